"""The REST API for knowledge-base bots: `search serve` (FastAPI + uvicorn).

Every search goes through the query services and every ingest through the indexer's service, like
the CLI and the page; this package only validates requests, guards paths and sizes, runs ingest
jobs and maps errors."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager, nullcontext

import uvicorn
from fastapi import APIRouter, FastAPI
from starlette.routing import Route

from search import owner
from search.api.backend import Backend
from search.api.errors import add_error_handlers
from search.api.hot import HotRoutes, hot_routes
from search.api.limits import CollectAfterBodies, LimitRequestSize
from search.api.responses import FastJSON
from search.api.routes import capabilities, embeddings, health, ingest, kb, search, watches
from search.api.schemas import errors
from search.api.security import SCOPES, KeyGate, KeyGuard, describe_access, principal
from search.config import Settings
from search.errors import StoreInUse
from search.mcp import McpEndpoint
from search.mcp import build as build_mcp
from search.observability import ApiMetrics, RequestObserver, configure_logging
from search.services.options import check_search_mode

log = logging.getLogger("search.api")
YOUNG_GC_THRESHOLD = 20_000


def create_app(settings: Settings) -> FastAPI:
    if settings.api_key_scope not in SCOPES:  # settings built with model_copy skip validation
        raise ValueError(f"api_key_scope: must be one of {', '.join(SCOPES)}, got {settings.api_key_scope!r}")
    check_search_mode(settings.search_mode)  # the registry's modes: a server with another one does not start
    metrics = ApiMetrics()
    backend = Backend(settings, metrics)
    local_only = not settings.api_key and settings.api_host in ("127.0.0.1", "localhost", "::1")
    mcp = McpEndpoint(build_mcp(lambda: nullcontext(backend.service()), caller=principal, reads_files=backend.may_read),
                      local_only=local_only)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        backend.jobs.resume()  # jobs a previous run did not finish (a crash, kill -9) run again
        backend.watches.start()  # the recorded folder watches, each catching up with a rescan first
        async with mcp.run():
            yield
        await backend.resources.triton.aclose()  # this loop's channel (searches await Triton in the loop)
        backend.close()

    app = FastAPI(title="Multimodal search API", version="1.0", lifespan=lifespan, default_response_class=FastJSON,
                  responses=errors(413, 500),  # any request may carry a body over the limit, or fail unexpectedly
                  description="Document search with citations, photo search (text and example image), "
                              "ingest jobs, folder watches and health. Send the key in the X-API-Key header when one is configured.")
    app.state.backend, app.state.metrics = backend, metrics
    add_error_handlers(app)
    # The query routes first: a request is matched against the routers in this order
    routers = (search.router, embeddings.router, health.public, health.reads, health.writes, ingest.router,
               watches.router, kb.reads, kb.writes)
    routers = (*routers, _capabilities(routers))  # the registry's, as it is now
    for router in routers:
        app.include_router(router)
    # MCP over streamable HTTP, behind the same key (the SDK's own transport; tools call the services and
    # ask the key, in request.state.principal, for each knowledge base, as the routes do)
    mcp_route = Route("/mcp", KeyGuard(mcp, backend), methods=["GET", "POST", "DELETE"], include_in_schema=False)
    app.router.routes.append(mcp_route)
    # Innermost first: the fast way for the hot routes sits inside the size limit, the key gate and the observer
    app.add_middleware(HotRoutes, backend=backend, routes=hot_routes((search.router, embeddings.router)))
    # Bodies that end up in reference cycles are collected after every 64 MB received (the GC settings of serve())
    app.add_middleware(LimitRequestSize, limit=settings.max_request_bytes, bodies=CollectAfterBodies())
    # The key, before any body is read (the routers' routes as the app matches them, in order)
    app.add_middleware(KeyGate, backend=backend, routes=[*(r for router in routers for r in router.routes), mcp_route])
    app.add_middleware(RequestObserver, metrics=metrics)  # outermost: sees 413s and every error too
    return app


def _capabilities(routers) -> APIRouter:
    """The families' capabilities' routes, none on a path the product's routes (or /mcp) already take."""
    router = capabilities.router()
    taken = {route.path for r in routers for route in r.routes} | {"/mcp"}
    if clash := sorted(route.path for route in router.routes if route.path in taken):
        raise ValueError(f"capabilities on paths the API already serves: {', '.join(clash)}")
    return router


def serve(settings: Settings, host: str | None = None, port: int | None = None,
          announce: Callable[[str], None] | None = None) -> None:
    """Run the API with uvicorn (one process). With the embedded store, this server is its owner: it
    opens the store before it starts, records its address in the data dir (search/owner.py) so the
    CLI and the page work through it, and refuses to start when another server owns the data dir.
    Logs are text or JSON lines (log_format), one per request, with its id."""
    host, port = host or settings.api_host, port or settings.api_port
    log_config = configure_logging(settings.log_format, settings.log_level)
    app = create_app(settings)
    backend: Backend = app.state.backend
    if not settings.qdrant_url:  # with a Qdrant server every process opens the store itself
        running = owner.find(settings.data_dir)
        if running is not None:
            raise StoreInUse(f"another search server owns {settings.data_dir}: {running.describe()}", running.pid)
        backend.open_store()  # the embedded store's lock: a CLI holding it is named here
        backend.owner = owner.claim(settings.data_dir, _local_url(host, port))
    # Who may call it (a WARNING where anyone may), once it is sure to start: a refusal stays one line
    level, line = describe_access(settings, backend.keys, host)
    log.log(level, "%s", line)
    # What start-up built (modules, the app, the store's client) lives as long as the server: frozen, out
    # of the collector's sight, it is not scanned again by every full collection (a pause of the
    # whole server under load)
    gc.collect()
    gc.freeze()
    # Young collections: at Python's 700 a loaded server ran one every ~11 requests, set off by what the
    # requests in flight hold for a moment, not by garbage; at 20,000 they are rare under load, while
    # cycles that do pile up still start one
    gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])
    if announce:
        announce(_local_url(host, port) if host in ("127.0.0.1", "localhost", "::1") else f"http://{host}:{port}")
    try:
        uvicorn.run(app, host=host, port=port, log_config=log_config, access_log=False)
    finally:  # a server that failed to start (a busy port) still gives the data dir back
        if backend.owner is not None:
            owner.release(settings.data_dir)


def _local_url(host: str, port: int) -> str:
    """How a process on this machine reaches the server."""
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
