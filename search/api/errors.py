"""Errors as JSON: a service error maps to its status code, a validation error names the field, and
an unexpected error is a 500 with the same body as every other error (the traceback goes to the log)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from search.errors import BadRequest, EmptyCollection, ModelNotReady, ServiceError, StoreUnavailable, TritonUnavailable
from search.observability import note_error

STATUS = {BadRequest: 400, EmptyCollection: 409, ModelNotReady: 503, TritonUnavailable: 503, StoreUnavailable: 503}


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        note_error(request, exc)
        return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """One readable message that starts with the field, plus pydantic's list for programs."""
        messages = []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"][1:]] or [str(e["loc"][0])]  # drop 'body' / 'query' / 'path'
            where = loc[0] + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
            messages.append(f"{where}: {e['msg']}")
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(messages), "errors": errors}, status_code=422)

    @app.exception_handler(Exception)  # Starlette answers with this, then re-raises for the server's log
    async def unexpected(_request: Request, _exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": "internal error: the server log has the details"}, status_code=500)
