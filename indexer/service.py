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
from search.errors import not_served
from search.models import Family, for_kind, ingest_kinds, minilm
from search.resources import Resources

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
               confine_to: list[Path] | None = None) -> IngestReport:
        """Documents and photos under ``paths``, each into its collection. A kind whose model is
        not served is reported (with how to fix it) while the other kinds are indexed. Failures
        that repeat on unchanged files are marked ``still_failing``. With ``confine_to``, only
        files that lie inside those folders when opened are read."""
        s, triton = self.settings, self.resources.triton
        kinds, unavailable = [], {}
        for name in ingest_kinds():
            needed, *optional = for_kind(name)
            if not triton.model_ready(needed.kinds[name]):
                unavailable[name] = (SUFFIXES[name], not_served(needed.kinds[name], needed.display))
                continue
            kinds.append(self._kind(name, [needed, *(f for f in optional if triton.model_ready(f.kinds[name]))]))
        report = pipeline.ingest(self.resources.store, kinds, paths, prune=prune, unavailable=unavailable,
                                 batch_size=s.embed_batch_size, concurrency=s.embed_concurrency,
                                 on_start=on_start, on_file=on_file, stop=stop, gone_ok=gone_ok,
                                 confine_to=confine_to)
        FailureMemory(s.data_dir / FAILURES_FILE).update(report)
        return report

    def _kind(self, name: str, families: list[Family]) -> Kind:
        s, triton = self.settings, self.resources.triton
        if name == "documents":
            chunker = Chunker(self.chunk_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap)
            return Documents(triton, chunker, s.max_file_bytes, families, max_seconds=s.max_parse_seconds,
                             max_elements=s.max_parse_elements, max_pages=s.max_pdf_pages)
        return Photos(triton, s.data_dir / "thumbnails", families[0], max_bytes=s.max_image_bytes,
                      max_pixels=s.max_image_pixels)

    def chunk_tokenizer(self) -> Tokenizer:
        """The tokenizer the served model uses, so chunk budgets are counted in its tokens."""
        path = minilm.MiniLM().tokenizer_path(self.settings.triton_repo)
        if not path.exists():
            path = minilm.package_weights() / "tokenizer.json"
        return Tokenizer.from_file(str(path))

