"""/healthz, /readyz, /metrics and /collections."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.schemas import Readiness, errors
from search.api.security import check_metrics_key, need_everything, readable_kbs, require_key
from search.errors import ServiceError

public = APIRouter(tags=["health"])
reads = APIRouter(dependencies=[Depends(require_key(writes=False))], responses=errors(401, 503))
writes = APIRouter(dependencies=[Depends(require_key(writes=True))], responses=errors(401, 403, 503))


@public.get("/metrics", include_in_schema=False, dependencies=[Depends(check_metrics_key)])
def prometheus_metrics(request: Request) -> Response:
    """Prometheus text format."""
    body, content_type = request.app.state.metrics.render()
    return Response(body, media_type=content_type)


@public.get("/healthz", summary="The process is up")
def healthz() -> dict:
    return {"status": "ok"}


@reads.get("/readyz", tags=["health"], summary="Triton and Qdrant, each reported on its own; 503 unless both answer",
           response_model=Readiness, responses={503: {"model": Readiness, "description": "Triton or the store does not answer"
                                                                                       " (or, with verify, a model misses)"},
                                                **errors(422)})
def readyz(verify: bool = Query(False, description="also check that every served model gives the expected answers "
                                                  "(`search models verify`: golden outputs, published examples); "
                                                  "the body gains `verify`, and a miss makes it 503"),
           backend: Backend = Depends(get_backend)) -> JSONResponse:
    try:
        svc = backend.service()
    except ServiceError:  # a busy or absent store: readiness() reports it
        svc = backend.unopened_service()
    body = svc.readiness_verified() if verify else svc.readiness()
    return JSONResponse(body, status_code=200 if body["ready"] else 503)


@reads.get("/models/verify", tags=["health"], summary="Do the served models give the expected answers? "
           "(`search models verify`: golden outputs, published examples)", responses=errors(400, 422, 503))
def models_verify(family: list[str] | None = Query(None, description="families to check (default: every built one)"),
                  published: bool | None = Query(None, description="the publishers' known-answer checks: true runs them "
                                                 "anyway, false skips them (default: where the checkpoint is theirs)"),
                  backend: Backend = Depends(get_backend)) -> dict:
    """``passed`` and per family its checks; a miss is ``passed: false`` (200), not an error."""
    return backend.unopened_service().verify_models(family or None, published_checks=published)  # Triton only


@reads.get("/collections", tags=["index"], summary="Points per collection, and per knowledge base (those the key may read)",
           responses=errors(503))
def collections(request: Request, backend: Backend = Depends(get_backend)) -> dict:
    svc = backend.service()
    return svc.collections(kbs=readable_kbs(request, svc))


@reads.get("/status", tags=["health"], summary="What `search status` shows: Triton, its models, the store and its counts",
           responses=errors(403, 503), dependencies=[Depends(need_everything)])
def status(backend: Backend = Depends(get_backend)) -> dict:
    try:
        svc = backend.service()
    except ServiceError:  # a busy or absent store: status() reports it
        svc = backend.unopened_service()
    return svc.status()


@reads.get("/store/stats", tags=["index"], summary="Points, segments, index status and disk size per collection",
           responses=errors(403, 503), dependencies=[Depends(need_everything)])
def store_stats(backend: Backend = Depends(get_backend)) -> dict:
    return backend.service().store_stats()


@writes.post("/store/optimize", tags=["index"], summary="Build the HNSW indexes now (ingest does this when it ends)",
             responses=errors(403, 503), dependencies=[Depends(need_everything)])
def store_optimize(backend: Backend = Depends(get_backend)) -> dict:
    backend.service().optimize_store()
    return {"optimized": True}
