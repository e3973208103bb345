"""Ingest jobs of the REST API: recorded in the data dir (indexer/jobs.py), run one at a time in a
background thread, resumed when the server starts again after stopping mid-job, cancelled on request.
Folder watches (search/api/watches.py) submit their batches here too, and wait for each."""

from __future__ import annotations

import logging
import threading
import time
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
    """The job table and the one worker thread. ``ingest(paths, prune=, on_start=, on_file=, stop=, gone_ok=)``
    does the work."""

    def __init__(self, ingest: Callable, store: JobStore, metrics: ApiMetrics | None = None) -> None:
        self._ingest, self.store, self.metrics = ingest, store, metrics
        self._lock = threading.Lock()
        self._cancel: set[str] = set()
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
        jobs = self.store.unfinished()
        for job in jobs:
            job.resumed += 1 if job.state == RUNNING else 0
            job.state = QUEUED
            self.store.save(job)
            self._start(job)
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
        """Ask a job to stop: a queued one never starts; a running one stops after the files in flight
        are written, so what is in the store stays whole."""
        job = self.store.get(job_id_)
        if job is None or job.state in FINISHED:
            return job
        with self._lock:
            self._cancel.add(job.id)
        job.cancel_requested = True
        if job.state == QUEUED:
            job.state, job.finished = CANCELLED, time.time()
        self.store.save(job)
        self._notify_ended()
        return job

    def _start(self, job: Job) -> None:
        with self._lock:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="ingest")
            self.pool.submit(self._run, job.id)

    def _cancelled(self, job: Job) -> bool:
        with self._lock:
            return job.id in self._cancel

    def _run(self, job_id_: str) -> None:
        job = self.store.get(job_id_)
        if job is None or job.state != QUEUED:  # cancelled while it waited
            return
        job.state, job.started = RUNNING, time.time()
        job.done, job.counts, job.failures = 0, type(job.counts)(), []  # a resumed job counts afresh
        self.store.save(job)
        tokens = request_id.set(job.request_id), job_id.set(job.id)  # every log line of the job carries both
        log.info("ingest job %s started", job.id, extra={"paths": len(job.paths)})
        saved = time.monotonic()

        def on_start(total: int) -> None:
            job.total = total
            self.store.save(job)

        def on_file(outcome) -> None:
            nonlocal saved
            job.note_file(outcome.status, outcome.path, outcome.reason)
            if self.metrics:
                self.metrics.ingest_files.labels(outcome.status).inc()
            if outcome.reason and outcome.status == "failed":
                log.warning("ingest job %s: %s: %s", job.id, readable(outcome.path), outcome.reason)
            if time.monotonic() - saved > SAVE_EVERY_S:
                self.store.save(job)
                saved = time.monotonic()

        try:
            report = self._ingest([Path(from_stored(p)) for p in job.paths], prune=job.prune, on_start=on_start, on_file=on_file,
                                  stop=lambda: self._cancelled(job), local=job.local, gone_ok=job.gone_ok, kb=job.kb,
                                  ocr_photos=job.ocr_photos,
                                  optimize=job.source != "watch")  # a watch optimizes once its folders are quiet
            job.report = report.as_dict()
            job.state = CANCELLED if report.cancelled else DONE
        except Exception as exc:  # the job's status is the only place left to report it
            log.exception("ingest job %s failed", job.id)
            first = (str(exc).strip().splitlines() or [""])[0]  # the whole message is in the log
            job.error, job.state = first or type(exc).__name__, FAILED
        job.finished = time.time()
        self.store.save(job)
        self.store.forget_finished(MAX_JOBS_KEPT)
        self._notify_ended()
        with self._lock:
            self._cancel.discard(job.id)
        if self.metrics:
            self.metrics.ingest_jobs.labels(job.state).inc()
        log.info("ingest job %s %s in %.1f s", job.id, job.state, job.finished - (job.started or job.created),
                 extra={"state": job.state, "files": dict(job.counts)})
        request_id.reset(tokens[0])
        job_id.reset(tokens[1])

    def close(self) -> None:
        """Finish the running job. Queued ones stay queued in the table: the next start runs them."""
        if self.pool is not None:
            with self._lock:
                pool, self.pool = self.pool, None
            pool.shutdown(wait=True, cancel_futures=True)
