"""Folder watches: the server keeps the index of some folders current as files change (search/api/watches.py)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Request, Response

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.paths import allowed_path
from search.api.schemas import WatchPaths, errors
from search.api.security import require_key

router = APIRouter(dependencies=[Depends(require_key(writes=True))], tags=["watches"], responses=errors(401))


@router.post("/watches", status_code=201, summary="Watch server-side folders inside the configured roots: "
             "changes are indexed as they happen (after a catch-up rescan)",
             responses={200: {"description": "these folders are watched already: that watch"}, **errors(400, 403, 404, 422)})
def add_watch(body: WatchPaths, request: Request, response: Response, backend: Backend = Depends(get_backend)) -> dict:
    local = request.state.local  # a face of the owner's user on this machine: any folder it can read
    paths = [allowed_path(backend, raw, f"paths[{i}]", local=local) for i, raw in enumerate(body.paths)]
    for i, path in enumerate(paths):
        if not path.is_dir():
            raise HTTPException(400, f"paths[{i}]: {body.paths[i]} is not a folder (watch the folder that holds it)")
    watch, created = backend.watches.add(paths, quiet_ms=body.quiet_ms, local=local)
    if not created:
        response.status_code = 200  # the same folders are watched already: that watch
    return {**(backend.watches.describe(watch.id) or watch.as_dict()), "new": created}


@router.get("/watches", summary="The folder watches, oldest first, with their state")
def list_watches(backend: Backend = Depends(get_backend)) -> dict:
    return {"watches": backend.watches.listed()}


@router.get("/watches/{watch_id}", summary="One folder watch and its state", responses=errors(404, 422))
def get_watch(watch_id: str, backend: Backend = Depends(get_backend)) -> dict:
    watch = backend.watches.describe(watch_id)
    if watch is None:
        raise HTTPException(404, f"watch_id: no watch {watch_id!r}")
    return watch


@router.delete("/watches/{watch_id}", summary="Stop watching (what was indexed stays indexed)", responses=errors(404, 422))
def remove_watch(watch_id: str, backend: Backend = Depends(get_backend)) -> dict:
    watch = backend.watches.remove(watch_id)
    if watch is None:
        raise HTTPException(404, f"watch_id: no watch {watch_id!r}")
    return watch
