"""Ingest jobs: server-side paths inside the configured roots, or uploads (kept per knowledge base,
readable only by that KB's requests); progress by job id."""

from __future__ import annotations

import shutil
import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, HTTPException, Request, UploadFile

from indexer.jobs import Job
from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.limits import MAX_FILES, read_limited, upload_name
from search.api.paths import allowed_path
from search.api.schemas import IngestPaths, KbName, errors
from search.api.security import need_kb, principal, require_key

router = APIRouter(dependencies=[Depends(require_key(writes=True))], tags=["ingest"], responses=errors(401, 403, 503))


@router.post("/ingest", status_code=202, summary="Index server-side files or folders inside the configured roots",
             responses=errors(400, 403, 404, 422))
def ingest_paths(body: IngestPaths, request: Request, backend: Backend = Depends(get_backend)) -> dict:
    kb = need_kb(request, body.kb, "write")
    local = request.state.local  # a face of the owner's user on this machine: any path it can read
    paths = [allowed_path(backend, raw, f"paths[{i}]", local=local, kb=kb) for i, raw in enumerate(body.paths)]
    return _accepted(request, backend.jobs.submit(paths, body.prune, source="cli" if local else "rest", local=local, kb=kb,
                                                     ocr_photos=body.ocr_photos))


@router.post("/ingest/upload", status_code=202, summary="Upload documents or photos and index them", responses=errors(400, 422))
async def ingest_upload(request: Request, files: list[UploadFile] = File(description="documents and photos"),
                        kb: Annotated[KbName | None, Form()] = None,
                        backend: Backend = Depends(get_backend)) -> dict:
    kb = need_kb(request, kb, "write")
    if len(files) > MAX_FILES:
        raise HTTPException(400, f"files: at most {MAX_FILES} files per request, got {len(files)}")
    names = [upload_name(f.filename, f"files[{i}]") for i, f in enumerate(files)]
    if len(set(names)) != len(names):
        raise HTTPException(400, "files: two uploads have the same file name")
    folder = backend.uploads / kb / uuid.uuid4().hex  # the KB's own: a root for its requests only
    folder.mkdir(parents=True)
    try:
        for i, (upload, name) in enumerate(zip(files, names, strict=True)):
            data = await read_limited(upload, f"files[{i}] ({name})", backend.settings.max_upload_bytes)
            (folder / name).write_bytes(data)
    except HTTPException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-uploaded is left to be indexed later
        raise
    return _accepted(request, backend.jobs.submit([folder], prune=False, kb=kb))


@router.get("/ingest/jobs/{job_id}", summary="An ingest job's state and progress", responses=errors(404, 422))
def ingest_job(job_id: str, request: Request, backend: Backend = Depends(get_backend)) -> dict:
    job = backend.jobs.get(job_id)
    if job is None or not principal(request).may(job.kb, "write"):  # another KB's job: as if there were none
        raise HTTPException(404, f"job_id: no ingest job {job_id!r}")
    return job.as_dict()


@router.delete("/ingest/jobs/{job_id}", summary="Cancel an ingest job (what it wrote stays whole)", responses=errors(404, 422))
def cancel_ingest_job(job_id: str, request: Request, backend: Backend = Depends(get_backend)) -> dict:
    job = backend.jobs.get(job_id)
    if job is not None and principal(request).may(job.kb, "write"):
        job = backend.jobs.cancel(job_id)
    else:
        job = None
    if job is None:
        raise HTTPException(404, f"job_id: no ingest job {job_id!r}")
    return job.as_dict()


@router.get("/ingest/jobs", summary="Recent ingest jobs, newest first")
def ingest_jobs(request: Request, backend: Backend = Depends(get_backend)) -> dict:
    who = principal(request)
    return {"jobs": [j.as_dict() for j in backend.jobs.newest_first() if who.may(j.kb, "write")]}


def _accepted(request: Request, job: Job) -> dict:
    return {"job_id": job.id, "state": job.state, "status_url": str(request.url_for("ingest_job", job_id=job.id))}
