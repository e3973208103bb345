"""The ingest service: which kinds of file can be indexed now (their model is served), and one
run of the pipeline over some paths. The CLI and the REST API's jobs call it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from indexer import pipeline
from indexer.chunking import Chunker
from indexer.failures import FailureMemory
from indexer.kinds import Documents, Kind, Photos
from indexer.report import FileOutcome, IngestReport
from search.config import Settings
from search.errors import BadRequest, not_served
from search.models import Family, for_kind, ingest_kinds, minilm
from search.resources import Resources
from search.store import COLLECTIONS, check_kb, kb_collection, kb_thumbnails

SUFFIXES = {Documents.name: Documents.suffixes, Photos.name: Photos.suffixes}
FAILURES_FILE = "ingest-failures.json"  # in the data dir: see indexer/failures.py


class IngestService:
    def __init__(self, settings: Settings, resources: Resources | None = None) -> None:
        self.settings = settings
        self.resources = resources or Resources(settings)

    def close(self) -> None:
        self.resources.close()

    def ingest(self, paths: list[Path], *, prune: bool = False,
               on_start: Callable[[int], None] | None = None,
               on_file: Callable[[FileOutcome], None] | None = None,
               stop: Callable[[], bool] | None = None, gone_ok: bool = False,
               confine_to: list[Path] | None = None, kb: str | None = None, optimize: bool = True) -> IngestReport:
        """Documents and photos under ``paths``, each into its collection. A kind whose model is
        not served is reported (with how to fix it) while the other kinds are indexed. Failures
        that repeat on unchanged files are marked ``still_failing``. With ``confine_to``, only
        files that lie inside those folders when opened are read. ``kb``: the knowledge base written
        (None: the default one; a new name creates it). ``optimize=False``: the store is not
        optimized after the run (a watch does it with ``optimize()`` once its folders are quiet)."""
        s, triton = self.settings, self.resources.triton
        try:
            check_kb(kb)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        kinds, unavailable = [], {}
        for name in ingest_kinds():
            needed, *optional = for_kind(name)
            if not triton.model_ready(needed.kinds[name]):
                unavailable[name] = (SUFFIXES[name], not_served(needed.kinds[name], needed.display))
                continue
            kinds.append(self._kind(name, [needed, *(f for f in optional if triton.model_ready(f.kinds[name]))], kb))
        report = pipeline.ingest(self.resources.store, kinds, paths, prune=prune, unavailable=unavailable,
                                 batch_size=s.embed_batch_size, concurrency=s.embed_concurrency,
                                 on_start=on_start, on_file=on_file, stop=stop, gone_ok=gone_ok,
                                 confine_to=confine_to, optimize=optimize)
        FailureMemory(s.data_dir / FAILURES_FILE).update(report)
        return report

    def optimize(self, kb: str | None = None) -> None:
        """Merge a KB's collections' segments and build their indexes (what a run does at its end)."""
        store = self.resources.store
        for name in COLLECTIONS:
            store.optimize(kb_collection(kb, name))

    def _kind(self, name: str, families: list[Family], kb: str | None = None) -> Kind:
        s, triton = self.settings, self.resources.triton
        if name == "documents":
            chunker = Chunker(self.chunk_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap)
            return Documents(triton, chunker, s.max_file_bytes, families, kb, max_seconds=s.max_parse_seconds,
                             max_elements=s.max_parse_elements, max_pages=s.max_pdf_pages)
        return Photos(triton, kb_thumbnails(s.data_dir, kb), families[0], max_bytes=s.max_image_bytes,
                      max_pixels=s.max_image_pixels, kb=kb)

    def chunk_tokenizer(self) -> Tokenizer:
        """The tokenizer the served model uses, so chunk budgets are counted in its tokens."""
        path = minilm.MiniLM().tokenizer_path(self.settings.triton_repo)
        if not path.exists():
            path = minilm.package_weights() / "tokenizer.json"
        return Tokenizer.from_file(str(path))

