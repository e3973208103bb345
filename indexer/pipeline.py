"""Ingest: discover files -> load -> split into units -> embed (Triton, batched across files) -> upsert.

One pipeline for every kind of file (documents: chunks of text; photos: one image each); a
``Kind`` (indexer/kinds.py) says how a file becomes units and how units are embedded.

Incremental rules, all keyed on content (sha256 of the file):
- a path whose size and mtime match what the store has is unchanged (not even read);
- known content at a new path reuses the stored vectors: a copy adds its path, a move replaces
  the path that is gone from disk;
- changed content at a known path is embedded anew, then the path leaves the old content
  (which is deleted once no path refers to it);
- with ``prune``, paths under the ingested roots that are gone from disk are removed;
- a path listed on more than one stored content is never unchanged: a run stopped between writing
  a file's new content and taking its path off the old one (or a Ray run stopped before the driver
  applied what its workers wrote) left it there, and its size and mtime match the new content. It
  is read again, and the rules above leave it on the content the file holds only.
Unit 0 of a file is written after its other units: it marks the file complete, so an
interrupted ingest never leaves a file that looks indexed but is not. The other units carry
``partial`` (the time) until then. A long file's other units are written as they are embedded,
once they hold WRITE_VALUES vector values, so memory follows a request, not a file (BGE-M3: ~0.8 MB
of vectors a chunk). Points of a file that never completed are deleted: at once when its model
rejects it or stops, and by the next run's ``open`` after a crash.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
from qdrant_client import models

from indexer.confine import OUTSIDE, Confinement, Refused, unreadable
from indexer.discover import discover
from indexer.kinds import Embedded, Kind, Unit
from indexer.loaders import read_bytes
from indexer.report import FAILED, INDEXED, PRUNED, UNCHANGED, UPDATED, FileOutcome, IngestReport
from search.errors import ModelNotReady
from search.paths import from_stored, stored
from search.store import PARTIAL, Store, StoredFile, folders_of, point_id

# discover (indexer/discover.py) and the report types (indexer/report.py) stay importable from here.
SORT_WINDOW = 4  # batches whose units are sorted by size together
WRITE_BATCH = 256  # points buffered before they are written
# Vector values per write request. The engine's memory follows the request: one request of a long
# document's 1,491 BGE-M3 points (ColBERT rows: ~200 x 1,024 values each) peaked the ingest at 8.7 GB.
WRITE_VALUES = 4_000_000
# Points of an unfinished file on a shared store (a Qdrant server) are another process's work in
# progress until none has been written for this long.
STALE_PARTIAL_S = 3600.0

T = TypeVar("T")


@dataclass
class _Job:
    path: str
    sha256: str
    size: int
    mtime: float
    units: list[Unit]
    status: str
    vectors: list = field(default_factory=list)
    remaining: int = 0
    # Other paths with the same new content seen in this run: (path, status).
    copies: list[tuple[str, str]] = field(default_factory=list)
    error: str = ""  # set when the model rejected one of its units
    # Set when a Ray worker wrote the points itself (indexer/distributed.py): the paths it wrote them
    # with, and the number of units (the units and vectors stayed on the worker).
    written: tuple[str, ...] | None = None
    chunks: int = 0
    # Units other than 0 that are embedded and not written yet, and their vector values; ``streamed``:
    # some were written before the file was complete (``Ingestor._stream``).
    ready: list[int] = field(default_factory=list)
    ready_values: int = 0
    streamed: bool = False


def _last_requests(units: int, batch_size: int, slots: int) -> int:
    """The request size for the run's last units: as many requests as fill the slots evenly, so the
    model's instances finish together instead of one running the last request alone."""
    requests = -(-max(units, 1) // batch_size)
    requests = -(-requests // slots) * slots
    return max(1, -(-units // requests))


class Ingestor:
    """Ingests the files of one kind into that kind's collection."""

    def __init__(self, store: Store, kind: Kind, *, batch_size: int = 16, concurrency: int = 2,
                 stop: Callable[[], bool] | None = None, confine: Confinement | None = None) -> None:
        self.store, self.kind, self.stop, self.confine = store, kind, stop, confine
        self.batch_size, self.concurrency = batch_size, concurrency
        self.write_batch = WRITE_BATCH
        self._rest: list[models.PointStruct] = []
        self._heads: list[models.PointStruct] = []
        self._inflight: dict[str, _Job] = {}
        self.by_sha: dict[str, StoredFile] = {}
        self.by_path: dict[str, str] = {}
        # Paths listed on more than one stored content (an interrupted run, see the module's rules) ->
        # those contents; by_path holds one of them. Such a path is never unchanged (``known``).
        self.stale: dict[str, set[str]] = {}
        self._opened = False
        self._written: dict[str, str] = {}  # content embedded and written in this run -> the path it was written for
        # Long files arriving in parts (``part``): path -> its job, or None for a file not admitted.
        self._parts: dict[str, _Job | None] = {}

    def run(self, files: list[Path], roots: list[Path], report: IngestReport, done: Callable[[FileOutcome], None],
            *, prune: bool = False, optimize: bool = True) -> None:
        """Ingest ``files``. A model that fails as a whole (ModelNotReady: not loaded, or its process
        died and could not be reloaded) stops this kind: its remaining files are reported as not
        indexed with the reason, not each as failed, and the files already written stay."""
        seen: set[str] = set()

        def emit(outcome: FileOutcome) -> None:
            seen.add(outcome.path)
            done(outcome)

        try:
            self._run(files, report, emit)
        except ModelNotReady as exc:
            self.stopped(files, seen, report, exc)
            if not self._opened:
                return  # the model failed before the collection was opened: nothing to write
        self.finish(roots, files, report, emit, prune=prune, optimize=optimize)

    def open(self) -> None:
        """Open the kind's collection and load what it holds (content -> paths): the view every run
        plans with, the Ray workers' included (``known_paths``)."""
        self.store.ensure(self.kind.schema)  # a photo kind's first inference: its dimension
        self._opened = True
        doubled = set()
        for f in self.store.files(self.kind.schema.name):
            f = replace(f, paths=tuple(from_stored(p) for p in f.paths))  # paths are OS strings here
            seen = self.by_sha.get(f.sha256)
            if seen is not None and seen.chunker != f.chunker:
                doubled.add(f.sha256)  # chunked twice: a re-chunk stopped before the old chunks went
                if seen.chunker == self.kind.signature:
                    continue
            self.by_sha[f.sha256] = f
            for p in f.paths:
                held = self.by_path.setdefault(p, f.sha256)
                if held != f.sha256:  # listed on another content too: an interrupted run
                    self.stale.setdefault(p, {held}).add(f.sha256)
        for sha in doubled:  # the current settings' chunks are complete (their chunk 0 is written): finish the run's delete
            if self.by_sha[sha].chunker == self.kind.signature:
                self.store.delete_content(self.kind.schema.name, sha, keep_chunker=self.kind.signature)
        self._sweep()

    def _sweep(self) -> None:
        """Points a run wrote before their file was complete, still marked partial: a run stopped by
        a crash or kill -9. Complete files (stopped between their unit 0 and the mark's removal) are
        completed; the points of the others are deleted. On a shared store, only once no process has
        written them for STALE_PARTIAL_S: another may be writing that content now, and completing
        it with the unit 0 it is about to replace would give its points that one's paths."""
        name = self.kind.schema.name
        for (sha, chunker), last in self.store.partial_contents(name).items():
            if self.store.shared and time.time() - last <= STALE_PARTIAL_S:
                continue
            if (paths := self.store.complete_paths(name, sha, chunker)) is not None:
                self.store.mark_complete(name, sha, chunker, paths)
            else:
                self.store.delete_chunking(name, sha, chunker)

    def stopped(self, files: list[Path], seen: set[str], report: IngestReport, exc: ModelNotReady) -> None:
        """The kind's model failed as a whole: forget what was in flight, count what is left."""
        for job in self._inflight.values():
            if job.streamed:
                self.store.delete_chunking(self.kind.schema.name, job.sha256, self.kind.signature)
            if job.sha256 not in self.by_sha:
                self.kind.forget(job.sha256)  # e.g. the thumbnail of a photo that is not indexed
        self._inflight.clear()
        self._parts.clear()
        left = sum(str(f) not in seen for f in files)
        report.stopped[self.kind.name] = str(exc)
        report.unavailable[self.kind.name] = (left, f"stopped: {exc}")

    def finish(self, roots: list[Path], files: list[Path], report: IngestReport, emit: Callable[[FileOutcome], None],
               *, prune: bool, optimize: bool = True) -> None:
        """Write what is buffered, prune, and let the store index what was written (unless ``optimize``
        is False: a watch does it once its folders are quiet)."""
        self._flush()
        if prune and not report.cancelled:
            for outcome in self._prune(roots, {str(p) for p in files}):
                emit(outcome)
        if optimize:
            self.store.optimize(self.kind.schema.name)  # edge: merge segments, build HNSW (a server does it itself)

    def _run(self, files: list[Path], report: IngestReport, done: Callable[[FileOutcome], None]) -> None:
        kind = self.kind
        self.open()

        pending: deque[tuple[Future, list[tuple[_Job, int]]]] = deque()
        batch: list[tuple[_Job, int]] = []
        sent = 0  # requests submitted
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:

            def submit(last: bool = False) -> None:
                # Sorted by size, so each request pads little: on CPU padding costs more than batching saves.
                nonlocal batch, sent
                batch.sort(key=lambda m: kind.sort_key(m[0].units[m[1]].item))
                size = _last_requests(len(batch), self.batch_size, self.concurrency) if last else self.batch_size
                for k in range(0, len(batch), size):
                    members = batch[k:k + size]
                    items = [job.units[i].item for job, i in members]
                    pending.append((pool.submit(kind.embed, items), members))
                    sent += 1
                batch = []

            def drain(keep: int) -> None:
                while len(pending) > keep:
                    fut, members = pending.popleft()
                    result = fut.result()
                    report.truncated_chunks += result.truncated
                    for k, (job, i) in enumerate(members):
                        job.vectors[i] = result.vectors[k]
                        job.error = job.error or result.errors.get(k, "")
                        job.remaining -= 1
                        if job.remaining == 0:
                            for outcome in self._write(job) if not job.error else self._reject(job):
                                done(outcome)
                        elif i and not job.error:
                            job.ready.append(i)
                            job.ready_values += _values(job.vectors[i])
                            if job.ready_values >= WRITE_VALUES:
                                self._stream(job)

            try:
                for path in files:
                    if self.stop is not None and self.stop():
                        report.cancelled = True
                        break
                    job = self._prepare(path)
                    if job is None:
                        continue
                    if isinstance(job, FileOutcome):
                        done(replace(job, kind=kind.name))
                        continue
                    self._inflight[job.sha256] = job
                    job.vectors = [None] * len(job.units)
                    job.remaining = len(job.units)
                    for i in range(len(job.units)):
                        batch.append((job, i))
                        # A full sort window; at the run's start, each full request as it fills, so the model
                        # works while the first window is read
                        if len(batch) >= self.batch_size * SORT_WINDOW or (len(batch) >= self.batch_size and sent < self.concurrency):
                            submit()
                            drain(keep=self.concurrency)
                submit(last=True)
                drain(keep=0)
            except BaseException:
                for fut, _ in pending:  # queued requests would only meet the same dead model
                    fut.cancel()
                raise

    def _prepare(self, path: Path) -> _Job | FileOutcome | None:
        got = read_file(path, self.kind, self.confine, self.known)
        if isinstance(got, FileOutcome):
            return got
        admitted = self.admit(got)
        if admitted is not got:
            return admitted
        units = split(got, self.kind)
        if isinstance(units, FileOutcome):
            return units
        return _Job(got.path, got.sha256, got.size, got.mtime, units, self.status_of(got.path))

    def known(self, path: str) -> StoredFile | None:
        """What the store holds for ``path`` (the unchanged check of ``read_file``); nothing for a path
        listed on several contents, so that it is read again and the rules repair it."""
        if path in self.stale:
            return None
        return self.by_sha.get(self.by_path.get(path, ""))

    def known_paths(self) -> dict[str, StoredFile]:
        """``known`` for every path that has something (what a Ray worker's read stage checks against)."""
        return {p: f for p in self.by_path if (f := self.known(p)) is not None}

    def status_of(self, path: str) -> str:
        return UPDATED if path in self.by_path else INDEXED

    def admit(self, got: Read) -> Read | FileOutcome | None:
        """The rules for content that was read: a copy of content being embedded now joins it
        (None); known content reuses its vectors (a copy adds its path, a move replaces the one
        gone); new content comes back as ``got``, to be split and embedded."""
        key, sha, kind = got.path, got.sha256, self.kind
        status = self.status_of(key)
        if sha in self._inflight:  # a copy of content that is being embedded right now
            self._inflight[sha].copies.append((key, status))
            return None
        same = self.by_sha.get(sha)
        if same and same.chunker == kind.signature:
            # Known content (a copy, a move, or a touched file): reuse its vectors. The path leaves the
            # content it held first: _repoint lists it on this one, after which _leave_old would find
            # nothing to take it off (and a run stopped in between leaves it on none, not on two).
            self._leave_old(key, sha)
            if key not in same.paths:
                # A copy keeps the other paths; a move drops the one that is gone. Content written in this
                # run keeps the size and mtime it was written with, as a copy met while in flight does.
                extra = {} if sha in self._written else {"size": got.size, "mtime": got.mtime}
                self._repoint(sha, [*_existing(same.paths), key], **extra)
            else:
                self._flush()
                self._set_paths(sha, list(same.paths), mtime=got.mtime)
                self.by_sha[sha] = replace(same, mtime=got.mtime)
                status = UNCHANGED
            return FileOutcome(key, status, chunks=same.chunks, kind=kind.name)
        return got

    def finished(self, job: _Job) -> list[FileOutcome]:
        """Write (or reject) a job whose units were embedded elsewhere (the Ray path)."""
        self._inflight[job.sha256] = job
        return self._write(job) if not job.error else self._reject(job)

    def part(self, got: Read, start: int, n: int, units: list[Unit], vectors: list, error: str = "") -> list[FileOutcome]:
        """One part of a long file embedded elsewhere (the Ray path with the embedded store), parts
        in order: the first is admitted as a whole file is; each part's units but unit 0 are written
        as the part comes, marked partial, and their vectors let go; the last part completes the
        file, and a part the model rejected deletes what was written of it. The later parts of a
        file that was not admitted (known content, a copy of content in flight) are dropped."""
        if start == 0:
            admitted = self.admit(got)
            if admitted is not got:
                self._parts[got.path] = None
                return [admitted] if isinstance(admitted, FileOutcome) else []
            job = _Job(got.path, got.sha256, got.size, got.mtime, [None] * n, self.status_of(got.path), vectors=[None] * n)
            self._parts[got.path] = self._inflight[got.sha256] = job
        job = self._parts.get(got.path)
        if job is None:
            return []
        end = start + len(units)
        job.units[start:end], job.vectors[start:end] = units, vectors
        if error or end == n:
            del self._parts[got.path]
            job.error = error
            return self.finished(job)
        job.ready = list(range(max(start, 1), end))
        self._stream(job)
        return []

    def abandon(self) -> None:
        """Long files whose last part will not come (the run was cancelled): what was written of
        them goes now, not at the next run's sweep."""
        for job in self._parts.values():
            if job is not None:
                self._drop(job)
        self._parts.clear()

    def rewritten(self, sha: str) -> None:
        """Content written in this run was written again, for a copy of it, by a Ray worker that could
        not know it was a copy (indexer/distributed.py): put back what the store held for it."""
        if sha in self._written:
            f = self.by_sha[sha]
            self._flush()
            self._set_paths(sha, list(f.paths), size=f.size, mtime=f.mtime, suffix=_suffix(self._written[sha]))

    def _write(self, job: _Job) -> list[FileOutcome]:
        kind = self.kind
        previous = self.by_sha.get(job.sha256)  # the same content, made with other settings or another model
        paths = content_paths(job, previous)
        if job.written is None:
            n = len(job.units)
            points = build_points(job, paths, kind.signature, [i for i, v in enumerate(job.vectors) if v is not None])
            self._rest += points[1:]
            self._heads += points[:1]
            if job.streamed:  # its other points went earlier, with the paths known then: complete them
                self._flush()
                self.store.mark_complete(kind.schema.name, job.sha256, kind.signature, [stored(p) for p in paths])
        else:  # a Ray worker wrote the points with the store's view of when the run was planned
            n = job.chunks
            if list(job.written) != paths:  # a path of the content it replaces was moved or dropped since
                self._flush()
                self._set_paths(job.sha256, paths)
        if previous is not None:
            self._flush()
            self.store.delete_content(kind.schema.name, job.sha256, keep_chunker=kind.signature)
        elif len(self._rest) + len(self._heads) >= self.write_batch:
            self._flush()
        self.by_sha[job.sha256] = StoredFile(job.sha256, tuple(paths), job.size, job.mtime, kind.signature, n)
        del self._inflight[job.sha256]
        self._written[job.sha256] = job.path
        for p in paths:
            self._leave_old(p, job.sha256)
        return [FileOutcome(job.path, job.status, chunks=n, embedded=n, kind=kind.name),
                *(FileOutcome(p, status, chunks=n, kind=kind.name) for p, status in job.copies)]

    def _stream(self, job: _Job) -> None:
        """Write a long file's embedded units (not unit 0) before the file is complete, and let go
        of their vectors; ``_write`` completes the file."""
        paths = content_paths(job, self.by_sha.get(job.sha256))
        write_marked(self.store, self.kind.schema.name, build_points(job, paths, self.kind.signature, job.ready), [])
        for i in job.ready:
            job.vectors[i] = None
        job.ready, job.ready_values, job.streamed = [], 0, True

    def _reject(self, job: _Job) -> list[FileOutcome]:
        self._drop(job)
        return [FileOutcome(p, FAILED, job.error, kind=self.kind.name) for p in (job.path, *(p for p, _ in job.copies))]

    def _drop(self, job: _Job) -> None:
        """Forget a job that will not be written, and delete what was written of it."""
        if job.streamed:
            self.store.delete_chunking(self.kind.schema.name, job.sha256, self.kind.signature)
        del self._inflight[job.sha256]
        self.kind.forget(job.sha256)

    def _flush(self) -> None:
        """Write buffered points: all later units first, then the unit-0 points that mark their
        files complete. Every other store write flushes first, so it sees these points."""
        rest, heads, self._rest, self._heads = self._rest, self._heads, [], []
        write_marked(self.store, self.kind.schema.name, rest, heads)

    def _set_paths(self, sha: str, paths: list[str], **extra) -> None:
        self.store.set_paths(self.kind.schema.name, sha, [stored(p) for p in paths], **extra)

    def _repoint(self, sha: str, paths: list[str], **extra) -> None:
        self._flush()
        self._set_paths(sha, paths, **extra)
        for p in set(self.by_sha[sha].paths) - set(paths):
            self.by_path.pop(p, None)
        self.by_sha[sha] = replace(self.by_sha[sha], paths=tuple(paths), **extra)
        for p in paths:
            self.by_path[p] = sha

    def _leave_old(self, path: str, new_sha: str) -> None:
        """``path`` now holds ``new_sha``: drop it from the content(s) it was listed on before."""
        held = self._holders(path)
        self.by_path[path] = new_sha
        for old in held:
            if old != new_sha:
                self._drop_path(old, path)

    def _holders(self, path: str) -> list[str]:
        """The stored contents ``path`` is listed on: one, or several after an interrupted run (then
        forgotten as stale: the caller takes the path off them)."""
        held = [self.by_path.get(path), *sorted(self.stale.pop(path, ()))]
        return [s for s in dict.fromkeys(held) if s and s in self.by_sha]

    def _drop_path(self, sha: str, path: str) -> None:
        remaining = [p for p in self.by_sha[sha].paths if p != path]
        self._flush()
        if remaining:
            self._set_paths(sha, remaining)
            self.by_sha[sha] = replace(self.by_sha[sha], paths=tuple(remaining))
        elif sha in self._inflight:  # being embedded anew (other settings), maybe partly written: keep that
            self.store.delete_content(self.kind.schema.name, sha, keep_chunker=self.kind.signature)
            del self.by_sha[sha]
        else:
            self.store.delete_content(self.kind.schema.name, sha)
            self.kind.forget(sha)
            del self.by_sha[sha]

    def _prune(self, roots: list[Path], seen: set[str]) -> list[FileOutcome]:
        outcomes = []
        under = {str(r) for r in roots}  # a set, not a scan of the roots: a watch's batch may name thousands of files
        for path in sorted({*self.by_path, *self.stale}):  # stale: a path moved since may still be listed elsewhere
            if path in seen or not _under_any(path, under) or Path(path).exists():
                continue
            for held in self._holders(path):
                self._drop_path(held, path)
            outcomes.append(FileOutcome(path, PRUNED, "gone from disk", kind=self.kind.name))
        for o in outcomes:
            self.by_path.pop(o.path, None)
        return outcomes


def ingest(store: Store, kinds: list[Kind], roots: list[Path], *, prune: bool = False,
           unavailable: dict[str, tuple[frozenset[str], str]] | None = None,
           batch_size: int = 16, concurrency: int = 2,
           on_start: Callable[[int], None] | None = None,
           on_file: Callable[[FileOutcome], None] | None = None,
           stop: Callable[[], bool] | None = None, gone_ok: bool = False,
           confine_to: list[Path] | Confinement | None = None, optimize: bool = True) -> IngestReport:
    """Ingest every file under ``roots`` with the kind its suffix belongs to.

    ``unavailable``: kinds whose model is not served (name -> (suffixes, why)); their files are
    counted and reported, nothing else is held up. ``stop``: asked between files; when it says so
    the run ends after the files in flight are written (``report.cancelled``). ``gone_ok``: a root
    that no longer exists is not an error (with ``prune`` its indexed files are removed).
    ``confine_to``: folders every file read must lie in, checked on each opened file (the REST
    API's roots, or a Confinement that also excludes some); others are reported, never read.
    ``optimize=False``: leave the store's optimize (segment merge, HNSW build) to the caller — a
    watch runs it once its folders are quiet, because the embedded engine holds the GIL while it
    optimizes and every search in the process waits."""
    started = time.perf_counter()
    report = IngestReport()
    roots, by_kind, confine, done = listing(report, kinds, roots, unavailable=unavailable, gone_ok=gone_ok,
                                            confine_to=confine_to, on_start=on_start, on_file=on_file)
    for kind in kinds:
        if report.cancelled:
            break
        if by_kind[kind.name] or prune:
            Ingestor(store, kind, batch_size=batch_size, concurrency=concurrency, stop=stop, confine=confine).run(
                by_kind[kind.name], roots, report, done, prune=prune and not report.cancelled, optimize=optimize)
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
        report.outcomes.append(outcome)
        if on_file:
            on_file(outcome)

    for outcome in bad:
        done(outcome)
    return roots, by_kind, confine, done


@dataclass(frozen=True)
class Read:
    """A file as the first stage read it: its content's hash and bytes (``data``; empty once it
    has been split, when the bytes need not travel further)."""
    path: str
    sha256: str
    size: int
    mtime: float
    data: bytes = b""


# The stages, as plain functions the local run above and the Ray run (indexer/distributed.py) share.

def read_file(path: Path, kind: Kind, confine: Confinement | None,
              known: Callable[[str], StoredFile | None]) -> Read | FileOutcome:
    """Stage 1: stat and read one file. ``known``: what the store holds for a path; a file whose
    size and mtime match it is unchanged and not even read."""
    key = str(path)
    if confine and confine.outside(path):  # not even stat()ed
        return FileOutcome(key, FAILED, OUTSIDE)
    try:
        st = path.stat()
    except OSError as exc:
        return FileOutcome(key, FAILED, unreadable(exc))
    if not stat.S_ISREG(st.st_mode):
        return FileOutcome(key, FAILED, "not a regular file")
    seen = known(key)
    if seen and seen.size == st.st_size and seen.mtime == st.st_mtime and seen.chunker == kind.signature:
        return FileOutcome(key, UNCHANGED, chunks=seen.chunks)
    try:  # confined: the opened file is checked again, so a symlink swapped in since cannot lead out
        data = confine.read(path, kind.max_bytes) if confine else read_bytes(path, kind.max_bytes)
    except (*kind.errors, Refused) as exc:
        return FileOutcome(key, FAILED, str(exc))
    return Read(key, hashlib.sha256(data).hexdigest(), st.st_size, st.st_mtime, data)


def split(got: Read, kind: Kind) -> list[Unit] | FileOutcome:
    """Stage 2: decode, chunk or thumbnail a file's content into the units its model embeds."""
    try:
        units = kind.units(Path(got.path), got.data, got.sha256)
    except kind.errors as exc:
        return FileOutcome(got.path, FAILED, str(exc))
    if not units:
        return FileOutcome(got.path, FAILED, "nothing to index")
    return units


def embed_units(kind: Kind, items: list, batch_size: int) -> Embedded:
    """Stage 3: embed ``items`` in requests of ``batch_size``, sorted by size so each pads little."""
    order = sorted(range(len(items)), key=lambda i: kind.sort_key(items[i]))
    out = Embedded([None] * len(items))
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        got = kind.embed([items[i] for i in idx])
        out.truncated += got.truncated
        for j, i in enumerate(idx):
            out.vectors[i] = got.vectors[j]
            if j in got.errors:
                out.errors[i] = got.errors[j]
    return out


def content_paths(job: _Job, previous: StoredFile | None) -> list[str]:
    """The paths new content is written with: its file's, those of copies met while it was embedded,
    and those of the same content stored with other settings (``previous``) that still exist."""
    return list(dict.fromkeys([job.path, *(p for p, _ in job.copies), *_existing(previous.paths if previous else ())]))


def build_points(job: _Job, paths: list[str], signature: str,
                 units: Iterable[int] | None = None) -> list[models.PointStruct]:
    """Stage 4: the points of new content, one per unit (``units``: those units only), in the order
    given (all: unit order, unit 0 first). Ids come from the content, the signature and the unit
    number, so writing them again duplicates nothing."""
    kept = [stored(p) for p in paths]  # names that are not UTF-8 kept losslessly (search/paths.py)
    common = {"path": kept[0], "paths": kept, "folders": sorted({f for p in kept for f in folders_of(p)}),
              "suffix": _suffix(job.path), "n_chunks": len(job.units), "sha256": job.sha256, "size": job.size,
              "mtime": job.mtime, "chunker": signature, PARTIAL: 0.0}
    assert len(job.vectors) == len(job.units)
    return [
        # Built, not validated: ids, lists of floats and SparseVectors are made right above, and
        # validating BGE-M3's ColBERT rows (a 1024-float list per token) cost more than the upsert.
        models.PointStruct.model_construct(id=point_id(job.sha256, signature, i), vector=job.vectors[i],
                                           payload={**common, "chunk": i, **job.units[i].payload})
        for i in (range(len(job.units)) if units is None else units)
    ]


def write_marked(store: Store, collection: str, rest: list[models.PointStruct], heads: list[models.PointStruct],
                 batch: int | None = None) -> None:
    """Stage 5: write files' points, every unit but unit 0 (``rest``) first, then the unit-0 points
    (``heads``) that mark their files complete, so a file never looks complete before it is.
    ``rest`` is written marked ``partial`` (the time; set on the points given), and the points of
    the files whose unit 0 is in ``heads`` lose the mark once it is written: a stop in between
    leaves them to the next run's sweep (``Ingestor.open``), not in the store for good.
    ``batch``: points per request (None: no limit); a request also holds at most WRITE_VALUES
    vector values."""
    mark = time.time()
    for p in rest:
        p.payload[PARTIAL] = mark
    for points in (rest, heads):
        for part in bounded_runs(points, lambda p: _values(p.vector), WRITE_VALUES, batch):
            store.upsert(collection, part)
    done = {_chunking(p) for p in heads}
    if ids := [p.id for p in rest if _chunking(p) in done]:
        store.clear_partial(collection, ids)


def _chunking(point: models.PointStruct) -> tuple[str, str]:
    return point.payload["sha256"], point.payload["chunker"]


def bounded_runs(items: list[T], weight: Callable[[T], int], limit: int, max_items: int | None = None) -> Iterator[list[T]]:
    """``items`` in order, in runs whose weights sum to at most ``limit`` (an item heavier than that
    is a run of its own), of at most ``max_items`` items."""
    run: list[T] = []
    total = 0
    for item in items:
        n = weight(item)
        if run and (total + n > limit or len(run) == max_items):
            yield run
            run, total = [], 0
        run.append(item)
        total += n
    if run:
        yield run


def _values(vector) -> int:
    total = 0
    for v in vector.values() if isinstance(vector, dict) else [vector]:
        if isinstance(v, np.ndarray):
            total += v.size
        elif isinstance(v, list):
            total += len(v) * (len(v[0]) if v and isinstance(v[0], list) else 1)
    return total


def _suffix(path: str) -> str:
    return Path(path).suffix.lower()


def _existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


def _under_any(path: str, roots: set[str]) -> bool:
    """``path`` is one of ``roots`` (absolute, as str(Path) writes them) or lies below one."""
    p = path
    while True:
        if p in roots:
            return True
        cut = p.rfind("/")
        if cut <= 0:
            return cut == 0 and "/" in roots
        p = p[:cut]
