"""The Ray executor's worker side: the stages of indexer/stages.py as Ray Data ``map_batches``
functions (read+split as tasks, embed in an actor pool that fails over between Triton replicas), and
the one writer (indexer/writer.py) on the workers when they write to a Qdrant server. Files travel
between the stages as ``_Rec`` records; what the model raised travels on them, to be raised again on
the driver (indexer/distributed.py)."""

from __future__ import annotations

import atexit
import pickle
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from indexer.confine import Confinement
from indexer.engine import Ingestor
from indexer.kinds import Kind, Loaded, Unit, make_kind
from indexer.patience import Patience
from indexer.report import FileOutcome
from indexer.stages import (
    FileJob,
    Read,
    bounded_runs,
    content_paths,
    embed_units,
    load,
    read_file,
    read_text,
    signature_of,
    units_of,
)
from search.config import Settings
from search.errors import ModelNotReady, ServiceError, TritonUnavailable
from search.models import family
from search.store import Store, StoredFile, open_store
from search.triton.client import TritonClient, client_options

FILES_PER_READ_BATCH = 8  # files a read+split task takes at once
FILES_PER_EMBED_BATCH = 32  # files whose units one embed call gets (sorted by size, sent in requests of embed_batch_size)
# An embed call embeds and returns its files in slices of at most this many units (a file with more
# is a slice of its own): each slice is one object in Ray's store, so a batch of long documents does
# not make one huge object. A multivector family's rows (ColBERT, 1024 floats a token) at the default 200-token chunks are ~0.8 MB a unit.
UNITS_PER_EMBED_SLICE = 128
EMBED_ACTOR_CPUS = 0  # an embed actor waits on Triton; with a share of a CPU it can starve the read stage of a small cluster


@dataclass(frozen=True)
class Plan:
    """What every worker needs, sent with the tasks: the settings, each kind's families and the
    signature the driver probed (so every worker writes the same ids), and the store's view."""
    token: str
    settings: Settings
    kinds: dict[str, tuple[tuple[str, ...], str, str | None]]  # kind -> (family names, signature, read_signature)
    known: dict[str, dict[str, StoredFile]]  # kind -> path -> what is stored (the unchanged check)
    current: dict[str, frozenset[str]]  # kind -> content stored with the current signature
    urls: tuple[str, ...]  # Triton replicas
    batch_size: int
    confine: Confinement | None  # the folders files may be read from (the driver's, exclusions included)
    kb: str | None = None  # the knowledge base written (None: the default one)
    write: bool = False  # the embed actors write new content's points (a Qdrant server: many openers)


@dataclass
class _Rec:
    """One file on its way through the stages."""
    path: Path
    kind: str
    outcome: FileOutcome | None = None  # decided in the read stage (failed, unchanged)
    read: Read | None = None  # without its bytes
    units: list[Unit] | None = None  # None: known content, nothing to embed (or its text still to read)
    loaded: Loaded | None = None  # new content whose text a model must read first (its scans), then split
    vectors: list | None = None
    error: str = ""  # the model rejected a unit
    # What the model raised (ModelNotReady: the kind's model failed as a whole; TritonUnavailable: no
    # replica answered), raised again on the driver as a local run's request raises it.
    failure: ServiceError | None = None
    truncated: int = 0
    written: tuple[str, ...] | None = None  # a worker wrote its points, with these paths
    chunks: int = 0  # its units, once written (units and vectors are dropped then)
    times: dict[str, float] = field(default_factory=dict)
    part: tuple[int, int] | None = None  # a long file sent in parts: (its first unit here, the file's units)
    signature: str = ""  # what a worker wrote its points under (indexer/stages.py ``signature_of``)

    def count(self) -> int:
        return len(self.units) if self.units else self.chunks

    # Vectors travel between the stages as float32 arrays (as the ingest keeps them): a multivector chunk's
    # ColBERT rows (a 1024-float row per token) pickle to ~2.8 MB as lists of floats, 1.2 MB as float32,
    # and a slice of records is one object in Ray's store. Lists (vectors read back from a store) are
    # float32 values too, so the trip is exact.
    def __getstate__(self) -> dict:
        state = dict(vars(self))
        if self.vectors:
            state["vectors"] = [{n: np.asarray(v, dtype=np.float32) if isinstance(v, list) else v for n, v in vec.items()}
                                if isinstance(vec, dict) else vec for vec in self.vectors]
        return state


V = TypeVar("V")

# Per worker process, for the plans it has served lately: a process that runs one ingest after
# another (a long-lived Ray worker, a library caller, the tests) keeps only the last few plans'
# Triton clients and stored-file maps.
RECENT_PLANS = 4
_KINDS: dict[str, dict[str, dict[str, Kind]]] = {}  # plan token -> url -> kinds
_STORED: dict[str, dict[str, dict[str, StoredFile]]] = {}  # plan token -> kind -> sha256 -> what is stored
# Dropped at exit, while grpc can still close their channels: left to the interpreter's teardown,
# each gRPC client's __del__ prints "Exception ignored ... 'NoneType' object has no attribute 'StatusCode'".
atexit.register(_KINDS.clear)


_RECENT_LOCK = threading.Lock()  # an actor may one day run calls in threads of its own


def _recent(cache: dict[str, V], token: str, make: Callable[[], V]) -> V:
    """``cache[token]``, made on first use; only the ``RECENT_PLANS`` plans used last stay."""
    with _RECENT_LOCK:
        if token in cache:
            cache[token] = cache.pop(token)  # most recent last
        else:
            cache[token] = make()
            while len(cache) > RECENT_PLANS:
                del cache[next(iter(cache))]
        return cache[token]


def workers_write(settings: Settings) -> bool:
    """Whether the workers write new content themselves: only to a Qdrant server, which many
    processes may open (the embedded store admits one)."""
    return settings.store_backend == "server"


def _kinds(plan: Plan, url: str) -> dict[str, Kind]:
    by_url = _recent(_KINDS, plan.token, dict)
    if url not in by_url:
        triton = TritonClient(url, **client_options(plan.settings))
        kinds = {}
        for name, (families, signature, read_signature) in plan.kinds.items():
            kind = make_kind(plan.settings, triton, name, [family(f) for f in families], plan.kb)
            kind.__dict__["signature"] = signature  # the driver's probe, not each worker's
            kind.__dict__["read_signature"] = read_signature
            kinds[name] = kind
        by_url[url] = kinds
    return by_url[url]


def _pack(recs: list[_Rec]) -> dict:
    # Pickled whole: paths may be bytes that are not UTF-8, which Arrow's strings cannot hold.
    return {"rec": np.array([pickle.dumps(r) for r in recs], dtype=object)}


def read_and_split(batch: dict, plan: Plan) -> dict:
    """The CPU stage (a Ray task per batch of files): read, hash, and decode/chunk/thumbnail new content."""
    kinds = _kinds(plan, plan.urls[0])
    confine = plan.confine
    recs = []
    for raw in batch["rec"]:
        rec: _Rec = pickle.loads(raw)
        kind = kinds[rec.kind]
        t0 = time.perf_counter()
        got = read_file(rec.path, kind, confine, plan.known[rec.kind].get)
        rec.times["read"] = time.perf_counter() - t0
        if isinstance(got, FileOutcome):
            rec.outcome = got
        elif got.sha256 in plan.current[rec.kind]:
            rec.read = replace(got, data=b"")  # known content: the driver reuses its vectors
        else:
            t1 = time.perf_counter()
            loaded = load(got, kind)
            if isinstance(loaded, FileOutcome):
                rec.outcome = loaded
            elif loaded.to_read:  # its text is read in the model actors (``Embedder``), then split there
                rec.read, rec.loaded = replace(got, data=b""), loaded
            else:
                units = units_of(loaded, kind)
                if isinstance(units, FileOutcome):
                    rec.outcome = units
                else:
                    rec.read, rec.units = replace(got, data=b""), units
            rec.times["split"] = time.perf_counter() - t1
        recs.append(rec)
    return _pack(recs)


class Planned:
    """The content rules a writing worker keeps (indexer/engine.py ``Rules``): new content's paths
    come from the store's view the run was planned with; what it wrote is kept here for the driver,
    which applies the rules (indexer/distributed.py)."""

    def __init__(self, kind: Kind, stored: dict[str, StoredFile]) -> None:
        self.kind, self.by_sha = kind, stored
        self.written: dict[str, tuple[tuple[str, ...], int, str]] = {}  # its file's path -> (paths, units, signature)

    def paths_for(self, job: FileJob) -> list[str]:
        return content_paths(job, self.by_sha.get(job.sha256))  # found: stored with other settings

    def stored(self, job: FileJob, paths: list[str], n: int) -> list[FileOutcome]:
        self.written[job.path] = (tuple(paths), n, signature_of(self.kind, job))  # a copy in the batch: its own paths
        return []  # the driver reports it

    def forget(self, job: FileJob, *, rejected: bool = False) -> None:
        pass  # the driver forgets it, as it gets the file's error


def writing(store: Store, plan: Plan, kind: Kind) -> tuple[Ingestor, Planned]:
    """The engine a worker writes ``kind``'s new content with, and the rules it keeps."""
    planned = Planned(kind, _stored(plan)[kind.name])
    return Ingestor(store, kind, rules=planned), planned


def written(rec: _Rec, planned: Planned) -> None:
    """``rec``'s content was written by the worker: the driver gets its paths and number of units,
    not its units and vectors."""
    paths, rec.chunks, rec.signature = planned.written[rec.read.path]
    rec.written, rec.units, rec.vectors = paths, None, None


def write_new(store: Store, plan: Plan, kinds: dict[str, Kind], recs: list[_Rec]) -> None:
    """The write stage, on a worker: the points of the new content in ``recs`` through the engine and
    its one writer, as a local run writes them, with the paths the store held when the run was planned."""
    for name, kind in kinds.items():
        todo = [r for r in recs if r.kind == name and r.units and r.vectors and not (r.error or r.failure)]
        if not todo:
            continue
        t0 = time.perf_counter()
        ing, planned = writing(store, plan, kind)
        jobs = [FileJob.of(r.read, r.units) for r in todo]
        for r, job in zip(todo, jobs):
            ing.arrived(job, range(len(job.units)), r.vectors)
        ing.writer.flush()
        seconds, n = time.perf_counter() - t0, sum(len(r.units) for r in todo)
        for r in todo:
            written(r, planned)
            r.times["write"] = seconds * r.chunks / n


def _stored(plan: Plan) -> dict[str, dict[str, StoredFile]]:
    return _recent(_STORED, plan.token,
                   lambda: {name: {f.sha256: f for f in known.values()} for name, known in plan.known.items()})


class Embedder:
    """The model stages: an actor (Ray Data's actor pool) holding Triton clients, that reads the text
    in new documents' scans (OCR) and splits them, then embeds. It starts on a random replica, so the
    pool spreads over them, and moves to the next one when a request (to read or to embed) fails
    because its replica is gone or its model is not there. With ``plan.write`` it writes the new
    content it embedded (``write_new``) to ``store``, or to the store it opens from the settings."""

    def __init__(self, plan: Plan, store: Store | None = None) -> None:
        self.plan, self.store = plan, store
        self.at = random.randrange(len(plan.urls))

    def __call__(self, batch: dict) -> Iterator[dict]:
        recs: list[_Rec] = [pickle.loads(raw) for raw in batch["rec"]]
        for rec in recs:
            if rec.loaded is not None:
                self._read_text(rec)
        for part in bounded_runs(recs, lambda r: len(r.units or ()), UNITS_PER_EMBED_SLICE):
            long = len(part[0].units or ()) > UNITS_PER_EMBED_SLICE  # a slice of its own
            if long and not self.plan.write:
                yield from (_pack([piece]) for piece in self._embed_in_parts(part[0]))
                continue
            if long:
                self._embed_and_write_long(part[0])
            else:
                self._embed_slice(part)
                if self.plan.write:
                    write_new(self._store(), self.plan, self._kinds(), part)
            yield _pack(part)

    def _store(self) -> Store:
        if self.store is None:
            self.store = open_store(self.plan.settings)
        return self.store

    def _kinds(self) -> dict[str, Kind]:
        return _kinds(self.plan, self.plan.urls[self.at])

    def _embed_and_write_long(self, rec: _Rec) -> None:
        """A file with more units than a slice, the workers writing: embedded a slice at a time, each
        slice to the engine as a local run's (its other units written as they reach the writer's
        budget, unit 0 last). A part the model rejects, a model that stops or no replica left: what
        was written of the file is deleted."""
        ing, planned = writing(self._store(), self.plan, self._kinds()[rec.kind])  # the same on every replica
        job = FileJob.of(rec.read, rec.units)
        embed_s = write_s = 0.0
        for piece in self._embed_in_parts(rec):
            start, end = piece.part[0], piece.part[0] + len(piece.units)
            t1 = time.perf_counter()
            embed_s += piece.times.get("embed", 0.0)
            rec.truncated += piece.truncated
            rec.error, rec.failure = piece.error, piece.failure
            if rec.failure:
                ing.writer.discard(job)
                break
            ing.arrived(job, range(start, end), piece.vectors, piece.error, last=bool(piece.error))
            write_s += time.perf_counter() - t1
        t1 = time.perf_counter()
        ing.writer.flush()
        if job.path in planned.written:
            written(rec, planned)
        rec.times["embed"], rec.times["write"] = embed_s, write_s + time.perf_counter() - t1

    def _embed_in_parts(self, rec: _Rec) -> Iterator[_Rec]:
        """A file with more units than a slice, embedded a slice at a time: a record per slice with
        its units and their vectors, so neither the actor nor Ray's store holds the file's vectors at
        once. With the embedded store the driver gets them and writes each part as it comes
        (``_apply``); a writing worker writes them itself (``_embed_and_write_long``). A part
        the model rejects, or a model that stops, is the last."""
        n = len(rec.units)
        for start in range(0, n, UNITS_PER_EMBED_SLICE):
            piece = _Rec(rec.path, rec.kind, read=rec.read, units=rec.units[start:start + UNITS_PER_EMBED_SLICE],
                         times=dict(rec.times) if start == 0 else {}, part=(start, n))  # read and split: counted once
            self._embed_slice([piece])
            yield piece
            if piece.error or piece.failure:
                return

    def _embed_slice(self, recs: list[_Rec]) -> None:
        for name in self.plan.kinds:
            todo = [r for r in recs if r.kind == name and r.units]
            if not todo:
                continue
            items = [u.item for r in todo for u in r.units]
            t0 = time.perf_counter()
            embedded = self._embed_or_mark(name, items, todo)
            if embedded is None:
                continue
            seconds = time.perf_counter() - t0
            todo[0].truncated = embedded.truncated
            k = 0
            for r in todo:
                n = len(r.units)
                r.vectors = embedded.vectors[k:k + n]
                r.error = next((embedded.errors[i] for i in range(k, k + n) if i in embedded.errors), "")
                r.times["embed"] = seconds * n / len(items)
                k += n

    def _read_text(self, rec: _Rec) -> None:
        """The read stage: the text in ``rec``'s scans, read on a replica that answers (as embedding:
        ``_call``), then split into its units; or what the model raised, on ``rec``."""
        loaded, rec.loaded = rec.loaded, None
        t0 = time.perf_counter()
        try:
            got = self._call(lambda kinds: read_text(loaded, kinds[rec.kind]))
        except (ModelNotReady, TritonUnavailable) as exc:
            rec.failure = exc
            return
        t1 = time.perf_counter()
        rec.times["ocr"] = t1 - t0
        units = got if isinstance(got, FileOutcome) else units_of(got, self._kinds()[rec.kind])
        if isinstance(units, FileOutcome):
            rec.outcome, rec.read = units, None
        else:
            rec.units = units
        rec.times["split"] = rec.times.get("split", 0.0) + time.perf_counter() - t1

    def _embed_or_mark(self, name: str, items: list, recs: list[_Rec]):
        """``items`` embedded; or None, what the model raised on ``recs`` (the driver raises it)."""
        try:
            return self._call(lambda kinds: embed_units(kinds[name], items, self.plan.batch_size))
        except (ModelNotReady, TritonUnavailable) as exc:
            for r in recs:
                r.failure = exc
        return None

    def _call(self, fn: Callable[[dict[str, Kind]], V]) -> V:
        """``fn`` of a replica's kinds, on a replica that answers: while none does, the actor waits (as
        a local run does: indexer/patience.py), up to SEARCH_INGEST_TRITON_WAIT_S."""
        patience = Patience(self._any_live, limit_s=self.plan.settings.ingest_triton_wait_s)
        return patience.call(self._on_replica, fn)

    def _any_live(self) -> bool:
        return any(next(iter(_kinds(self.plan, url).values())).triton.is_live() for url in self.plan.urls)

    def _on_replica(self, fn: Callable[[dict[str, Kind]], V]) -> V:
        """``fn`` on the actor's replica, else on the next ones in turn (the actor stays on the one
        that answered); what the last raises comes out."""
        urls = self.plan.urls
        for tried in range(len(urls)):
            try:
                return fn(_kinds(self.plan, urls[self.at]))
            except (TritonUnavailable, ModelNotReady):
                if tried == len(urls) - 1:
                    raise
                self.at = (self.at + 1) % len(urls)
        raise AssertionError("unreachable")
