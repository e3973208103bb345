"""The hottest routes, POST /search/documents and POST /v1/embeddings, answered without FastAPI's
plumbing, which costs about as much CPU as the route's own work.

Only a request that would pass takes this way: a key the routes' check accepts, then a body the
route's pydantic model accepts. Anything else goes on to FastAPI as it came, so refusals and
validation errors stay the app's own. The answer is the route's own code; the outer middleware
still applies."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import Response

from search.api.errors import http_error_response, service_error_response
from search.api.openai import EmbeddingRequest
from search.api.routes.embeddings import answer_embeddings
from search.api.routes.search import answer_documents
from search.api.schemas import DocumentQuery
from search.api.security import check, decided, sent_key
from search.errors import ServiceError
from search.keys import Principal
from search.observability import note_error

Answer = Callable[..., Awaitable[Response]]  # (backend, body, who) -> the route's response


@dataclass(frozen=True)
class HotRoute:
    model: type[BaseModel]
    answer: Answer
    route: APIRoute  # the FastAPI route it stands for: its path labels the request's metrics and log line


HOT = {"/search/documents": (DocumentQuery, answer_documents), "/v1/embeddings": (EmbeddingRequest, answer_embeddings)}


def hot_routes(routers: Iterable[APIRouter]) -> dict[str, HotRoute]:
    """The routers' POST routes that the fast way also answers, by path."""
    routes = {r.path: r for router in routers for r in router.routes if isinstance(r, APIRoute) and "POST" in r.methods}
    return {path: HotRoute(model, answer, routes[path]) for path, (model, answer) in HOT.items()}


class HotRoutes:
    """Pure ASGI, inside the app's own middleware (the size limit, the request observer)."""

    def __init__(self, app, backend, routes: dict[str, HotRoute]) -> None:
        self.app, self.backend, self.routes = app, backend, routes

    async def __call__(self, scope, receive, send):
        hot = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if hot is None or scope["query_string"]:
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        if _media_type(headers) != "application/json":
            return await self.app(scope, receive, send)
        who = self._passes(scope, headers)
        if who is None:  # refused: FastAPI answers it, with the body unread
            return await self.app(scope, receive, send)
        try:
            body = await _read(receive)
        except HTTPException as exc:  # the size limit's 413 for a chunked body (FastAPI's body reading answers it so)
            return await http_error_response(scope["path"], exc)(scope, receive, send)
        if body is None:  # the client went away
            return
        try:
            request = hot.model.model_validate(json.loads(body))  # as FastAPI reads and validates a body
        except Exception:  # noqa: BLE001  (a bad body: FastAPI answers it, as for any other request)
            return await self.app(scope, _replay(body, receive), send)
        scope["route"] = hot.route
        try:
            response = await hot.answer(self.backend, request, who)
        except ServiceError as exc:
            note_error(Request(scope), exc)
            response = service_error_response(scope["path"], exc)
        except HTTPException as exc:
            response = http_error_response(scope["path"], exc)
        await response(scope, receive, send)

    def _passes(self, scope, headers: Headers) -> Principal | None:
        """Who the request acts as, when the routes' key check lets it through (KeyGate's answer, when it asked)."""
        access = decided(scope, writes=False) or check(self.backend, sent_key(headers), writes=False)
        return None if access.refusal else access.principal


def _media_type(headers: Headers) -> str:
    return headers.get("content-type", "").partition(";")[0].strip().lower()


async def _read(receive) -> bytes | None:
    """The whole body (None when the client disconnects first)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive):
    """A ``receive`` that hands over the body read already, then listens for a disconnect as before."""
    sent = False

    async def again():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
