"""What operators see of the REST API, against the real local Triton and the embedded store:
Prometheus metrics at /metrics (requests by route template, latency histograms, errors, ingest
progress), request ids in and out, and one JSON log line per request, with the job id on every
line an ingest job logs; and `search serve` logging JSON lines from a real uvicorn."""

from __future__ import annotations

import gc
import io
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from fastapi.testclient import TestClient
from processes import stop
from prometheus_client.parser import text_string_to_metric_families

from search.api import app as api_app
from search.api import create_app
from search.errors import TritonUnavailable
from search.observability import ContextFilter, JsonFormatter
from search.triton.local import free_port

KEY = "s3cret-key"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, from the Prometheus text format."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def requests_total(metrics: dict, method: str, route: str, status: int) -> float:
    return metrics.get(("search_api_requests_total", (("method", method), ("route", route), ("status", str(status)))), 0)


@pytest.fixture
def json_log():
    """The lines the 'search' loggers write, formatted as `search serve --log-format json` does."""
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("search")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in buf.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_metrics_count_requests_by_route_template(settings, docs):
    with TestClient(create_app(settings)) as client:
        client.post("/ingest", json={"paths": [str(docs)]})  # 403: outside the roots
        client.get("/ingest/jobs/0123456789abcdef")  # 404: counted under the template, not the id
        client.get("/ingest/jobs/fedcba9876543210")
        client.get("/no/such/path")
        client.post("/search/documents", json={"query": ""})  # 422
        client.post("/search/documents", json={"query": "reset password"})  # 409: nothing indexed
        for _ in range(3):
            client.get("/healthz")
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    m = samples(response.text)
    assert requests_total(m, "GET", "/healthz", 200) == 3
    assert requests_total(m, "GET", "/ingest/jobs/{job_id}", 404) == 2
    assert requests_total(m, "GET", "<unmatched>", 404) == 1
    assert requests_total(m, "POST", "/ingest", 403) == 1
    assert requests_total(m, "POST", "/search/documents", 422) == 1
    assert requests_total(m, "POST", "/search/documents", 409) == 1
    assert not any("0123456789abcdef" in str(key) for key in m)  # raw paths never become labels
    hist = ("search_api_request_duration_seconds_count", (("method", "GET"), ("route", "/healthz")))
    assert m[hist] == 3
    assert m[("search_api_request_duration_seconds_bucket", (("le", "+Inf"), ("method", "GET"), ("route", "/healthz")))] == 3
    assert ("process_resident_memory_bytes", ()) in m
    assert not any(k[0] == "search_api_errors_total" for k in m)  # 4xx are not errors


def test_metrics_count_server_errors_by_cause(settings):
    app = create_app(settings)

    @app.get("/boom")
    def boom():
        raise RuntimeError("a bug")

    @app.get("/triton-down")
    def triton_down():
        raise TritonUnavailable("Triton is not reachable at 127.0.0.1:1")

    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/boom").status_code == 500
        r = client.get("/triton-down")
        assert r.status_code == 503 and r.headers["x-request-id"]
        m = samples(client.get("/metrics").text)
    assert m[("search_api_errors_total", (("error", "RuntimeError"), ("method", "GET"), ("route", "/boom")))] == 1
    assert m[("search_api_errors_total", (("error", "TritonUnavailable"), ("method", "GET"), ("route", "/triton-down")))] == 1
    assert requests_total(m, "GET", "/boom", 500) == 1 and requests_total(m, "GET", "/triton-down", 503) == 1
    assert m[("search_api_requests_in_progress", ())] == 1  # the /metrics request itself


def test_metrics_and_the_api_key(settings):
    with TestClient(create_app(settings.model_copy(update={"api_key": KEY}))) as client:
        assert client.get("/collections").status_code == 401
        assert client.get("/metrics").status_code == 200  # default: open, like /healthz
    with TestClient(create_app(settings.model_copy(update={"api_key": KEY, "metrics_require_key": True}))) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get("/metrics", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        assert client.get("/metrics", headers={"X-API-Key": KEY}).status_code == 200
    assert "/metrics" not in create_app(settings).openapi()["paths"]


def test_request_ids_and_one_log_line_per_request(settings, json_log):
    with TestClient(create_app(settings)) as client:
        given = client.get("/healthz", headers={"X-Request-ID": "lb-42.a:b_c"})
        fresh = client.get("/healthz")
        unusable = client.get("/healthz", headers={"X-Request-ID": "x" * 200})
        client.post("/search/documents", json={"query": "vpn"})
    assert given.headers["x-request-id"] == "lb-42.a:b_c"
    assert len(fresh.headers["x-request-id"]) == 32 and len(unusable.headers["x-request-id"]) == 32
    access = [line for line in json_log() if line["logger"] == "search.api.access"]
    assert [line["request_id"] for line in access[:3]] == [given.headers["x-request-id"], fresh.headers["x-request-id"],
                                                           unusable.headers["x-request-id"]]
    first = access[0]
    assert (first["method"], first["route"], first["path"], first["status"]) == ("GET", "/healthz", "/healthz", 200)
    assert first["duration_ms"] >= 0 and first["level"] == "INFO" and first["ts"].endswith("Z")
    assert (access[3]["route"], access[3]["status"], access[3]["error"]) == ("/search/documents", 409, "EmptyCollection")


def test_ingest_job_logs_carry_the_job_id(settings, docs, json_log):
    settings = settings.model_copy(update={"api_roots": [docs.parent]})
    with TestClient(create_app(settings)) as client:
        response = client.post("/ingest", json={"paths": [str(docs)]}, headers={"X-Request-ID": "ingest-req-1"})
        job_id = response.json()["job_id"]
        deadline = time.monotonic() + 120
        while client.get(f"/ingest/jobs/{job_id}").json()["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        m = samples(client.get("/metrics").text)
    job_lines = [line for line in json_log() if line.get("job_id") == job_id]
    messages = [line["msg"] for line in job_lines]
    assert any("queued" in msg for msg in messages) and any("started" in msg for msg in messages)
    done = next(line for line in job_lines if line.get("state"))
    assert done["state"] == "done" and done["files"]["indexed"] >= 5
    assert all(line["request_id"] == "ingest-req-1" for line in job_lines)  # the request that submitted it
    assert m[("search_ingest_files_total", (("status", "indexed"),))] == done["files"]["indexed"]
    assert m[("search_ingest_jobs_total", (("state", "done"),))] == 1


def test_search_serve_logs_json_lines(settings, tmp_path):
    port = free_port()
    env = {**os.environ, "SEARCH_LOG_FORMAT": "json", "SEARCH_DATA_DIR": str(tmp_path / "data"),
           "SEARCH_TRITON_URL": settings.triton_url, "SEARCH_TRITON_REPO": str(settings.triton_repo)}
    log = tmp_path / "serve.log"  # a file: an unread pipe fills with request logs and blocks the server
    with log.open("a") as err:
        proc = subprocess.Popen([sys.executable, "-m", "search", "serve", "--port", str(port)], env=env,
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/healthz", headers={"X-Request-ID": "probe-7"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    assert r.headers["X-Request-ID"] == "probe-7"
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text() if proc.poll() is not None else "timeout"
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert requests_total(samples(r.read().decode()), "GET", "/healthz", 200) >= 1
    finally:
        stop(proc)
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON, uvicorn's own included
    assert any(line["logger"].startswith("uvicorn") for line in lines)
    probe = [line for line in lines if line.get("request_id") == "probe-7"]
    assert len(probe) == 1 and probe[0]["route"] == "/healthz" and probe[0]["status"] == 200


def test_serve_freezes_what_start_up_built(settings, monkeypatch):
    """`search serve` moves what start-up built out of the collector's sight (gc.freeze): a full
    collection under load then scans what requests left, not the modules and the app (~225k objects,
    a pause of 0.1-0.2 s each time). And it runs young collections less often: the requests in
    flight, not garbage, set them off."""
    seen = {}
    monkeypatch.setattr(api_app, "configure_logging", lambda *args: {})  # keep this process's logging as it is
    monkeypatch.setattr(api_app.uvicorn, "run",
                        lambda app, **kw: seen.update(frozen=gc.get_freeze_count(), threshold=gc.get_threshold(), app=app))
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        api_app.serve(settings, "127.0.0.1", free_port())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        if "app" in seen:
            seen["app"].state.backend.close()
    assert seen["frozen"] > 0
    assert seen["threshold"] == (api_app.YOUNG_GC_THRESHOLD, *threshold[1:])  # fewer young collections, same older ones
