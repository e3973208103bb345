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
from typing import Annotated, Any

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from search.config import MAX_IMAGE_BYTES
from search.errors import ServiceError
from search.keys import EVERYTHING, Principal
from search.media.files import Refused, read_regular
from search.models import Capability, capabilities
from search.services.options import ENTAIL_MODEL, HIT_CHARS_LIMIT, PHOTO_MODEL
from search.services.results import DocumentHit, ImageHit, prompt_context
from search.services.spec import DocumentQuery, EntailQuery, ImageQuery, OcrQuery, PhotoQuery, parameters, problem, with_parameters
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

Chars = Annotated[int, Field(ge=1, le=HIT_CHARS_LIMIT)]
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


def spec_tool(spec: type[BaseModel], *, optional: tuple[str, ...] = ()):
    """A tool whose parameters are ``spec``'s fields (search/services/spec.py), besides its own."""
    return lambda fn: with_parameters(fn, parameters(spec, optional=optional))


def _spec(spec: type[BaseModel], args: dict) -> BaseModel:
    """The spec from a tool's arguments (the SDK checked each; this checks how they go together)."""
    try:
        return spec(**{k: v for k, v in args.items() if k in spec.model_fields and v is not None})
    except ValidationError as exc:
        raise ToolError(problem(exc)) from None


def _documents(svc: Any, spec: DocumentQuery) -> dict[str, Any]:
    """A document search's answer: passages, or documents with group_by, and the context for a prompt."""
    options = {**spec.options(), "kb": need_kb(spec.kb)}
    if spec.group_by:
        groups = svc.search_document_groups(spec.query, **options)
        return {"query": spec.query, "documents": [_document(g) for g in groups],
                "context": prompt_context([h for g in groups for h in g.hits])}
    hits = svc.search_documents(spec.query, **options)
    return {"query": spec.query, **hits.relevance_fields(), "hits": [passage(h) for h in hits],
            "context": prompt_context(hits)}


def _document(g) -> dict[str, Any]:
    """A document of a grouped search: its best passage, how many more matched, the others asked for."""
    return {**passage(g.hits[0]), "more_passages": g.more, **({"passages": [passage(h) for h in g.hits[1:]]} if len(g.hits) > 1 else {})}


def _sent(photo: str | None, image_base64: str | None) -> bytes | None:
    """The image a tool was sent (base64), checked before any service is asked; None: it names a photo."""
    if (photo is None) == (image_base64 is None):
        raise ToolError("photo: give a photo's path or id, or image_base64 (one of them)")
    return _decode(image_base64, "image_base64")


def _image(svc: Any, photo: str | None, sent: bytes | None) -> bytes:
    """The image sent, or else the photo of the index (the default KB's, as GET /photos/{id}) named by path or id."""
    if sent is not None:
        return sent
    need_kb(None)
    return _photo_bytes(svc, svc.photo_path(photo))


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
    @spec_tool(DocumentQuery)
    def search_documents(**args) -> dict[str, Any]:
        """Passages of the indexed documents that answer the query, best first, each with its citation
        (path, page, section, chunk), score and id (for get_passage), plus a numbered context for a prompt;
        with group_by "document", one entry per document."""
        spec = _spec(DocumentQuery, args)
        return _call(connect, lambda svc: _documents(svc, spec))

    @mcp.tool(annotations=READ_ONLY, structured_output=False)
    @spec_tool(ImageQuery, optional=("text",))
    def search_images(image_base64: Annotated[str | None, Field(description="an example photo, base64 (instead of text)")] = None,
                      thumbnails: bool = True, **args) -> list:
        """Photos that match a text or look like an example photo, with their metadata as JSON and,
        unless thumbnails is false, a thumbnail of each (in the same order)."""
        like = _decode(image_base64, "image_base64")
        if (like is None) == (args["text"] is None):
            raise ToolError("text: give a text or image_base64 (one of them)")
        if like is not None and (args["verify"] or args["min_entailment"] is not None):
            raise ToolError("verify: needs a text (it checks that each photo entails the text)")
        spec = _spec(ImageQuery if like is None else PhotoQuery, args)
        hits = _call(connect, lambda svc: svc.search_images(args["text"], like=like, **{**spec.options(), "kb": need_kb(spec.kb)}))
        out: list = [TextContent(type="text", text=json.dumps({**hits.relevance_fields(), "hits": [photo(h) for h in hits]},
                                                              ensure_ascii=False))]
        if thumbnails:
            out += [t for t in (_thumbnail(h) for h in hits) if t is not None]
        return out

    @mcp.tool(annotations=READ_ONLY)
    @spec_tool(EntailQuery)
    def entail(photo: Annotated[str | None, Field(description="the photo's path, or its id from search_images")] = None,
               image_base64: Annotated[str | None, Field(description="or the photo itself, base64")] = None,
               **args) -> dict[str, Any]:
        """Does the photo support the hypothesis? Visual entailment: a label (entailment, neutral,
        contradiction) and the three probabilities."""
        spec, sent = _spec(EntailQuery, args), _sent(photo, image_base64)
        return _call(connect, lambda svc: {"photo": photo, "hypothesis": spec.hypothesis, **svc.entail(
            _image(svc, photo, sent), spec.hypothesis, spec.premise).as_dict()})

    @mcp.tool(annotations=READ_ONLY)
    @spec_tool(OcrQuery)
    def read_text(photo: Annotated[str | None, Field(description="the photo's path, or its id from search_images")] = None,
                  image_base64: Annotated[str | None, Field(description="or the image itself, base64")] = None,
                  **args) -> dict[str, Any]:
        """The text in a photo or a scanned page (OCR): its lines in reading order, each with the
        model's confidence (0..1) and its box in the image's pixels."""
        spec, sent = _spec(OcrQuery, args), _sent(photo, image_base64)
        return _call(connect, lambda svc: {"photo": photo, **svc.read_text(_image(svc, photo, sent))
                                           .confident(spec.min_score).as_dict()})

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

    _capability_tools(mcp, connect)

    @mcp.resource("search://collections", name="collections", mime_type="application/json",
                  description="The knowledge bases (those the caller may read) and their collections, with the points in each")
    def collections() -> str:
        return _collections(connect)

    return mcp


def _capability_tools(mcp: MCPServer, connect: Connect) -> None:
    """One tool per family capability in the registry (search.models.capabilities), its parameters the
    capability's query spec; a spec with a ``kb`` is held to the caller's knowledge bases."""
    taken = {t.name for t in mcp._tool_manager.list_tools()}  # the SDK's public list_tools is async; it would keep the first
    for cap in capabilities():
        if cap.name in taken:
            raise ValueError(f"capability {cap.name!r}: an MCP tool of that name exists")
        mcp.add_tool(_capability_tool(connect, cap), name=cap.name, description=cap.help, annotations=READ_ONLY)


def _capability_tool(connect: Connect, cap: Capability):
    def tool(**args) -> dict[str, Any]:
        spec = _spec(cap.spec, args)

        def answer(svc: Any) -> dict[str, Any]:
            scoped = spec.model_copy(update={"kb": need_kb(spec.kb)}) if "kb" in cap.spec.model_fields else spec
            return svc.ask(cap, scoped).model_dump(mode="json")
        return _call(connect, answer)

    tool.__name__, tool.__doc__ = cap.name, cap.help
    return with_parameters(tool, parameters(cap.spec))


def _collections(connect: Connect) -> str:
    """The knowledge bases the caller may read, with their collections and the points in each."""
    try:
        with connect() as svc:
            readable = _caller.get().readable(lambda: svc.knowledge_bases())  # asked only of a scoped key
            counts = svc.collections() if readable is None else svc.collections(kbs=readable)
    except ServiceError as exc:
        raise ResourceError(str(exc)) from None
    kbs = counts["kbs"] if "kbs" in counts else {DEFAULT_KB: counts.get("collections", {})}
    return json.dumps({"knowledge_bases": [{"name": name, "collections": points} for name, points in kbs.items()]})


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
