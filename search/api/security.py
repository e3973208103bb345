"""Who a request acts as: the optional API key of the settings (every right, for every endpoint or
only for those that change the index), or a key from the keys file scoped to knowledge bases and a
right (search/keys.py). Routes then ask for a right on the knowledge base they touch."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fastapi import HTTPException, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import APIKeyHeader
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from search.api.errors import error_response
from search.api.limits import LimitRequestSize
from search.keys import EVERYTHING, KbRefused, KeyFile, KeysFileError, Principal
from search.store.schema import DEFAULT_KB

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_DECIDED = "key_access"  # in the request's scope["state"]: (writes, Access) as KeyGate decided it


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
    anonymous: bool = False  # passes without a key where keys are required: max_anonymous_request_bytes


def check(backend, key: str | None, writes: bool) -> Access:
    """Who ``key`` is. The owner's local token: every right and any local path. No API key and no keys
    file: every request passes. Else keys are required, even if the keys file is empty (revoking the
    last key must not open the server): the settings' key is admin over every KB; a keys-file key acts
    within its KBs and right; without a key only reads pass ("writes" scope), or everything with
    open_access."""
    if key and backend.owner and hmac.compare_digest(key.encode(), backend.owner.token.encode()):
        return Access(True)
    settings = backend.settings
    expected = settings.api_key
    try:
        scoped = backend.keys.load()
    except KeysFileError as exc:  # changed while the server runs: refuse rather than guess
        return Access(False, status=503, refusal=str(exc))
    if not expected and not backend.keys.exists:
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
    if settings.open_access:
        return Access(False)
    if settings.api_key_scope == "writes" and not writes:
        return Access(False, anonymous=True)
    return Access(False, status=401, refusal=f"{API_KEY_HEADER}: header required (or Authorization: Bearer)")


def decided(scope, writes: bool) -> Access | None:
    """What KeyGate decided for this request, when it asked what the caller asks now."""
    seen = (scope.get("state") or {}).get(_DECIDED)
    return seen[1] if seen is not None and seen[0] == writes else None


def refused(path: str, access: Access, challenge: str) -> Response:
    """The answer to a refused key: 401 (with the scheme to authenticate with), 403 or 503."""
    return error_response(path, access.status, access.refusal,
                          headers={"WWW-Authenticate": challenge} if access.status == 401 else None)


def describe_access(settings, keys: KeyFile, host: str) -> tuple[int, str]:
    """The log level and line that `search serve` starts with: who may call it (WARNING: anyone)."""
    if settings.open_access:
        return logging.WARNING, ("open access (SEARCH_OPEN_ACCESS=true): requests without a key pass with every "
                                 "right on every knowledge base" + (", though keys are configured" if
                                                                     settings.api_key or keys.exists else ""))
    if not settings.api_key and not keys.exists:
        where = "every request from this machine passes" if host in LOCAL_HOSTS else \
            f"anyone who can reach {host} can search and ingest"
        return (logging.INFO if host in LOCAL_HOSTS else logging.WARNING,
                f"open access: no API key and no keys file ({keys.path}): {where}; SEARCH_API_KEY or "
                "`search keys add` makes keys required")
    reads = ", but reads (SEARCH_API_KEY_SCOPE=writes)" if settings.api_key_scope == "writes" else ""
    source = " and ".join(s for s, on in (("SEARCH_API_KEY", settings.api_key), (f"the keys file {keys.path}", keys.exists)) if on)
    return logging.INFO, f"API keys required{reads}: {source}"


class _KeyCheck(APIKeyHeader):
    """The key check as the security scheme itself: OpenAPI still documents the X-API-Key header, and
    FastAPI resolves one dependency per request instead of the header's scheme under a checking
    function (each level of dependencies costs the event loop time on every request)."""

    def __init__(self, writes: bool) -> None:
        super().__init__(name=API_KEY_HEADER, scheme_name="APIKeyHeader", auto_error=False)
        self.writes = writes

    async def __call__(self, request: Request) -> None:  # async: no thread hop
        access = decided(request.scope, self.writes) or check(request.app.state.backend, sent_key(request.headers), self.writes)
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
        access = decided(scope, self.writes) or check(self.backend, sent_key(Headers(scope=scope)), self.writes)
        if access.refusal:
            return await refused(scope["path"], access, "Bearer")(scope, receive, send)
        state = Request(scope).state  # scope["state"]: this request's, which the SDK's Request sees too
        state.local, state.principal = access.local, access.principal
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class Guard:
    """A route's key check, as KeyGate applies it."""

    writes: bool
    challenge: str  # the WWW-Authenticate scheme of its 401
    route: APIRoute | None  # labels a refusal's metrics and log line, as the route's own refusal was


class KeyGate:
    """Pure ASGI, inside the request observer: refuses (401, 403, 503) a request to a keyed route from
    its headers alone, since FastAPI would parse the whole body before the route's dependencies run.
    A passing request carries the decision in its scope for the route's check; one without a key
    where keys are required ("writes" scope) may send at most max_anonymous_request_bytes. Routes
    without a key check and unrouted paths pass untouched."""

    def __init__(self, app, backend, routes: Iterable[BaseRoute]) -> None:
        self.app, self.backend = app, backend
        self.static: dict[tuple[str, str], Guard] = {}
        self.templated: list[tuple] = []  # (path regex, methods, Guard), in the router's order
        for route in routes:
            guard = _guard_of(route)
            if guard is None:
                continue
            if "{" in route.path:
                self.templated.append((route.path_regex, frozenset(route.methods or ()), guard))
            else:
                for method in route.methods or ():
                    self.static.setdefault((method, route.path), guard)  # the first route of a path serves it
        self.anonymous = LimitRequestSize(app, backend.settings.max_anonymous_request_bytes,
                                          "max_anonymous_request_bytes", "a request without an API key")

    async def __call__(self, scope, receive, send) -> None:
        guard = self._guard(scope) if scope["type"] == "http" else None
        if guard is None:
            return await self.app(scope, receive, send)
        access = check(self.backend, sent_key(Headers(scope=scope)), guard.writes)
        if access.refusal:
            if guard.route is not None:
                scope["route"] = guard.route
            return await refused(scope["path"], access, guard.challenge)(scope, receive, send)
        scope.setdefault("state", {})[_DECIDED] = (guard.writes, access)
        await (self.anonymous if access.anonymous else self.app)(scope, receive, send)

    def _guard(self, scope) -> Guard | None:
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root + "/"):  # as Starlette's router matches it
            path = path[len(root):]
        method = scope["method"]
        if (guard := self.static.get((method, path))) is not None:
            return guard
        for regex, methods, guard in self.templated:
            if method in methods and regex.match(path):
                return guard
        return None


def _guard_of(route: BaseRoute) -> Guard | None:
    """The key check a route runs: the require_key dependency of an APIRoute, or a KeyGuard app (/mcp)."""
    if isinstance(route, APIRoute):
        call = next((d.call for d in _dependencies(route.dependant) if isinstance(d.call, _KeyCheck)), None)
        return None if call is None else Guard(call.writes, "ApiKey", route)
    if isinstance(route, Route) and isinstance(route.endpoint, KeyGuard):
        return Guard(route.endpoint.writes, "Bearer", None)
    return None


def _dependencies(dependant: Dependant) -> Iterator[Dependant]:
    for dep in dependant.dependencies:
        yield dep
        yield from _dependencies(dep)


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
