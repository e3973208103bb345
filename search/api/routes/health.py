"""/healthz, /readyz, /metrics and /collections."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.security import check_metrics_key, require_key
from search.errors import ServiceError

public = APIRouter(tags=["health"])
reads = APIRouter(dependencies=[Depends(require_key(writes=False))])


@public.get("/metrics", include_in_schema=False, dependencies=[Depends(check_metrics_key)])
def prometheus_metrics(request: Request) -> Response:
    """Prometheus text format."""
    body, content_type = request.app.state.metrics.render()
    return Response(body, media_type=content_type)


@public.get("/healthz", summary="The process is up")
def healthz() -> dict:
    return {"status": "ok"}


@reads.get("/readyz", tags=["health"], summary="Triton and Qdrant, each reported on its own; 503 unless both answer")
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


@reads.get("/collections", tags=["index"], summary="Points per collection")
def collections(backend: Backend = Depends(get_backend)) -> dict:
    return backend.service().collections()
