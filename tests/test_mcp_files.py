"""Files the MCP tools and photo verification read from a path: never with a plain read (a FIFO
held a thread for ever), regular files only, bounded, and for an HTTP caller only inside the API's
roots or as an indexed photo whose bytes are still the ones indexed. The SDK's own client against a
real `search serve` with a read-only key, and in-process; real Triton (tiny CLIP and OFA), real store."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from PIL import Image
from processes import SearchServer, run_cli

from indexer.service import IngestService
from search.mcp import build
from search.services import SearchService

ADMIN = "the-servers-own-admin-key"
HYPOTHESIS = "there is a dog"
FAST_S = 5  # a refusal is immediate; a thread held by a FIFO is let go only after WATCHDOG_S
WATCHDOG_S = 8


def photo(path: Path, seed: int) -> Path:
    blocks = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(blocks).resize((160, 120), Image.NEAREST).save(path, "JPEG")
    return path


@contextmanager
def fifo_released_after(fifo: Path, seconds: float) -> Iterator[None]:
    """Readers blocked on ``fifo`` (the old plain read) are let go after ``seconds`` by opening it for
    writing, so a test of code that blocks fails on its timing instead of hanging."""
    stop = threading.Event()

    def release() -> None:
        if stop.wait(seconds):
            return
        while not stop.wait(0.1):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader waiting (ENXIO)
                pass

    t = threading.Thread(target=release, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


@pytest.fixture
def album(settings, tmp_path) -> dict[str, Path]:
    """ROOT/photos (the API's root) and an album outside it, both indexed into the default KB; a
    photo outside that is not indexed (the secret)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    paths = {f"p{i}": photo(root / "photos" / f"p{i}.jpg", i) for i in range(3)}
    paths["q"] = photo(outside / "album" / "q.jpg", 7)
    svc = IngestService(settings)
    try:
        report = svc.ingest([root / "photos", outside / "album"])
    finally:
        svc.close()
    assert report.counts["indexed"] == 4, report.failures
    return {"root": root, "outside": outside, "secret": photo(outside / "secret.jpg", 99), **paths}


def reader_key(settings) -> str:
    r = run_cli("search", "keys", "add", "photo-bot", "--kb", "default", "--right", "read", settings=settings)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@contextmanager
def served(settings, album, tmp_path) -> Iterator[tuple[SearchServer, str]]:
    key = reader_key(settings)
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_API_KEY=ADMIN,
                          SEARCH_API_ROOTS=json.dumps([str(album["root"])]))
    try:
        yield server, key
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def mcp_calls(url: str | None, key: str | None, calls: list[tuple[str, dict]], svc=None) -> list[tuple[float, object]]:
    """Each (tool, arguments) through the SDK's client (over HTTP at ``url`` with ``key``, or in-process
    on ``svc``): (seconds it took, result)."""
    async def main():
        if url is None:
            transport, http = build(lambda: nullcontext(svc)), nullcontext()
        else:
            http = create_mcp_http_client(headers={"X-API-Key": key})
            transport = streamable_http_client(f"{url}/mcp", http_client=http)
        out = []
        async with http, Client(transport, read_timeout_seconds=60) as client:
            for name, args in calls:
                start = time.monotonic()
                result = await client.call_tool(name, args)
                out.append((time.monotonic() - start, result))
        return out
    return anyio.run(main)


def text_of(result) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def test_a_fifo_named_over_http_is_refused_at_once_and_holds_no_thread(settings, album, tmp_path):
    fifo = album["root"] / "kb" / "fifo.jpg"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    with served(settings, album, tmp_path) as (server, key), fifo_released_after(fifo, WATCHDOG_S):
        calls = [("entail", {"photo": str(fifo), "hypothesis": HYPOTHESIS})] * 12
        for took, result in mcp_calls(server.url, key, calls):
            assert took < FAST_S, f"entail on a FIFO took {took:.1f} s: a thread blocked on it"
            assert result.is_error and "fifo.jpg: not a regular file" in text_of(result), text_of(result)
        for route in ("/healthz", "/collections", "/ingest/jobs"):
            r = httpx.get(server.url + route, headers={"X-API-Key": ADMIN}, timeout=FAST_S)
            assert r.status_code == 200, (route, r.text)


def test_a_photo_swapped_since_ingest_is_never_read_over_http(settings, album, tmp_path):
    """Inside the roots: a link out, a link to /dev/zero, a directory, an oversized file. Outside the
    roots: an indexed photo is read while its bytes are those indexed, and refused once they change."""
    secret, q = album["secret"], album["q"]
    album["p1"].unlink()
    album["p1"].symlink_to(secret)  # the indexed photo, now a link to a file outside the roots
    (album["root"] / "photos" / "zero.jpg").symlink_to("/dev/zero")
    album["p2"].unlink()
    album["p2"].symlink_to("/dev/zero")  # an indexed name: /dev/zero's size (0) passed the old check
    (album["root"] / "photos" / "folder.jpg").mkdir()
    with open(album["root"] / "photos" / "huge.jpg", "wb") as f:
        f.truncate(settings.max_image_bytes + 1)  # sparse: no disk used

    def entail(name: Path | str) -> tuple[str, dict]:
        return "entail", {"photo": str(name), "hypothesis": HYPOTHESIS}

    with served(settings, album, tmp_path) as (server, key):
        results = mcp_calls(server.url, key, [entail(album["p1"])])
        swapped = results[0][1]
        assert swapped.is_error, f"a link out of the roots was read: {swapped.structured_content}"
        assert "p1.jpg: not the photo indexed there" in text_of(swapped), text_of(swapped)

        names = [album["p2"], album["root"] / "photos" / "zero.jpg", album["root"] / "photos" / "folder.jpg",
                 album["root"] / "photos" / "huge.jpg", secret, album["p0"], q]
        results = mcp_calls(server.url, key, [entail(n) for n in names])
        why = {n.name: (took, r.is_error, text_of(r)) for n, (took, r) in zip(names, results)}
        assert all(took < FAST_S for took, failed, _ in why.values() if failed), why  # refused at once
        assert why["p2.jpg"][1] and "p2.jpg: not the photo indexed there" in why["p2.jpg"][2], why
        assert why["zero.jpg"][1] and "zero.jpg: not a photo of the index" in why["zero.jpg"][2], why
        assert why["folder.jpg"][1] and "folder.jpg: unreadable: Is a directory" in why["folder.jpg"][2], why
        assert why["huge.jpg"][1] and "huge.jpg: too large" in why["huge.jpg"][2], why
        assert why["secret.jpg"][1] and "secret.jpg: not a photo of the index" in why["secret.jpg"][2], why
        assert not why["p0.jpg"][1] and not why["q.jpg"][1], why  # inside the roots; an indexed photo outside
        for _took, failed, text in why.values():  # one line naming the photo, never the roots
            assert not failed or ("\n" not in text and "ingest from" not in text), text

        photo(q, 8)  # the indexed photo outside the roots now holds other bytes
        (_took, changed), = mcp_calls(server.url, key, [entail(q)])
        assert changed.is_error and "q.jpg: not the photo indexed there" in text_of(changed), text_of(changed)


def test_verify_skips_a_photo_whose_file_changed(settings, album):
    """--verify reads each hit's file: one swapped for a link out (or to /dev/zero) stays unverified."""
    album["p1"].unlink()
    album["p1"].symlink_to(album["secret"])
    svc = SearchService(settings)
    try:
        hits = {Path(h.path).name: h for h in svc.search_images("a photo", top_k=4, verify=True)}
        assert hits.keys() == {"p0.jpg", "p1.jpg", "p2.jpg", "q.jpg"}
        assert hits["p1.jpg"].entailment is None, "the file outside the roots was read and verified"
        assert all(hits[n].entailment is not None for n in ("p0.jpg", "p2.jpg", "q.jpg"))
        album["p2"].unlink()
        album["p2"].symlink_to("/dev/zero")
        hits = {Path(h.path).name: h for h in svc.search_images("a photo", top_k=4, verify=True)}
        assert hits["p2.jpg"].entailment is None and hits["p0.jpg"].entailment is not None
    finally:
        svc.close()


def test_thumbnails_never_send_a_file_swapped_since_ingest(settings, album):
    """A hit whose thumbnail is gone falls back to its photo: only while the photo is the one indexed."""
    svc = SearchService(settings)
    try:
        for thumb in (settings.data_dir / "thumbnails").rglob("*.jpg"):
            thumb.unlink()
        album["p1"].unlink()
        album["p1"].symlink_to(album["secret"])
        (_took, found), = mcp_calls(None, None, [("search_images", {"text": "a photo", "top_k": 4})], svc=svc)
    finally:
        svc.close()
    listing = json.loads(found.content[0].text)["hits"]
    sent = [base64.b64decode(c.data) for c in found.content if c.type == "image"]
    assert len(listing) == 4 and album["secret"].read_bytes() not in sent, "the file outside was sent as a thumbnail"
    assert sorted(sent) == sorted(album[n].read_bytes() for n in ("p0", "p2", "q"))


def test_the_machines_own_user_reads_any_regular_file_but_never_blocks(settings, album, tmp_path):
    """`search mcp` (no caller: the machine's user) reads a photo anywhere, not a FIFO or /dev/zero."""
    fifo = tmp_path / "elsewhere" / "fifo.jpg"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    (fifo.parent / "zero.jpg").symlink_to("/dev/zero")
    svc = SearchService(settings)
    try:
        with fifo_released_after(fifo, WATCHDOG_S):
            (took, blocked), = mcp_calls(None, None, [("entail", {"photo": str(fifo), "hypothesis": HYPOTHESIS})], svc=svc)
        assert took < FAST_S, f"entail on a FIFO took {took:.1f} s: the thread blocked on it"
        assert blocked.is_error and "not a regular file" in text_of(blocked), text_of(blocked)
        results = mcp_calls(None, None, [("entail", {"photo": str(p), "hypothesis": HYPOTHESIS})
                                         for p in (fifo.parent / "zero.jpg", album["secret"])], svc=svc)
    finally:
        svc.close()
    (_t, zero), (_t2, anywhere) = results
    assert zero.is_error and "not a regular file" in text_of(zero), text_of(zero)
    assert not anywhere.is_error and anywhere.structured_content["label"] in ("entailment", "neutral", "contradiction")
