"""Ingest jobs of the REST API: recorded in the data dir (indexer/jobs.py), run in background
threads, resumed when the server starts again after stopping mid-job, cancelled on request.
Folder watches (search/api/watches.py) submit their batches here too, and wait for each.

A knowledge base's jobs run one at a time, in order (two jobs never write one collection at once);
the jobs of different KBs run side by side, up to ``parallel`` (SEARCH_INGEST_JOBS), KBs taking
turns, so one KB's hour of OCR does not hold another's small upload. A job asked to stop (cancel,
or the server shutting down) stops at its next file, batch or scanned page."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from indexer.jobs import CANCELLED, DONE, FAILED, FINISHED, QUEUED, RUNNING, Job, JobStore
from search.observability import ApiMetrics, job_id, request_id
from search.paths import from_stored, readable, stored

log = logging.getLogger("search.api")

MAX_JOBS_KEPT = 200  # finished jobs beyond this are forgotten, oldest first
SAVE_EVERY_S = 0.5  # progress is written to the job table at most this often


class Jobs:
    """The job table and the worker threads. ``ingest(paths, prune=, on_start=, on_file=, stop=, gone_ok=)``
    does the work; ``parallel``: jobs running at once (each of another KB)."""

    def __init__(self, ingest: Callable, store: JobStore, metrics: ApiMetrics | None = None, parallel: int = 2) -> None:
        self._ingest, self.store, self.metrics, self.parallel = ingest, store, metrics, parallel
        self._lock = threading.Lock()
        self._cancel: set[str] = set()
        self._queues: dict[str, deque[str]] = {}  # KB -> its waiting jobs' ids; the dict's order is the KBs' turns
        self._busy: set[str] = set()  # KBs with a job running
        self._closing = threading.Event()  # the server is stopping: running jobs stop, and stay unfinished
        self._ended = threading.Condition()  # notified when a job ends or is cancelled before it started
        self.pool: ThreadPoolExecutor | None = None  # started on first use

    def get(self, job_id_: str) -> Job | None:
        return self.store.get(job_id_)

    def newest_first(self) -> list[Job]:
        return self.store.newest_first(MAX_JOBS_KEPT)

    def submit(self, paths: list[Path], prune: bool, source: str = "rest", local: bool = False,
               gone_ok: bool = False, kb: str = "default", ocr_photos: bool | None = None) -> Job:
        """Queue a job. ``local``: asked by the owner's user on this machine (any path it can read).
        ``gone_ok``: paths that no longer exist are not failures (with ``prune``, what was indexed
        under them is removed): a watch's batches carry the paths of deleted files. ``ocr_photos``: read
        the text in photos too (None: the server's setting)."""
        # stored form: a name that is not UTF-8 (a surrogate-escaped str) cannot go into SQLite as it is
        job = Job.new([stored(str(p)) for p in paths], prune=prune, source=source, local=local, gone_ok=gone_ok,
                      request_id=request_id.get(), kb=kb, ocr_photos=ocr_photos)
        self.store.save(job)
        self._start(job)
        log.info("ingest job %s queued", job.id, extra={"job_id": job.id, "paths": len(paths)})
        return job

    def resume(self) -> list[Job]:
        """Queue again the jobs a previous run of the server did not finish (a crash, kill -9):
        content-derived ids make the redo exact."""
        jobs = []
        for job in self.store.unfinished():
            if job.cancel_requested:  # cancelled before the server stopped: it stays so
                job.state, job.finished = CANCELLED, time.time()
                self.store.save(job)
                log.info("ingest job %s stays cancelled", job.id, extra={"job_id": job.id})
                continue
            job.resumed += 1 if job.state == RUNNING else 0
            job.state = QUEUED
            self.store.save(job)
            self._start(job)
            jobs.append(job)
            log.info("ingest job %s resumed", job.id, extra={"job_id": job.id})
        return jobs

    def wait(self, job_id_: str, stop: Callable[[], bool] | None = None, poll_s: float = 0.25) -> Job | None:
        """The job once it has ended (done, failed, cancelled), or as it is when ``stop()`` says so."""
        while True:
            job = self.store.get(job_id_)
            if job is None or job.state in FINISHED or (stop is not None and stop()):
                return job
            with self._ended:
                self._ended.wait(poll_s)

    def _notify_ended(self) -> None:
        with self._ended:
            self._ended.notify_all()

    def cancel(self, job_id_: str) -> Job | None:
        """Ask a job to stop: a queued one never starts; a running one stops at its next file, write
        batch or scanned page (seconds), each file in the store whole or not there at all. The request
        is recorded: a job cancelled never runs again, even after a kill -9."""
        with self._lock:  # with the running job's own saves (_save): none of them undoes the request
            job = self.store.get(job_id_)
            if job is None or job.state in FINISHED:
                return job
            self._cancel.add(job.id)
            job.cancel_requested = True  # recorded: a server killed before the job stopped does not resume it
            if job.state == QUEUED:
                job.state, job.finished = CANCELLED, time.time()
            self.store.save(job)
        self._notify_ended()
        return job

    def _start(self, job: Job) -> None:
        with self._lock:
            self._queues.setdefault(job.kb, deque()).append(job.id)
            self._dispatch()

    def _dispatch(self) -> None:
        """Start waiting jobs while fewer than ``parallel`` run: the next KB in turn without a running
        job gives its oldest, then goes to the back of the line. Called holding ``_lock``."""
        while not self._closing.is_set() and len(self._busy) < self.parallel:
            kb = next((k for k, q in self._queues.items() if q and k not in self._busy), None)
            if kb is None:
                return
            queue = self._queues.pop(kb)
            job_id_ = queue.popleft()
            if queue:
                self._queues[kb] = queue
            self._busy.add(kb)
            if self.pool is None:
                self.pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="ingest")
            self.pool.submit(self._turn, kb, job_id_)

    def _turn(self, kb: str, job_id_: str) -> None:
        try:
            self._run(job_id_)
        finally:
            with self._lock:
                self._busy.discard(kb)
                self._dispatch()

    def _cancelled(self, job: Job) -> bool:
        with self._lock:
            return job.id in self._cancel

    def _stop(self, job: Job) -> bool:
        return self._closing.is_set() or self._cancelled(job)

    def _save(self, job: Job) -> None:
        """A running job's progress, keeping a cancel asked meanwhile."""
        with self._lock:
            job.cancel_requested = job.cancel_requested or job.id in self._cancel
            self.store.save(job)

    def _run(self, job_id_: str) -> None:
        with self._lock:  # with cancel(): a job cancelled while it waited never starts
            job = self.store.get(job_id_)
            if job is None or job.state != QUEUED:
                self._cancel.discard(job_id_)  # cancelled while it waited
                return
            job.state, job.started = RUNNING, time.time()
            job.done, job.counts, job.failures, job.waiting = 0, type(job.counts)(), [], None  # a resumed job counts afresh
            self.store.save(job)
        tokens = request_id.set(job.request_id), job_id.set(job.id)  # every log line of the job carries both
        log.info("ingest job %s started", job.id, extra={"paths": len(job.paths)})
        saved = time.monotonic()
        guard = threading.Lock()  # the job is noted from the run's thread and, while it waits, from its model's

        def on_start(total: int) -> None:
            job.total = total
            self._save(job)

        def on_file(outcome) -> None:
            nonlocal saved
            with guard:
                job.note_file(outcome.status, outcome.path, outcome.reason)
                if time.monotonic() - saved > SAVE_EVERY_S:
                    self._save(job)
                    saved = time.monotonic()
            if self.metrics:
                self.metrics.ingest_files.labels(outcome.status).inc()
            if outcome.reason and outcome.status == "failed":
                log.warning("ingest job %s: %s: %s", job.id, readable(outcome.path), outcome.reason)

        def on_wait(why: str | None) -> None:
            with guard:
                job.waiting = why
                self._save(job)
            if why:
                log.warning("ingest job %s: %s", job.id, why)
            else:
                log.info("ingest job %s: Triton answers again: going on", job.id)

        try:
            report = self._ingest([Path(from_stored(p)) for p in job.paths], prune=job.prune, on_start=on_start, on_file=on_file,
                                  stop=lambda: self._stop(job), local=job.local, gone_ok=job.gone_ok, kb=job.kb,
                                  ocr_photos=job.ocr_photos,
                                  optimize=job.source != "watch", on_wait=on_wait)  # a watch optimizes once its folders are quiet
            job.report = report.as_dict()
            job.state = CANCELLED if report.cancelled else DONE
        except Exception as exc:  # the job's status is the only place left to report it
            log.exception("ingest job %s failed", job.id)
            first = (str(exc).strip().splitlines() or [""])[0]  # the whole message is in the log
            job.error, job.state = first or type(exc).__name__, FAILED
        try:
            if job.state == CANCELLED and not self._cancelled(job):  # stopped by the server's shutdown
                self._save_interrupted(job)
            else:
                self._finish(job)
        finally:
            request_id.reset(tokens[0])
            job_id.reset(tokens[1])

    def _save_interrupted(self, job: Job) -> None:
        """A job the server's shutdown stopped stays running in the table: the next start runs it again."""
        job.state, job.report = RUNNING, None
        self._save(job)
        log.info("ingest job %s stopped by the shutdown: it resumes when the server starts again", job.id)

    def _finish(self, job: Job) -> None:
        job.finished, job.waiting = time.time(), None
        self._save(job)
        self.store.forget_finished(MAX_JOBS_KEPT)
        self._notify_ended()
        with self._lock:
            self._cancel.discard(job.id)
        if self.metrics:
            self.metrics.ingest_jobs.labels(job.state).inc()
        log.info("ingest job %s %s in %.1f s", job.id, job.state, job.finished - (job.started or job.created),
                 extra={"state": job.state, "files": dict(job.counts)})

    def close(self) -> None:
        """Stop the running jobs at their next file, batch or scanned page (seconds: SIGTERM is not
        held by an hour of OCR), leaving them and the queued ones unfinished in the table: the next
        start runs them."""
        self._closing.set()
        with self._lock:
            pool, self.pool = self.pool, None
            self._queues.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        self._closing.clear()  # an app that starts again (test clients do) runs jobs again
