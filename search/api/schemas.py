"""Request bodies (pydantic models, so a bad field is a 422 that names it), and the bodies of the
error and readiness answers, so the OpenAPI document shows every status a route can answer with."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from search.services import (
    GROUP_BY,
    HIT_CHARS,
    HIT_CHARS_LIMIT,
    MAX_DEPTH,
    MAX_GROUP_SIZE,
    MAX_PAGE,
    MAX_TOP_K,
    MODES,
    SORTS,
    ImageFilters,
)
from search.services.options import ENTAIL_MODEL
from search.store.schema import DEFAULT_KB, KB_NAME

MAX_PATHS = 100  # per ingest request


def utf8_text(value: str) -> str:
    try:
        value.encode("utf-8")  # JSON may carry lone surrogates, which the tokenizers cannot take
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


Text = Annotated[str, AfterValidator(utf8_text)]
KB_PATTERN = KB_NAME.pattern
KbName = Annotated[str, Field(pattern=KB_PATTERN, max_length=40, examples=["hr"],
                              description=f"a knowledge base (default: {DEFAULT_KB!r}, today's index)")]
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K)]
Score = Annotated[float, Field(allow_inf_nan=False)]
# Calibrated relevance (docs/relevance.md): hits below it are hidden; none left -> "no_match": true.
MinRelevance = Annotated[float, Field(ge=0, le=1, description="hide hits whose calibrated relevance (the share of "
                                      "unrelated questions that find less in this collection, 0..1; 0.9 = nine in ten) is below this; "
                                      "when none is left the answer says no_match: true")]


FileTypes = Annotated[list[Annotated[Text, Field(min_length=1, max_length=16)]], Field(max_length=32)]


class DocumentQuery(BaseModel):
    query: Text = Field(min_length=1, max_length=2000, examples=["reset password"])
    kb: KbName | None = None
    top_k: Annotated[int, Field(ge=1, le=MAX_PAGE)] = Field(5, description="hits per page (documents, with group_by)")
    offset: Annotated[int, Field(ge=0, le=MAX_DEPTH - 1)] = Field(
        0, description=f"hits (documents, with group_by) to skip: the next page starts at the answer's next_offset; "
                       f"offset + top_k is at most {MAX_DEPTH}")
    group_by: Literal[GROUP_BY] | None = Field(
        None, description="document: one entry per document, in the order of its best passage, with its best "
                          "passages (group_size) and how many more of its passages matched")
    group_size: Annotated[int, Field(ge=1, le=MAX_GROUP_SIZE)] | None = Field(
        None, description="with group_by: passages per document (default 1)")
    mode: Literal[MODES] | None = Field(None, description="default: the server's search_mode (auto)")
    min_score: Score | None = None
    min_relevance: MinRelevance | None = None
    folder: Text | None = Field(None, max_length=4096, description="only files under this folder")
    types: FileTypes | None = Field(None, description="only files of these types, e.g. [\"pdf\", \"docx\"]")
    max_chars: Annotated[int, Field(ge=1, le=HIT_CHARS_LIMIT)] | None = Field(
        None, description=f"characters of text per hit, cut at a word boundary when there is one (the hit then says "
                          f"truncated and its whole length); null: {HIT_CHARS}")
    full_text: bool = Field(False, description="each hit's whole text, however long (leave max_chars out)")

    @model_validator(mode="after")
    def _one_bound(self) -> DocumentQuery:
        if self.full_text and self.max_chars is not None:
            raise ValueError("max_chars and full_text: give one or the other")
        if self.offset + self.top_k > MAX_DEPTH:
            raise ValueError(f"offset + top_k: must be at most {MAX_DEPTH}")
        if self.group_size is not None and self.group_by is None:
            raise ValueError("group_size: applies only with group_by")
        if self.min_relevance is not None and self.group_by is not None:
            raise ValueError("min_relevance: not available with group_by (groups carry no calibrated relevance yet)")
        return self


class PhotoFilters(BaseModel):
    after: Text | None = Field(None, max_length=64, examples=["2021-07-14"])
    before: Text | None = Field(None, max_length=64)
    camera: Text | None = Field(None, max_length=200)
    near: Text | None = Field(None, max_length=100, description="LAT,LON,KM", examples=["51.5,-0.12,10"])
    folder: Text | None = Field(None, max_length=4096)
    types: FileTypes | None = Field(None, description="only files of these types, e.g. [\"jpg\", \"png\"]")

    def to_filters(self) -> ImageFilters:
        return ImageFilters.parse(after=self.after, before=self.before, camera=self.camera, near=self.near,
                                  folder=self.folder, suffixes=self.types or ())


class ImageQuery(PhotoFilters):
    text: Text = Field(min_length=1, max_length=2000, examples=["a dog on the beach"])
    kb: KbName | None = None
    top_k: TopK = 12
    min_score: Score | None = None
    min_relevance: MinRelevance | None = None
    sort: Literal[SORTS] = "score"
    verify: bool = Field(False, description=f"re-rank the top_k hits by {ENTAIL_MODEL}'s probability that each photo entails the text")
    min_entailment: Annotated[float, Field(ge=0, le=1)] | None = Field(
        None, description="with verify: drop photos whose entailment probability is below this")


class IngestPaths(BaseModel):
    paths: list[Text] = Field(min_length=1, max_length=MAX_PATHS,
                              description="absolute server-side paths inside the configured roots (or this knowledge "
                                          "base's uploads); in a name that is not UTF-8, each byte that is not as "
                                          "NUL + two hex digits (\u0000ff)")
    prune: bool = Field(False, description="also remove indexed files under these paths that are gone from disk")
    kb: KbName | None = None
    ocr_photos: bool | None = Field(None, description="also read the text in photos and image files (OCR), so a search "
                                                      "finds them by their words; null: the server's setting")


# -- answers other than a route's success


class ErrorBody(BaseModel):
    detail: str = Field(description="one line; it starts with the field or header at fault when there is one")
    error: str | None = Field(None, description="the kind of error (e.g. ModelNotReady, EmptyCollection), "
                                                "when the service raised it: what the CLI maps to its exit codes")


class ValidationIssue(BaseModel):
    loc: list[str | int] = Field(description="where: 'body', 'query', 'header' or 'path', then the field")
    msg: str
    type: str


class ValidationErrorBody(ErrorBody):
    errors: list[ValidationIssue] = Field(description="pydantic's findings, for programs")


class TritonReadiness(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str
    live: bool
    models: dict[str, bool] = Field(description="model name -> ready")


class StoreReadiness(BaseModel):
    model_config = ConfigDict(extra="allow")
    backend: str
    location: str
    reachable: bool
    error: str | None = None


class Readiness(BaseModel):
    ready: bool
    triton: TritonReadiness
    qdrant: StoreReadiness
    verify: dict | None = Field(None, description="with ?verify=1: `search models verify`'s report "
                                "(passed, checked_at, families with their checks), reused while at most "
                                "SEARCH_VERIFY_REUSE_S old; age_s says how old")


_ERRORS = {
    400: "A value that cannot be used (a blank query, a bad date or image, a relative path); the message names the field",
    401: "The X-API-Key header is missing or wrong (only when the server has an API key)",
    403: "The API key may not do this: a knowledge base it has no (or too low a) right on, a write with a read-only key, "
         "a route about the whole server with a key scoped to knowledge bases, or a path outside the folders this server "
         "may ingest from",
    404: "No such path or job",
    409: "Nothing is indexed yet in the collection searched",
    413: "The request body, or one uploaded file, is over the server's size limit",
    422: "The request does not match this schema; `detail` names each field, `errors` lists pydantic's findings",
    500: "An unexpected error; the server log has the details",
    503: "Triton, a model or the store is not available (or the API keys file became unreadable); Retry-After when Triton is down",
    504: "Triton is there but did not answer in time, retries included (busy): try again later",
}
_AUTH_HEADER = {"WWW-Authenticate": {"description": "the scheme to authenticate with", "required": True,
                                     "schema": {"type": "string"}}}


def errors(*codes: int) -> dict[int | str, dict]:
    """The ``responses=`` of a route or router: these statuses, each with the project's error body."""
    codes = (*codes, 504) if 503 in codes else codes  # where Triton may be down, it may be busy
    return {code: {"model": ValidationErrorBody if code == 422 else ErrorBody, "description": _ERRORS[code],
                   **({"headers": _AUTH_HEADER} if code == 401 else {})} for code in codes}


class WatchPaths(BaseModel):
    paths: list[Text] = Field(min_length=1, max_length=MAX_PATHS,
                              description="absolute server-side folders inside the configured roots")
    quiet_ms: int = Field(500, ge=50, le=60_000,
                          description="how long the folders must be quiet before a batch of changes is indexed")
