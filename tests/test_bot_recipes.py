"""The bot recipes of docs/bots.md, run as written against a real `search serve`: the curl for
/v1/embeddings, LangChain's OpenAIEmbeddings plus the REST retriever, and both MCP client configs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import numpy as np
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from processes import SearchServer, env_for

from indexer.service import IngestService
from search.config import PROJECT_ROOT
from search.models import minilm
from search.triton.client import TritonClient

KEY = "recipe-key"
API_DOC = PROJECT_ROOT / "docs" / "bots.md"


def recipe(name: str) -> str:
    """The fenced block after ``<!-- recipe: NAME -->`` in docs/bots.md."""
    found = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```\w*\n(.*?)\n```", API_DOC.read_text(), re.S)
    assert found, f"no recipe {name} in {API_DOC}"
    return found.group(1)


async def tools_of(transport) -> set[str]:
    async with Client(transport, read_timeout_seconds=120) as client:
        return {t.name for t in (await client.list_tools()).tools}


def test_the_recipes_run_as_written(settings, docs, tmp_path, monkeypatch):
    svc = IngestService(settings)
    try:
        svc.ingest([docs])
    finally:
        svc.close()
    server = SearchServer(settings, tmp_path / "serve.log", SEARCH_API_KEY=KEY)
    try:
        # curl
        out = subprocess.run(["bash", "-c", recipe("curl-embeddings")], env={**os.environ, "API": server.url, "KEY": KEY},
                             capture_output=True, text=True, timeout=120, check=True).stdout
        body = json.loads(out)
        expected, _ = minilm.embed(TritonClient(settings.triton_url), ["reset password", "vpn setup"])
        assert body["model"] == "minilm" and [d["index"] for d in body["data"]] == [0, 1]
        assert f'"prompt_tokens": {body["usage"]["prompt_tokens"]},' in recipe("curl-embeddings")  # the documented answer
        assert np.allclose([d["embedding"] for d in body["data"]], expected, atol=1e-5)

        # LangChain: the embeddings and the retriever
        monkeypatch.setenv("SEARCH_API", server.url)
        monkeypatch.setenv("SEARCH_API_KEY", KEY)
        scope: dict = {"__name__": "recipe"}
        exec(compile(recipe("langchain"), "docs/bots.md:langchain", "exec"), scope)  # the documented code, as written
        assert len(scope["vector"]) == 384 and np.dot(scope["vector"], expected[0]) >= 0.9999
        found = scope["docs"]
        assert len(found) == 3 and found[0].metadata["path"] == str(docs / "reset-password.md")
        assert "reset-password.md" in found[0].metadata["source"] and found[0].page_content

        # MCP over HTTP, as configured
        http_conf = json.loads(recipe("mcp-http"))["mcpServers"]["search"]
        url = http_conf["url"].replace("http://127.0.0.1:8080", server.url)
        headers = {k: v.replace("your-key", KEY) for k, v in http_conf["headers"].items()}

        async def over_http():
            http = create_mcp_http_client(headers=headers)
            async with http:
                return await tools_of(streamable_http_client(url, http_client=http))
        assert "search_documents" in anyio.run(over_http)

        # MCP over stdio, as configured (here through the running server, which owns the data dir)
        stdio_conf = json.loads(recipe("mcp-stdio"))["mcpServers"]["search"]
        command = Path(sys.executable).parent / stdio_conf["command"]  # the venv's `search` script
        env = env_for(settings)  # the test's data dir (and Triton) in place of the documented example's
        assert set(stdio_conf["env"]) <= set(env)
        params = StdioServerParameters(command=str(command), args=stdio_conf["args"], env=env, cwd=str(PROJECT_ROOT))
        assert "get_document" in anyio.run(tools_of, params)
    finally:
        server.stop()
