"""Ingest through the running `search serve` that owns the store (see search/owner.py): the paths go
to the server as a job; its progress comes back by polling; Ctrl-C cancels it there. Folder watches
are registered in the server the same way (it runs them, and again after a restart)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from search.errors import StoreUnavailable
from search.paths import stored
from search.rest_client import RestClient

POLL_S = 0.25


def _sent(paths: list[Path]) -> list[str]:
    """Absolute as this process means them (the server may run in another working folder), a name
    that is not UTF-8 in the stored form (search/paths.py): JSON cannot carry its bytes as they are."""
    return [stored(str(Path(p).expanduser().absolute())) for p in paths]


class RemoteIngest(RestClient):
    def submit(self, paths: list[Path], *, prune: bool = False, kb: str | None = None,
               ocr_photos: bool | None = None) -> str:
        """``ocr_photos``: None leaves it to the server's setting."""
        body = {"paths": _sent(paths), "prune": prune, "kb": kb, "ocr_photos": ocr_photos}
        return self.call("POST", "/ingest", body)["job_id"]

    def job(self, job_id: str) -> dict:
        return self.call("GET", f"/ingest/jobs/{job_id}")

    def cancel(self, job_id: str) -> dict:
        return self.call("DELETE", f"/ingest/jobs/{job_id}")

    def jobs(self) -> list[dict]:
        return self.call("GET", "/ingest/jobs")["jobs"]

    def watch(self, paths: list[Path], *, quiet_ms: int | None = None) -> dict:
        """Register a watch of these folders (or get the one that exists)."""
        return self.call("POST", "/watches", {"paths": _sent(paths), "quiet_ms": quiet_ms})

    def watches(self) -> list[dict]:
        return self.call("GET", "/watches")["watches"]

    def unwatch(self, watch_id: str) -> dict:
        return self.call("DELETE", f"/watches/{watch_id}")

    def follow(self, job_id: str, on_progress: Callable[[dict], None] | None = None) -> dict:
        """Poll until the job ends; Ctrl-C asks the server to cancel it and waits for that. A server
        that stops answering meanwhile has the job recorded in its data dir: it runs it on its next start."""
        try:
            return self._follow(job_id, on_progress)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"the search server ({self.owner.describe()}) stopped answering while it ran ingest job {job_id}: "
                "the job is recorded in the data dir and resumes when the server starts again (`search serve`); "
                "`indexer jobs` shows it") from exc

    def _follow(self, job_id: str, on_progress: Callable[[dict], None] | None) -> dict:
        try:
            while True:
                job = self.job(job_id)
                if on_progress:
                    on_progress(job)
                if job["state"] in ("done", "failed", "cancelled"):
                    return job
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.cancel(job_id)
            while (job := self.job(job_id))["state"] not in ("done", "failed", "cancelled"):
                time.sleep(POLL_S)
            return job
