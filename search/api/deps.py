"""Dependencies the routers share."""

from __future__ import annotations

from fastapi import Request

from search.api.backend import Backend


def get_backend(request: Request) -> Backend:
    return request.app.state.backend
