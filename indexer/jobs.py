"""Ingest jobs and folder watches that outlive the process running them: SQLite tables in the data dir.

A job is recorded on submit and updated as it runs, so a server restarted after a crash runs its
unfinished jobs again (content-derived ids make the redo exact). SQLite, not JSON: several
processes and threads write it, each update atomic. Server watches (`POST
/watches`, `indexer watch` with a server) live in a second table, so a restarted server resumes them."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from search.datadir import private
from search.paths import path_bytes, readable

JOBS_FILE = "jobs.sqlite"  # in the data dir
QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
FINISHED = (DONE, FAILED, CANCELLED)
MAX_FAILURES_KEPT = 1000  # per job: the first ones, enough to act on, bounded for a folder of bad files


@dataclass
class Job:
    id: str
    paths: list[str]
    prune: bool = False
    source: str = "rest"  # rest | cli | watch: who asked
    local: bool = False  # asked by the owner's user on this machine: any path it can read, no roots
    gone_ok: bool = False  # paths that no longer exist are not failures (a watch's deletes; with prune: removed)
    state: str = QUEUED
    total: int | None = None
    done: int = 0
    counts: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    report: dict | None = None
    error: str | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    resumed: int = 0  # times it was started again after the server stopped mid-run
    cancel_requested: bool = False
    request_id: str | None = None  # the request that submitted it, for the logs
    kb: str = "default"  # the knowledge base it writes
    waiting: str | None = None  # while running: "waiting for Triton: why" (indexer/patience.py)
    ocr_photos: bool | None = None  # read the text in photos too; None: the server's setting (SEARCH_OCR_PHOTOS)

    @classmethod
    def new(cls, paths: list[str], *, prune: bool = False, source: str = "rest", local: bool = False,
            gone_ok: bool = False, request_id: str | None = None, kb: str = "default",
            ocr_photos: bool | None = None) -> Job:
        return cls(uuid.uuid4().hex, [str(p) for p in paths], prune=prune, source=source, local=local, gone_ok=gone_ok,
                   request_id=request_id, kb=kb, ocr_photos=ocr_photos)

    def as_dict(self) -> dict:
        return {"id": self.id, "state": self.state, "kb": self.kb, "paths": self.paths, "prune": self.prune, "source": self.source,
                "gone_ok": self.gone_ok, "ocr_photos": self.ocr_photos,
                "files_done": self.done, "files_total": self.total, "counts": dict(self.counts),
                "failures": list(self.failures), "report": self.report, "error": self.error,
                "created": self.created, "started": self.started, "finished": self.finished,
                "resumed": self.resumed, "cancel_requested": self.cancel_requested, "waiting": self.waiting}

    def note_file(self, status: str, path: str, reason: str | None) -> None:
        """One file's outcome (``path`` as the OS gives it)."""
        self.done += 1
        self.counts[status] += 1
        if reason and status == "failed" and len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append({"path": readable(path), "path_bytes": path_bytes(path), "reason": reason})


@dataclass
class Watch:
    """A folder watch the server runs: its folders, how long they must be quiet before a batch, and
    whether a local face registered it (any local path) or a REST client (inside the API's roots)."""
    id: str
    paths: list[str]
    quiet_ms: int = 500
    local: bool = False
    created: float = field(default_factory=time.time)

    @classmethod
    def new(cls, paths: list[str], *, quiet_ms: int = 500, local: bool = False) -> Watch:
        return cls(uuid.uuid4().hex, [str(p) for p in paths], quiet_ms=quiet_ms, local=local)

    def as_dict(self) -> dict:
        return {"id": self.id, "paths": self.paths, "quiet_ms": self.quiet_ms, "created": self.created}


class JobStore:
    """The job and watch tables. Thread-safe; every write is its own transaction."""

    def __init__(self, path: Path) -> None:
        private(path.parent)  # the data dir: `indexer jobs` may be the first to open it
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @property
    def _db(self) -> sqlite3.Connection:
        """The connection, opened on first use (and again after close(): an app may start twice)."""
        if self._conn is None:
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=10)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, created REAL, state TEXT, body TEXT)")
            self._conn.execute("CREATE TABLE IF NOT EXISTS watches (id TEXT PRIMARY KEY, created REAL, body TEXT)")
        return self._conn

    def save(self, job: Job) -> None:
        body = json.dumps({**asdict(job), "counts": dict(job.counts)}, ensure_ascii=False)
        with self._lock:
            self._db.execute("INSERT INTO jobs (id, created, state, body) VALUES (?, ?, ?, ?) "
                             "ON CONFLICT(id) DO UPDATE SET state = excluded.state, body = excluded.body",
                             (job.id, job.created, job.state, body))

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _load(row[0]) if row else None

    def newest_first(self, limit: int = 200) -> list[Job]:
        with self._lock:
            rows = self._db.execute("SELECT body FROM jobs ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
        return [_load(r[0]) for r in rows]

    def unfinished(self) -> list[Job]:
        """Queued or running jobs, oldest first: what a restarted server picks up."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM jobs WHERE state IN (?, ?) ORDER BY created",
                                    (QUEUED, RUNNING)).fetchall()
        return [_load(r[0]) for r in rows]

    def forget_finished(self, keep: int) -> None:
        """Drop finished jobs beyond the newest ``keep``."""
        with self._lock:
            self._db.execute(
                f"DELETE FROM jobs WHERE state IN ({','.join('?' * len(FINISHED))}) AND id NOT IN "
                f"(SELECT id FROM jobs WHERE state IN ({','.join('?' * len(FINISHED))}) ORDER BY created DESC LIMIT ?)",
                (*FINISHED, *FINISHED, keep))

    def save_watch(self, watch: Watch) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO watches (id, created, body) VALUES (?, ?, ?)",
                             (watch.id, watch.created, json.dumps(asdict(watch), ensure_ascii=False)))

    def watches(self) -> list[Watch]:
        """Every watch, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT body FROM watches ORDER BY created").fetchall()
        return [Watch(**json.loads(r[0])) for r in rows]

    def delete_watch(self, watch_id: str) -> bool:
        with self._lock:
            return self._db.execute("DELETE FROM watches WHERE id = ?", (watch_id,)).rowcount > 0

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _load(body: str) -> Job:
    data = json.loads(body)
    data["counts"] = Counter(data.get("counts") or {})
    return Job(**data)
