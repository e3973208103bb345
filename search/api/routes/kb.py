"""Knowledge bases: list them with their counts, delete one (its points and thumbnails)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Query, Request

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.schemas import KB_PATTERN, errors
from search.api.security import need_kb, readable_kbs, require_key
from search.store import DEFAULT_KB

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


@reads.get("/relevance/check", summary="How well a knowledge base's documents tell a match from unrelated "
           "questions (`search relevance check`)", responses=errors(400, 403, 422))
def relevance_check(request: Request, kb: str | None = Query(None, pattern=KB_PATTERN, max_length=40,
                                                            description="the knowledge base (default: the default one)"),
                    min_relevance: float | None = Query(None, ge=0, le=1, description="the threshold to check (default 0.97)"),
                    backend: Backend = Depends(get_backend)) -> dict:
    """A fixed sample of questions (about 185 searches, a few seconds): ``warnings`` lists what one
    threshold cannot do here, empty when it serves the collection (docs/relevance.md)."""
    kb = need_kb(request, kb)
    options = {} if min_relevance is None else {"min_relevance": min_relevance}
    return backend.service().relevance_check(kb=None if kb == DEFAULT_KB else kb, **options)
