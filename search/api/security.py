"""The optional API key: for every endpoint, or only for those that change the index."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader
from starlette.datastructures import Headers

from search.api.errors import error_response

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")
_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False)


def _bearer(headers: Headers) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def check(backend, key: str | None, writes: bool) -> tuple[bool, str | None]:
    """(local, refusal): whether ``key`` is the owner's local token (a face of the same user on this
    machine, with every right and any local path to ingest), and why the request is refused (None: it
    may pass: no key configured, a read under the "writes" scope, or the right key)."""
    if key and backend.owner and hmac.compare_digest(key.encode(), backend.owner.token.encode()):
        return True, None
    settings = backend.settings
    expected = settings.api_key
    if not expected or (settings.api_key_scope == "writes" and not writes):
        return False, None
    if not key:
        return False, f"{API_KEY_HEADER}: header required (or Authorization: Bearer)"
    if not hmac.compare_digest(key.encode(), expected.encode()):
        return False, f"{API_KEY_HEADER}: wrong API key"
    return False, None


def require_key(writes: bool) -> Callable:
    """A dependency that lets a request through when ``check`` does; the key comes in X-API-Key or,
    as OpenAI-compatible clients send it, 'Authorization: Bearer KEY'."""
    async def dependency(request: Request, key: str | None = Security(_key_header)) -> None:  # async: no thread hop
        request.state.local, refusal = check(request.app.state.backend, key or _bearer(request.headers), writes)
        if refusal:
            raise HTTPException(401, refusal, headers={"WWW-Authenticate": "ApiKey"})
    return dependency


class KeyGuard:
    """The same key check for a mounted ASGI app (the MCP endpoint)."""

    def __init__(self, app, backend, writes: bool = False) -> None:
        self.app, self.backend, self.writes = app, backend, writes

    async def __call__(self, scope, receive, send) -> None:
        headers = Headers(scope=scope)
        _, refusal = check(self.backend, headers.get(API_KEY_HEADER) or _bearer(headers), self.writes)
        if refusal:
            response = error_response(scope["path"], 401, refusal, headers={"WWW-Authenticate": "Bearer"})
            return await response(scope, receive, send)
        await self.app(scope, receive, send)


def check_metrics_key(request: Request) -> None:
    """/metrics is open like /healthz unless metrics_require_key is set; then the API key goes in
    X-API-Key or as 'Authorization: Bearer KEY', which Prometheus can send."""
    settings = request.app.state.backend.settings
    if not (settings.api_key and settings.metrics_require_key):
        return
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    sent = request.headers.get(API_KEY_HEADER) or bearer
    if not sent or not hmac.compare_digest(sent.encode(), settings.api_key.encode()):
        raise HTTPException(401, f"{API_KEY_HEADER}: the API key is required for /metrics",
                            headers={"WWW-Authenticate": "Bearer"})
