"""The ingest service: which kinds of file can be indexed now (their model is served), and one
run of the pipeline over some paths. The CLI and the REST API's jobs call it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tokenizers import Tokenizer

from indexer import distributed, pipeline
from indexer.failures import FailureMemory
from indexer.kinds import KINDS, Kind, chunk_tokenizer, make_kind
from indexer.patience import Patience, PatientTriton
from indexer.report import FileOutcome, IngestReport
from search.config import Settings
from search.errors import BadRequest, TritonUnavailable, not_served
from search.models import for_kind, ingest_kinds, required, text_reader
from search.resources import Resources
from search.store import COLLECTIONS, DOCUMENTS, check_kb, kb_collection

SUFFIXES = {name: kind.suffixes for name, kind in KINDS.items()}
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
               confine_to: list[Path] | None = None, kb: str | None = None, optimize: bool = True,
               ray: str | None = None, on_wait: Callable[[str | None], None] | None = None,
               ocr_photos: bool | None = None) -> IngestReport:
        """Documents and photos under ``paths``, each into its collection. A kind whose model is not
        served is reported while the others are indexed; repeated failures of unchanged files are
        ``still_failing``. ``confine_to``: only files inside those folders when opened
        are read. ``kb``: the knowledge base written (None: default; a new name creates it).
        ``optimize=False``: skip the store's optimize afterwards. ``ray``: run as a Ray Data pipeline (an
        address, "auto", or "" for SEARCH_RAY_ADDRESS else a local Ray). ``on_wait(why)``: the run pauses
        waiting for Triton (``why``) or goes on (None): indexer/patience.py. ``ocr_photos``: this run's
        choice of reading the text in photos (None: the setting's)."""
        if ocr_photos is not None and ocr_photos != self.settings.ocr_photos:  # the run on its own settings
            run = IngestService(self.settings.model_copy(update={"ocr_photos": ocr_photos}), self.resources)
            return run.ingest(paths, prune=prune, on_start=on_start, on_file=on_file, stop=stop, gone_ok=gone_ok,
                              confine_to=confine_to, kb=kb, optimize=optimize, ray=ray, on_wait=on_wait)
        s = self.settings
        try:
            check_kb(kb)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        patience = Patience(self.resources.triton.is_live, limit_s=s.ingest_triton_wait_s, on_wait=on_wait, stop=stop)
        kinds, unavailable = self._served_kinds(kb, patience)
        memory = FailureMemory(s.data_dir / FAILURES_FILE)

        def outcome(o: FileOutcome) -> None:
            memory.watch(o)
            if on_file:
                on_file(o)

        if ray is not None:
            report = distributed.ingest(self.resources.store, kinds, paths, settings=s,
                                        urls=s.triton_replicas or [self.resources.triton_url()],
                                        address=ray or s.ray_address, prune=prune, unavailable=unavailable,
                                        on_start=on_start, on_file=outcome, stop=stop, gone_ok=gone_ok,
                                        confine_to=confine_to, kb=kb)
        else:
            report = pipeline.ingest(self.resources.store, kinds, paths, prune=prune, unavailable=unavailable,
                                     batch_size=s.embed_batch_size, concurrency=s.embed_concurrency,
                                     on_start=on_start, on_file=outcome, stop=stop, gone_ok=gone_ok,
                                     confine_to=confine_to, optimize=optimize)
        memory.update(report)
        return report

    def _served_kinds(self, kb: str | None, patience: Patience):
        """``kinds``, embedding patiently. A Triton that is not running is this call's error (start it);
        one that is live but too busy to answer whether its models are ready is waited for."""
        triton = PatientTriton(self.resources.triton, patience)
        try:
            return self.kinds(kb, triton)
        except TritonUnavailable as exc:
            if not self.resources.triton.is_live():
                raise
            patience.wait(exc)
        return patience.call(self.kinds, kb, triton)

    def kinds(self, kb: str | None = None, triton=None) -> tuple[list[Kind], dict[str, tuple[frozenset[str], str]]]:
        """The kinds that can be ingested into ``kb`` now (their model is served), and those that
        cannot: name -> (their suffixes, why). ``triton``: the client they embed through (default: the
        resources' own)."""
        triton = triton or self.resources.triton
        kinds, unavailable = [], {}
        reader = text_reader(self.settings.text_reader)
        readers = [reader] if reader and triton.model_ready(reader.ensembles[0]) else []
        for name in ingest_kinds():
            needed, optional = required(name), [f for f in for_kind(name) if f.optional]
            if not triton.model_ready(needed.kinds[name]):
                unavailable[name] = (SUFFIXES[name], not_served(needed.kinds[name], needed.display))
                continue
            served = [needed, *(f for f in optional if triton.model_ready(f.kinds[name]))]
            kinds.append(make_kind(self.settings, triton, name, served + (readers if name == DOCUMENTS.name else []), kb))
        return kinds, unavailable

    def optimize(self, kb: str | None = None) -> None:
        """Merge a KB's collections' segments and build their indexes (what a run does at its end)."""
        store = self.resources.store
        for name in COLLECTIONS:
            store.optimize(kb_collection(kb, name))

    def chunk_tokenizer(self) -> Tokenizer:
        return chunk_tokenizer(self.settings)
