"""Knowledge bases: list them with their counts, delete one (its points and thumbnails)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.schemas import KB_PATTERN, errors
from search.api.security import need_kb, readable_kbs, require_key

reads = APIRouter(dependencies=[Depends(require_key(writes=False))], tags=["index"], responses=errors(401, 503))
writes = APIRouter(dependencies=[Depends(require_key(writes=True))], tags=["index"], responses=errors(401, 403, 503))


@reads.get("/kb", summary="The knowledge bases (those the key may read), with points per kind")
def list_kbs(request: Request, backend: Backend = Depends(get_backend)) -> dict:
    svc = backend.service()
    return {"kbs": svc.collections(kbs=readable_kbs(request, svc))["kbs"]}


@writes.delete("/kb/{name}", summary="Delete a knowledge base: every point of its documents and photos, and its thumbnails "
               "(needs the admin right on it)", responses=errors(400, 404, 422))
def delete_kb(request: Request, name: str = Path(pattern=KB_PATTERN, max_length=40),
              backend: Backend = Depends(get_backend)) -> dict:
    return backend.service().delete_kb(need_kb(request, name, "admin"))
