"""REST API helpers shared by tests/test_api.py and tests/test_api_routes.py: an app client, a job waited for, a photo, a 4xx check."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient
from PIL import Image

from search.api import create_app


def make_client(settings, **update) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=update)))


def wait(api: TestClient, response, timeout: float = 120, headers=None) -> dict:
    """The finished job behind a 202."""
    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/ingest/jobs/{job_id}", headers=headers).json()
        if job["state"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} still {job['state']}")


def photo(path: Path, seed: int, fmt: str = "JPEG") -> Path:
    blocks = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(blocks).resize((160, 120), Image.NEAREST).save(path, fmt)
    return path


def fails(response, status: int, field: str) -> None:
    """A 4xx whose message names the field."""
    assert response.status_code == status, response.text
    assert field in response.json()["detail"], response.json()
