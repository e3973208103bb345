"""Where the REST API's own time goes, without network, Triton or a store: the app's ASGI stack
called directly, one request at a time, with the search service answering at once (an empty hit
list). Beside the real `/search/documents` route it mounts probe routes that add one piece at a
time (async or sync endpoint, body validation, the key check, the backend dependency), so the
difference between two rows is what that piece costs per request.

    python bench/bench_api_stack.py [-n 3000] [--hits 5] [--concurrency 32]

CPU microseconds per request, single-threaded; the sync rows include the thread-pool hop (the
endpoint runs in a worker thread and the event loop waits for it), which costs the same CPU under
load. What `bench/bench_api.py` measures end to end adds uvicorn's HTTP parsing and the socket.

The `/search/documents` row takes the route's path for the embedded store (the default): the
search runs in the event loop, with no hop to a query thread.

`--hits N` answers searches with N passages shaped like real ones (~1,000 characters each, with
page, section and citation) instead of none, so the answer's building and encoding count too;
`--concurrency C` keeps C requests in flight, as a loaded server does. Each row is the fastest of
`--reps` repetitions: on a shared machine the CPU time of a fixed piece of work only ever comes out
too high. To compare two versions of the API, run this script from both trees at the same time,
each pinned to its own core (taskset -c 0 / -c 1), then swap the cores: changes of ~50 us show.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fastapi import Depends, Request  # noqa: E402
from fastapi.responses import JSONResponse  # noqa: E402

from bench.common import load, record, slug  # noqa: E402
from search.api import backend as api_backend  # noqa: E402
from search.api import create_app  # noqa: E402
from search.api.deps import get_backend  # noqa: E402
from search.api.schemas import DocumentQuery  # noqa: E402
from search.api.security import require_key  # noqa: E402
from search.config import Settings  # noqa: E402
from search.observability import configure_logging  # noqa: E402
from search.services import HitList  # noqa: E402
from search.services.results import DocumentHit  # noqa: E402

BODY = json.dumps({"query": "reset password", "top_k": 5, "mode": "semantic"}).encode()


class _Answers:
    """The query service, answering at once: what is left is the API's own work."""

    def __init__(self, hits: int = 0) -> None:
        self.hits = HitList([_hit(i) for i in range(hits)])

    async def encode_query(self, query: str, **options) -> None:  # awaited, the event loop's half: Triton, here at once
        return None

    def needs_sampling(self, encoded, **options) -> bool:
        return False

    def search_documents(self, query: str, **options) -> HitList:
        return self.hits


def _hit(i: int) -> DocumentHit:
    text = " ".join(f"passage {i} word {w} of a policy text about accounts and passwords" for w in range(16))[:1000]
    return DocumentHit(score=0.8 - i / 100, path=f"/srv/kb/handbook/section-{i}.pdf", chunk=i, text=text,
                       sha256=f"{i:064x}", paths=[f"/srv/kb/handbook/section-{i}.pdf"], start=0, end=len(text),
                       page=i + 1, title="Handbook", section=f"Accounts {i}", relevance=0.9, length=len(text), mode="semantic")


def app_with_probes(settings: Settings, hits: int = 0):
    answers = _Answers(hits)
    api_backend.Backend.service = lambda self: answers
    api_backend.Backend.store_in_loop = lambda self: True  # the embedded store's path (the default): no thread hop
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


async def measure(app, paths: list[str], n: int, access_log: logging.Logger, concurrency: int = 1,
                  reps: int = 1) -> list[tuple[str, float, float]]:
    rows = []
    async with app.router.lifespan_context(app):
        for path in paths:
            for log_on in (True, False) if path == "/search/documents" else (True,):
                access_log.disabled = not log_on
                await _batch(app, path, 200, concurrency)
                best = None
                for _ in range(reps):
                    wall, cpu = time.perf_counter(), time.process_time()
                    await _batch(app, path, n, concurrency)
                    took = ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
                    best = took if best is None or took[0] < best[0] else best
                rows.append((path + ("" if log_on else "  (access log off)"), *best))
        access_log.disabled = False
    return rows


async def _batch(app, path: str, n: int, concurrency: int) -> None:
    """``n`` requests, ``concurrency`` of them in flight at a time."""
    if concurrency == 1:
        for _ in range(n):
            await one(app, path)
        return
    slots = asyncio.Semaphore(concurrency)

    async def limited() -> None:
        async with slots:
            await one(app, path)
    await asyncio.gather(*(limited() for _ in range(n)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=3000, help="requests per row")
    ap.add_argument("--hits", type=int, default=0, help="passages in every search answer [default: none]")
    ap.add_argument("--concurrency", type=int, default=1, help="requests in flight at a time [default: 1]")
    ap.add_argument("--reps", type=int, default=1, help="repetitions of each row; the fastest is reported [default: 1]")
    ap.add_argument("--no-record", action="store_true", help="do not append the run to bench/results (the tests' runs)")
    args = ap.parse_args()
    load_before = load()
    with tempfile.TemporaryDirectory(prefix="bench-stack-") as tmp:
        rows = run(Settings(data_dir=Path(tmp), qdrant_url=None, api_key=None), args.n, args.hits, args.concurrency, args.reps)
    if args.no_record:
        return
    record("bench_api_stack", {"requests_per_row": args.n, "hits": args.hits, "concurrency": args.concurrency,
                               "reps": args.reps, "routes": {slug(path): {"cpu_us": round(cpu, 1), "wall_us": round(wall, 1)}
                                                             for path, cpu, wall in rows}}, load_before=load_before)


def run(settings: Settings, n: int, hits: int = 0, concurrency: int = 1, reps: int = 1) -> list[tuple[str, float, float]]:
    configure_logging(settings.log_format, settings.log_level)  # applies the config itself
    sink = open(os.devnull, "w")  # the log lines are formatted and written, to nowhere
    for handler in logging.getLogger().handlers + logging.getLogger("search.api.access").handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sink)
    app = app_with_probes(settings, hits)
    paths = ["/probe/async", "/probe/async+body+key", "/probe/sync", "/probe/sync+body", "/probe/sync+body+key",
             "/probe/sync+body+key+backend", "/search/documents"]
    rows = asyncio.run(measure(app, paths, n, logging.getLogger("search.api.access"), concurrency, reps))
    how = "one request at a time" if concurrency == 1 else f"{concurrency} requests in flight"
    print(f"{f'route (ASGI app called directly, {how}; {hits} hits per search)':62} {'CPU us':>7} {'wall us':>8}")
    for path, cpu, wall in rows:
        print(f"{path:62} {cpu:7.0f} {wall:8.0f}")
    return rows


if __name__ == "__main__":
    main()
