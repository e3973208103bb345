"""Errors as JSON: a service error maps to its status code, a validation error names the field, and
an unexpected error is a 500 with the same body as every other error (the traceback goes to the log).
Under /v1 (the OpenAI-compatible routes) the body is OpenAI's ``{"error": {...}}`` and a request that
does not match the schema is a 400, as OpenAI's clients expect."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from search.api import openai
from search.errors import (
    BadRequest,
    Busy,
    EmptyCollection,
    ModelNotReady,
    NotFound,
    ServiceError,
    StoreUnavailable,
    TritonTimeout,
    TritonUnavailable,
)
from search.observability import note_error

# First match wins: a subclass comes before its base. A Triton that timed out is there but busy: 504
# (the gateway's upstream was slow), without Retry-After; one that is down is a 503 with it, and so is
# a full queue (Busy, with its own Retry-After).
STATUS = {NotFound: 404, BadRequest: 400, EmptyCollection: 409, ModelNotReady: 503, TritonTimeout: 504,
          TritonUnavailable: 503, StoreUnavailable: 503, Busy: 503}
RETRY_AFTER_S = 5  # a Triton that is down: the supervisor starts a crashed local one again in seconds


def error_response(path: str, status: int, message: str, *, param: str | None = None, kind: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    """The error body of the route at ``path``: OpenAI's under /v1, the project's elsewhere."""
    if openai.is_openai(path):
        return JSONResponse(openai.error_body(status, message, param), status_code=status, headers=headers)
    body = {"detail": message, **({"error": kind} if kind else {})}
    return JSONResponse(body, status_code=status, headers=headers)


def service_error_response(path: str, exc: ServiceError) -> JSONResponse:
    status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
    headers = None
    if isinstance(exc, Busy):
        headers = {"Retry-After": str(exc.retry_after)}
    elif isinstance(exc, TritonUnavailable) and not isinstance(exc, TritonTimeout):  # down, not slow
        headers = {"Retry-After": str(RETRY_AFTER_S)}
    return error_response(path, status, str(exc), param=getattr(exc, "param", None), kind=type(exc).__name__,
                          headers=headers)


def http_error_response(path: str, exc: HTTPException) -> JSONResponse:
    return error_response(path, exc.status_code, str(exc.detail), headers=exc.headers)


def forget_frames(exc: BaseException) -> None:
    """Drop the tracebacks of an answered error and of the errors it was raised from. A traceback holds
    the frames of the request's work, and a frame may hold the error (FastAPI's validation error is a
    local of the frame it is raised from): a cycle that keeps the body, json's decoded copy and the
    parsed input until a collection reaches it, which under gc.freeze() may be never."""
    seen, todo = set(), [exc]
    while todo:
        exc = todo.pop()
        if exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            exc.__traceback__ = None
            todo += (exc.__cause__, exc.__context__)


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        note_error(request, exc)
        forget_frames(exc)
        return service_error_response(request.url.path, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        forget_frames(exc)
        return http_error_response(request.url.path, exc)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        """One readable message that starts with the field, plus pydantic's list for programs."""
        forget_frames(exc)
        messages, fields = [], []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"][1:]] or [str(e["loc"][0])]  # drop 'body' / 'query' / 'path'
            where = loc[0] + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
            messages.append(f"{where}: {e['msg']}")
            fields.append(loc[0])
        if openai.is_openai(request.url.path):
            return JSONResponse(openai.error_body(400, "; ".join(messages), fields[0] if fields else None), status_code=400)
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(messages), "errors": errors}, status_code=422)

    @app.exception_handler(Exception)  # Starlette answers with this, then re-raises for the server's log
    async def unexpected(request: Request, _exc: Exception) -> JSONResponse:
        return error_response(request.url.path, 500, "internal error: the server log has the details")
