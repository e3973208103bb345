"""The MCP server: tools over the query services, like the REST routes (no search logic here).

``build(connect)`` makes the server; ``connect()`` yields a query service for one call. Tool
arguments pass straight to the service functions.

``caller`` (REST face): who an HTTP request acts as (search/keys.py's Principal); every tool asks
it for the read right on its knowledge base, and the collections resource lists only readable
ones. ``reads_files`` (REST face):
whether a request may have a path read (entail's ``photo``), asked of the opened file's real path,
as REST ingest does; other files are read only as indexed photos whose bytes are unchanged.
Without them (stdio, in-process) the caller is the machine's user with every right. Every file is
opened without blocking and bounded."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import TextContent, ToolAnnotations
from pydantic import Field

from search.config import MAX_IMAGE_BYTES
from search.errors import ServiceError
from search.keys import EVERYTHING, Principal
from search.media.files import Refused, read_regular
from search.services.options import ENTAIL_MODEL, HIT_CHARS_LIMIT, MAX_TOP_K, MODES, PHOTO_MODEL, SORTS, ImageFilters
from search.services.results import DocumentHit, ImageHit, prompt_context
from search.store.schema import DEFAULT_KB

Connect = Callable[[], AbstractContextManager[Any]]
Caller = Callable[[Any], Principal]  # the HTTP request the SDK attached (Starlette's) -> who it acts as
FileRule = Callable[[Any, Path], bool]  # the HTTP request, a server path -> may it read that file
THUMBNAIL_BYTES = 512 * 1024  # a thumbnail larger than this is left out (they are ~320 px JPEGs)
DOCUMENT_CHARS = 20_000
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
INSTRUCTIONS = ("Semantic search over an indexed knowledge base (documents: passages with citations) and a photo "
                f"library ({PHOTO_MODEL} text-to-image and image-to-image, {ENTAIL_MODEL} visual entailment). Cite passages by their "
                "citation; fetch more context with get_passage / get_document.")

TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K, description="how many hits")]
Chars = Annotated[int, Field(ge=1, le=HIT_CHARS_LIMIT)]
Text = Annotated[str, Field(min_length=1, max_length=2000)]
MinRelevance = Annotated[float | None, Field(ge=0, le=1, description="hide hits whose calibrated relevance is below "
                                                                  "this (0.9: better than nine unrelated questions in ten find here)")]
Kb = Annotated[str | None, Field(description="the knowledge base (default: 'default'); see the collections resource")]


_caller: ContextVar[Principal] = ContextVar("mcp_caller", default=EVERYTHING)
# Where an HTTP request may have a file read from (a real path -> allowed); None: the machine's own user
_reads_file: ContextVar[Callable[[str], bool] | None] = ContextVar("mcp_reads_file", default=None)


def _any_file(_request, _path: Path) -> bool:
    return True


class _BindCaller:
    """SDK middleware (it wraps each MCP request's handler): who the request acts as, from the HTTP
    request the transport attached, for its tools and resources. A contextvar because the SDK hands
    static resources no Context; anyio carries it into the worker thread of a sync tool."""

    def __init__(self, caller: Caller, reads_files: FileRule) -> None:
        self.caller, self.reads_files = caller, reads_files

    async def __call__(self, ctx, call_next):
        request, rule = ctx.request, self.reads_files
        token = _caller.set(self.caller(request))
        files = _reads_file.set(lambda real: rule(request, Path(real)))  # asked of the opened file's real path
        try:
            return await call_next(ctx)
        finally:
            _reads_file.reset(files)
            _caller.reset(token)


def need_kb(kb: str | None) -> str:
    """The knowledge base a tool names (None: the default one), if the caller may read it (KbRefused,
    a ServiceError, becomes the tool's error with the REST 403's words)."""
    return _caller.get().need(kb or DEFAULT_KB)


def _call(connect: Connect, fn: Callable[[Any], Any]) -> Any:
    """``fn(service)`` with a service error as the tool's error message (one line, no traceback)."""
    try:
        with connect() as svc:
            return fn(svc)
    except ServiceError as exc:
        raise ToolError(str(exc)) from None


def passage(h: DocumentHit) -> dict[str, Any]:
    return {"id": f"{h.sha256}:{h.chunk}", "citation": h.citation, "path": h.display_path, "chunk": h.chunk,
            "page": h.page, "section": h.section, "score": round(h.score, 6), "text": h.text,
            "truncated": h.truncated, "length": h.length, "highlights": [list(x) for x in h.highlights],
            **({"relevance": h.relevance} if h.relevance is not None else {})}


def photo(h: ImageHit) -> dict[str, Any]:
    return {"id": h.sha256, "path": h.display_path, "score": round(h.score, 6), "taken": h.taken, "camera": h.camera,
            "width": h.width, "height": h.height, "latitude": h.latitude, "longitude": h.longitude,
            **({"text": h.text} if h.text else {}), **({"found_by": list(h.found_by)} if h.found_by != ("image",) else {}),
            **({"entailment": h.entailment} if h.entailment is not None else {}),
            **({"relevance": h.relevance} if h.relevance is not None else {})}


def _decode(image_base64: str | None, name: str) -> bytes | None:
    """The image sent (None: none sent). An empty one is an error, not the absence of one."""
    if image_base64 is None:
        return None
    text = image_base64.strip().split(",", 1)[-1] if image_base64.strip().startswith("data:") else image_base64.strip()
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError(f"{name}: not base64 (send the image's bytes base64-encoded, or a data: URL)") from None
    if not data:
        raise ToolError(f"{name}: the image is empty (send the image's bytes base64-encoded, or a data: URL)")
    return data


def _thumbnail(h: ImageHit) -> Image | None:
    """The hit's thumbnail (ingest wrote it), else its photo when small enough and still the one
    indexed (its bytes' sha256 is the hit's id: a file swapped since ingest is not sent); each read
    without blocking and bounded. None when neither."""
    for candidate, sha256 in ((h.thumbnail, None), (h.path, h.sha256)):
        if not candidate:
            continue
        try:
            data = read_regular(candidate, THUMBNAIL_BYTES)
        except Refused:
            continue
        if sha256 is None or hashlib.sha256(data).hexdigest() == sha256:
            fmt = {".png": "png", ".gif": "gif", ".webp": "webp"}.get(Path(candidate).suffix.lower(), "jpeg")
            return Image(data=data, format=fmt)
    return None


def _photo_bytes(svc: Any, path: Path) -> bytes:
    """The photo a tool names by path, read as the caller may (ImageSearch.read_photo): an HTTP
    caller only inside the roots or an indexed photo still as indexed; the machine's own user any
    regular file. Read here, never as a plain read: a FIFO would hold the thread for ever."""
    inside = _reads_file.get()
    if inside is not None or hasattr(svc, "read_photo"):
        return svc.read_photo(path, inside)
    try:  # `search mcp` through the server that owns the data dir: the user's own file, sent as bytes
        return read_regular(path.expanduser(), MAX_IMAGE_BYTES)
    except Refused as exc:
        raise ToolError(f"photo: {path}: {exc}") from None


def _server(name: str, middleware: list) -> MCPServer:
    """MCPServer(), without the logging it sets up: the SDK calls logging.basicConfig (a rich handler
    on the root logger at INFO, so every httpx request of the host process was logged) unless the
    root logger has a handler. Logging is the host process's to configure."""
    root, guard = logging.getLogger(), logging.NullHandler()
    root.addHandler(guard)
    try:
        return MCPServer(name, instructions=INSTRUCTIONS, middleware=middleware)
    finally:
        root.removeHandler(guard)


def build(connect: Connect, *, name: str = "multimodal-search", caller: Caller | None = None,
          reads_files: FileRule | None = None) -> MCPServer:
    mcp = _server(name, [_BindCaller(caller, reads_files or _any_file)] if caller is not None else [])

    @mcp.tool(annotations=READ_ONLY)
    def search_documents(query: Text, top_k: TopK = 5,
                         mode: Annotated[Literal[MODES] | None, Field(description="default: the server's (auto)")] = None,
                         folder: Annotated[str | None, Field(description="only files under this folder")] = None,
                         types: Annotated[list[str] | None, Field(description="only these file types, e.g. ['pdf']")] = None,
                         min_score: float | None = None,
                         max_chars: Annotated[Chars | None, Field(description="characters per passage (default 2000)")] = None,
                         kb: Kb = None,
                         offset: Annotated[int, Field(ge=0, le=10_000, description="skip this many (the next page)")] = 0,
                         per_document: Annotated[bool, Field(description="one entry per document: its best passage "
                                                                         "and how many more matched")] = False,
                         min_relevance: MinRelevance = None,
                         ) -> dict[str, Any]:
        """Passages of the indexed documents that answer the query, best first, each with its citation
        (path, page, section, chunk), score and id (for get_passage), plus a numbered context for a prompt."""
        def run(svc):
            options = dict(top_k=top_k, offset=offset, mode=mode, folder=folder, suffixes=types or (),
                           min_score=min_score, max_chars=max_chars, kb=need_kb(kb))
            if per_document:
                if min_relevance is not None:
                    raise ToolError("min_relevance: not available with per_document (groups carry no calibrated "
                                    "relevance yet)")
                groups = svc.search_document_groups(query, **options)
                hits = [g.hits[0] for g in groups]
                return {"query": query, "documents": [{**passage(g.hits[0]), "more_passages": g.more} for g in groups],
                        "context": prompt_context(hits)}
            hits = svc.search_documents(query, min_relevance=min_relevance, **options)
            return {"query": query, **hits.relevance_fields(), "hits": [passage(h) for h in hits],
                    "context": prompt_context(hits)}
        return _call(connect, run)

    @mcp.tool(annotations=READ_ONLY, structured_output=False)
    def search_images(text: Annotated[str | None, Field(max_length=2000, description="what the photos show, or words in them")] = None,
                      image_base64: Annotated[str | None, Field(description="an example photo, base64 (instead of text)")] = None,
                      top_k: Annotated[int, Field(ge=1, le=50)] = 6,
                      after: Annotated[str | None, Field(description="taken on or after, e.g. 2021-07-14")] = None,
                      before: str | None = None, camera: str | None = None,
                      near: Annotated[str | None, Field(description="LAT,LON,KM")] = None,
                      folder: str | None = None, types: list[str] | None = None,
                      sort: Literal[SORTS] = "score", thumbnails: bool = True, kb: Kb = None,
                      min_relevance: MinRelevance = None) -> list:
        """Photos that match a text or look like an example photo, with their metadata as JSON and,
        unless thumbnails is false, a thumbnail of each (in the same order)."""
        like = _decode(image_base64, "image_base64")

        def run(svc):
            filters = ImageFilters.parse(after=after, before=before, camera=camera, near=near, folder=folder,
                                         suffixes=types or ())
            return svc.search_images(text, like=like, top_k=top_k, filters=filters, sort=sort, kb=need_kb(kb),
                                     min_relevance=min_relevance)
        hits = _call(connect, run)
        found = [photo(h) for h in hits]
        out: list = [TextContent(type="text", text=json.dumps({**hits.relevance_fields(), "hits": found}, ensure_ascii=False))]
        if thumbnails:
            out += [t for t in (_thumbnail(h) for h in hits) if t is not None]
        return out

    @mcp.tool(annotations=READ_ONLY)
    def entail(hypothesis: Text,
               photo: Annotated[str | None, Field(description="the photo's path, or its id from search_images")] = None,
               image_base64: Annotated[str | None, Field(description="or the photo itself, base64")] = None,
               premise: str | None = None) -> dict[str, Any]:
        """Does the photo support the hypothesis? Visual entailment: a label (entailment, neutral,
        contradiction) and the three probabilities."""
        if (photo is None) == (image_base64 is None):
            raise ToolError("photo: give a photo's path or id, or image_base64 (one of them)")
        image = _decode(image_base64, "image_base64")

        def run(svc):
            data = image
            if image is None:  # a photo of the index (the default KB's, as GET /photos/{id}); one sent: as POST /entail
                need_kb(None)
                data = _photo_bytes(svc, svc.photo_path(photo))
            return {"photo": photo, "hypothesis": hypothesis, **svc.entail(data, hypothesis, premise).as_dict()}
        return _call(connect, run)

    @mcp.tool(annotations=READ_ONLY)
    def read_text(photo: Annotated[str | None, Field(description="the photo's path, or its id from search_images")] = None,
                  image_base64: Annotated[str | None, Field(description="or the image itself, base64")] = None) -> dict[str, Any]:
        """The text in a photo or a scanned page (OCR): its lines in reading order, each with the
        model's confidence (0..1) and its box in the image's pixels."""
        if (photo is None) == (image_base64 is None):
            raise ToolError("photo: give a photo's path or id, or image_base64 (one of them)")
        image = _decode(image_base64, "image_base64")

        def run(svc):
            data = image
            if image is None:  # a photo of the index (the default KB's), as entail reads it
                need_kb(None)
                data = _photo_bytes(svc, svc.photo_path(photo))
            return {"photo": photo, **svc.read_text(data).as_dict()}
        return _call(connect, run)

    @mcp.tool(annotations=READ_ONLY)
    def get_passage(id: Annotated[str | None, Field(description="a hit's id (SHA256:CHUNK)")] = None,
                    path: str | None = None, chunk: Annotated[int | None, Field(ge=0)] = None,
                    max_chars: Chars = 8000, kb: Kb = None) -> dict[str, Any]:
        """One passage by its id, or by its document's path and chunk number (neighbours: chunk ± 1)."""
        return _call(connect, lambda svc: passage(svc.get_passage(id, path=path, chunk=chunk, max_chars=max_chars,
                                                                  kb=need_kb(kb))))

    @mcp.tool(annotations=READ_ONLY)
    def get_document(path: str | None = None, sha256: str | None = None,
                     max_chars: Annotated[Chars, Field(description="the text stops here (truncated says so)")] = DOCUMENT_CHARS,
                     kb: Kb = None) -> dict[str, Any]:
        """A document's indexed text (its passages in order), bounded by max_chars."""
        return _call(connect, lambda svc: svc.get_document(path, sha256=sha256, max_chars=max_chars, kb=need_kb(kb)))

    @mcp.resource("search://collections", name="collections", mime_type="application/json",
                  description="The knowledge bases (those the caller may read) and their collections, with the points in each")
    def collections() -> str:
        try:
            with connect() as svc:
                readable = _caller.get().readable(lambda: svc.knowledge_bases())  # asked only of a scoped key
                counts = svc.collections() if readable is None else svc.collections(kbs=readable)
        except ServiceError as exc:
            raise ResourceError(str(exc)) from None
        kbs = counts["kbs"] if "kbs" in counts else {DEFAULT_KB: counts.get("collections", {})}
        return json.dumps({"knowledge_bases": [{"name": name, "collections": points} for name, points in kbs.items()]})

    return mcp


def transport_security(local_only: bool) -> TransportSecuritySettings:
    """DNS-rebinding protection (Host and Origin must be this machine) for a server without a key on a
    local address; a key, or a deliberate public address, decides access instead."""
    if not local_only:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "testserver"],
                                     allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"])


class McpEndpoint:
    """/mcp for `search serve`: streamable HTTP (stateless, JSON answers) for the MCP server. A fresh
    session manager per app lifespan (``run()``): the SDK's runs once, and test clients restart apps."""

    def __init__(self, server: MCPServer, local_only: bool) -> None:
        self.server, self.local_only, self.manager = server, local_only, None

    def run(self):
        self.server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                        transport_security=transport_security(self.local_only))
        self.manager = self.server.session_manager
        return self.manager.run()

    async def __call__(self, scope, receive, send) -> None:
        await self.manager.handle_request(scope, receive, send)
