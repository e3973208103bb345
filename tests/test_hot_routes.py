"""The fast way for the hot routes (search/api/hot.py), against the real local Triton and the
embedded store: it answers as FastAPI does (the same bodies, headers and errors, the same metrics
label), and what it does not take goes on to FastAPI as it came."""

from __future__ import annotations

import time

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from search.api import create_app

KEY = "hot-key"
# A query string sends a request past the fast way (FastAPI ignores parameters a route does not declare)
VIA_FASTAPI = "?via=fastapi"


@pytest.fixture
def routed(monkeypatch) -> list[str]:
    """The paths FastAPI's own route handling served."""
    seen: list[str] = []
    handle = APIRoute.handle

    async def counted(self, scope, receive, send):
        seen.append(self.path)
        await handle(self, scope, receive, send)

    monkeypatch.setattr(APIRoute, "handle", counted)
    return seen


@pytest.fixture
def hot_api(settings, docs):
    with TestClient(create_app(settings.model_copy(update={"api_roots": [docs], "api_key": KEY}))) as c:
        c.headers["X-API-Key"] = KEY
        job = c.post("/ingest", json={"paths": [str(docs)]}).json()["job_id"]
        deadline = time.monotonic() + 120
        while c.get(f"/ingest/jobs/{job}").json()["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline, "the ingest job did not finish"
            time.sleep(0.1)
        yield c


def both_ways(c: TestClient, routed: list[str], path: str, gate: bool = False, **kwargs):
    """The same request by the fast way and through FastAPI, and that each took its way (``gate``: the
    key gate refuses both before either way)."""
    before = len(routed)
    fast = c.post(path, **kwargs)
    taken = routed[before:]
    slow = c.post(path + VIA_FASTAPI, **kwargs)
    assert routed[before + len(taken):] == ([] if gate else [path]), "the query string did not send the request through FastAPI"
    return fast, slow, taken


ANSWERED = [
    ("/search/documents", {"query": "reset password", "top_k": 3, "mode": "semantic"}),
    ("/search/documents", {"query": "vpn from home", "top_k": 2, "offset": 2, "max_chars": 40}),
    ("/search/documents", {"query": "reset password", "group_by": "document", "group_size": 2, "mode": "semantic"}),
    ("/search/documents", {"query": "reset password", "full_text": True, "top_k": 1}),
    ("/v1/embeddings", {"model": "minilm", "input": "reset password"}),
    ("/v1/embeddings", {"model": "minilm", "input": ["reset password", "vpn from home"], "encoding_format": "base64",
                        "user": "a client's own field"}),
]


REFUSED = [  # (path, request, status, answered by): "fast" when the route's code raised, "gate" when the key gate
    # refused it from the headers (search/api/security.py, KeyGate), else FastAPI answered
    ("/search/documents", {"json": {"query": "   "}}, 400, "fast"),  # the service's BadRequest
    ("/search/documents", {"json": {"query": "x", "kb": "nowhere"}}, 409, "fast"),  # an empty knowledge base
    ("/v1/embeddings", {"json": {"model": "no-such-model", "input": "x"}}, 404, "fast"),  # OpenAI's error body
    ("/v1/embeddings", {"json": {"model": "minilm", "input": "x", "dimensions": 3}}, 400, "fast"),
    ("/search/documents", {"json": {"query": ""}}, 422, "fastapi"),  # pydantic's field error
    ("/search/documents", {"json": {"query": "x", "top_k": "many"}}, 422, "fastapi"),
    ("/search/documents", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422, "fastapi"),
    ("/search/documents", {"content": b'{"query": "\\ud800"}', "headers": {"content-type": "application/json"}}, 422,
     "fastapi"),
    ("/search/documents", {"content": b'{"query": "x"}', "headers": {"content-type": "text/plain"}}, 422, "fastapi"),
    ("/search/documents", {"json": {"query": "x"}, "headers": {"X-API-Key": "wrong"}}, 401, "gate"),
    ("/v1/embeddings", {"json": {"model": "minilm", "input": [[1, 2]]}}, 400, "fast"),  # token arrays: the service refuses
    ("/v1/embeddings", {"json": {"model": "minilm", "input": "x", "encoding_format": "hex"}}, 400, "fastapi"),
    ("/v1/embeddings", {"json": {"model": "minilm", "input": "x"}, "headers": {"X-API-Key": ""}}, 401, "gate"),
]


# One client for every case: each ingests the sample docs first (~10 s)
def test_the_fast_way_answers_as_fastapi_does_and_leaves_it_the_rest(hot_api, routed, subtests):
    for path, body in ANSWERED:
        with subtests.test(path=path, body=body):
            fast, slow, taken = both_ways(hot_api, routed, path, json=body)
            assert taken == [], "FastAPI served a request the fast way should have answered"
            assert fast.status_code == slow.status_code == 200, fast.text
            assert fast.json() == slow.json()
            assert fast.headers["content-type"] == slow.headers["content-type"] == "application/json"
            assert fast.headers["x-request-id"] and fast.headers["x-request-id"] != slow.headers["x-request-id"]
    for path, request, status, by in REFUSED:
        with subtests.test(path=path, request=request):
            fast, slow, taken = both_ways(hot_api, routed, path, gate=by == "gate", **request)
            assert taken == ([path] if by == "fastapi" else [])
            assert fast.status_code == slow.status_code == status, fast.text
            assert fast.json() == slow.json()
            assert fast.headers.get("www-authenticate") == slow.headers.get("www-authenticate")


def test_the_fast_way_is_counted_under_the_routes_label(hot_api, routed):
    for _ in range(3):
        assert hot_api.post("/search/documents", json={"query": "reset password"}).status_code == 200
    assert hot_api.post("/search/documents", json={"query": "x", "kb": "nowhere"}).status_code == 409
    assert routed == []
    metrics = hot_api.get("/metrics").text
    assert 'api_requests_total{method="POST",route="/search/documents",status="200"} 3.0' in metrics
    assert 'route="/search/documents",status="409"' in metrics
    assert "<unmatched>" not in metrics
