"""Request bodies (pydantic models, so a bad field is a 422 that names it), and the bodies of the
error and readiness answers, so the OpenAPI document shows every status a route can answer with."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from search.config import KB_NAME
from search.services.spec import (
    DocumentQuery,
    EntailQuery,
    ImageQuery,
    KbName,
    OcrQuery,
    PhotoFilters,
    PhotoQuery,
    Text,
    utf8_text,
)

# The query bodies are the services' query specs (search/services/spec.py), so OpenAPI shows theirs
__all__ = ["DocumentQuery", "EntailQuery", "ImageQuery", "KbName", "OcrQuery", "PhotoFilters", "PhotoQuery", "Text", "utf8_text"]

MAX_PATHS = 100  # per ingest request
KB_PATTERN = KB_NAME.pattern


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
