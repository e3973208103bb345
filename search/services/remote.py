"""The query services through the running `search serve` that owns the store (see search/owner.py):
same methods, same hits, same errors as ``SearchService``, so a face does not care which it holds."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from urllib.parse import quote, urlencode

from search import errors
from search.config import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from search.media.files import Refused, photo_reason, read_regular
from search.rest_client import RestClient
from search.services.options import ImageFilters
from search.services.results import DocumentGroup, DocumentHit, HitList, ImageHit, TextRead, Verdict
from search.services.spec import DocumentQuery, ImageQuery, PhotoQuery


class RemoteService(RestClient):
    """The query services as the owner's REST API answers them."""

    def close(self) -> None:
        pass

    # -- queries: the bodies are the query specs' fields (search/services/spec.py), as the service takes them
    def search_documents(self, query: str, **options) -> HitList:
        answer = self.call("POST", "/search/documents", _fields(DocumentQuery, query=query, **options))
        return _hits(DocumentHit, answer, options.get("min_relevance"))

    def search_document_groups(self, query: str, **options) -> list[DocumentGroup]:
        body = _fields(DocumentQuery, query=query, group_by="document", group_size=options.pop("group_size", 1), **options)
        return [DocumentGroup([_hit(DocumentHit, h) for h in g["hits"]], g["more"])
                for g in self.call("POST", "/search/documents", body)["groups"]]

    def search_images(self, text: str | None = None, *, like: Path | bytes | None = None,
                      filters: ImageFilters = ImageFilters(), **options) -> HitList:
        fields = {**filters.as_fields(), **options}
        if like is None:
            answer = self.call("POST", "/search/images", _fields(ImageQuery, text=text, **fields))
        else:
            answer = self.call("POST", "/search/images/like", form=_fields(PhotoQuery, **fields),
                               upload=("image", _image(like, "like")))
        return _hits(ImageHit, answer, options.get("min_relevance"))

    def entail(self, image: Path | str | bytes, hypothesis: str, premise: str | None = None) -> Verdict:
        form = {"hypothesis": hypothesis, "premise": premise}
        return _hit(Verdict, self.call("POST", "/entail", form=form, upload=("image", _image(image, "image"))))

    def read_text(self, image: Path | str | bytes, *, pdf: Path | None = None) -> TextRead:
        name, data = _image(image, "image")
        answer = self.call("POST", "/ocr", form={}, upload=(name, data))
        read = TextRead(answer["lines"], answer["model"], answer.get("pages", 1))
        if pdf is not None:  # the pages again here (the server checked their count and size): no second reading
            from search.media.pages import most, scan_pages  # noqa: PLC0415  (Pillow, PDFium, fpdf2: only a PDF written needs them)
            from search.media.searchable_pdf import write_pages  # noqa: PLC0415

            pages = list(scan_pages(data, max_pixels=MAX_IMAGE_PIXELS, count=most(read.pages)))
            write_pages(pages, read.lines, pdf)
        return read

    def ask(self, capability, spec):
        """A family's capability (search.models.Capability) as its route answers it: POST /<name>, the spec as the body."""
        return capability.answer.model_validate(self.call("POST", capability.path, spec.model_dump(mode="json", exclude_none=True)))

    def get_passage(self, passage_id: str | None = None, *, path: str | None = None, chunk: int | None = None,
                    max_chars: int | None = None, full_text: bool = False, kb: str | None = None) -> DocumentHit:
        query = {"id": passage_id, "path": _here(path), "chunk": chunk, "max_chars": max_chars,
                 "full_text": full_text or None, "kb": kb}
        return _hit(DocumentHit, self.call("GET", "/passages?" + _query(query)))

    def get_document(self, path: str | None = None, *, sha256: str | None = None, max_chars: int = 20_000,
                     kb: str | None = None) -> dict:
        query = {"path": _here(path), "sha256": sha256, "max_chars": max_chars, "kb": kb}
        return self.call("GET", "/documents?" + _query(query))

    def photo_path(self, photo: str) -> Path:
        """A photo's path, or the path of the photo with this id (as the server resolves it)."""
        if len(photo) == 64 and all(c in "0123456789abcdef" for c in photo) and not Path(photo).exists():
            return Path(self.call("GET", f"/photos/{photo}")["path"])
        return Path(photo).expanduser()

    def status(self) -> dict:
        return self.call("GET", "/status")

    def verify_models(self, families: list[str] | None = None, *, published_checks: bool | None = None) -> dict:
        query = [("family", f) for f in families or []]
        if published_checks is not None:
            query.append(("published", str(published_checks).lower()))
        return self.call("GET", "/models/verify" + (f"?{urlencode(query)}" if query else ""))

    def verify_report(self) -> dict:
        """As ``SearchService.verify_report``: an error is reported in ``error``, not raised."""
        try:
            return self.verify_models()
        except errors.ServiceError as exc:
            return {"passed": False, "error": str(exc), "families": []}

    def relevance_check(self, kb: str | None = None, min_relevance: float | None = None) -> dict:
        query = {k: v for k, v in {"kb": kb, "min_relevance": min_relevance}.items() if v is not None}
        return self.call("GET", "/relevance/check" + (f"?{urlencode(query)}" if query else ""))

    def store_stats(self) -> dict:
        return self.call("GET", "/store/stats")

    def optimize_store(self) -> None:
        self.call("POST", "/store/optimize")

    def collections(self) -> dict:
        return self.call("GET", "/collections")

    def delete_kb(self, kb: str) -> dict:
        return self.call("DELETE", f"/kb/{quote(kb, safe='')}")


def _fields(spec, **values) -> dict:
    """A request's body: the values given for ``spec``'s fields (None and False left out: the server's
    defaults apply), a folder as this process means it. A name the spec lacks is a TypeError, as a
    keyword the service lacks would be."""
    if unknown := set(values) - set(spec.model_fields):
        raise TypeError(f"{spec.__name__} has no option {', '.join(sorted(unknown))}")
    if "folder" in values:
        values["folder"] = _here(values["folder"])
    if "types" in values:
        values["types"] = list(values["types"] or ()) or None
    return {k: v for k, v in values.items() if v is not None and v is not False}


def _query(params: dict) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


def _here(folder: str | None) -> str | None:
    """A folder as this process means it (relative to its working folder), for a server elsewhere."""
    return str(Path(folder).expanduser().absolute()) if folder else None


def _hits(cls, answer: dict, min_relevance: float | None) -> HitList:
    """The hits with what the server's calibration said about them (no_match, relevance_note)."""
    return HitList([_hit(cls, h) for h in answer["hits"]], no_match=bool(answer.get("no_match")),
                   note=answer.get("relevance_note"), min_relevance=min_relevance, best=answer.get("best_relevance"))


def _hit(cls, data: dict):
    """A hit from its JSON. A name that is not UTF-8 comes as its readable form and its bytes
    (path_bytes): the hit holds the real name, as without a server, so that its JSON is the same."""
    names = cls.__dataclass_fields__
    fields = {k: v for k, v in data.items() if k in names}
    if "path" in names and data.get("path_bytes"):
        fields["path"] = os.fsdecode(base64.b64decode(data["path_bytes"]))
        fields["paths"] = [fields["path"] if p == data["path"] else p for p in data.get("paths", [])]
    return cls(**fields)


def _image(value: Path | str | bytes, field: str) -> tuple[str, bytes]:
    if isinstance(value, bytes):
        return "upload", value
    path = Path(value).expanduser()
    try:  # the user's own file, sent as bytes: still never a blocking or unbounded read
        return path.name, read_regular(path, MAX_IMAGE_BYTES)
    except Refused as exc:
        raise errors.BadRequest(f"{field}: {path}: {photo_reason(exc)}") from None
