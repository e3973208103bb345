"""The optional API key: for every endpoint, or only for those that change the index."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from fastapi import HTTPException, Request, Security
from fastapi.security import APIKeyHeader

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")
_key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False)


def require_key(writes: bool) -> Callable:
    """A dependency that lets a request through when no key is configured, when the scope is
    "writes" and this is a read, or when it sends the right key."""
    def check(request: Request, key: str | None = Security(_key_header)) -> None:
        backend = request.app.state.backend
        # The owner's local token (search/owner.py): a face of the same user on this machine, with
        # every right and any local path to ingest.
        request.state.local = bool(key and backend.owner and hmac.compare_digest(key.encode(), backend.owner.token.encode()))
        if request.state.local:
            return
        settings = backend.settings
        expected = settings.api_key
        if not expected or (settings.api_key_scope == "writes" and not writes):
            return
        if not key:
            raise HTTPException(401, f"{API_KEY_HEADER}: header required", headers={"WWW-Authenticate": "ApiKey"})
        if not hmac.compare_digest(key.encode(), expected.encode()):
            raise HTTPException(401, f"{API_KEY_HEADER}: wrong API key", headers={"WWW-Authenticate": "ApiKey"})
    return check


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
