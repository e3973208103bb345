"""How many OCR requests a process reads at once, and how many may wait: each holds its decoded
image (hundreds of MB for a large one) while Triton reads it, so concurrent ones are bounded, and a
request past the queue is told the service is busy (REST 503 with Retry-After) rather than piling
up memory or timing out in Triton's queue."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from search.errors import Busy

RETRY_AFTER_S = 5


class Gate:
    def __init__(self, concurrency: int, queue: int) -> None:
        self.concurrency, self.queue = concurrency, queue
        self._slots = threading.Semaphore(concurrency)
        self._lock = threading.Lock()
        self._admitted = 0  # reading or waiting

    @contextmanager
    def admitted(self) -> Iterator[None]:
        with self._lock:
            if self._admitted >= self.concurrency + self.queue:
                raise Busy(f"OCR is busy: {self.concurrency} images are being read and {self.queue} wait "
                           f"(SEARCH_OCR_CONCURRENCY, SEARCH_OCR_QUEUE); try again in {RETRY_AFTER_S} s",
                           retry_after=RETRY_AFTER_S)
            self._admitted += 1
        try:
            with self._slots:
                yield
        finally:
            with self._lock:
                self._admitted -= 1


_gates: dict[tuple[int, int], Gate] = {}
_gates_lock = threading.Lock()


def gate(concurrency: int, queue: int) -> Gate:
    """The process's gate for these limits (every service object of a server shares it)."""
    with _gates_lock:
        return _gates.setdefault((concurrency, queue), Gate(concurrency, queue))
