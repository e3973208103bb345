"""Ingest jobs of the REST API: queued, run one at a time in a background thread, kept in memory."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from search.observability import ApiMetrics, job_id, request_id
from search.paths import path_bytes, readable

log = logging.getLogger("search.api")

MAX_JOBS_KEPT = 200  # finished jobs beyond this are forgotten, oldest first


@dataclass
class Job:
    id: str
    paths: list[str]
    state: str = "queued"  # queued | running | done | failed
    total: int | None = None
    done: int = 0
    counts: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    report: dict | None = None
    error: str | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None
    request_id: str | None = None  # the request that submitted it, for the logs

    def as_dict(self) -> dict:
        return {"id": self.id, "state": self.state, "paths": self.paths, "files_done": self.done,
                "files_total": self.total, "counts": dict(self.counts), "failures": list(self.failures),
                "report": self.report, "error": self.error, "created": self.created, "finished": self.finished}


class Jobs:
    """The job table and the one worker thread. ``ingest(paths, prune, on_start, on_file)`` does the work."""

    def __init__(self, ingest: Callable, metrics: ApiMetrics | None = None) -> None:
        self._ingest = ingest
        self.metrics = metrics
        self.jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None  # started on first use

    def get(self, job_id_: str) -> Job | None:
        return self.jobs.get(job_id_)

    def newest_first(self) -> list[Job]:
        return sorted(list(self.jobs.values()), key=lambda j: -j.created)

    def submit(self, paths: list[Path], prune: bool) -> Job:
        job = Job(uuid.uuid4().hex, [str(p) for p in paths], request_id=request_id.get())
        with self._lock:
            finished = [j for j in self.jobs.values() if j.finished]
            for old in finished[: max(0, len(finished) - MAX_JOBS_KEPT)]:
                del self.jobs[old.id]
            self.jobs[job.id] = job
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="ingest")
            self.pool.submit(self._run, job, paths, prune)
        log.info("ingest job %s queued", job.id, extra={"job_id": job.id, "paths": len(paths)})
        return job

    def _run(self, job: Job, paths: list[Path], prune: bool) -> None:
        job.state = "running"
        tokens = request_id.set(job.request_id), job_id.set(job.id)  # every log line of the job carries both
        log.info("ingest job %s started", job.id, extra={"paths": len(paths)})

        def on_file(outcome) -> None:
            job.done += 1
            job.counts[outcome.status] += 1
            if self.metrics:
                self.metrics.ingest_files.labels(outcome.status).inc()
            if outcome.reason and outcome.status == "failed":
                shown = readable(outcome.path)  # a name that is not UTF-8 cannot go into JSON or a log as is
                job.failures.append({"path": shown, "path_bytes": path_bytes(outcome.path), "reason": outcome.reason})
                log.warning("ingest job %s: %s: %s", job.id, shown, outcome.reason)

        try:
            report = self._ingest(paths, prune=prune, on_start=lambda n: setattr(job, "total", n), on_file=on_file)
            job.report, job.state = report.as_dict(), "done"
        except Exception as exc:  # the job's status is the only place left to report it
            log.exception("ingest job %s failed", job.id)
            first = (str(exc).strip().splitlines() or [""])[0]  # the whole message is in the log
            job.error, job.state = first or type(exc).__name__, "failed"
        job.finished = time.time()
        if self.metrics:
            self.metrics.ingest_jobs.labels(job.state).inc()
        log.info("ingest job %s %s in %.1f s", job.id, job.state, job.finished - job.created,
                 extra={"state": job.state, "files": dict(job.counts)})
        request_id.reset(tokens[0])
        job_id.reset(tokens[1])

    def close(self) -> None:
        """Finish the running job; fail the queued ones."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        for job in self.jobs.values():
            if job.state == "queued":
                job.state, job.error = "failed", "the server shut down before the job started"
