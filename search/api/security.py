"""Who a request acts as: the optional API key of the settings (every right, for every endpoint or
only for those that change the index), or a key from the keys file scoped to knowledge bases and a
right (search/keys.py). Routes then ask for a right on the knowledge base they touch."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader

from search.keys import EVERYTHING, KeysFileError, Principal
from search.store.schema import DEFAULT_KB

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")
_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False)


def require_key(writes: bool) -> Callable:
    """A dependency that lets a request through when no key is configured (no API key, no keys
    file), when the scope is "writes" and this is a read, or when it sends a valid key; it records
    who the request acts as in ``request.state.principal``. A read-only key is refused on writes."""
    def check(request: Request, key: str | None = Security(_key_header)) -> None:
        backend = request.app.state.backend
        request.state.principal = EVERYTHING
        # The owner's local token (search/owner.py): a face of the same user on this machine, with
        # every right and any local path to ingest.
        request.state.local = bool(key and backend.owner and hmac.compare_digest(key.encode(), backend.owner.token.encode()))
        if request.state.local:
            return
        settings = backend.settings
        expected = settings.api_key
        try:
            scoped = backend.keys.load()
        except KeysFileError as exc:  # changed while the server runs: refuse rather than guess
            raise HTTPException(503, str(exc)) from None
        if key:
            if expected and hmac.compare_digest(key.encode(), expected.encode()):
                return
            who = backend.keys.match(key) if scoped else None
            if who is None:
                raise HTTPException(401, f"{API_KEY_HEADER}: wrong API key", headers={"WWW-Authenticate": "ApiKey"})
            request.state.principal = who
            if writes and who.right == "read":
                raise HTTPException(403, f"{API_KEY_HEADER}: this key may only read (key {who.name!r})")
            return
        if (not expected and not scoped) or (settings.api_key_scope == "writes" and not writes):
            return
        raise HTTPException(401, f"{API_KEY_HEADER}: header required", headers={"WWW-Authenticate": "ApiKey"})
    return check


def principal(request: Request) -> Principal:
    """Who the request acts as (set by require_key)."""
    return getattr(request.state, "principal", EVERYTHING)


def need_kb(request: Request, kb: str | None, right: str = "read") -> str:
    """The knowledge base a request names (None: the default one), if its key has ``right`` on it; else 403."""
    kb = kb or DEFAULT_KB
    who = principal(request)
    if not who.may(kb, right):
        verb = {"read": "search", "write": "write to", "admin": "administer"}[right]
        raise HTTPException(403, f"kb: this API key may not {verb} knowledge base {kb!r}")
    return kb


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
    bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    sent = request.headers.get(API_KEY_HEADER) or bearer
    if not sent or not hmac.compare_digest(sent.encode(), settings.api_key.encode()):
        raise HTTPException(401, f"{API_KEY_HEADER}: the API key is required for /metrics",
                            headers={"WWW-Authenticate": "Bearer"})
