"""A Qdrant server's idempotent calls ride out a moment of trouble (503, a connection dropped
mid-call) with backoff; the others, and a refused connection, fail at once. No Qdrant server runs here: the real qdrant-client talks HTTP to a
stand-in that answers the two routes these tests ask (GET /collections, PUT /collections/NAME) as
Qdrant does, failing as told first."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from search.errors import StoreUnavailable
from search.store.qdrant import QdrantStore
from search.triton.local import free_port

pytestmark = pytest.mark.filterwarnings("ignore:Failed to obtain server version")


class StandIn(ThreadingHTTPServer):
    """Answers ``fail`` requests with 503, then as Qdrant does; counts the requests by route."""

    def __init__(self, port: int, fail: int = 0, drop: int = 0) -> None:
        self.fail, self.drop, self.asked = fail, drop, []
        super().__init__(("127.0.0.1", port), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        server: StandIn = self.server  # type: ignore[assignment]
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/":  # the client's version check, asked when it likes
            server.asked.append(f"{self.command} {self.path.split('?')[0]}")
        if server.drop > 0 and self.path != "/":  # the connection closed without an answer
            server.drop -= 1
            self.close_connection = True
            return
        if server.fail > 0 and self.path != "/":
            server.fail -= 1
            status, result = 503, None
        elif self.path.startswith("/collections") and self.command == "GET":
            status, result = 200, {"collections": [{"name": "docs"}]}
        else:
            status, result = 200, {"title": "qdrant", "version": "1.15.0"} if self.path == "/" else True
        body = json.dumps({"result": result, "status": "ok" if status == 200 else {"error": "busy"}, "time": 0}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _answer

    def log_message(self, *args) -> None:
        pass


def test_a_read_is_tried_again_until_a_busy_server_answers():
    port = free_port()
    server = StandIn(port, fail=3)
    try:
        store = QdrantStore(f"http://127.0.0.1:{port}", retry_budget_s=300)
        server.asked.clear()
        assert store.collections() == ["docs"]
        assert server.asked == ["GET /collections"] * 4  # three 503s, then the answer
    finally:
        server.close()


def test_a_read_whose_connection_drops_is_tried_again(caplog):
    caplog.set_level(logging.INFO, logger="search.store")
    port = free_port()
    server = StandIn(port, drop=2)
    try:
        store = QdrantStore(f"http://127.0.0.1:{port}", retry_budget_s=300)
        server.asked.clear()
        assert store.collections() == ["docs"]
        assert server.asked == ["GET /collections"] * 3
        assert sum("trying again" in r.getMessage() for r in caplog.records) == 2
    finally:
        server.close()


def test_a_server_that_refuses_the_connection_is_unavailable_at_once(caplog):
    caplog.set_level(logging.INFO, logger="search.store")
    store = QdrantStore(f"http://127.0.0.1:{free_port()}", retry_budget_s=300)
    with pytest.raises(StoreUnavailable, match="not reachable"):
        store.collections()
    assert not [r for r in caplog.records if "trying again" in r.getMessage()]  # nothing listens: down, no retry


def test_a_call_that_is_not_idempotent_or_out_of_budget_fails_at_once():
    port = free_port()
    server = StandIn(port, fail=100)
    try:
        store = QdrantStore(f"http://127.0.0.1:{port}", retry_budget_s=300)
        server.asked.clear()
        with pytest.raises(StoreUnavailable, match="not reachable"):  # a second create could fail on the first's success
            store._call(store.client.create_collection, "x", vectors_config={})
        assert server.asked == ["PUT /collections/x"]
        no_budget = QdrantStore(f"http://127.0.0.1:{port}", retry_budget_s=0)
        server.asked.clear()
        with pytest.raises(StoreUnavailable):
            no_budget.collections()
        assert server.asked == ["GET /collections"]
    finally:
        server.close()
