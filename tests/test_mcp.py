"""`search mcp` as MCP clients meet it, through the official SDK's own client: over stdio (a real
`python -m search mcp` child), over streamable HTTP at /mcp of a real `search serve` (behind its
API key), and in-process. Real Triton, real store, real files."""

from __future__ import annotations

import base64
import io
import json
import sys
from contextlib import nullcontext
from pathlib import Path

import anyio
import httpx
import numpy as np
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from PIL import Image
from processes import SearchServer, env_for

from indexer.service import IngestService
from search.config import PROJECT_ROOT
from search.mcp import build
from search.services import SearchService

KEY = "mcp-key-7"
TOOLS = {"search_documents", "search_images", "entail", "get_passage", "get_document"}


def photo(path: Path, seed: int) -> Path:
    blocks = np.random.default_rng(seed).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(blocks).resize((160, 120), Image.NEAREST).save(path, "JPEG")
    return path


@pytest.fixture
def indexed(settings, docs, tmp_path):
    album = tmp_path / "album"
    for i in range(3):
        photo(album / f"p{i}.jpg", i)
    svc = IngestService(settings)
    try:
        svc.ingest([docs, album])
    finally:
        svc.close()
    return docs, album


def structured(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


async def exercise(client: Client, docs: Path, album: Path) -> None:
    """What a bot does: find passages, fetch one and its document, find photos, check one."""
    assert {t.name for t in (await client.list_tools()).tools} >= TOOLS

    found = structured(await client.call_tool("search_documents", {"query": "reset password", "top_k": 3}))
    top = found["hits"][0]
    assert top["path"] == str(docs / "reset-password.md") and top["citation"] in found["context"]
    assert {"id", "chunk", "score", "text", "citation"} <= top.keys() and len(found["hits"]) == 3

    # the calibrated relevance, per-document results and knowledge bases, as the REST search has them
    assert found["no_match"] is False and ("relevance" in top or found["relevance_note"])
    strict = structured(await client.call_tool("search_documents", {"query": "reset password", "min_relevance": 0.5}))
    assert strict["no_match"] or strict["relevance_note"] or all(h["relevance"] >= 0.5 for h in strict["hits"])
    per_doc = structured(await client.call_tool("search_documents", {"query": "reset password", "top_k": 3,
                                                                    "group_by": "document"}))
    paths = [d["path"] for d in per_doc["documents"]]
    assert paths[0] == top["path"] and len(paths) == len(set(paths)) and all("more_passages" in d for d in per_doc["documents"])
    assert (await client.call_tool("search_documents", {"query": "x", "group_by": "document", "min_relevance": 0.5})).is_error
    assert (await client.call_tool("search_documents", {"query": "x", "kb": "nowhere"})).is_error

    again = structured(await client.call_tool("get_passage", {"id": top["id"], "max_chars": 50}))
    assert again["path"] == top["path"] and again["chunk"] == top["chunk"] and len(again["text"]) <= 50 and again["truncated"]
    by_path = structured(await client.call_tool("get_passage", {"path": top["path"], "chunk": top["chunk"]}))
    assert by_path["id"] == top["id"] and by_path["text"] == top["text"]
    doc = structured(await client.call_tool("get_document", {"path": top["path"], "max_chars": 100}))
    assert doc["chunks"] >= 1 and len(doc["text"]) <= 100 and doc["length"] > 0

    photos = await client.call_tool("search_images", {"text": "a photo", "top_k": 2})
    assert not photos.is_error, photos.content
    listing = json.loads(photos.content[0].text)["hits"]
    images = [c for c in photos.content if c.type == "image"]
    assert len(listing) == 2 and len(images) == 2 and images[0].mime_type == "image/jpeg"
    assert Image.open(io.BytesIO(base64.b64decode(images[0].data))).size[0] > 0
    assert all(Path(h["path"]).parent == album for h in listing)
    like = await client.call_tool("search_images", {"image_base64": base64.b64encode((album / "p1.jpg").read_bytes()).decode(),
                                                    "top_k": 1, "thumbnails": False})
    assert json.loads(like.content[0].text)["hits"][0]["path"] == str(album / "p1.jpg") and len(like.content) == 1

    verdict = structured(await client.call_tool("entail", {"photo": listing[0]["id"], "hypothesis": "there is a dog"}))
    assert verdict["label"] in ("entailment", "neutral", "contradiction") and abs(sum(verdict["probs"].values()) - 1) < 1e-3
    by_file = structured(await client.call_tool("entail", {"photo": str(album / "p0.jpg"), "hypothesis": "there is a dog"}))
    assert by_file["label"] in ("entailment", "neutral", "contradiction")

    resource = await client.read_resource("search://collections")
    kb = json.loads(resource.contents[0].text)["knowledge_bases"][0]
    assert kb["name"] == "default" and kb["collections"]["images"] == 3 and kb["collections"]["documents"] > 0

    for bad in ({"query": "x", "mode": "psychic"}, {"query": ""}, {"query": "x", "top_k": 1001}):
        assert (await client.call_tool("search_documents", bad)).is_error
    missing = await client.call_tool("get_passage", {"id": "0" * 64 + ":0"})
    assert missing.is_error and "no passage" in missing.content[0].text and "Traceback" not in missing.content[0].text


def stdio(settings) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "search", "mcp"], env=env_for(settings),
                                 cwd=str(PROJECT_ROOT))


def test_stdio(settings, indexed):
    async def main():
        async with Client(stdio(settings), read_timeout_seconds=120) as client:
            await exercise(client, *indexed)
    anyio.run(main)


def test_streamable_http_in_search_serve_behind_the_key(settings, indexed, tmp_path):
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_API_KEY=KEY)
    try:
        refused = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                             headers={"Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401 and "X-API-Key" in refused.json()["detail"]

        async def main():
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"})
            async with http, Client(streamable_http_client(f"{server.url}/mcp", http_client=http),
                                    read_timeout_seconds=120) as client:
                await exercise(client, *indexed)
            # `search mcp` while this server owns the data dir: the same answers, through its REST API
            async with Client(stdio(settings), read_timeout_seconds=120) as client:
                await exercise(client, *indexed)
        anyio.run(main)
    finally:
        server.stop()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def test_in_process(settings, indexed):
    svc = SearchService(settings)

    async def main():
        async with Client(build(lambda: nullcontext(svc))) as client:
            await exercise(client, *indexed)
    try:
        anyio.run(main)
    finally:
        svc.close()


def test_an_empty_image_is_an_error_not_an_absent_one():
    """image_base64 "" (or a data: URL without data) says the image is empty, in one line; it is
    not taken as no image ("photo: give a photo's path or id")."""
    def connect():
        raise AssertionError("an empty image reached the services")

    async def main():
        async with Client(build(connect)) as client:
            for tool, args in (("search_images", {}), ("entail", {"hypothesis": "a dog"}), ("read_text", {})):
                for empty in ("", "  ", "data:image/png;base64,"):
                    result = await client.call_tool(tool, {**args, "image_base64": empty})
                    text = result.content[0].text
                    assert result.is_error and "image_base64: the image is empty" in text and "\n" not in text, (tool, text)
    anyio.run(main)
