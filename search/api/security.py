"""Who a request acts as: the optional API key of the settings (every right, for every endpoint or
only for those that change the index), or a key from the keys file scoped to knowledge bases and a
right (search/keys.py). Routes then ask for a right on the knowledge base they touch."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import HTTPException, Request
from fastapi.security import APIKeyHeader
from starlette.datastructures import Headers

from search.api.errors import error_response
from search.keys import EVERYTHING, KbRefused, KeysFileError, Principal
from search.store.schema import DEFAULT_KB

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")


def sent_key(headers: Headers) -> str | None:
    """The key a request sent: in X-API-Key or, as OpenAI-compatible clients and Prometheus send it,
    'Authorization: Bearer KEY'."""
    if key := headers.get(API_KEY_HEADER):
        return key
    scheme, _, token = headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


@dataclass(frozen=True)
class Access:
    """What ``check`` decided: the owner's local token or not, who the request acts as, and why it is
    refused (None: it may pass) with the status to answer."""

    local: bool
    principal: Principal = EVERYTHING
    status: int = 0
    refusal: str | None = None


def check(backend, key: str | None, writes: bool) -> Access:
    """Who ``key`` is. The owner's local token: a face of the same user on this machine, with every
    right and any local path to ingest. With no API key and no keys file every request passes; with
    the "writes" scope, reads pass without a key; the settings' key is an admin over every KB; a key
    from the keys file acts within its KBs and right (a read-only key is refused on writes)."""
    if key and backend.owner and hmac.compare_digest(key.encode(), backend.owner.token.encode()):
        return Access(True)
    settings = backend.settings
    expected = settings.api_key
    try:
        scoped = backend.keys.load()
    except KeysFileError as exc:  # changed while the server runs: refuse rather than guess
        return Access(False, status=503, refusal=str(exc))
    if not expected and not scoped:
        return Access(False)
    if key:
        if expected and hmac.compare_digest(key.encode(), expected.encode()):
            return Access(False)
        who = backend.keys.match(key) if scoped else None
        if who is None:
            return Access(False, status=401, refusal=f"{API_KEY_HEADER}: wrong API key")
        if writes and who.right == "read":
            return Access(False, who, 403, f"{API_KEY_HEADER}: this key may only read (key {who.name!r})")
        return Access(False, who)
    if settings.api_key_scope == "writes" and not writes:
        return Access(False)
    return Access(False, status=401, refusal=f"{API_KEY_HEADER}: header required (or Authorization: Bearer)")


class _KeyCheck(APIKeyHeader):
    """The key check as the security scheme itself: OpenAPI still documents the X-API-Key header, and
    FastAPI resolves one dependency per request instead of the header's scheme under a checking
    function (each level of dependencies costs ~10-20 us of the event loop per request)."""

    def __init__(self, writes: bool) -> None:
        super().__init__(name=API_KEY_HEADER, scheme_name="APIKeyHeader", auto_error=False)
        self.writes = writes

    async def __call__(self, request: Request) -> None:  # async: no thread hop
        access = check(request.app.state.backend, sent_key(request.headers), self.writes)
        request.state.local, request.state.principal = access.local, access.principal
        if access.refusal:
            raise HTTPException(access.status, access.refusal,
                                headers={"WWW-Authenticate": "ApiKey"} if access.status == 401 else None)


def require_key(writes: bool) -> Callable:
    """A dependency that lets a request through when ``check`` does and records who it acts as in
    ``request.state.principal``; the key comes in X-API-Key or, as OpenAI-compatible clients send
    it, 'Authorization: Bearer KEY'."""
    return _KeyCheck(writes)


class KeyGuard:
    """The same key check for a mounted ASGI app (the MCP endpoint). Who the request acts as goes in
    its ``request.state.principal``, as for the routes: the MCP tools read it from the SDK's request
    context (``principal``) and ask for a right on each knowledge base they touch."""

    def __init__(self, app, backend, writes: bool = False) -> None:
        self.app, self.backend, self.writes = app, backend, writes

    async def __call__(self, scope, receive, send) -> None:
        headers = Headers(scope=scope)
        access = check(self.backend, sent_key(headers), self.writes)
        if access.refusal:
            response = error_response(scope["path"], access.status, access.refusal,
                                      headers={"WWW-Authenticate": "Bearer"} if access.status == 401 else None)
            return await response(scope, receive, send)
        state = Request(scope).state  # scope["state"]: this request's, which the SDK's Request sees too
        state.local, state.principal = access.local, access.principal
        await self.app(scope, receive, send)


def principal(request: Request) -> Principal:
    """Who the request acts as (set by require_key)."""
    return getattr(request.state, "principal", EVERYTHING)


def readable_kbs(request: Request, svc) -> list[str] | None:
    """The knowledge bases the request's key may read (None: every one)."""
    return principal(request).readable(svc.knowledge_bases)


def need_kb(request: Request, kb: str | None, right: str = "read") -> str:
    """The knowledge base a request names (None: the default one), if its key has ``right`` on it; else 403."""
    return need(principal(request), kb, right)


def need(who: Principal, kb: str | None, right: str = "read") -> str:
    """``need_kb`` for the key ``who``."""
    try:
        return who.need(kb or DEFAULT_KB, right)
    except KbRefused as exc:
        raise HTTPException(403, str(exc)) from None


def need_everything(request: Request) -> None:
    """Routes about the whole server (its store, status, watches) are for keys over every knowledge base."""
    if not principal(request).everything:
        raise HTTPException(403, f"{API_KEY_HEADER}: this route needs an admin key over every knowledge base "
                                 "(the server's API key)")


def check_metrics_key(request: Request) -> None:
    """/metrics is open like /healthz unless metrics_require_key is set; then the API key goes in
    X-API-Key or as 'Authorization: Bearer KEY', which Prometheus can send."""
    settings = request.app.state.backend.settings
    if not (settings.api_key and settings.metrics_require_key):
        return
    sent = sent_key(request.headers)
    if not sent or not hmac.compare_digest(sent.encode(), settings.api_key.encode()):
        raise HTTPException(401, f"{API_KEY_HEADER}: the API key is required for /metrics",
                            headers={"WWW-Authenticate": "Bearer"})
