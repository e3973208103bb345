"""One write per response on the wire.

uvicorn's httptools protocol writes a response's head (status line and headers) and its body in two
``transport.write`` calls, and uvloop sends each at once: two ``send`` system calls and, with
TCP_NODELAY, two TCP segments, so a waiting client wakes up twice per answer. On a 2-core host
where the clients, the API and Triton share the cores, that was ~12 % of the API's loop time under
load (docs/api.md, F8). Here the transport holds a lone write until the next one, or until the
loop's current turn ends, and sends what it holds in one call (the same bytes, in order); aiohttp
does the same for small responses.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class OneWriteTransport:
    """A transport that sends two writes of one loop turn as one: the first is held, the second
    goes out with it; one left alone goes out when the turn ends. Closing sends what is held
    first; everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self._held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
            return
        held, self._held = self._held, None
        self._transport.writelines((held, data))

    def flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def writelines(self, parts) -> None:
        for part in parts:
            self.write(part)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (``uvicorn.run(..., http=...)``), writing through ``OneWriteTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWriteTransport(transport, self.loop))  # type: ignore[arg-type]
