"""The REST API against the real local Triton and the embedded store (nothing mocked): every
endpoint's success path and its 4xx cases, the API key, path escapes, size limits, and a
schemathesis run over the OpenAPI spec that must never get a 5xx nor an answer the spec does not
document (with and without an API key)."""

from __future__ import annotations

import io
import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as fuzz_settings
from indexed import copy_index, ingested, sample_docs
from ingest_helper import long_passage
from PIL import Image
from schemathesis import checks
from starlette_testclient import TestClient as RequestsTestClient  # the requests-based client schemathesis sends with

from search.api import create_app
from search.api.responses import FastJSON
from search.config import Settings
from search.services import HIT_CHARS, HIT_CHARS_LIMIT, MAX_PAGE, SearchService
from search.triton.local import free_port

KEY = "s3cret-key"


def make_client(settings, **update) -> TestClient:
    return TestClient(create_app(settings.model_copy(update=update)))


@pytest.fixture
def api(settings):
    with make_client(settings) as c:
        yield c


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


def image_bytes(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def fails(response, status: int, field: str) -> None:
    """A 4xx whose message names the field."""
    assert response.status_code == status, response.text
    assert field in response.json()["detail"], response.json()


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


# -- documents
def test_ingest_a_folder_then_search_documents(settings, docs):
    with make_client(settings, api_roots=[docs]) as c:
        job = wait(c, c.post("/ingest", json={"paths": [str(docs)]}))
        n = len(list(docs.iterdir()))
        assert job["state"] == "done" and job["files_done"] == job["files_total"] == n
        assert job["counts"] == {"indexed": n} and job["report"]["indexed"] == n and not job["failures"]
        assert [j["id"] for j in c.get("/ingest/jobs").json()["jobs"]] == [job["id"]]
        counts = c.get("/collections").json()
        assert counts["collections"]["documents"] >= n and counts["collections"]["images"] == 0

        r = c.post("/search/documents", json={"query": "reset password", "top_k": 3, "mode": "semantic"})
        assert r.status_code == 200, r.text
        body = r.json()
        top = body["hits"][0]
        assert top["path"] == str(docs / "reset-password.md") and 0 < top["score"] <= 1.0001
        assert {"score", "path", "page", "chunk", "text", "citation", "section"} <= top.keys()
        assert body["context"].startswith(f"[1] {top['citation']}\n") and "[3] " in body["context"]
        assert len(body["hits"]) == 3
        backend = c.app.state.backend
        assert backend.store_in_loop()  # the search awaited Triton and read the store in the event loop
        plain = backend.service().search_documents("reset password", top_k=3, mode="semantic")
        assert body["hits"] == json.loads(json.dumps([h.as_dict() for h in plain]))

        auto = c.post("/search/documents", json={"query": "reset password", "mode": "auto"}).json()
        assert auto["hits"] and len(auto["hits"]) == 5
        assert c.post("/search/documents", json={"query": "reset password", "min_score": 0.999}).json()["hits"] == []
        elsewhere = c.post("/search/documents", json={"query": "reset password", "folder": str(docs / "none")})
        assert elsewhere.status_code == 200 and elsewhere.json()["hits"] == []
        fails(c.post("/search/documents", json={"query": "x", "folder": "~0"}), 400, "folder")  # no such user: was a 500


def test_document_hits_carry_bounded_text(settings, tmp_path):
    word = "Reset your password: " + "x" * 2_000_000  # a 2 MB "word" stored whole, before chunks were bounded
    svc = SearchService(settings)
    try:
        long_passage(svc, tmp_path / "long", word)
    finally:
        svc.close()  # the app opens the store itself
    with make_client(settings) as c:
        r = c.post("/search/documents", json={"query": "reset password", "top_k": 1})
        assert r.status_code == 200 and len(r.content) < 3 * HIT_CHARS, r.text[:500]
        [hit], context = r.json()["hits"], r.json()["context"]
        assert hit["truncated"] is True and hit["length"] == len(word) and hit["text"] == word[:HIT_CHARS]
        assert context.startswith(f"[1] {hit['citation']}\nReset your password: xxx") and context.endswith("x …")
        [small] = c.post("/search/documents", json={"query": "reset password", "max_chars": 100}).json()["hits"]
        assert small["text"] == word[:100] and small["truncated"] is True
        [whole] = c.post("/search/documents", json={"query": "reset password", "full_text": True}).json()["hits"]
        assert whole["text"] == word and whole["truncated"] is False


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


def test_searches_are_answered_while_an_ingest_job_runs(settings, docs):
    with make_client(settings, api_roots=[docs]) as c:
        wait(c, c.post("/ingest", json={"paths": [str(docs)]}))
        for i, f in enumerate(sorted(docs.iterdir())):  # every file changes: the next job re-embeds all
            f.write_text(f.read_text() + f"\n\nRevision note {i}.\n")
        running = c.post("/ingest", json={"paths": [str(docs)]})
        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda _: c.post("/search/documents", json={"query": "printer jam"}).status_code,
                                  range(16)))
        assert codes == [200] * 16
        assert wait(c, running)["counts"] == {"updated": len(list(docs.iterdir()))}


# -- server-side paths
def test_paths_outside_the_roots_are_rejected(settings, docs, tmp_path):
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.md").write_text("the root password is hunter2")
    linked = tmp_path / "kb2"
    linked.mkdir()
    (linked / "leak.md").symlink_to(outside / "secret.md")
    (docs / "escape").symlink_to(outside)
    with make_client(settings, api_roots=[docs, linked]) as c:
        for raw in ("/etc", "/etc/passwd", f"{docs}/../private", f"{docs}/../private/secret.md",
                    f"{docs}/escape", f"{docs}/escape/secret.md", f"{linked}/leak.md", "/nonexistent/x.md"):
            fails(c.post("/ingest", json={"paths": [raw]}), 403, "paths[0]")
        fails(c.post("/ingest", json={"paths": [str(linked)]}), 403, "symlink")  # a folder with a link out
        fails(c.post("/ingest", json={"paths": [str(docs), "/etc"]}), 403, "paths[1]")
        fails(c.post("/ingest", json={"paths": ["kb/printer.md"]}), 400, "absolute")
        fails(c.post("/ingest", json={"paths": [f"{docs}/missing.md"]}), 404, "paths[0]")
        fails(c.post("/ingest", json={"paths": [f"{docs}/a\u0000b"]}), 400, "paths[0]")
        fails(c.post("/ingest", json={"paths": []}), 422, "paths")
        fails(c.post("/ingest", json={"paths": [str(docs)], "prune": "sometimes"}), 422, "prune")
        assert c.get("/ingest/jobs").json()["jobs"] == []  # nothing was started
        fails(c.get("/ingest/jobs/nope"), 404, "job_id")
    with make_client(settings) as c:  # no roots configured: uploads only
        fails(c.post("/ingest", json={"paths": [str(docs)]}), 403, "outside the folders")


# -- uploads
def test_upload_then_search_and_upload_limits(settings):
    note = b"# Parking\n\nVisitor parking permits for the blue garage are issued by reception on level 2.\n"
    with make_client(settings) as c:
        job = wait(c, c.post("/ingest/upload", files=[("files", ("parking.md", note, "text/markdown")),
                                                      ("files", ("extra.bin", b"\x00\x01", "application/octet-stream"))]))
        assert job["state"] == "done" and job["counts"] == {"indexed": 1}, job
        hit = c.post("/search/documents", json={"query": "visitor parking permit", "top_k": 1}).json()["hits"][0]
        assert hit["path"].startswith(str((settings.data_dir / "uploads").resolve())) and hit["path"].endswith("/parking.md")

        fails(c.post("/ingest/upload", files=[("files", (".env", b"X=1", "text/plain"))]), 400, "files[0]")
        fails(c.post("/ingest/upload", files=[("files", ("a.md", b"x", "text/plain")), ("files", ("a.md", b"y", "text/plain"))]),
              400, "files")
        fails(c.post("/ingest/upload", data={"nothing": "here"}), 422, "files")
    with make_client(settings, max_upload_bytes=1000, max_request_bytes=5000) as c:
        earlier = c.get("/ingest/jobs").json()["jobs"]  # kept across restarts: the job above
        fails(c.post("/ingest/upload", files=[("files", ("ok.md", b"fine", "text/plain")),
                                              ("files", ("big.md", b"x" * 2000, "text/plain"))]), 413, "files[1] (big.md)")
        fails(c.post("/ingest/upload", files=[("files", ("huge.md", b"x" * 6000, "text/plain"))]), 413, "body")
        fails(c.post("/search/documents", content=b"{" + b" " * 6000 + b"}", headers={"content-type": "application/json"}),
              413, "max_request_bytes")

        def chunked():  # no Content-Length: the limit applies while the body streams in
            yield b'{"query": "'
            yield b"x" * 6000
            yield b'"}'
        fails(c.post("/search/documents", content=chunked(), headers={"content-type": "application/json"}), 413, "body")
        assert c.get("/ingest/jobs").json()["jobs"] == earlier  # no refused upload started a job


def test_oversized_upload_leaves_no_files_behind(settings):
    with make_client(settings, max_upload_bytes=1000) as c:
        r = c.post("/ingest/upload", files=[("files", ("ok.md", b"fine", "text/plain")),
                                            ("files", ("big.md", b"x" * 2000, "text/plain"))])
        assert r.status_code == 413
    assert not list((settings.data_dir / "uploads").glob("*/*"))


# -- photos
def test_photo_search_by_text_and_by_upload(settings, tmp_path):
    album = tmp_path / "album"
    for i in range(3):
        photo(album / f"p{i}.jpg", i)
    photo(album / "p3.png", 3, "PNG")
    with make_client(settings, api_roots=[album]) as c:
        job = wait(c, c.post("/ingest", json={"paths": [str(album)]}))
        assert job["counts"] == {"indexed": 4}, job
        assert c.get("/collections").json()["collections"]["images"] == 4

        r = c.post("/search/images", json={"text": "a red car", "top_k": 2})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert len(hits) == 2 and all(h["path"].startswith(str(album)) and -1 <= h["score"] <= 1 for h in hits)
        assert len(c.post("/search/images", json={"text": "x", "folder": str(album), "sort": "newest"}).json()["hits"]) == 4

        like = c.post("/search/images/like", files={"image": ("q.png", (album / "p3.png").read_bytes(), "image/png")},
                      data={"top_k": "3"})
        assert like.status_code == 200, like.text
        assert like.json()["hits"][0]["path"] == str(album / "p3.png") and len(like.json()["hits"]) == 3
        filtered = c.post("/search/images/like", files={"image": ("q.png", image_bytes(9), "image/png")},
                          data={"after": "2020-01-01"})
        assert filtered.status_code == 200 and filtered.json()["hits"] == []  # no EXIF dates

        fails(c.post("/search/images", json={"text": "x", "after": "last tuesday"}), 400, "after")
        fails(c.post("/search/images", json={"text": "x", "near": "51.5,-0.1"}), 400, "near")
        fails(c.post("/search/images", json={"text": "x", "folder": "~nosuchuser/x"}), 400, "folder")
        fails(c.post("/search/images", json={"text": "x", "sort": "random"}), 422, "sort")
        fails(c.post("/search/images", json={"text": ""}), 422, "text")
        fails(c.post("/search/images/like", files={"image": ("q.png", b"not an image", "image/png")}), 400, "like")
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}, data={"top_k": "0"}),
              422, "top_k")
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}, data={"near": "x"}),
              400, "near")
        fails(c.post("/search/images/like", data={"top_k": "3"}), 422, "image")
    with make_client(settings, max_upload_bytes=100) as c:
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}), 413, "image")


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
CONFORMANCE = (checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
               checks.response_schema_conformance, checks.response_headers_conformance)


# Each call of these two runs every served model's verification (~4 s here, most of it the tiny OFA
# at 480 px), and their whole input is a flag or two and family names: a few examples cover it,
# where 50 took 5 of the suite's minutes. They are fuzzed with the key sent only: the key modes
# differ in the guard in front of the route, not in the route, and the guard is fuzzed on every
# route by the other runs (without the key too, below); each mode cost ~25-60 s of the suite.
MODEL_CHECKS = ["/models/verify", "/readyz"]
FUZZ_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
               HealthCheck.function_scoped_fixture]


@fuzz.exclude(path=MODEL_CHECKS).parametrize()
@fuzz_settings(max_examples=50, deadline=None, suppress_health_check=FUZZ_HEALTH)
def test_fuzz_openapi_conformance(case, fuzz_client):
    case.call_and_validate(session=fuzz_client, headers=fuzz_client.key_headers, checks=CONFORMANCE)


@fuzz.include(path=MODEL_CHECKS).parametrize()
@fuzz_settings(max_examples=8, deadline=None, suppress_health_check=FUZZ_HEALTH)
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
