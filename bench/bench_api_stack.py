"""Where the REST API's own time goes, without network, Triton or a store: the app's ASGI stack
called directly, one request at a time, with the search service answering at once (an empty hit
list). Beside the real `/search/documents` route it mounts probe routes that add one piece at a
time (async or sync endpoint, body validation, the key check, the backend dependency), so the
difference between two rows is what that piece costs per request.

    python bench/bench_api_stack.py [-n 3000]

CPU microseconds per request, single-threaded; the sync rows include the thread-pool hop (the
endpoint runs in a worker thread and the event loop waits for it), which costs the same CPU under
load. What `bench/bench_api.py` measures end to end adds uvicorn's HTTP parsing and the socket.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import logging.config
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi import Depends, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from search.api import backend as api_backend  # noqa: E402
from search.api import create_app  # noqa: E402
from search.api.deps import get_backend  # noqa: E402
from search.api.schemas import DocumentQuery  # noqa: E402
from search.api.security import require_key  # noqa: E402
from search.config import Settings  # noqa: E402
from search.observability import configure_logging  # noqa: E402
from search.services import HitList  # noqa: E402

BODY = json.dumps({"query": "reset password", "top_k": 5, "mode": "semantic"}).encode()


class _Answers:
    """The query service, answering at once: what is left is the API's own work."""

    def search_documents(self, query: str, **options) -> HitList:
        return HitList([])


def app_with_probes(settings: Settings):
    api_backend.Backend.service = lambda self: _Answers()
    app = create_app(settings)
    key = [Depends(require_key(writes=False))]

    @app.post("/probe/async")
    async def probe_async() -> dict:
        return JSONResponse({"ok": 1})

    @app.post("/probe/sync")
    def probe_sync() -> dict:
        return JSONResponse({"ok": 1})

    @app.post("/probe/sync+body")
    def probe_body(body: DocumentQuery) -> dict:
        return JSONResponse({"ok": 1})

    @app.post("/probe/sync+body+key", dependencies=key)
    def probe_key(body: DocumentQuery, request: Request) -> dict:
        return JSONResponse({"ok": 1})

    @app.post("/probe/sync+body+key+backend", dependencies=key)
    def probe_backend(body: DocumentQuery, request: Request, backend=Depends(get_backend)) -> dict:
        return JSONResponse({"ok": 1})

    @app.post("/probe/async+body+key", dependencies=key)
    async def probe_async_key(body: DocumentQuery, request: Request) -> dict:
        return JSONResponse({"ok": 1})

    return app


async def one(app, path: str) -> None:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"bench"), (b"content-type", b"application/json"),
                         (b"content-length", str(len(BODY)).encode())],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}
    sent, status = False, []

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await asyncio.sleep(3600)

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    if status != [200]:
        sys.exit(f"{path}: answered {status}")


async def measure(app, paths: list[str], n: int, access_log: logging.Logger) -> list[tuple[str, float, float]]:
    rows = []
    async with app.router.lifespan_context(app):
        for path in paths:
            for log_on in (True, False) if path == "/search/documents" else (True,):
                access_log.disabled = not log_on
                for _ in range(200):
                    await one(app, path)
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(n):
                    await one(app, path)
                rows.append((path + ("" if log_on else "  (access log off)"),
                             (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6))
        access_log.disabled = False
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=3000, help="requests per row")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-stack-") as tmp:
        run(Settings(data_dir=Path(tmp), qdrant_url=None, api_key=None), args.n)


def run(settings: Settings, n: int) -> None:
    logging.config.dictConfig(configure_logging(settings.log_format, settings.log_level))
    sink = open(os.devnull, "w")  # the log lines are formatted and written, to nowhere
    for handler in logging.getLogger().handlers + logging.getLogger("search.api.access").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
    app = app_with_probes(settings)
    paths = ["/probe/async", "/probe/async+body+key", "/probe/sync", "/probe/sync+body", "/probe/sync+body+key",
             "/probe/sync+body+key+backend", "/search/documents"]
    rows = asyncio.run(measure(app, paths, n, logging.getLogger("search.api.access")))
    print(f"{'route (ASGI app called directly, one request at a time)':62} {'CPU us':>7} {'wall us':>8}")
    for path, cpu, wall in rows:
        print(f"{path:62} {cpu:7.0f} {wall:8.0f}")


if __name__ == "__main__":
    main()
