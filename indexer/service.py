"""The ingest service: which kinds of file can be indexed now (their model is served), and one
run of the pipeline over some paths. The CLI and the REST API's jobs call it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from indexer import pipeline
from indexer.chunking import Chunker
from indexer.kinds import Documents, Photos
from indexer.loaders import DOCUMENT_SUFFIXES
from search.config import Settings
from search.errors import not_served
from search.media.photos import IMAGE_SUFFIXES
from search.models import minilm
from search.resources import Resources


class IngestService:
    def __init__(self, settings: Settings, resources: Resources | None = None) -> None:
        self.settings = settings
        self.resources = resources or Resources(settings)

    def close(self) -> None:
        self.resources.close()

    def ingest(self, paths: list[Path], *, prune: bool = False,
               on_start: Callable[[int], None] | None = None,
               on_file: Callable[[pipeline.FileOutcome], None] | None = None,
               confine_to: list[Path] | None = None) -> pipeline.IngestReport:
        """Documents and photos under ``paths``, each into its collection. A kind whose model is
        not served is reported (with how to fix it) while the other kinds are indexed. With
        ``confine_to``, only files that lie inside those folders when opened are read."""
        s, triton = self.settings, self.resources.triton
        kinds, unavailable = [], {}
        if triton.model_ready("minilm"):
            chunker = Chunker(self.chunk_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap)
            kinds.append(Documents(triton, chunker, s.max_file_bytes, bge_m3=triton.model_ready("bge_m3")))
        else:
            unavailable["documents"] = (DOCUMENT_SUFFIXES, not_served("minilm", "MiniLM"))
        if triton.model_ready("clip_image"):
            kinds.append(Photos(triton, s.data_dir / "thumbnails", max_bytes=s.max_image_bytes,
                                max_pixels=s.max_image_pixels))
        else:
            unavailable["images"] = (IMAGE_SUFFIXES, not_served("clip_image", "CLIP"))
        return pipeline.ingest(self.resources.store, kinds, paths, prune=prune, unavailable=unavailable,
                               batch_size=s.embed_batch_size, concurrency=s.embed_concurrency,
                               on_start=on_start, on_file=on_file, confine_to=confine_to)

    def chunk_tokenizer(self) -> Tokenizer:
        """The tokenizer the served model uses, so chunk budgets are counted in its tokens."""
        path = minilm.MiniLM().tokenizer_path(self.settings.triton_repo)
        if not path.exists():
            path = minilm.package_weights() / "tokenizer.json"
        return Tokenizer.from_file(str(path))

