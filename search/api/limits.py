"""Size limits checked before a body is read, and safe upload names."""

from __future__ import annotations

import gc
from pathlib import Path

from fastapi import HTTPException, UploadFile

from search.api.errors import error_response

CHUNK = 1 << 20
MAX_FILES = 100  # per upload request


class _TooLarge(HTTPException):
    pass


class CollectAfterBodies:
    """A full collection once the bodies received since the last one add up to ``budget`` bytes.

    A body that ends up in a reference cycle (an error's traceback holding the frames that hold it,
    in a library's code as well as ours) lives until a collection reaches it, and under gc.freeze()
    with a high young-generation threshold that may be never: 55 MB bodies kept 7 GB. This bounds
    what such cycles can hold to about the budget, at one collection per ``budget`` bytes read."""

    def __init__(self, budget: int = 64 << 20) -> None:
        self.budget, self.since = budget, 0

    def received(self, size: int) -> None:
        self.since += size
        if self.since >= self.budget:
            self.since = 0
            gc.collect()


class LimitRequestSize:
    """413 for a Content-Length over the limit, and for a chunked body once it passes it; the bytes
    received go to ``bodies`` when given."""

    def __init__(self, app, limit: int, setting: str = "max_request_bytes", what: str = "the request",
                 bodies: CollectAfterBodies | None = None) -> None:
        self.app, self.limit, self.setting, self.what, self.bodies = app, limit, setting, what, bodies

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            response = error_response(scope["path"], 413, self._message())
            return await response(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge(413, self._message())  # FastAPI re-raises HTTPExceptions from body reading
            return message

        try:
            return await self.app(scope, counted, send)
        finally:
            if self.bodies is not None and seen:
                self.bodies.received(seen)

    def _message(self) -> str:
        return f"body: {self.what} is larger than the {self.limit:,} byte limit ({self.setting})"


def upload_name(filename: str | None, name: str) -> str:
    base = Path(filename or "").name
    try:
        ok = bool(base) and not base.startswith(".") and "\\" not in base and "\0" not in base \
            and len(base.encode("utf-8")) <= 255
    except UnicodeEncodeError:
        ok = False
    if not ok:
        raise HTTPException(400, f"{name}: unusable file name {filename!r}")
    return base


async def read_limited(upload: UploadFile, name: str, limit: int) -> bytes:
    parts, size = [], 0
    while chunk := await upload.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"{name}: larger than the {limit:,} byte upload limit (max_upload_bytes)")
        parts.append(chunk)
    return b"".join(parts)
