"""Keep the index of some folders current while files change (`indexer watch`, server-side watches).

A rescan on start catches up with what changed while nothing was watching; after that, filesystem
events (watchdog) are collected and handed to ingest in batches once the folders have been quiet
for a moment (``quiet_s``) or the oldest change has waited ``max_delay_s``. Ingest applies the
same rules as `indexer ingest --prune` to the changed paths: a rename keeps its vectors and gets
the new path, a delete removes points and thumbnails, copies are stored once. An editor's save
(write a temporary file, rename it over the original) arrives as events on a dotfile or a
`~`/`.swp` name the pipeline skips plus a move onto the real name: one change of one file. A
burst (thousands of files copied in) becomes a few large batches, not thousands of small ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

log = logging.getLogger("indexer.watch")

# ingest(paths, prune) -> anything; paths that are gone are pruned
Ingest = Callable[[list[Path]], object]


class Watcher:
    def __init__(self, roots: list[Path], ingest: Ingest, *, quiet_s: float = 0.5, max_delay_s: float = 3.0,
                 on_batch: Callable[[list[Path], object], None] | None = None,
                 on_error: Callable[[Exception], None] | None = None) -> None:
        self.roots = [Path(r).expanduser().absolute() for r in roots]
        self.ingest, self.on_batch, self.on_error = ingest, on_batch, on_error
        self.quiet_s, self.max_delay_s = quiet_s, max_delay_s
        self._pending: set[Path] = set()
        self._first = self._last = 0.0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._observer = Observer()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self.batches = 0

    def start(self) -> Watcher:
        """Rescan (catch up), then follow changes in the background."""
        handler = _Handler(self._note)
        for root in self.roots:  # watch before the rescan: nothing that changes during it is missed
            self._observer.schedule(handler, str(root), recursive=True)
        self._observer.start()
        self._apply(list(self.roots))
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._observer.stop()
        self._observer.join(timeout=5)
        if self._thread.is_alive():
            self._thread.join(timeout=60)  # a batch in progress finishes

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _note(self, path: Path) -> None:
        with self._lock:
            now = time.monotonic()
            if not self._pending:
                self._first = now
            self._pending.add(path)
            self._last = now
            self._lock.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                while not self._pending and not self._stop.is_set():
                    self._lock.wait()
                if self._stop.is_set():
                    return
                now = time.monotonic()
                due = min(self._last + self.quiet_s, self._first + self.max_delay_s)
                if now < due:
                    self._lock.wait(due - now)
                    continue
                batch, self._pending = self._pending, set()
            self._apply(sorted(batch))

    def _apply(self, changed: list[Path]) -> None:
        paths = _outermost(changed)
        try:
            result = self.ingest(paths)
        except Exception as exc:  # keep watching: the next change retries these paths too
            log.warning("watch: ingest of %d path(s) failed: %s", len(paths), exc)
            with self._lock:
                self._pending.update(paths)
                self._first = self._last = time.monotonic()
            if self.on_error:
                self.on_error(exc)
            self._stop.wait(self.max_delay_s)
            return
        self.batches += 1
        if self.on_batch:
            self.on_batch(paths, result)


class _Handler(FileSystemEventHandler):
    def __init__(self, note: Callable[[Path], None]) -> None:
        self.note = note

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write") or (event.is_directory and event.event_type == "modified"):
            return  # reads, and a folder's own mtime: nothing to index
        self.note(Path(_str(event.src_path)))
        if getattr(event, "dest_path", ""):
            self.note(Path(_str(event.dest_path)))


def _outermost(paths: list[Path]) -> list[Path]:
    """The paths that are not under another one in the list (a new folder covers its files)."""
    out: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(p.is_relative_to(q) for q in out):
            out.append(p)
    return out


def _str(path: str | bytes) -> str:
    return path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
