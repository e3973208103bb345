"""One write per response: search/api/wire.py's transport, on a real event loop and on a real
socket under uvicorn."""

from __future__ import annotations

import asyncio
import socket
import threading

import uvicorn

from search.api.wire import OneWriteHttpToolsProtocol, OneWriteTransport


class Recorder:
    """The calls a transport gets, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def write(self, data: bytes) -> None:
        self.calls.append(("write", bytes(data)))

    def writelines(self, parts) -> None:
        self.calls.append(("writelines", [bytes(p) for p in parts]))

    def close(self) -> None:
        self.calls.append(("close",))

    def abort(self) -> None:
        self.calls.append(("abort",))

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


def in_a_turn(steps):
    """Run ``steps(transport, recorder)`` in one turn of a real loop, then let the loop finish the
    turn; returns (the calls made within the turn, all calls)."""
    loop = asyncio.new_event_loop()
    rec = Recorder()
    within: list[tuple] = []

    async def main():
        steps(OneWriteTransport(rec, loop), rec)
        within.extend(rec.calls)
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    return within, rec.calls


def test_a_head_and_a_body_of_one_turn_go_out_as_one_write():
    within, calls = in_a_turn(lambda t, _: (t.write(b"HTTP/1.1 200 OK\r\n\r\n"), t.write(b'{"ok":1}')))
    assert within == calls == [("writelines", [b"HTTP/1.1 200 OK\r\n\r\n", b'{"ok":1}'])]


def test_a_lone_write_goes_out_when_the_turn_ends():
    within, calls = in_a_turn(lambda t, _: t.write(b"data: 1\n\n"))
    assert within == []
    assert calls == [("write", b"data: 1\n\n")]


def test_three_writes_keep_their_order():
    _, calls = in_a_turn(lambda t, _: [t.write(x) for x in (b"a", b"b", b"c")])
    assert calls == [("writelines", [b"a", b"b"]), ("write", b"c")]


def test_close_sends_what_is_held_first_and_abort_drops_it():
    _, calls = in_a_turn(lambda t, _: (t.write(b"bye"), t.close()))
    assert calls == [("write", b"bye"), ("close",)]
    _, calls = in_a_turn(lambda t, _: (t.write(b"lost"), t.abort()))
    assert calls == [("abort",)]


def test_the_rest_is_the_wrapped_transports():
    _, calls = in_a_turn(lambda t, _: (t.write(b""), t.is_closing() or t.write(b"x")))
    assert calls == [("write", b"x")]
    loop = asyncio.new_event_loop()
    try:
        t = OneWriteTransport(Recorder(), loop)
        t.write(b"12345")
        assert t.get_write_buffer_size() == 5
    finally:
        loop.close()


async def json_app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b'{"path":"%s"}' % scope["path"].encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def test_uvicorn_answers_through_it_on_a_real_socket():
    """Several requests on one kept-alive connection, then one that closes it: every answer whole."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(json_app, http=OneWriteHttpToolsProtocol, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            answers = b""
            for i in range(3):
                last = i == 2
                c.sendall(b"GET /q%d HTTP/1.1\r\nHost: x\r\n%s\r\n" % (i, b"Connection: close\r\n" if last else b""))
                want = b'{"path":"/q%d"}' % i
                while not answers.endswith(want):
                    chunk = c.recv(65536)
                    assert chunk, answers
                    answers += chunk
            assert answers.count(b"HTTP/1.1 200 OK\r\n") == 3
            assert c.recv(65536) == b""  # the server closed the connection after the last answer
    finally:
        server.should_exit = True
        thread.join(10)
