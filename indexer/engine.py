"""The ingest engine: one kind's files through the stages (indexer/stages.py), the content rules
(indexer/ledger.py) and the writer (indexer/writer.py), on threads (indexer/local.py) or a Ray
cluster (indexer/distributed.py). The engine imports neither executor (the caller passes one in)
nor Ray.

Both executors hand it files read and split (``begin``), units embedded (``arrived``) and the
model's exceptions (ModelNotReady stops the kind: ``stopped``). A file's unit 0 is written last and
marks it complete, so an interrupted ingest never leaves a file that looks indexed but is not;
points of files never completed are deleted (at once on a model failure, else by the next ``open``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from indexer.confine import Confinement
from indexer.discover import discover
from indexer.kinds import Kind, Unit
from indexer.ledger import Ledger
from indexer.report import FAILED, FileOutcome, IngestReport
from indexer.stages import FileJob, Read, read_file, split
from indexer.writer import Writer
from search.errors import ModelNotReady, TritonUnavailable
from search.store import Store


class Rules(Protocol):
    """What writing new content asks of the content rules: a Ledger on the driver; on a Ray worker
    that writes, the store's view the run was planned with (indexer/ray_write.py ``Planned``)."""

    def paths_for(self, job: FileJob) -> list[str]: ...
    def stored(self, job: FileJob, paths: list[str], n: int) -> list[FileOutcome]: ...
    def forget(self, job: FileJob, *, rejected: bool = False) -> None: ...


# An executor: the opened engine of one kind, its files, the run's report and where each outcome goes.
# Exceptions the model raises (ModelNotReady, TritonUnavailable) come out of it as they were raised.
Executor = Callable[["Ingestor", list[Path], IngestReport, Callable[[FileOutcome], None]], None]


class Ingestor:
    """Ingests the files of one kind into that kind's collection: the content rules (``ledger``)
    decide, the writer writes. ``rules``: another keeper of the rules than a Ledger of ``store``
    (a Ray worker's view of the store as planned)."""

    def __init__(self, store: Store, kind: Kind, *, batch_size: int = 16, concurrency: int = 2,
                 stop: Callable[[], bool] | None = None, confine: Confinement | None = None, whole: bool = False,
                 rules: Rules | None = None) -> None:
        self.store, self.kind = store, kind
        self.stop, self.confine = stop, confine
        self.batch_size, self.concurrency = batch_size, concurrency
        self.writer = Writer(store, kind)
        self.ledger = rules if rules is not None else Ledger(store, kind, whole=whole, flush=self.writer.flush)
        self._opened = False

    def open(self) -> None:
        self.ledger.open()
        self._opened = True

    def run(self, files: list[Path], roots: list[Path], report: IngestReport, done: Callable[[FileOutcome], None],
            *, execute: Executor, prune: bool = False, optimize: bool = True) -> None:
        """Ingest ``files`` through ``execute``, the caller's executor (indexer/local.py: threads). A
        model that fails as a whole (ModelNotReady: not loaded, or its process died and could not be
        reloaded) stops this kind: its remaining files are reported as not indexed with the reason,
        not each as failed, and the files already written stay. A Triton
        that does not answer pauses the run (indexer/patience.py); past its limit the run ends with
        that error, the files completed so far written."""
        emitted = 0  # a file's outcome comes once: a count, not a set of every path, tells what is left

        def emit(outcome: FileOutcome) -> None:
            nonlocal emitted
            emitted += 1
            done(outcome)

        try:
            self.open()
            execute(self, files, report, emit)
        except ModelNotReady as exc:
            self.stopped(len(files) - emitted, report, exc)
            if not self._opened:
                return  # the model failed before the collection was opened: nothing to write
        except TritonUnavailable:  # not answered within the run's wait (indexer/patience.py), or cancelled meanwhile
            self.abandon()
            self.writer.flush()  # the files completed so far stay indexed
            if not (self.stop is not None and self.stop()):
                raise
            report.cancelled = True
        self.finish(roots, files, report, emit, prune=prune, optimize=optimize)

    def start(self, path: Path) -> FileJob | FileOutcome | None:
        """Read, admit and split one file here: a job to embed, an outcome, or None (a copy of content
        in flight, which joins it)."""
        got = read_file(path, self.kind, self.confine, self.ledger.known)
        if isinstance(got, FileOutcome):
            return got
        units = self.ledger.admit(got)
        if units is got:
            units = split(got, self.kind, self.stop)
        return units if not isinstance(units, list) else self.begin(got, units)

    def begin(self, got: Read, units: list[Unit | None]) -> FileJob:
        """New content admitted, its units to embed (placeholders for those still to come)."""
        job = FileJob.of(got, list(units), self.ledger.status_of(got.path))
        self.ledger.inflight[job.sha256] = job
        return job

    def arrived(self, job: FileJob, units: Sequence[int], vectors: list, error: str = "", *,
                last: bool = False) -> list[FileOutcome]:
        """An embedded slice of ``job`` to the writer, whichever executor embedded it: ``units`` got
        ``vectors`` (``error``: the model rejected one). The file's other units are streamed once they
        hold the writer's budget; the file is written (or, with an error, discarded) with its last
        unit, or at once when ``last`` says no more of its units come (a rejected part of a long file)."""
        for i, v in zip(units, vectors, strict=True):
            job.vectors[i] = v
        job.error = job.error or error
        job.remaining -= len(units)
        if job.remaining == 0 or last:
            return self.complete(job)
        if not job.error and self.writer.embedded(job, units):
            self.writer.stream(job, self.ledger.paths_for(job))
        return []

    def complete(self, job: FileJob) -> list[FileOutcome]:
        """Write a file whose units were all embedded, or fail it (and what was written of it)."""
        if job.error:
            self.writer.discard(job)
            self.ledger.forget(job, rejected=True)
            return [FileOutcome(p, FAILED, job.error, kind=self.kind.name) for p in (job.path, *(p for p, _ in job.copies))]
        paths = self.ledger.paths_for(job)
        self.writer.add(job, paths)
        return self.ledger.stored(job, paths, len(job.units))

    def abandon(self) -> None:
        """Files in flight that will not complete: what was written of them goes now."""
        for job in list(self.ledger.inflight.values()):
            self.writer.discard(job)
            self.ledger.forget(job)

    def stopped(self, left: int, report: IngestReport, exc: ModelNotReady) -> None:
        """The kind's model failed as a whole: forget what was in flight; ``left``: its files not reported."""
        self.abandon()
        left = max(left, 0)
        report.stopped[self.kind.name] = str(exc)
        report.unavailable[self.kind.name] = (left, f"stopped: {exc}")

    def finish(self, roots: list[Path], files: list[Path], report: IngestReport, emit: Callable[[FileOutcome], None],
               *, prune: bool, optimize: bool = True) -> None:
        """Write what is buffered, prune, and let the store index what was written (unless ``optimize``
        is False: a watch does it once its folders are quiet)."""
        self.writer.flush()
        if prune and not report.cancelled:
            for outcome in self.ledger.prune(roots, {str(p) for p in files}):
                emit(outcome)
        if optimize:
            self.store.optimize(self.kind.schema.name)  # edge: merge segments, build HNSW (a server does it itself)


def ingest(store: Store, kinds: list[Kind], roots: list[Path], *, prune: bool = False,
           unavailable: dict[str, tuple[frozenset[str], str]] | None = None,
           batch_size: int = 16, concurrency: int = 2,
           on_start: Callable[[int], None] | None = None,
           on_file: Callable[[FileOutcome], None] | None = None,
           stop: Callable[[], bool] | None = None, gone_ok: bool = False,
           confine_to: list[Path] | Confinement | None = None, optimize: bool = True,
           execute: Executor) -> IngestReport:
    """Ingest every file under ``roots`` with the kind its suffix belongs to, each kind's files
    through ``execute`` (the caller's choice: indexer/local.py on threads).

    ``unavailable``: kinds whose model is not served (name -> (suffixes, why)); their files are
    reported. ``stop``: asked between files; the run ends once the files in flight are written
    (``report.cancelled``). ``gone_ok``: a missing root is not an error.
    ``confine_to``: folders every opened file must lie in (others are reported, not read).
    ``optimize=False``: leave the store's optimize to the caller (a watch runs it once quiet: the
    embedded engine holds the GIL while optimizing)."""
    started = time.perf_counter()
    report = IngestReport()
    roots, by_kind, confine, done = listing(report, kinds, roots, unavailable=unavailable, gone_ok=gone_ok,
                                            confine_to=confine_to, on_start=on_start, on_file=on_file)
    for kind in kinds:
        if report.cancelled:
            break
        if by_kind[kind.name] or prune:
            Ingestor(store, kind, batch_size=batch_size, concurrency=concurrency, stop=stop, confine=confine).run(
                by_kind[kind.name], roots, report, done, execute=execute, prune=prune and not report.cancelled,
                optimize=optimize)
    report.seconds = time.perf_counter() - started
    return report


def listing(report: IngestReport, kinds: list[Kind], roots: list[Path], *,
            unavailable: dict[str, tuple[frozenset[str], str]] | None, gone_ok: bool,
            confine_to: list[Path] | Confinement | None,
            on_start: Callable[[int], None] | None, on_file: Callable[[FileOutcome], None] | None):
    """Stage 0, on the driver: the files under ``roots`` by kind (bad roots and files of kinds not
    served go into ``report``). Returns (roots, files by kind, confinement, the outcome callback)."""
    roots = [Path(r).expanduser().absolute() for r in roots]
    unavailable = unavailable or {}
    suffixes = frozenset().union(*(k.suffixes for k in kinds), *(s for s, _ in unavailable.values()))
    confine = confine_to if confine_to is None or isinstance(confine_to, Confinement) else Confinement(confine_to)
    files, bad, report.skipped_files = discover(roots, suffixes, confine)
    if gone_ok:
        bad = [b for b in bad if not (b.reason == "no such file or folder" and not os.path.lexists(b.path))]
    by_kind = {k.name: [f for f in files if f.suffix.lower() in k.suffixes] for k in kinds}
    for name, (sfx, why) in unavailable.items():
        n = sum(f.suffix.lower() in sfx for f in files)
        if n:
            report.unavailable[name] = (n, why)
    if on_start:
        on_start(sum(len(v) for v in by_kind.values()) + len(bad))

    def done(outcome: FileOutcome) -> None:
        report.add(outcome)
        if on_file:
            on_file(outcome)

    for outcome in bad:
        done(outcome)
    return roots, by_kind, confine, done
