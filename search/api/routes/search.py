"""Document search, photo search (text and example image) and visual entailment."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, UploadFile
from starlette.concurrency import run_in_threadpool

from search.api.backend import Backend
from search.api.deps import get_backend
from search.api.limits import read_limited
from search.api.schemas import DocumentQuery, ImageQuery, PhotoFilters, errors, utf8_text
from search.api.security import require_key
from search.services import MAX_TOP_K, SORTS, prompt_context

router = APIRouter(dependencies=[Depends(require_key(writes=False))], tags=["search"], responses=errors(401, 400, 422, 503))


@router.post("/search/documents", summary="Passages with citations, ready for a prompt", responses=errors(409))
def search_documents(body: DocumentQuery, backend: Backend = Depends(get_backend)) -> dict:
    hits = backend.service().search_documents(body.query, top_k=body.top_k, min_score=body.min_score,
                                              folder=body.folder, mode=body.mode, suffixes=body.types or (),
                                              max_chars=body.max_chars, full_text=body.full_text,
                                              min_relevance=body.min_relevance)
    return {"query": body.query, **_relevance(hits), "hits": [h.as_dict() for h in hits], "context": prompt_context(hits)}


@router.post("/search/images", summary="Photos that match a text (CLIP)", responses=errors(409))
def search_images(body: ImageQuery, backend: Backend = Depends(get_backend)) -> dict:
    hits = backend.service().search_images(body.text, top_k=body.top_k, min_score=body.min_score,
                                           filters=body.to_filters(), sort=body.sort, verify=body.verify,
                                           min_entailment=body.min_entailment, min_relevance=body.min_relevance)
    return {"text": body.text, **_relevance(hits), "hits": [h.as_dict() for h in hits]}


@router.post("/entail", summary="Does the uploaded photo support the hypothesis? (OFA visual entailment)",
             responses=errors(413))
async def entail(hypothesis: Annotated[str, Form(min_length=1, max_length=20000, examples=["there are two dogs"])],
                 image: UploadFile = File(description="the photo"),
                 premise: Annotated[str | None, Form(max_length=20000, description="an optional text premise")] = None,
                 backend: Backend = Depends(get_backend)) -> dict:
    data = await read_limited(image, "image", backend.settings.max_upload_bytes)
    verdict = await run_in_threadpool(backend.service().entail, data, utf8_text(hypothesis),
                                      utf8_text(premise) if premise else None)
    return {"image": image.filename, "hypothesis": hypothesis, "premise": premise, **verdict.as_dict()}


@router.post("/search/images/like", summary="Photos that look like the uploaded one", responses=errors(409, 413))
async def search_like(image: UploadFile = File(description="the example photo"),
                      top_k: Annotated[int, Form(ge=1, le=MAX_TOP_K)] = 12,
                      min_score: Annotated[float | None, Form(allow_inf_nan=False)] = None,
                      min_relevance: Annotated[float | None, Form(ge=0, le=1)] = None,
                      sort: Annotated[Literal[SORTS], Form()] = "score",
                      after: Annotated[str | None, Form(max_length=64)] = None,
                      before: Annotated[str | None, Form(max_length=64)] = None,
                      camera: Annotated[str | None, Form(max_length=200)] = None,
                      near: Annotated[str | None, Form(max_length=100)] = None,
                      folder: Annotated[str | None, Form(max_length=4096)] = None,
                      backend: Backend = Depends(get_backend)) -> dict:
    data = await read_limited(image, "image", backend.settings.max_upload_bytes)
    filters = PhotoFilters(after=after, before=before, camera=camera, near=near, folder=folder).to_filters()
    hits = await run_in_threadpool(backend.service().search_images, like=data, top_k=top_k, min_score=min_score,
                                   filters=filters, sort=sort, min_relevance=min_relevance)  # off the event loop
    return {"like": image.filename, **_relevance(hits), "hits": [h.as_dict() for h in hits]}


def _relevance(hits) -> dict:
    """no_match: hits were found but none is clearly above the background (min_relevance asked);
    relevance_note: why the hits carry no relevance (a collection too small to calibrate);
    best_relevance: the best hit's relevance before the min_relevance cut-off."""
    return {"no_match": hits.no_match, "relevance_note": hits.note,
            "best_relevance": None if hits.best is None else round(float(hits.best), 6)}
