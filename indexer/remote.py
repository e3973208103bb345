"""Ingest through the running `search serve` that owns the store (see search/owner.py): the paths go
to the server as a job; its progress comes back by polling; Ctrl-C cancels it there. Folder watches
are registered in the server the same way (it runs them, and again after a restart)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from search.rest_client import RestClient

POLL_S = 0.25


class RemoteIngest(RestClient):
    def submit(self, paths: list[Path], *, prune: bool = False) -> str:
        # Absolute as this process means them: the server may run in another working folder.
        body = {"paths": [str(Path(p).expanduser().absolute()) for p in paths], "prune": prune}
        return self.call("POST", "/ingest", body)["job_id"]

    def job(self, job_id: str) -> dict:
        return self.call("GET", f"/ingest/jobs/{job_id}")

    def cancel(self, job_id: str) -> dict:
        return self.call("DELETE", f"/ingest/jobs/{job_id}")

    def jobs(self) -> list[dict]:
        return self.call("GET", "/ingest/jobs")["jobs"]

    def watch(self, paths: list[Path], *, quiet_ms: int | None = None) -> dict:
        """Register a watch of these folders (or get the one that exists)."""
        body = {"paths": [str(Path(p).expanduser().absolute()) for p in paths], "quiet_ms": quiet_ms}
        return self.call("POST", "/watches", body)

    def watches(self) -> list[dict]:
        return self.call("GET", "/watches")["watches"]

    def unwatch(self, watch_id: str) -> dict:
        return self.call("DELETE", f"/watches/{watch_id}")

    def follow(self, job_id: str, on_progress: Callable[[dict], None] | None = None) -> dict:
        """Poll until the job ends; Ctrl-C asks the server to cancel it and waits for that."""
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
