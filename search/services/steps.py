"""One path for a service's model calls, whether a thread or an event loop waits on them.

The service writes the call as a generator that yields what it waits for (``Batched``: an item for
a model's batcher, ``Blocking``: any other blocking call, e.g. asking Triton whether a model is
served) and gets each answer (or its error, thrown in) back. ``Steps`` runs it either way: a thread
calls ``steps.run()`` (each wait a blocking call), an event loop ``await steps`` (a batcher's
answer awaited, as the batcher sends from threads of its own; anything else in a worker thread)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True)
class Batched:
    """``batchers[model](item)``: one item in the model's batcher (Resources.batchers)."""

    model: str
    item: Any


@dataclass(frozen=True)
class Blocking:
    """``call()``, a blocking call: in a worker thread when an event loop waits."""

    call: Callable[[], Any]


Wait = Batched | Blocking


class Steps(Generic[R]):
    """A service call's steps and the batchers its ``Batched`` waits go to."""

    def __init__(self, steps: Generator[Wait, Any, R], batchers) -> None:
        self.steps, self.batchers = steps, batchers

    def run(self) -> R:
        """In this thread: every wait a blocking call."""
        answer, error = None, None
        while True:
            try:
                wait = self.steps.throw(error) if error is not None else self.steps.send(answer)
            except StopIteration as done:
                return done.value
            try:
                answer, error = (self.batchers[wait.model](wait.item) if isinstance(wait, Batched) else wait.call()), None
            except Exception as exc:  # noqa: BLE001  (thrown into the steps, which decide)
                answer, error = None, exc

    def __await__(self):
        return self._awaited().__await__()

    async def _awaited(self) -> R:
        answer, error = None, None
        while True:
            try:
                wait = self.steps.throw(error) if error is not None else self.steps.send(answer)
            except StopIteration as done:
                return done.value
            try:
                if isinstance(wait, Batched):
                    answer = await self.batchers[wait.model].acall(wait.item)
                else:
                    answer = await asyncio.to_thread(wait.call)
                error = None
            except Exception as exc:  # noqa: BLE001  (thrown into the steps, which decide)
                answer, error = None, exc
