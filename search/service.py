"""The service layer: the one implementation of search and ingest that the CLI, the REST API
and the Streamlit page all call."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path

from qdrant_client import models

from search.config import Settings
from search.errors import BadRequest, EmptyCollection
from search.models import FAMILIES, minilm
from search.store import DOCUMENTS, Store, open_store
from search.triton.client import TritonClient
from search.triton.local import LocalTriton

MAX_TOP_K = 100


@dataclass(frozen=True)
class DocumentHit:
    score: float
    path: str
    chunk: int
    text: str
    sha256: str
    paths: list[str] = field(default_factory=list)
    start: int | None = None
    end: int | None = None

    def snippet(self, width: int = 240) -> str:
        flat = " ".join(self.text.split())
        return flat if len(flat) <= width else flat[: width - 1].rsplit(" ", 1)[0] + "…"

    def as_dict(self) -> dict:
        return asdict(self)


class SearchService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def store(self) -> Store:
        return open_store(self.settings)

    @cached_property
    def triton(self) -> TritonClient:
        return TritonClient(self.triton_url(), self.settings.triton_timeout_s)

    def triton_url(self) -> str:
        """An explicit URL, else the local server that `search triton up` recorded, else the defaults."""
        if self.settings.triton_url:
            return self.settings.triton_url
        local = LocalTriton.attach(self.run_dir)
        if local is not None and local.is_running():
            return f"{local.host}:{local.grpc_port}"
        return self.settings.grpc_url

    @property
    def run_dir(self) -> Path:
        return self.settings.data_dir / "triton"

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()

    # -- queries
    def search_documents(self, query: str, *, top_k: int = 5, min_score: float | None = None,
                         folder: str | None = None) -> list[DocumentHit]:
        query = (query or "").strip()
        if not query:
            raise BadRequest("query: must not be empty")
        if not 1 <= top_k <= MAX_TOP_K:
            raise BadRequest(f"top_k: must be between 1 and {MAX_TOP_K}, got {top_k}")
        if self.store.count(DOCUMENTS.name) == 0:
            raise EmptyCollection("nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)")
        vectors, _ = minilm.embed(self.triton, [query])
        flt = None
        if folder:
            folder = str(Path(folder).expanduser().absolute()).rstrip("/") or "/"
            flt = models.Filter(must=[models.FieldCondition(key="folders", match=models.MatchValue(value=folder))])
        points = self.store.search(DOCUMENTS.name, "minilm", vectors[0].tolist(), limit=top_k,
                                   query_filter=flt, score_threshold=min_score)
        return [_document_hit(p) for p in points]

    # -- ingest
    def ingest(self, paths: list[Path], *, prune: bool = False,
               on_start: Callable[[int], None] | None = None, on_file: Callable | None = None):
        from indexer.chunking import Chunker  # noqa: PLC0415
        from indexer.pipeline import Ingestor  # noqa: PLC0415

        s = self.settings
        chunker = Chunker(self.chunk_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap)
        ingestor = Ingestor(self.store, self.triton, chunker, batch_size=s.embed_batch_size,
                            concurrency=s.embed_concurrency, max_file_bytes=s.max_file_bytes)
        return ingestor.run(paths, prune=prune, on_start=on_start, on_file=on_file)

    def chunk_tokenizer(self):
        """The tokenizer the served model uses, so chunk budgets are counted in its tokens."""
        from tokenizers import Tokenizer  # noqa: PLC0415

        path = minilm.MiniLM().tokenizer_path(self.settings.triton_repo)
        if not path.exists():
            path = minilm.package_weights() / "tokenizer.json"
        return Tokenizer.from_file(str(path))

    # -- status
    def status(self) -> dict:
        out: dict = {"triton": {"url": self.triton_url(), "live": self.triton.is_live(), "models": {}},
                     "store": {"location": self.settings.qdrant_location}}
        for fam in FAMILIES:
            built = fam.is_built(self.settings.triton_repo)
            ready = out["triton"]["live"] and self.triton.model_ready(fam.ensemble)
            out["triton"]["models"][fam.ensemble] = {"built": built, "ready": bool(ready)}
        out["store"]["collections"] = {DOCUMENTS.name: self.store.count(DOCUMENTS.name)}
        return out


def _document_hit(p: models.ScoredPoint) -> DocumentHit:
    pl = p.payload or {}
    return DocumentHit(score=float(p.score), path=pl.get("path", ""), chunk=int(pl.get("chunk", 0)),
                       text=pl.get("text", ""), sha256=pl.get("sha256", ""), paths=list(pl.get("paths", [])),
                       start=pl.get("start"), end=pl.get("end"))


def to_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)
