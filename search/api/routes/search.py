"""Document search, photo search (text and example image), visual entailment and reading the text in images."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Form, Path, Query, Request, UploadFile

from search.api.backend import Backend
from search.api.deps import backend_of, get_backend
from search.api.limits import read_limited
from search.api.responses import FastJSON
from search.api.schemas import DocumentQuery, EntailQuery, ImageQuery, KbName, OcrQuery, PhotoQuery, errors, utf8_text
from search.api.security import need, need_kb, principal, require_key
from search.keys import Principal
from search.services import HIT_CHARS_LIMIT, prompt_context
from search.services.documents import DOCUMENT_CHARS, EncodedQuery
from search.services.options import ENTAIL_MODEL, PHOTO_MODEL

router = APIRouter(dependencies=[Depends(require_key(writes=False))], tags=["search"],
                   responses=errors(401, 400, 403, 422, 503))


@router.post("/search/documents", summary="Passages with citations, ready for a prompt; in pages, or one entry per document",
             responses=errors(409))
async def search_documents(body: DocumentQuery, request: Request) -> dict:
    # backend_of, not a dependency: the hottest route saves FastAPI's per-dependency cost
    return await answer_documents(backend_of(request), body, principal(request))


async def answer_documents(backend: Backend, body: DocumentQuery, who: Principal) -> FastJSON:
    """The route's answer, also given by the fast path (search/api/hot.py)."""
    kb = need(who, body.kb)
    if not backend.store_in_loop():
        return await backend.run(_documents, backend, body, kb)
    svc = backend.service()
    encoded = await svc.encode_query(body.query, mode=body.mode, kb=kb)
    if svc.needs_sampling(encoded, grouped=body.group_by is not None):  # a one-off of up to a second or so at 100k passages
        return await backend.run(_documents, backend, body, kb, encoded)
    return _documents(backend, body, kb, encoded)


def _documents(backend: Backend, body: DocumentQuery, kb: str, encoded: EncodedQuery | None = None) -> FastJSON:
    options = {**body.options(), "kb": kb, "encoded": encoded}
    svc = backend.service()
    # next_offset: where the next page starts (null once a page comes back short: nothing more).
    # A response as is: FastAPI would otherwise walk the whole answer through jsonable_encoder first.
    if body.group_by is None:
        hits = svc.search_documents(body.query, **options)
        return FastJSON({"query": body.query, "offset": body.offset, **hits.relevance_fields(),
                         "hits": [h.as_dict() for h in hits],
                         "next_offset": body.offset + len(hits) if len(hits) == body.top_k else None,
                         "context": prompt_context(hits)})
    groups = svc.search_document_groups(body.query, **options)
    return FastJSON({"query": body.query, "offset": body.offset, "group_by": body.group_by,
                     "groups": [g.as_dict() for g in groups],
                     "next_offset": body.offset + len(groups) if len(groups) == body.top_k else None,
                     "context": prompt_context([h for g in groups for h in g.hits])})


@router.post("/search/images", summary=f"Photos that match a text ({PHOTO_MODEL})", responses=errors(409))
async def search_images(body: ImageQuery, request: Request, backend: Backend = Depends(get_backend)) -> dict:
    return await backend.run(_images, backend, body, need_kb(request, body.kb))


def _images(backend: Backend, body: ImageQuery, kb: str) -> FastJSON:
    hits = backend.service().search_images(body.text, **{**body.options(), "kb": kb})
    return FastJSON({"text": body.text, **hits.relevance_fields(), "hits": [h.as_dict() for h in hits]})


@router.post("/entail", summary=f"Does the uploaded photo support the hypothesis? ({ENTAIL_MODEL} visual entailment)",
             responses=errors(413))
async def entail(form: Annotated[EntailQuery, Form()], image: UploadFile = File(description="the photo"),
                 backend: Backend = Depends(get_backend)) -> dict:
    data = await read_limited(image, "image", backend.settings.max_upload_bytes)
    verdict = await backend.run(lambda: backend.service().entail(data, form.hypothesis, form.premise or None))
    return {"image": image.filename, "hypothesis": form.hypothesis, "premise": form.premise, **verdict.as_dict()}


@router.post("/ocr", summary="The text lines in the uploaded photo, scan or PDF (OCR), each with its confidence, box and page",
             responses=errors(413))
async def ocr(form: Annotated[OcrQuery, Form()],
              image: UploadFile = File(description="the photo or scan: an image (every frame of a multi-page TIFF) or a "
                                                   "PDF (every page, up to the server's max_read_pages)"),
              backend: Backend = Depends(get_backend)) -> dict:
    data = await read_limited(image, "image", backend.settings.max_upload_bytes)
    read = await backend.run(lambda: backend.service().read_text(data))
    return {"image": image.filename, **read.confident(form.min_score).as_dict()}


@router.post("/search/images/like", summary="Photos that look like the uploaded one", responses=errors(409, 413))
async def search_like(request: Request, form: Annotated[PhotoQuery, Form()],
                      image: UploadFile = File(description="the example photo"),
                      backend: Backend = Depends(get_backend)) -> dict:
    kb = need_kb(request, form.kb)
    data = await read_limited(image, "image", backend.settings.max_upload_bytes)
    options = {**form.options(), "kb": kb}
    hits = await backend.run(lambda: backend.service().search_images(like=data, **options))
    return {"like": image.filename, **hits.relevance_fields(), "hits": [h.as_dict() for h in hits]}


SHA256 = r"^[0-9a-f]{64}$"


@router.get("/passages", summary="One passage by its id (SHA256:CHUNK) or by path and chunk", responses=errors(404, 409))
def passage(request: Request, id: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}:[0-9]{1,9}$")] = None,
            path: Annotated[str | None, Query(min_length=1, max_length=4096)] = None,
            chunk: Annotated[int | None, Query(ge=0, le=10**9)] = None,
            max_chars: Annotated[int | None, Query(ge=1, le=HIT_CHARS_LIMIT)] = None, full_text: bool = False,
            kb: Annotated[KbName | None, Query()] = None, backend: Backend = Depends(get_backend)) -> dict:
    hit = backend.service().get_passage(id, path=utf8_text(path) if path else None, chunk=chunk, max_chars=max_chars,
                                        full_text=full_text, kb=need_kb(request, kb))
    return hit.as_dict()


@router.get("/documents", summary="A document's indexed text, its passages in order, bounded by max_chars",
            responses=errors(404, 409))
def document(request: Request, path: Annotated[str | None, Query(min_length=1, max_length=4096)] = None,
             sha256: Annotated[str | None, Query(pattern=SHA256)] = None,
             max_chars: Annotated[int, Query(ge=1, le=HIT_CHARS_LIMIT)] = DOCUMENT_CHARS,
             kb: Annotated[KbName | None, Query()] = None, backend: Backend = Depends(get_backend)) -> dict:
    return backend.service().get_document(utf8_text(path) if path else None, sha256=sha256, max_chars=max_chars,
                                          kb=need_kb(request, kb))


@router.get("/photos/{photo_id}", summary="Where the photo with this id (its sha256) is", responses=errors(404, 409))
def photo_by_id(photo_id: Annotated[str, Path(pattern=SHA256)], request: Request,
                backend: Backend = Depends(get_backend)) -> dict:
    need_kb(request, None)  # photos by id: the default knowledge base only
    return {"id": photo_id, "path": str(backend.service().photo_path(photo_id))}

