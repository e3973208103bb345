"""Keep the index of some folders current while files change (`indexer watch`, server-side watches).

A rescan on start catches up; then filesystem events (watchdog) go to ingest in batches once the
folders are quiet for ``quiet_s`` or the oldest change has waited ``max_delay_s``, under the rules
of `indexer ingest --prune`. An editor's save (temporary dotfile or `~`/`.swp` name, renamed over
the original) counts as one change, and a burst becomes a few large batches. The store's optimize
is left to ``on_idle``, run after ``idle_s`` of quiet: the embedded engine holds the GIL while it
optimizes, which would delay the next batch and every search."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from indexer.discover import SKIP_DIRS
from indexer.kinds import KINDS

log = logging.getLogger("indexer.watch")

# ingest(paths) -> anything (the caller's report); paths that are gone are to be pruned
Ingest = Callable[[list[Path]], object]
SUFFIXES = frozenset().union(*(k.suffixes for k in KINDS.values()))  # what ingest reads: changes to other files are not collected
RETRY_MAX_S = 60.0  # a failing ingest (Triton down) is retried with a delay that doubles up to this
IDLE_S = 2.0  # quiet this long after a batch before on_idle (the store's optimize) runs


class Watcher:
    """Watch ``roots`` (folders) and hand their changes to ``ingest``. ``ignore``: folders whose
    changes are never collected (the data dir: the store's own writes must not trigger batches)."""

    def __init__(self, roots: Iterable[Path], ingest: Ingest, *, quiet_s: float = 0.5, max_delay_s: float = 3.0,
                 on_batch: Callable[[list[Path], object], None] | None = None,
                 on_error: Callable[[list[Path], Exception, float], None] | None = None,
                 on_idle: Callable[[], None] | None = None, idle_s: float = IDLE_S,
                 ignore: Iterable[Path] = (), suffixes: frozenset[str] = SUFFIXES) -> None:
        self.roots = [Path(r).expanduser().absolute() for r in roots]
        self.ingest, self.on_batch, self.on_error, self.on_idle, self.idle_s = ingest, on_batch, on_error, on_idle, idle_s
        self.quiet_s, self.max_delay_s = quiet_s, max(max_delay_s, quiet_s)
        self.ignore = [Path(p).expanduser().absolute() for p in ignore]
        self.suffixes = suffixes
        self._pending: set[Path] = set()
        self._first = self._last = 0.0
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._observer = Observer()
        self._thread = threading.Thread(target=self._run, name="watch", daemon=True)
        self.caught_up = threading.Event()  # set once the rescan on start has been ingested
        self.batches = 0
        self.last_batch: float | None = None  # time.time() of the last ingested batch
        self.last_error: str | None = None  # the last batch's error, cleared by the next success
        self._retry_s = 0.0
        self._busy = False
        self._dirty = False  # a batch was ingested since on_idle last ran

    def start(self) -> Watcher:
        """Follow changes in the background; the first batch is a rescan of the roots (catch-up)."""
        for root in self.roots:
            if not root.is_dir():
                raise NotADirectoryError(f"{root}: not a folder (watch the folder that holds it)")
        handler = _Handler(self._note, self._wanted)
        for root in self.roots:  # watch before the rescan: nothing that changes during it is missed
            self._observer.schedule(handler, str(root), recursive=True)
        self._observer.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching. A batch being ingested is asked to stop (``stopping()``) and waited for."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._observer.is_alive():
            self._observer.stop()
            self._observer.join(timeout=5)
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        if self._dirty and not self._thread.is_alive():  # the last batches' optimize, not left to the next run
            self._idle()

    def stopping(self) -> bool:
        """For ingest's ``stop`` callback: a batch in progress ends early when the watch stops (the
        next start's rescan finishes it)."""
        return self._stop.is_set()

    def idle(self) -> bool:
        """Caught up, nothing collected, no batch being ingested and on_idle done."""
        with self._lock:
            return self.caught_up.is_set() and not self._pending and not self._busy and not self._dirty

    def alive(self) -> bool:
        return self._thread.is_alive() and self._observer.is_alive()

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wanted(self, path: Path, is_directory: bool) -> bool:
        """A change ingest could act on: not hidden or in a tool folder below a root, not under an
        ignored folder, and for a file one of the suffixes ingest reads."""
        if any(path.is_relative_to(i) for i in self.ignore):
            return False
        for root in self.roots:
            if path.is_relative_to(root):
                if any(p.startswith(".") or p in SKIP_DIRS for p in path.relative_to(root).parts):
                    return False
                break
        return is_directory or path.suffix.lower() in self.suffixes

    def _note(self, path: Path) -> None:
        with self._lock:
            now = time.monotonic()
            if not self._pending:
                self._first = now
            self._pending.add(path)
            self._last = now
            self._lock.notify_all()

    def _run(self) -> None:
        with self._lock:
            self._busy = True
        self._apply(list(self.roots))  # catch up with what changed while nothing watched
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    return
                if not self._pending:
                    # After a batch, quiet for idle_s: on_idle's turn. wait() is True when woken
                    # (a change or stop): look again.
                    if not self._dirty or self._lock.wait(self.idle_s) or self._pending or self._stop.is_set():
                        if not self._dirty:
                            self._lock.wait()
                        continue
                    self._busy, batch = True, None
                else:
                    now = time.monotonic()
                    due = min(self._last + self.quiet_s, self._first + self.max_delay_s)
                    if now < due:
                        self._lock.wait(due - now)
                        continue
                    batch, self._pending = self._pending, set()
                    self._busy = True
            if batch is None:
                self._idle()
            else:
                self._apply(sorted(batch))

    def _idle(self) -> None:
        try:
            if self.on_idle:
                self.on_idle()
        except Exception as exc:  # the next batch's store writes will say more; keep watching
            log.warning("watch: optimizing the store failed: %s", exc)
        with self._lock:
            self._dirty = self._busy = False

    def _apply(self, changed: list[Path]) -> None:
        paths = _outermost(changed)
        try:
            result = self.ingest(paths)
        except Exception as exc:  # keep watching: these paths are tried again, after a growing delay
            self._retry_s = min(max(self._retry_s * 2, self.max_delay_s), RETRY_MAX_S)
            self.last_error = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            log.warning("watch: ingest of %d path(s) failed (retrying in %.0f s): %s", len(paths), self._retry_s, exc)
            with self._lock:
                self._pending.update(paths)
                self._first = self._last = time.monotonic()
                self._busy = False
            if self.on_error:
                self.on_error(paths, exc, self._retry_s)
            self._stop.wait(self._retry_s)
            return
        self._retry_s = 0.0
        self.batches += 1
        self.last_batch, self.last_error = time.time(), None
        if self.on_batch:
            try:
                self.on_batch(paths, result)
            except Exception:  # reporting a batch must not end the watch
                log.exception("watch: on_batch failed")
        with self._lock:
            self._busy = False
            self._dirty = self.on_idle is not None
            self.caught_up.set()  # the first success: every batch before it failed and carried the roots on


class _Handler(FileSystemEventHandler):
    def __init__(self, note: Callable[[Path], None], wanted: Callable[[Path, bool], bool]) -> None:
        self.note, self.wanted = note, wanted

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write") or (event.is_directory and event.event_type == "modified"):
            return  # reads, and a folder's own mtime: nothing to index
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                path = Path(_str(raw))
                if self.wanted(path, event.is_directory):
                    self.note(path)


def _outermost(paths: list[Path]) -> list[Path]:
    """The paths that are not under another one in the list (a new folder covers its files).
    Each path's parents are looked up in a set: comparing every pair is quadratic in a burst of files."""
    out: list[Path] = []
    kept: set[Path] = set()
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(parent in kept for parent in p.parents):
            out.append(p)
            kept.add(p)
    return out


def _str(path: str | bytes) -> str:
    return path.decode("utf-8", "surrogateescape") if isinstance(path, bytes) else path
