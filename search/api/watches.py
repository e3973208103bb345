"""Folder watches of the REST API (`POST /watches`, `indexer watch` while a server owns the store).

One Watcher (indexer/watch.py) per watch. Each batch becomes an ingest job (source "watch", prune,
gone_ok), and the watcher waits for it before the next batch, so changes arriving meanwhile become
one job. Watches are recorded in the data dir (indexer/jobs.py) and restarted, with a catch-up
rescan, when the server starts; a failed batch (Triton down) is retried."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from indexer.jobs import FAILED, Job, JobStore, Watch
from indexer.watch import Watcher
from search.api.jobs import Jobs
from search.paths import from_stored, stored
from search.store.schema import DEFAULT_KB

log = logging.getLogger("search.api")


class WatchBatchFailed(RuntimeError):
    """The ingest job of a batch failed as a whole: the watcher tries the batch again later."""


@dataclass
class _Running:
    watch: Watch
    watcher: Watcher | None = None
    last_job: str | None = None
    error: str | None = None  # why it is not running (its folder is missing) or what a batch left out


class Watches:
    """The server's watches. ``outside_link(path, kb)``: for a watch a REST client registered, the
    first symbolic link under ``path`` that leads out of the KB's roots (those paths are left out
    of a batch, as `POST /ingest` refuses them). ``ignore``: folders whose changes are never
    collected (the data dir)."""

    def __init__(self, jobs: Jobs, store: JobStore, *, ignore: list[Path],
                 outside_link: Callable[[Path, str], Path | None], optimize: Callable[[], None] | None = None) -> None:
        self.jobs, self.store, self.ignore, self.outside_link = jobs, store, ignore, outside_link
        self.optimize = optimize  # the store's optimize, run by a watch once its folders are quiet
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}

    def start(self) -> None:
        """Start every recorded watch (the server starts): each rescans its folders first."""
        for watch in self.store.watches():
            with self._lock:
                if watch.id not in self._running:
                    self._running[watch.id] = self._start(watch)

    def add(self, paths: list[Path], *, quiet_ms: int, local: bool) -> tuple[Watch, bool]:
        """The watch of exactly these folders: a new one (recorded, started), or the one that
        exists (``False``: nothing was added)."""
        key = sorted(stored(str(p)) for p in paths)  # a name that is not UTF-8 as valid text (search/paths.py)
        with self._lock:
            for watch in self.store.watches():
                if sorted(watch.paths) == key:
                    running = self._running.get(watch.id)
                    if running is None or running.watcher is None:  # e.g. its folder was missing at start
                        self._running[watch.id] = self._start(watch)
                    return watch, False
            watch = Watch.new(key, quiet_ms=quiet_ms, local=local)
            self.store.save_watch(watch)
            self._running[watch.id] = self._start(watch)
            log.info("watch %s added: %s", watch.id, ", ".join(key))
            return watch, True

    def remove(self, watch_id: str) -> dict | None:
        """Stop a watch and forget it; what it indexed stays indexed. Its state as it ended, or None."""
        watch = next((w for w in self.store.watches() if w.id == watch_id), None)
        if watch is None:
            return None
        with self._lock:
            running = self._running.pop(watch_id, None)
        if running is not None and running.watcher is not None:
            running.watcher.stop()
        self.store.delete_watch(watch_id)
        log.info("watch %s removed", watch_id)
        return self._describe(watch, running)

    def describe(self, watch_id: str) -> dict | None:
        watch = next((w for w in self.store.watches() if w.id == watch_id), None)
        return None if watch is None else self._describe(watch, self._running.get(watch_id))

    def listed(self) -> list[dict]:
        return [self._describe(w, self._running.get(w.id)) for w in self.store.watches()]

    def close(self) -> None:
        """Stop every watcher (the server stops); the records stay, so the next start watches again."""
        with self._lock:
            running, self._running = list(self._running.values()), {}
        for r in running:
            if r.watcher is not None:
                r.watcher.stop()

    def _start(self, watch: Watch) -> _Running:
        running = _Running(watch)
        running.watcher = Watcher([Path(from_stored(p)) for p in watch.paths], lambda paths: self._batch(running, paths),
                                  quiet_s=watch.quiet_ms / 1000, on_idle=self.optimize, ignore=self.ignore)
        try:
            running.watcher.start()
        except OSError as exc:  # a folder that is gone or not mounted: nothing is pruned, it is reported
            running.watcher.stop()
            running.watcher, running.error = None, f"not running: {exc}"
            log.warning("watch %s %s", watch.id, running.error)
        return running

    def _batch(self, running: _Running, paths: list[Path]) -> object:
        watch, watcher = running.watch, running.watcher
        left_out = ""
        if not watch.local:
            # a watch writes the default KB (the routes are for admin keys): that KB's roots apply
            refused = {p: link for p in paths if (link := self.outside_link(p, DEFAULT_KB)) is not None}
            if refused:
                left_out = "left out: " + "; ".join(f"{link} is a symlink to a file outside the allowed folders"
                                                    for link in refused.values())
                log.warning("watch %s %s", watch.id, left_out)
                paths = [p for p in paths if p not in refused]
            if not paths:
                running.error = left_out or None
                return None
        # A local face's watch reads any local path, as its `indexer ingest` would: without `local`
        # the job would be held to the API's roots and fail every file.
        job = self.jobs.submit(paths, prune=True, source="watch", gone_ok=True, local=watch.local, kb=DEFAULT_KB)
        running.last_job = job.id
        job = self.jobs.wait(job.id, stop=watcher.stopping if watcher is not None else None)
        if job is not None and job.state == FAILED:
            raise WatchBatchFailed(f"ingest job {job.id} failed: {job.error}")
        failed = _failed(job)
        running.error = "; ".join(e for e in (left_out, failed) if e) or None
        return job

    @staticmethod
    def _describe(watch: Watch, running: _Running | None) -> dict:
        watcher = running.watcher if running is not None else None
        if watcher is None:
            state = "not running"
        elif watcher.last_error:
            state = "retrying"
        elif not watcher.caught_up.is_set():
            state = "catching up"
        else:
            state = "watching"
        return {**watch.as_dict(), "state": state, "batches": watcher.batches if watcher else 0,
                "last_batch": watcher.last_batch if watcher else None,
                "last_job": running.last_job if running else None,
                "error": (watcher.last_error if watcher else None) or (running.error if running else None)}


def _failed(job: Job | None) -> str:
    """The files a batch could not index, for the watch's ``error`` (a watch that fails every file
    must not look healthy)."""
    report = (job.report if job is not None else None) or {}
    failures = [f for f in report.get("failures", []) if not f.get("still_failing")]
    if not failures:
        return ""
    first = failures[0]
    more = f" (+{len(failures) - 1} more, `indexer jobs` lists them)" if len(failures) > 1 else ""
    return f"last batch: {first['path']}: {first['reason']}{more}"
