"""The key is checked from the headers before any body is read: a wrong or missing key never makes the
server read, parse or hold a large body (59 MB of `[{},{},…]` once cost 3.4 s and 1.5 GB before its
401). Driven at the ASGI level, so the test sees exactly how much of the body the app asked for."""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi.testclient import TestClient
from processes import run_cli

from search.api import create_app
from search.config import Settings
from search.keys import KeyFile, key_file
from search.triton.local import free_port

KEY = "gate-admin-key"
CHUNK = 1 << 20
CHUNKS = 30  # 30 MB in all, under the 60 MB max_request_bytes: only the key can stop it early
# Routes that need a key, as a client would send them: (method, path, content-type)
GUARDED = [("POST", "/v1/embeddings", "application/json"), ("POST", "/search/documents", "application/json"),
           ("POST", "/ingest", "application/json"), ("POST", "/ingest/upload", "multipart/form-data; boundary=x"),
           ("POST", "/search/images/like", "multipart/form-data; boundary=x"), ("POST", "/watches", "application/json"),
           ("POST", "/mcp", "application/json")]


@pytest.fixture
def plain(tmp_path) -> Settings:
    """A server's settings with no Triton behind them: a refused request never gets that far."""
    return Settings(data_dir=tmp_path / "data", triton_url=f"127.0.0.1:{free_port()}", qdrant_url=None)


def send(app, method: str, path: str, headers: dict[str, str], chunks: int = CHUNKS, length: bool = False):
    """One request of ``chunks`` MB straight into the app: (status, parsed body, headers, chunks the app read)."""
    pulled, sent = 0, []

    async def receive():
        nonlocal pulled
        if pulled < chunks:
            pulled += 1
            return {"type": "http.request", "body": b"[{}," * (CHUNK // 4), "more_body": pulled < chunks}
        return {"type": "http.disconnect"}

    async def reply(message):
        sent.append(message)

    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if length:
        raw.append((b"content-length", str(chunks * CHUNK).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": raw,
             "client": ("127.0.0.1", 50000), "server": ("testserver", 80), "state": {}}
    asyncio.run(app(scope, receive, reply))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), {k.decode(): v.decode() for k, v in start["headers"]}, pulled


@pytest.mark.parametrize("length", [False, True], ids=["chunked", "content-length"])
def test_a_wrong_or_missing_key_is_refused_before_the_body_is_read(plain, length):
    app = create_app(plain.model_copy(update={"api_key": KEY}))
    for method, path, media in GUARDED:
        for headers in ({"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}, {}):
            status, body, sent, pulled = send(app, method, path, {"content-type": media, **headers}, length=length)
            assert (status, pulled) == (401, 0), (path, headers, status, body, pulled)
            assert "www-authenticate" in sent and "x-request-id" in sent, sent  # inside the request observer
            # The routes' own refusal, word for word (the app's error body; OpenAI's under /v1)
            message = "X-API-Key: header required (or Authorization: Bearer)" if not headers else "X-API-Key: wrong API key"
            assert body == ({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                       "code": "invalid_api_key"}} if path.startswith("/v1/") else {"detail": message}), body
            assert sent["www-authenticate"] == ("Bearer" if path == "/mcp" else "ApiKey")
    metrics = app.state.metrics.registry
    assert metrics.get_sample_value("search_api_requests_total",
                                    {"method": "POST", "route": "/v1/embeddings", "status": "401"}) == 3
    # Public routes are left alone
    status, _, _, _ = send(app, "GET", "/healthz", {}, chunks=0)
    assert status == 200


def test_a_scoped_key_is_refused_from_the_headers_too(plain):
    reader = KeyFile(plain.data_dir / "api-keys.json").add("reader", ["hr"], "read")
    app = create_app(plain)
    status, body, _, pulled = send(app, "POST", "/ingest", {"content-type": "application/json", "X-API-Key": reader})
    assert (status, pulled) == (403, 0) and "may only read" in body["detail"], body
    status, body, _, pulled = send(app, "POST", "/search/documents", {"content-type": "application/json"})
    assert (status, pulled) == (401, 0), body  # keys file, no key: refused


def test_requests_without_a_key_that_pass_get_the_lower_body_limit(plain):
    """With api_key_scope=writes reads pass without a key; such a request may not send more than
    max_anonymous_request_bytes, and the app stops reading once it passes that."""
    app = create_app(plain.model_copy(update={"api_key": KEY, "api_key_scope": "writes"}))
    limit = plain.max_anonymous_request_bytes
    for length in (False, True):
        status, body, _, pulled = send(app, "POST", "/search/documents", {"content-type": "application/json"}, length=length)
        assert status == 413 and "max_anonymous_request_bytes" in body["detail"], body
        assert pulled <= limit // CHUNK + 1
        status, body, _, _ = send(app, "POST", "/v1/embeddings", {"content-type": "application/json"}, length=length)
        assert status == 413 and "max_anonymous_request_bytes" in body["error"]["message"], body
    # The key lifts it to max_request_bytes: the whole body is read (and refused: it is no JSON one can parse)
    status, body, _, pulled = send(app, "POST", "/search/documents", {"content-type": "application/json", "X-API-Key": KEY})
    assert pulled == CHUNKS and status == 400 and "parsing the body" in body["detail"], body
    # Writes still need the key
    status, _, _, pulled = send(app, "POST", "/ingest", {"content-type": "application/json"})
    assert (status, pulled) == (401, 0)
    # A JSON query under the limit passes as before (the model is not served here: 503 once it is read)
    query = {"model": "minilm", "input": ["word " * 20_000] * 5}  # 500,000 characters, the most one request may embed
    assert len(json.dumps(query)) < limit
    with TestClient(create_app(plain.model_copy(update={"api_key": KEY, "api_key_scope": "writes"}))) as c:
        r = c.post("/v1/embeddings", json=query)
        assert r.status_code == 503 and "Triton" in r.json()["error"]["message"], r.text


def test_the_cli_refuses_a_key_for_a_knowledge_base_that_cannot_exist(plain):
    r = run_cli("search", "keys", "add", "y", "--kb", "NOT A KB", settings=plain)
    assert r.returncode != 0 and "kb: a knowledge base's name" in r.stderr + r.stdout, r
    assert "Traceback" not in r.stderr
    assert key_file(plain).load() == [] and not (plain.data_dir / "api-keys.json").exists()
    assert run_cli("search", "keys", "add", "every", "--kb", "*", settings=plain).returncode == 0
