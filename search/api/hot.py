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
        request = _valid(hot.model, body)
        if request is None:  # a bad body: FastAPI answers it, as for any other request
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
    """The whole body (None when the client disconnects first), or only its start when that already
    cannot be JSON: the rest is never read, and FastAPI answers the start as it would the whole."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if not chunks and (start := _not_json(chunk)) is not None:
            return start
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


_JSON_STARTS = frozenset(b'{["-0123456789tfnNI')  # the bytes a JSON value may start with (Python's json: NaN, Infinity)


def _not_json(chunk: bytes) -> bytes | None:
    """The chunk up to its first byte after whitespace when that byte is ASCII and cannot start a JSON
    value: json.loads fails on this start where it fails on the whole body, with the same message
    ("Expecting value" at that byte). Other bytes (a byte-order mark, UTF-16) are left to the parser."""
    rest = chunk.lstrip(b" \t\n\r")
    if rest and 0x21 <= rest[0] <= 0x7E and rest[0] not in _JSON_STARTS:
        return chunk[:len(chunk) - len(rest) + 1]
    return None


def _valid(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """The body as the route's model, as FastAPI reads and validates one; None when it is not.

    The error is dropped here, not kept: its traceback holds the frames that hold the body (and
    json's decoded copy of it), a cycle the collector may not get to for a long time."""
    try:
        return model.model_validate(json.loads(body))
    except Exception:  # noqa: BLE001
        return None


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
