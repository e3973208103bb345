"""A capability is the unit of extension: a family defined in this file and registered with one line
is found by the product's own code, with no other edit. Here: a second text reader, served by the
session's Triton like the first, chosen by a setting (SEARCH_TEXT_READER) and used by `search ocr`'s
service and by ingest, while the first reader stays as it was; and a new capability, a toy reranker
served by a Triton of its own, that every face offers: `search rerank`, POST /rerank, the MCP tool
rerank, a section of the page, `search models list` and `search models verify`."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated

import anyio
import numpy as np
import pytest
import uvicorn
from fastapi.testclient import TestClient
from indexed import settings_for
from ingest_helper import ingest
from mcp import Client
from pydantic import BaseModel, Field
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

import search.models
from search import owner
from search.api.app import create_app
from search.cli.app import app as search_cli
from search.config import PROJECT_ROOT, Settings
from search.errors import ModelNotReady
from search.mcp import build as build_mcp
from search.models import PPOCR, Capability, Family, golden, text_reader
from search.services import SearchService
from search.services.remote import RemoteService
from search.store import DOCUMENTS
from search.triton.local import LocalTriton, free_port

pytestmark = pytest.mark.served("ppocr")
SCAN = PROJECT_ROOT / "samples" / "scans" / "printer-queue-scan.pdf"


class ShoutingReader(PPOCR):
    """Another model that reads text: the served PP-OCR's lines in capitals (a reader for another
    script or with other weights differs from the first as much)."""

    family, display = "shouting_ocr", "Shouting OCR"

    def read_text(self, client, images: list[bytes]) -> list[list]:
        return [[dataclasses.replace(line, text=line.text.upper()) for line in lines]
                for lines in super().read_text(client, images)]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, ShoutingReader()))  # the one line


def _passages(svc: SearchService) -> str:
    points, _ = svc.store.scroll(DOCUMENTS.name, limit=1000, with_payload=True)
    return " ".join(p.payload["text"] for p in sorted(points, key=lambda p: p.payload["chunk"]))


def test_a_second_text_reader_is_chosen_by_a_setting_for_ocr_and_ingest(registered, settings, tmp_path):
    with pytest.raises(ModelNotReady, match="several models read text .*SEARCH_TEXT_READER"):
        text_reader()
    folder = tmp_path / "kb"
    folder.mkdir()
    shutil.copy(SCAN, folder)
    got = {}
    for reader in (PPOCR.family, ShoutingReader.family):  # one after the other: they share the data dir
        svc = SearchService(settings.model_copy(update={"text_reader": reader}))
        try:
            got[reader] = svc.read_text(SCAN), [o.status for o in ingest(svc, [folder]).outcomes], _passages(svc)
        finally:
            svc.close()
    (plain, plain_status, plain_text), (loud, loud_status, loud_text) = got[PPOCR.family], got[ShoutingReader.family]
    assert loud.model == "Shouting OCR" and plain.model == "PP-OCR"
    assert [line["text"] for line in loud.lines] == [line["text"].upper() for line in plain.lines]
    assert any(line["text"] != line["text"].upper() for line in plain.lines)  # the first reader is untouched
    assert plain_status == ["indexed"] and "spooler" in plain_text
    # The reader is part of a scan's signature: the one chosen next reads it again, in capitals.
    assert loud_status == ["updated"] and "SPOOLER" in loud_text and "spooler" not in loud_text


def test_a_reader_that_is_not_registered_is_named_in_one_line(registered):
    with pytest.raises(ModelNotReady, match="SEARCH_TEXT_READER 'tesseract': no such reader .*shouting_ocr"):
        text_reader("tesseract")


# -- a new capability: a toy reranker, served by a Triton of its own, found by every face


TOY, TOY_BATCH = "toy_rerank", 32
TOY_CONFIG = f"""
name: "{TOY}"
backend: "python"
max_batch_size: {TOY_BATCH}
input [ {{ name: "QUERY" data_type: TYPE_STRING dims: [ 1 ] }}, {{ name: "PASSAGE" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [ {{ name: "SCORE" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
"""
# One (query, passage) pair per row, as a cross-encoder takes them: the share of the query's words in the passage
TOY_MODEL = """
import re
import numpy as np
import triton_python_backend_utils as pb_utils


def words(text):
    return set(re.findall(r"\\w+", text.lower()))


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            queries = pb_utils.get_input_tensor_by_name(r, "QUERY").as_numpy().reshape(-1)
            passages = pb_utils.get_input_tensor_by_name(r, "PASSAGE").as_numpy().reshape(-1)
            scores = [len(words(q.decode()) & words(p.decode())) / max(len(words(q.decode())), 1)
                      for q, p in zip(queries, passages)]
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCORE", np.array(scores, np.float32).reshape(-1, 1))]))
        return out
"""


def reference(query: str, passages: list[str]) -> np.ndarray:
    """What the toy model should answer, computed here (a real family's is its PyTorch reference)."""
    def words(text: str) -> set[str]:
        return set(re.findall(r"\w+", text.lower()))
    return np.array([len(words(query) & words(p)) / max(len(words(query)), 1) for p in passages], np.float32)


class RerankQuery(BaseModel):
    query: str = Field(min_length=1, max_length=500, description="what the passages should answer")
    passages: list[Annotated[str, Field(min_length=1, max_length=2000)]] = Field(
        min_length=1, max_length=TOY_BATCH, description="the passages to put in order")
    top_k: Annotated[int, Field(ge=1, le=TOY_BATCH)] | None = Field(None, description="keep the best this many (default: all)")


class Ranked(BaseModel):
    index: int  # its place in the passages sent
    score: float
    passage: str


class Reranked(BaseModel):
    model: str
    ranked: list[Ranked]


class ToyReranker(Family):
    """A reranker: what a cross-encoder does, here by counting words."""

    family, display = TOY, "Toy reranker"
    ensembles = steps = (TOY,)
    source_setting, cli_option = "toy_rerank_source", "--toy-rerank-source"
    source_help = "none: the test writes the toy's model (build_toy)"

    def artifacts(self, repo: Path) -> list[Path]:
        return [repo / TOY / "1" / "model.py", self.manifest_path(repo)]

    def rerank(self, client, query: str, passages: list[str]) -> np.ndarray:
        rows = np.array([[query.encode(), p.encode()] for p in passages], dtype=np.object_)
        out = [client.infer(TOY, {"QUERY": rows[i:i + TOY_BATCH, :1], "PASSAGE": rows[i:i + TOY_BATCH, 1:]}, ["SCORE"])["SCORE"]
               for i in range(0, len(rows), TOY_BATCH)]
        return np.concatenate(out).reshape(-1)

    def served_golden(self, client, gold) -> dict[str, np.ndarray]:
        return {"rerank_scores": self.rerank(client, gold.texts[0].text, [t.text for t in gold.texts])}

    def capabilities(self) -> tuple[Capability, ...]:
        return (Capability("rerank", "Put passages in order of how well they answer a query.", RerankQuery, Reranked,
                           self.answer, self),)

    def answer(self, svc, spec: RerankQuery) -> Reranked:
        scores = self.rerank(svc.triton, spec.query, spec.passages)
        order = sorted(range(len(scores)), key=lambda i: -scores[i])[:spec.top_k]
        return Reranked(model=self.display, ranked=[Ranked(index=i, score=float(scores[i]), passage=spec.passages[i])
                                                    for i in order])


def build_toy(repo: Path) -> None:
    """The toy's build: its model, its golden outputs (the reference on the golden inputs), its manifest."""
    (repo / TOY / "1").mkdir(parents=True)
    (repo / TOY / "config.pbtxt").write_text(TOY_CONFIG)
    (repo / TOY / "1" / "model.py").write_text(TOY_MODEL)
    gold = golden.inputs()
    scores = reference(gold.texts[0].text, [t.text for t in gold.texts])
    golden.save(repo / TOY / "1" / golden.FILE, {"rerank_scores": scores}, {"family": TOY, "inputs_digest": gold.digest})
    (repo / TOY / "1" / "build.json").write_text(json.dumps({"source": "tests/test_extension.py", "precision": "fp32"}))


@pytest.fixture(scope="module")
def toy_triton(tmp_path_factory):
    repo = tmp_path_factory.mktemp("toy") / "triton_repo"
    build_toy(repo)
    with LocalTriton(repo, repo.parent / "run", models=[TOY]).start(timeout=120) as server:
        yield server


@pytest.fixture
def toy(toy_triton, tmp_path, monkeypatch) -> Settings:
    """The toy registered (the one line) and settings on its Triton; the environment says the same to the CLI."""
    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, ToyReranker()))  # the one line
    settings = settings_for(tmp_path / "data", toy_triton.repo, toy_triton.grpc_port)
    for var, value in (("SEARCH_DATA_DIR", settings.data_dir), ("SEARCH_TRITON_REPO", settings.triton_repo),
                       ("SEARCH_TRITON_URL", settings.triton_url), ("COLUMNS", "200")):
        monkeypatch.setenv(var, str(value))
    return settings


QUERY, PASSAGES = "reset my password", ["the printer queue", "how to reset your password", "a password policy"]
EXPECTED = {"model": "Toy reranker", "ranked": [{"index": 1, "score": 2 / 3, "passage": PASSAGES[1]},
                                                 {"index": 2, "score": 1 / 3, "passage": PASSAGES[2]}]}


def close_to(answer: dict) -> bool:
    return answer["model"] == EXPECTED["model"] and [(r["index"], r["passage"]) for r in answer["ranked"]] == \
        [(r["index"], r["passage"]) for r in EXPECTED["ranked"]] and \
        np.allclose([r["score"] for r in answer["ranked"]], [r["score"] for r in EXPECTED["ranked"]])


def test_a_new_capability_is_a_command_with_its_spec_s_flags(toy):
    cli = CliRunner()
    listing = cli.invoke(search_cli, ["--help"])
    assert listing.exit_code == 0 and re.search(r"│ rerank +Put passages in order", listing.output), listing.output
    flags = cli.invoke(search_cli, ["rerank", "--help"]).output
    assert all(f in flags for f in ("--query", "--passages", "--top-k", "What the passages should answer")), flags
    ran = cli.invoke(search_cli, ["rerank", "--query", QUERY, *(a for p in PASSAGES for a in ("--passages", p)), "--top-k", "2"])
    assert ran.exit_code == 0 and close_to(json.loads(ran.stdout)), ran.output
    bad = cli.invoke(search_cli, ["rerank", "--passages", "x"])  # the spec's own rule, named as the flag
    assert bad.exit_code == 2 and "--query: Field required" in bad.stderr and "Traceback" not in bad.output
    assert cli.invoke(search_cli, ["rerank", "--query", "x", "--passages", "y", "--top-k", "0"]).exit_code == 2  # its bound


def test_a_new_capability_is_a_route_behind_the_key(toy):
    api = TestClient(create_app(toy.model_copy(update={"api_key": "k"})))
    schema = api.get("/openapi.json").json()
    route = schema["paths"]["/rerank"]["post"]
    assert route["summary"].startswith("Put passages in order") and route["security"] == [{"APIKeyHeader": []}]
    assert route["requestBody"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/RerankQuery"}
    assert schema["components"]["schemas"]["RerankQuery"]["properties"]["top_k"]["anyOf"][0]["maximum"] == TOY_BATCH
    # the key before the body: no key is a 401 even for a body that is not JSON
    assert api.post("/rerank", content=b"{not json").status_code == 401
    answer = api.post("/rerank", json={"query": QUERY, "passages": PASSAGES, "top_k": 2}, headers={"X-API-Key": "k"})
    assert answer.status_code == 200 and close_to(answer.json()), answer.text
    refused = api.post("/rerank", json={"query": QUERY, "passages": []}, headers={"X-API-Key": "k"})
    assert refused.status_code == 422 and "passages" in refused.text


def test_a_new_capability_is_an_mcp_tool_and_a_section_of_the_page(toy):
    svc = SearchService(toy)

    async def main():
        async with Client(build_mcp(lambda: nullcontext(svc))) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "rerank")
            assert tool.input_schema["required"] == ["query", "passages"] and "top_k" in tool.input_schema["properties"]
            answer = await client.call_tool("rerank", {"query": QUERY, "passages": PASSAGES, "top_k": 2})
            assert not answer.is_error and close_to(answer.structured_content), answer.content
            wrong = await client.call_tool("rerank", {"query": QUERY, "passages": PASSAGES, "top_k": 99})
            assert wrong.is_error and "top_k" in wrong.content[0].text
    try:
        anyio.run(main)
        where = {"data_dir": str(toy.data_dir), "triton_repo": str(toy.triton_repo), "triton_url": toy.triton_url}
        page = AppTest.from_function(_page, args=(where,), default_timeout=120).run()
        assert not page.exception, page.exception
        assert [e.label for e in page.expander] == ["Rerank: Put passages in order of how well they answer a query."]
        page.text_input(key="cap:rerank:query").input(QUERY)
        page.text_area(key="cap:rerank:passages").input("\n".join(PASSAGES))
        top_k = page.number_input(key="cap:rerank:top_k")
        assert (top_k.min, top_k.max, top_k.value) == (1, TOY_BATCH, None)
        page = top_k.set_value(2).run().button(key="cap:rerank:run").click().run()
        assert not page.exception and not page.error, page.error
        assert close_to(json.loads(page.json[0].value))
    finally:
        svc.close()


def _page(where: dict) -> None:
    """The page's capability sections, with a service on the toy's settings (AppTest runs this as a script)."""
    from search.config import Settings
    from search.services import SearchService
    from ui.app import capability_sections

    svc = SearchService(Settings(**where, qdrant_url=None))
    try:
        capability_sections(svc)
    finally:
        svc.close()


def test_a_new_capability_is_listed_and_verified(toy):
    listing = CliRunner().invoke(search_cli, ["models", "list"])
    row = next((line for line in listing.output.splitlines() if line.startswith("│ toy_rerank")), "")
    assert listing.exit_code == 0 and "Toy reranker" in row and "yes" in row, listing.output
    assert "search rerank (Toy reranker): Put passages in order" in listing.output
    svc = SearchService(toy)
    try:
        report = svc.verify_models()
        fam = next(f for f in report["families"] if f["family"] == TOY)
        assert report["passed"] and fam["status"] == "pass", report
        assert [c["check"] for c in fam["checks"] if c["status"] == "pass"] == [f"golden: rerank_scores ({len(golden.inputs().texts)})"]
        # a served answer that is not the reference's is a miss
        path = toy.triton_repo / TOY / "1" / golden.FILE
        kept = path.read_bytes()
        arrays, meta = golden.load(path)
        golden.save(path, {"rerank_scores": arrays["rerank_scores"] + 0.01}, meta)
        try:
            missed = svc.verify_models(["toy_rerank"])
        finally:
            path.write_bytes(kept)
        assert not missed["passed"] and "max |Δ| 1.00e-02" in str(missed["families"][0]["checks"])
    finally:
        svc.close()


def test_a_new_capability_through_the_server_that_owns_the_data_dir(toy):
    """With `search serve` running (here in this process, so that it sees the toy), the CLI and the page
    ask it: RemoteService.ask posts to the capability's route, with the owner's local token."""
    port = free_port()
    app = create_app(toy)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(600):
            if server.started:
                break
            time.sleep(0.1)
        app.state.backend.owner = owner.claim(toy.data_dir, f"http://127.0.0.1:{port}")
        found = owner.serving(toy)
        rerank = next(c for c in search.models.capabilities() if c.name == "rerank")
        assert close_to(RemoteService(found).ask(rerank, RerankQuery(query=QUERY, passages=PASSAGES, top_k=2)).model_dump())
        ran = CliRunner().invoke(search_cli, ["rerank", "--query", QUERY, *(a for p in PASSAGES for a in ("--passages", p)),
                                              "--top-k", "2"])
        assert ran.exit_code == 0 and close_to(json.loads(ran.stdout)), ran.output
    finally:
        owner.release(toy.data_dir)
        server.should_exit = True
        thread.join(30)
