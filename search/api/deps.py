"""Dependencies the routers share."""

from __future__ import annotations

from fastapi import Request

from search.api.backend import Backend


def backend_of(request: Request) -> Backend:
    return request.app.state.backend


async def get_backend(request: Request) -> Backend:  # async: a sync dependency costs a thread hop per request
    return backend_of(request)
