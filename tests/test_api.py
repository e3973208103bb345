"""The REST API against the real local Triton and the embedded store (nothing mocked): health and
readiness, request validation and errors, the API key, and a schemathesis run over the OpenAPI spec
that must never get a 5xx nor an answer the spec does not document (with and without an API key).
Ingest and search routes: tests/test_api_routes.py."""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from pathlib import Path

import pytest
import schemathesis
from api_helpers import fails, make_client, photo, wait
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as fuzz_settings
from indexed import copy_index, ingested, sample_docs
from schemathesis import checks
from starlette_testclient import TestClient as RequestsTestClient  # the requests-based client schemathesis sends with

from search.api import create_app
from search.api.responses import FastJSON
from search.config import Settings
from search.services import HIT_CHARS_LIMIT, MAX_PAGE
from search.triton.local import free_port

KEY = "s3cret-key"


@pytest.fixture
def api(settings):
    with make_client(settings) as c:
        yield c


# -- health
def test_health_ready_and_docs(api):
    assert api.get("/healthz").json() == {"status": "ok"}
    ready = api.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["ready"] and body["triton"]["live"] and body["qdrant"]["reachable"]
    assert body["triton"]["models"]["minilm"] is True and "clip_text" in body["triton"]["models"]
    assert api.get("/openapi.json").json()["paths"].keys() >= {"/search/documents", "/ingest", "/readyz"}
    assert api.get("/docs").status_code == 200


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")  # the Qdrant URL points nowhere on purpose
def test_readyz_reports_triton_and_qdrant_separately(settings):
    with make_client(settings, triton_url=f"127.0.0.1:{free_port()}") as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["triton"]["live"] is False and r.json()["qdrant"]["reachable"] is True
    with make_client(settings, qdrant_url=f"http://127.0.0.1:{free_port()}") as c:
        r = c.get("/readyz")
        body = r.json()
        assert r.status_code == 503 and body["triton"]["live"] is True and body["qdrant"]["reachable"] is False
        assert "not reachable" in body["qdrant"]["error"]
        fails(c.get("/collections"), 503, "not reachable")


# -- validation and errors
def test_search_before_anything_is_indexed_is_409(api):
    fails(api.post("/search/documents", json={"query": "reset password"}), 409, "nothing indexed yet")
    fails(api.post("/search/images", json={"text": "a dog"}), 409, "no photos indexed yet")


@pytest.mark.parametrize("body, status, field", [
    ({"query": "x", "top_k": 0}, 422, "top_k"),
    ({"query": "x", "top_k": MAX_PAGE + 1}, 422, "top_k"),
    ({"query": "x", "top_k": "many"}, 422, "top_k"),
    ({"query": ""}, 422, "query"),
    ({"query": "   "}, 400, "query"),
    ({"query": "x" * 2001}, 422, "query"),
    ({"top_k": 3}, 422, "query"),
    ({"query": "x", "mode": "telepathy"}, 422, "mode"),
    ({"query": "x", "min_score": "high"}, 422, "min_score"),
    ({"query": "x", "max_chars": 0}, 422, "max_chars"),
    ({"query": "x", "max_chars": HIT_CHARS_LIMIT + 1}, 422, "max_chars"),
    ({"query": "x", "max_chars": 10, "full_text": True}, 422, "max_chars"),
    (b'{"query": "\\ud800"}', 422, "query"),  # a lone surrogate (valid JSON, not valid text)
    (None, 422, "body"),
])
def test_invalid_document_searches_name_the_field(api, body, status, field):
    if isinstance(body, bytes):
        r = api.post("/search/documents", content=body, headers={"content-type": "application/json"})
    else:
        r = api.post("/search/documents", json=body)
    fails(r, status, field)


def test_malformed_json_is_a_422(api):
    r = api.post("/search/documents", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "JSON" in r.json()["detail"]


# -- API key
def test_api_key_for_every_endpoint(settings):
    with make_client(settings, api_key=KEY) as c:
        assert c.get("/healthz").status_code == 200  # liveness probes carry no key
        for r in (c.get("/readyz"), c.get("/collections"), c.post("/search/documents", json={"query": "x"}),
                  c.post("/ingest", json={"paths": ["/etc"]}), c.get("/ingest/jobs")):
            fails(r, 401, "X-API-Key")
        fails(c.get("/collections", headers={"X-API-Key": "guess"}), 401, "wrong API key")
        ok = {"X-API-Key": KEY}
        assert c.get("/collections", headers=ok).status_code == 200
        assert c.get("/readyz", headers=ok).status_code == 200
        fails(c.post("/search/documents", json={"query": "x"}, headers=ok), 409, "nothing indexed")
        fails(c.post("/ingest", json={"paths": ["/etc"]}, headers=ok), 403, "paths[0]")  # past the key check
        job = wait(c, c.post("/ingest/upload", files={"files": ("n.md", b"# Note\n\nhello", "text/markdown")}, headers=ok),
                   headers=ok)
        assert job["counts"] == {"indexed": 1}


def test_api_key_for_writes_only(settings):
    with make_client(settings, api_key=KEY, api_key_scope="writes") as c:
        assert c.get("/collections").status_code == 200
        fails(c.post("/search/documents", json={"query": "x"}), 409, "nothing indexed")
        fails(c.post("/ingest", json={"paths": ["/etc"]}), 401, "X-API-Key")
        fails(c.post("/ingest/upload", files={"files": ("n.md", b"x", "text/markdown")}), 401, "X-API-Key")
        fails(c.get("/ingest/jobs"), 401, "X-API-Key")
        fails(c.post("/ingest", json={"paths": ["/etc"]}, headers={"X-API-Key": KEY}), 403, "paths[0]")


def test_openapi_documents_every_error_with_the_error_body(api):
    spec = api.get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's 422 body is not ours
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            where, answers = f"{method.upper()} {path}", op["responses"]
            assert {"413", "500"} <= answers.keys(), where
            assert ("401" in answers) == (path != "/healthz"), where
            if "401" in answers:
                assert answers["401"]["headers"]["WWW-Authenticate"]["required"], where
            for status, answer in answers.items():
                if status >= "400":
                    ref = answer["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
                    if path.startswith("/v1/"):  # OpenAI-compatible routes answer with OpenAI's error body
                        assert ref == "OpenAIError" and status != "422", (where, status)
                        continue
                    expected = {"422": "ValidationErrorBody", "503": "Readiness" if path == "/readyz" else "ErrorBody"}
                    assert ref == expected.get(status, "ErrorBody"), (where, status)
    ingest = spec["paths"]["/ingest"]["post"]["responses"]
    assert {"400", "403", "404", "422"} <= ingest.keys()
    assert "409" in spec["paths"]["/search/documents"]["post"]["responses"]
    assert "404" in spec["paths"]["/ingest/jobs/{job_id}"]["get"]["responses"]


def test_openapi_documents_the_key_header_on_every_route_that_checks_it(api):
    """The key check is the security scheme itself (one dependency per request): OpenAPI still shows it."""
    spec = api.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"] == {"APIKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key"}}
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            checked = "401" in op["responses"]
            assert (op.get("security") == [{"APIKeyHeader": []}]) == checked, f"{method.upper()} {path}"


def test_an_unexpected_error_is_a_json_500(settings):
    app = create_app(settings)

    @app.get("/boom")
    def boom():
        raise ZeroDivisionError("no")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom")
    assert r.status_code == 500 and r.headers["content-type"] == "application/json"
    assert "server log" in r.json()["detail"]


def test_an_unknown_key_scope_is_refused(settings):
    with pytest.raises(ValueError, match="api_key_scope"):
        create_app(settings.model_copy(update={"api_key_scope": "sometimes"}))


# -- schema fuzzing: whatever the spec allows a client to send, the answer is never a 5xx, and every
# answer (status, content type, body, headers) is one the spec documents for that route
KEY_MODES = {"open": ({}, None), "key sent": ({"api_key": KEY}, KEY), "key missing": ({"api_key": KEY}, None),
             "writes key missing": ({"api_key": KEY, "api_key_scope": "writes"}, None)}


@pytest.fixture(scope="module")
def fuzz_index(model_repo, triton, tmp_path_factory) -> tuple[Settings, list[Path]]:
    """The sample docs and two photos, ingested once for the module's fuzz runs (tests/indexed.py),
    so that searches reach Triton and the store."""
    root = tmp_path_factory.mktemp("fuzz")
    docs, album = sample_docs(root), root / "album"
    for i in range(2):
        photo(album / f"p{i}.jpg", i)
    with ingested(root, model_repo, triton.grpc_port, [docs, album]) as (svc, _):
        return svc.settings, [docs, album]


@contextmanager
def fuzz_app(fuzz_index, tmp_path: Path, mode: str):
    """One client for every generated case (schemathesis' own ASGI transport would run the app's
    start-up and shut-down around each request, reopening the store every time)."""
    indexed, roots = fuzz_index
    update, key = KEY_MODES[mode]
    app = create_app(copy_index(indexed, tmp_path / "data").model_copy(
        update={"api_roots": roots, "max_upload_bytes": 200_000, **update}))
    with RequestsTestClient(app) as api:
        api.key_headers = {"X-API-Key": key} if key else {}
        yield api


# Without the key ("key missing") is a run of its own, below; a test narrows the modes with an
# indirect parametrize of fuzz_client.
@pytest.fixture(params=[mode for mode in KEY_MODES if mode != "key missing"])
def fuzz_client(request, fuzz_index, tmp_path):
    with fuzz_app(fuzz_index, tmp_path, request.param) as api:
        yield api


@pytest.fixture
def fuzz_schema(fuzz_client):
    return schemathesis.from_dict(fuzz_client.app.openapi(), base_url="http://testserver")


schemathesis.experimental.OPEN_API_3_1.enable()  # FastAPI writes OpenAPI 3.1
fuzz = schemathesis.from_pytest_fixture("fuzz_schema")


def _said_5xx(ctx, response, case) -> None:
    """Not a check: it logs a server error's body, so that one the replay does not repeat (a busy
    machine) still leaves its words in the report ("found 0 distinct sets of failures" says nothing)."""
    if response.status_code >= 500:
        logging.getLogger("tests.fuzz").warning("%s %s %s -> %s %s", case.method, case.path, case.query,
                                                response.status_code, response.text[:1000])


CONFORMANCE = (_said_5xx, checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
               checks.response_schema_conformance, checks.response_headers_conformance)


# Each call of these two runs every served model's verification (~4 s here, most of it the tiny OFA
# at 480 px), and the relevance check ~135 searches; their whole input is a flag or two and names: a
# few examples cover it, where 50 took 5 of the suite's minutes (8 took 40 s, 4 about half that). They are fuzzed with the key sent only: the key modes
# differ in the guard in front of the route, not in the route, and the guard is fuzzed on every
# route by the other runs (without the key too, below); each mode cost ~25-60 s of the suite.
MODEL_CHECKS = ["/models/verify", "/readyz", "/relevance/check"]
FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
               HealthCheck.function_scoped_fixture]


@fuzz.exclude(path=MODEL_CHECKS).parametrize()
@fuzz_settings(max_examples=50, deadline=None, suppress_health_check=FUZZ_HEALTH)
def test_fuzz_openapi_conformance(case, fuzz_client):
    case.call_and_validate(session=fuzz_client, headers=fuzz_client.key_headers, checks=CONFORMANCE)


@fuzz.include(path=MODEL_CHECKS).parametrize()
@fuzz_settings(max_examples=4, deadline=None, suppress_health_check=FUZZ_HEALTH)
@pytest.mark.parametrize("fuzz_client", ["key sent"], indirect=True)
def test_fuzz_model_checks_conformance(case, fuzz_client):
    case.call_and_validate(session=fuzz_client, headers=fuzz_client.key_headers, checks=CONFORMANCE)


# A key is needed and none is sent: every route but the public ones answers the same 401 whatever
# its input, so a few examples per route show it (50 per route took ~40 s here).
@fuzz.parametrize()
@fuzz_settings(max_examples=10, deadline=None, suppress_health_check=FUZZ_HEALTH)
@pytest.mark.parametrize("fuzz_client", ["key missing"], indirect=True)
def test_fuzz_without_the_key_conformance(case, fuzz_client):
    case.call_and_validate(session=fuzz_client, headers={}, checks=CONFORMANCE)


def test_answers_are_json_with_the_same_numbers_also_where_orjson_refuses():
    """orjson writes the answers, floats with the same shortest round-trip digits as json; what it
    refuses (a non-str key) json writes instead, never a 500."""
    body = {"query": "café", "scores": [0.1, 1e-05, 0.30000001192092896, -2.5e+20], "n": {1: "one"}}
    assert json.loads(FastJSON(body).body) == {**body, "n": {"1": "one"}}
    scores = [0.1, 1e-05, 0.30000001192092896, -2.5e+20, 0.012345678918063641]
    assert json.loads(FastJSON({"scores": scores}).body)["scores"] == scores
