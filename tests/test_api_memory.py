"""Bodies never outlive their request (issue 68): invalid large bodies, sent with a key of another
knowledge base or without a key where reads need none, leave `search serve`'s memory where it was;
a body that cannot be JSON from its first byte is answered without reading the rest."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from processes import SearchServer

from search.api import create_app
from search.keys import KEYS_FILE, KeyFile

ADMIN = "admin-key"
MB = 1_000_000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def invalid(size: int) -> bytes:
    """JSON that fails at its second byte, read whole (its first byte may start JSON)."""
    return b"{" + b"x" * (size - 1)


def test_invalid_large_bodies_leave_no_memory_behind(settings, tmp_path):
    """Before: ~30 MB kept per 8 MB body (the error's traceback held the frames that held the body
    and json's decoded copy, a cycle that gc.freeze() and a young threshold of 20,000 left alone)."""
    reader = KeyFile(settings.data_dir / KEYS_FILE).add("reader", ["other"], "read")  # another KB's read-only key
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_API_KEY=ADMIN, SEARCH_API_KEY_SCOPE="writes")
    keyed = {"X-API-Key": reader, "content-type": "application/json"}
    keyless = {"content-type": "application/json"}  # reads pass without a key (scope writes), up to 4 MB
    rounds = [("/search/documents", keyed, 8 * MB, 40, 422), ("/v1/embeddings", keyed, 8 * MB, 40, 400),
              ("/search/images", keyed, 8 * MB, 20, 422),  # FastAPI's own way
              ("/search/documents", keyless, int(3.9 * MB), 40, 422)]
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for path, headers, size, _, status in rounds:  # what a first request of each kind sets up
                assert http.post(path, content=invalid(size), headers=headers).status_code == status
            start = rss_mb(server.proc.pid)
            for path, headers, size, count, status in rounds:
                body = invalid(size)
                for _ in range(count):
                    r = http.post(path, content=body, headers=headers)
                    assert r.status_code == status, r.text
            grown = rss_mb(server.proc.pid) - start
    finally:
        server.stop()
    sent = sum(size * count for _, _, size, count, _ in rounds) / MB
    assert grown < 100, f"{sent:,.0f} MB of invalid bodies left the server {grown:,.0f} MB larger"


REQUEST_CODE = ("/search/", "/fastapi/", "/starlette/", "/pydantic/", "/json/", "/anyio/")


def from_the_request(o) -> bool:
    """A frame, traceback or exception that went through the request's code. The collection sees the
    whole process: another thread's leftovers (a library's refused connection was one) are not this
    request's."""
    if isinstance(o, BaseException):
        o = o.__traceback__
    frames = []
    while type(o).__name__ == "traceback":
        frames.append(o.tb_frame)
        o = o.tb_next
    if type(o).__name__ == "frame":
        frames.append(o)
    return any(part in f.f_code.co_filename for f in frames for part in REQUEST_CODE)


def test_an_answered_invalid_body_is_in_no_reference_cycle(settings):
    """With the collector off, nothing the request built stays: no cycle holds its body."""
    body = invalid(3 * MB)
    with TestClient(create_app(settings.model_copy(update={"api_key": ADMIN}))) as api:
        api.headers.update({"X-API-Key": ADMIN, "content-type": "application/json"})
        for path in ("/search/documents", "/v1/embeddings", "/search/images"):
            api.post(path, content=b"{}")
            gc.collect()
            gc.disable()
            try:
                assert api.post(path, content=body).status_code in (400, 422)
                gc.set_debug(gc.DEBUG_SAVEALL)
                gc.collect()
                kept = [type(o).__name__ for o in gc.garbage
                        if (type(o).__name__ in ("frame", "traceback") or isinstance(o, BaseException)) and from_the_request(o)]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
            assert not kept, f"{path}: the request left a cycle of {sorted(set(kept))}"


def test_bodies_received_set_off_a_full_collection(settings):
    """A cycle from code that does not break its own is collected once 64 MB of bodies came in,
    even with automatic collection off."""

    class Cyclic:
        pass

    with TestClient(create_app(settings.model_copy(update={"api_key": ADMIN}))) as api:
        api.headers.update({"X-API-Key": ADMIN, "content-type": "application/json"})
        gc.disable()
        try:
            garbage = Cyclic()
            garbage.me = garbage
            gone = weakref.ref(garbage)
            del garbage
            for _ in range(9):  # 72 MB
                assert api.post("/search/documents", content=invalid(8 * MB)).status_code == 422
            assert gone() is None
        finally:
            gc.enable()


def test_a_body_that_cannot_be_json_is_answered_from_its_start(settings):
    """The fast way stops reading at a first byte no JSON value starts with, and the answer is
    FastAPI's own for the whole body."""
    app = create_app(settings.model_copy(update={"api_key": ADMIN}))
    start = b"  \n<html>"
    with TestClient(app) as api:
        expected = api.post("/search/documents?via=fastapi", content=start + b"x" * 1000,  # FastAPI reads it all
                            headers={"X-API-Key": ADMIN, "content-type": "application/json"})
    assert expected.status_code == 422, expected.text

    async def ask() -> tuple[int, bytes]:
        chunks = [{"type": "http.request", "body": start, "more_body": True}]
        sent: list[dict] = []

        async def receive():
            assert chunks, "the body was read past its first chunk"
            return chunks.pop()

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/search/documents", "raw_path": b"/search/documents", "root_path": "", "query_string": b"",
                 "headers": [(b"content-type", b"application/json"), (b"x-api-key", ADMIN.encode()), (b"host", b"test")],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80), "state": {}}
        await app(scope, receive, send)
        return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])

    status, answer = asyncio.run(ask())
    assert (status, answer) == (422, expected.content)
