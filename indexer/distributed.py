"""Ingest as a Ray Data pipeline (`indexer ingest --ray`): the stages of indexer/pipeline.py spread
over a Ray cluster, with the rules (content ids, moves, copies, the file-complete marker, prune)
kept in one place, the driver's ``Ingestor``.

    driver: listing ──► blocks of paths ──► read+split (map_batches tasks, CPU)
            ──► embed (actor pool, one or more per Triton replica) [──► write new content: Qdrant server]
            ──► driver: rules + store writes

Files must be visible to every node at the same path (a shared filesystem), and so must the data
dir (workers write the photos' thumbnails there); a node that cannot read a root stops the run
before anything is read. With a Qdrant server (QDRANT_URL) the embed actors write the points of
new content themselves, in batches, the file-complete markers (unit 0) after the files' other units
(a file longer than an embed slice: a slice at a time, as it is embedded), and send the driver no
vectors. The rest of the bookkeeping needs one view of what is stored and
stays on the driver: known content (moves, copies, unchanged files), the paths of content written
by a worker that the rules changed since the run was planned, prune. With the embedded store (one
opener) the driver writes everything; a file longer than an embed slice reaches it in parts, one
record per slice, each written as it comes. Point ids are derived from content, so a block Ray runs
twice writes the same points again, never new ones.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import random
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from indexer.confine import Confinement
from indexer.kinds import Kind, Unit, make_kind
from indexer.pipeline import (
    WRITE_BATCH,
    FileOutcome,
    Ingestor,
    Read,
    _Job,
    bounded_runs,
    build_points,
    content_paths,
    embed_units,
    listing,
    read_file,
    split,
    write_marked,
)
from indexer.report import IngestReport
from search.config import Settings
from search.errors import ModelNotReady, ServiceError, TritonUnavailable
from search.models import family
from search.paths import stored
from search.store import Store, StoredFile, kb_thumbnails, open_store
from search.triton.client import TritonClient

FILES_PER_READ_BATCH = 8  # files a read+split task takes at once
FILES_PER_EMBED_BATCH = 32  # files whose units one embed call gets (sorted by size, sent in requests of embed_batch_size)
# An embed call embeds and returns its files in slices of at most this many units (a file with more
# is a slice of its own): each slice is one object in Ray's store, so a batch of long documents does
# not make one huge object. BGE-M3's ColBERT rows at the default 200-token chunks are ~0.8 MB a unit.
UNITS_PER_EMBED_SLICE = 128
EMBED_ACTOR_CPUS = 0  # an embed actor waits on Triton; with a share of a CPU it can starve the read stage of a small cluster


class RayUnavailable(ServiceError):
    exit_code = 1


@dataclass(frozen=True)
class Plan:
    """What every worker needs, sent with the tasks: the settings, each kind's families and the
    signature the driver probed (so every worker writes the same ids), and the store's view."""
    token: str
    settings: Settings
    kinds: dict[str, tuple[tuple[str, ...], str]]  # kind -> (family names, signature)
    known: dict[str, dict[str, StoredFile]]  # kind -> path -> what is stored (the unchanged check)
    current: dict[str, frozenset[str]]  # kind -> content stored with the current signature
    urls: tuple[str, ...]  # Triton replicas
    batch_size: int
    confine_to: tuple[Path, ...] | None
    kb: str | None = None  # the knowledge base written (None: the default one)
    write: bool = False  # the embed actors write new content's points (a Qdrant server: many openers)


@dataclass
class _Rec:
    """One file on its way through the stages."""
    path: Path
    kind: str
    outcome: FileOutcome | None = None  # decided in the read stage (failed, unchanged)
    read: Read | None = None  # without its bytes
    units: list[Unit] | None = None  # None: known content, nothing to embed
    vectors: list | None = None
    error: str = ""  # the model rejected a unit
    stopped: str = ""  # the kind's model failed as a whole
    fatal: str = ""  # no Triton replica answered
    truncated: int = 0
    written: tuple[str, ...] | None = None  # a worker wrote its points, with these paths
    chunks: int = 0  # its units, once written (units and vectors are dropped then)
    times: dict[str, float] = field(default_factory=dict)
    part: tuple[int, int] | None = None  # a long file sent in parts: (its first unit here, the file's units)

    def count(self) -> int:
        return len(self.units) if self.units else self.chunks

    # Vectors travel between the stages as float32 arrays (as the ingest keeps them): a BGE-M3 chunk's
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
        triton = TritonClient(url, plan.settings.triton_timeout_s)
        kinds = {}
        for name, (families, signature) in plan.kinds.items():
            kind = make_kind(plan.settings, triton, name, [family(f) for f in families], plan.kb)
            kind.__dict__["signature"] = signature  # the driver's probe, not each worker's
            kinds[name] = kind
        by_url[url] = kinds
    return by_url[url]


def _pack(recs: list[_Rec]) -> dict:
    # Pickled whole: paths may be bytes that are not UTF-8, which Arrow's strings cannot hold.
    return {"rec": np.array([pickle.dumps(r) for r in recs], dtype=object)}


def read_and_split(batch: dict, plan: Plan) -> dict:
    """The CPU stage (a Ray task per batch of files): read, hash, and decode/chunk/thumbnail new content."""
    kinds = _kinds(plan, plan.urls[0])
    confine = Confinement(list(plan.confine_to)) if plan.confine_to is not None else None
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
            units = split(got, kind)
            rec.times["split"] = time.perf_counter() - t1
            if isinstance(units, FileOutcome):
                rec.outcome = units
            else:
                rec.read, rec.units = replace(got, data=b""), units
        recs.append(rec)
    return _pack(recs)


def write_new(store: Store, plan: Plan, kinds: dict[str, Kind], recs: list[_Rec]) -> None:
    """The write stage, on a worker: the points of the new content in ``recs`` (built as a local run
    builds them, with the paths the store held when the run was planned), written in batches, every
    file's other units before the unit-0 points that mark the files complete. The records keep what
    the driver needs (the paths written, the number of units), not their units and vectors."""
    stored = _stored(plan)
    for name, kind in kinds.items():
        todo = [r for r in recs if r.kind == name and r.units and r.vectors and not (r.error or r.stopped or r.fatal)]
        if not todo:
            continue
        t0 = time.perf_counter()
        rest, heads = [], []
        for r in todo:
            job = _Job(r.read.path, r.read.sha256, r.read.size, r.read.mtime, r.units, "", vectors=r.vectors)
            paths = content_paths(job, stored[name].get(job.sha256))  # found: stored with other settings
            points = build_points(job, paths, kind.signature)
            rest += points[1:]
            heads += points[:1]
            r.written = tuple(paths)
        write_marked(store, kind.schema.name, rest, heads, batch=WRITE_BATCH)
        seconds, n = time.perf_counter() - t0, len(rest) + len(heads)
        for r in todo:
            r.chunks, r.units, r.vectors = len(r.units), None, None
            r.times["write"] = seconds * r.chunks / n


def _stored(plan: Plan) -> dict[str, dict[str, StoredFile]]:
    return _recent(_STORED, plan.token,
                   lambda: {name: {f.sha256: f for f in known.values()} for name, known in plan.known.items()})


class Embedder:
    """The embed stage: an actor (Ray Data's actor pool) holding Triton clients. It starts on a
    random replica, so the pool spreads over them, and moves to the next one when a request fails
    because its replica is gone or its model is not there. With ``plan.write`` it writes the new
    content it embedded (``write_new``) to ``store``, or to the store it opens from the settings."""

    def __init__(self, plan: Plan, store: Store | None = None) -> None:
        self.plan, self.store = plan, store
        self.at = random.randrange(len(plan.urls))

    def __call__(self, batch: dict) -> Iterator[dict]:
        recs: list[_Rec] = [pickle.loads(raw) for raw in batch["rec"]]
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
        """A file with more units than a slice, the workers writing: embedded a slice at a time, its
        other units written as each slice is (marked partial, as a local run writes a long file), its
        unit 0 last. The actor holds one slice's vectors, not the file's. A part the model rejects, a
        model that stops or no replica left: what was written of the file is deleted."""
        name, n = rec.kind, len(rec.units)
        kind = self._kinds()[name]  # its collection and signature: the same on every replica
        job = _Job(rec.read.path, rec.read.sha256, rec.read.size, rec.read.mtime, rec.units, "", vectors=[None] * n)
        paths = content_paths(job, _stored(self.plan)[name].get(job.sha256))
        embed_s = write_s = 0.0
        for piece in self._embed_in_parts(rec):
            start, end = piece.part[0], piece.part[0] + len(piece.units)
            t1 = time.perf_counter()
            embed_s += piece.times.get("embed", 0.0)
            rec.truncated += piece.truncated
            rec.error, rec.stopped, rec.fatal = piece.error, piece.stopped, piece.fatal
            if rec.error or rec.stopped or rec.fatal:
                if start:
                    self._store().delete_chunking(kind.schema.name, job.sha256, kind.signature)
                break
            job.vectors[start:end] = piece.vectors
            others = range(max(start, 1), end)  # unit 0 waits for the end
            write_marked(self._store(), kind.schema.name, build_points(job, paths, kind.signature, others), [])
            job.vectors[others.start:end] = [None] * len(others)
            write_s += time.perf_counter() - t1
        else:
            t1 = time.perf_counter()
            write_marked(self._store(), kind.schema.name, [], build_points(job, paths, kind.signature, [0]))
            self._store().mark_complete(kind.schema.name, job.sha256, kind.signature, [stored(p) for p in paths])
            rec.written, rec.chunks, rec.units = tuple(paths), n, None
            write_s += time.perf_counter() - t1
        rec.times["embed"], rec.times["write"] = embed_s, write_s

    def _embed_in_parts(self, rec: _Rec) -> Iterator[_Rec]:
        """A file with more units than a slice, embedded a slice at a time: a record per slice with
        its units and their vectors, so neither the actor nor Ray's store holds the file's vectors at
        once. With the embedded store the driver gets them and writes each part as it comes
        (``Ingestor.part``); a writing worker writes them itself (``_embed_and_write_long``). A part
        the model rejects, or a model that stops, is the last."""
        n = len(rec.units)
        for start in range(0, n, UNITS_PER_EMBED_SLICE):
            piece = _Rec(rec.path, rec.kind, read=rec.read, units=rec.units[start:start + UNITS_PER_EMBED_SLICE],
                         times=dict(rec.times) if start == 0 else {}, part=(start, n))  # read and split: counted once
            self._embed_slice([piece])
            yield piece
            if piece.error or piece.stopped or piece.fatal:
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

    def _embed_or_mark(self, name: str, items: list, recs: list[_Rec]):
        """``items`` embedded; or None, ``recs`` marked stopped (the kind's model failed) or fatal (no
        replica answered)."""
        try:
            return self._embed(name, items)
        except ModelNotReady as exc:
            for r in recs:
                r.stopped = str(exc)
        except TritonUnavailable as exc:
            for r in recs:
                r.fatal = str(exc)
        return None

    def _embed(self, name: str, items: list):
        urls = self.plan.urls
        for tried in range(len(urls)):
            try:
                return embed_units(_kinds(self.plan, urls[self.at])[name], items, self.plan.batch_size)
            except (TritonUnavailable, ModelNotReady):
                if tried == len(urls) - 1:
                    raise
                self.at = (self.at + 1) % len(urls)
        raise AssertionError("unreachable")


def _can_read(paths: list[str], writable: list[str]) -> list[str]:
    """On one node: the paths it cannot read (or write, for ``writable``)."""
    return ([p for p in paths if not os.access(p, os.R_OK)]
            + [p for p in writable if not os.access(p, os.W_OK)])


def connect(address: str | None):
    """The ``ray`` module, connected: "auto" or an address joins a cluster; None starts a local one.
    Returns (ray, whether this call connected, so the caller disconnects)."""
    import ray  # noqa: PLC0415  (optional heavy dependency: only `indexer ingest --ray` loads it)

    if ray.is_initialized():
        return ray, False
    if address and "://" not in address and address != "auto":
        _reachable(address)  # ray.init would retry an address nobody listens on for minutes
    logging.getLogger("ray").setLevel(logging.WARNING)
    try:
        if address:
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        else:
            ray.init(log_to_driver=False, logging_level=logging.WARNING, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"at {address}" if address else "locally"
        raise RayUnavailable(f"could not start or join a Ray cluster {where}: {str(exc).splitlines()[0]}") from None
    return ray, True


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as exc:
        raise RayUnavailable(f"could not join the Ray cluster at {address}: {exc} (is `ray start --head` running there?)") from None


def check_nodes(ray, roots: list[Path], writable: list[Path]) -> None:
    """Refuse to start when a node cannot see the files (they must be on a filesystem every node mounts)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415  (optional: ray)

    probe = ray.remote(num_cpus=0)(_can_read)
    paths = [str(r) for r in roots if r.exists()]
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [(n, probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
             .remote(paths, [str(w) for w in writable])) for n in nodes]
    for node, ref in refs:
        try:
            missing = ray.get(ref, timeout=60)
        except (ray.exceptions.TaskUnschedulableError, ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError):
            # The node left after ray.nodes() still listed it (a node killed moments ago is "Alive"
            # until the cluster notices): it gets no work either, so there is nothing to check.
            continue
        if missing:
            raise RayUnavailable(f"Ray node {node.get('NodeManagerAddress', '?')} cannot access {missing[0]}: every node "
                                 "must see the files and the data dir at the same path (a shared filesystem)")


def ingest(store: Store, kinds: list[Kind], roots: list[Path], *, settings: Settings, urls: list[str],
           address: str | None, prune: bool = False, unavailable: dict | None = None,
           on_start: Callable[[int], None] | None = None, on_file: Callable[[FileOutcome], None] | None = None,
           stop: Callable[[], bool] | None = None, gone_ok: bool = False,
           confine_to: list[Path] | None = None, kb: str | None = None) -> IngestReport:
    """pipeline.ingest on a Ray cluster: same arguments, same report, plus per-stage costs. ``kb``: the
    knowledge base the kinds write (the workers build theirs for it)."""
    started = time.perf_counter()
    report = IngestReport()
    roots, by_kind, confine, done = listing(report, kinds, roots, unavailable=unavailable, gone_ok=gone_ok,
                                            confine_to=confine_to, on_start=on_start, on_file=on_file)
    ray, connected = connect(address)
    try:
        _run(ray, store, kinds, roots, by_kind, confine, done, report, settings=settings, urls=urls, prune=prune,
             stop=stop, confine_to=confine_to, kb=kb)
    except ray.exceptions.RayError as exc:  # what a task raised, or a cluster that went away: one line
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise RayUnavailable(f"the Ray pipeline failed: {lines[-1] if lines else type(exc).__name__}") from None
    finally:
        if connected:
            ray.shutdown()
    report.seconds = time.perf_counter() - started
    return report


def _run(ray, store, kinds, roots, by_kind, confine, done, report: IngestReport, *, settings: Settings, urls: list[str],
         prune: bool, stop, confine_to, kb: str | None) -> None:
    ingestors: dict[str, Ingestor] = {}
    for kind in kinds:
        if not (by_kind[kind.name] or prune):
            continue
        ing = Ingestor(store, kind, batch_size=settings.embed_batch_size, confine=confine)
        try:
            ing.open()
            kind.signature  # noqa: B018  (probed here, once, for every worker)
        except ModelNotReady as exc:
            ing.stopped(by_kind[kind.name], set(), report, exc)
            continue
        ingestors[kind.name] = ing
    files = [(f, name) for name in ingestors for f in by_kind[name]]
    write = workers_write(settings)
    rules = "apply" if write else "write"  # the driver's stage: the rules, and the writes the workers do not do
    stages = {s: {"items": 0, "seconds": 0.0} for s in ("read", "split", "embed", "write", "apply")}
    seen: set[str] = set()

    def emit(outcome: FileOutcome) -> None:
        seen.add(outcome.path)
        done(outcome)

    if files:
        thumbs = [kb_thumbnails(settings.data_dir, kb)] if "images" in ingestors else []
        for t in thumbs:
            t.mkdir(parents=True, exist_ok=True)
        check_nodes(ray, roots, thumbs)
        plan = make_plan(settings, ingestors, urls, confine_to=confine_to, kb=kb, write=write)
        for rec in _stream(ray, plan, files, settings):
            if stop is not None and stop():
                report.cancelled = True
                for ing in ingestors.values():
                    ing.abandon()  # a long file cut between its parts
                break
            _apply(rec, ingestors[rec.kind], report, emit, stages, by_kind, seen, rules)
    t0 = time.perf_counter()
    for name, ing in ingestors.items():
        if name not in report.stopped:
            ing.finish(roots, by_kind[name], report, emit, prune=prune)
    stages[rules]["seconds"] += time.perf_counter() - t0
    report.stages = {k: {"items": v["items"], "seconds": round(v["seconds"], 3)} for k, v in stages.items() if v["items"]}


def make_plan(settings: Settings, ingestors: dict[str, Ingestor], urls: list[str], *, confine_to: list[Path] | None,
              kb: str | None, write: bool) -> Plan:
    """The plan the workers get, from the opened ``ingestors`` (kind name -> Ingestor)."""
    return Plan(
        token=uuid.uuid4().hex, settings=settings,
        kinds={name: (tuple(_families(ing.kind)), ing.kind.signature) for name, ing in ingestors.items()},
        known={name: ing.known_paths() for name, ing in ingestors.items()},
        current={name: frozenset(s for s, f in ing.by_sha.items() if f.chunker == ing.kind.signature)
                 for name, ing in ingestors.items()},
        urls=tuple(urls), batch_size=settings.embed_batch_size,
        confine_to=tuple(confine_to) if confine_to is not None else None, kb=kb, write=write)


def _stream(ray, plan: Plan, files: list[tuple[Path, str]], settings: Settings):
    """The records coming out of the pipeline, in the order of ``files``."""
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # outcomes (and which path of a copy comes first) as a local run
    ctx.enable_progress_bars = False  # the CLI shows its own bar
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)  # "Progress bars disabled": by us
    # A run of fewer blocks than embed actors (a few files) is told it cannot use them all: it needs none more.
    warnings.filterwarnings("ignore", "The minimum number of concurrent actors", UserWarning)
    blocks = max(1, min(len(files) // FILES_PER_READ_BATCH, 1000))
    ds = ray.data.from_items([{"rec": pickle.dumps(_Rec(path, name))} for path, name in files], override_num_blocks=blocks)
    ds = ds.map_batches(read_and_split, fn_kwargs={"plan": plan}, batch_size=FILES_PER_READ_BATCH, num_cpus=1,
                        batch_format="numpy")
    actors = max(1, len(plan.urls) * settings.embed_concurrency)  # requests in flight per replica, as a local run
    ds = ds.map_batches(Embedder, fn_constructor_kwargs={"plan": plan}, batch_size=FILES_PER_EMBED_BATCH,
                        compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=EMBED_ACTOR_CPUS, batch_format="numpy")
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for raw in batch["rec"]:
            yield pickle.loads(raw)


def _apply(rec: _Rec, ing: Ingestor, report: IngestReport, emit, stages: dict, by_kind: dict, seen: set[str],
           rules: str = "write") -> None:
    """The driver's part: the rules and the writes (those the workers did not do), through the same
    Ingestor as a local run. ``rules``: the stage its time is counted in."""
    name = rec.kind
    if name in report.stopped:
        return  # counted as not indexed when its model stopped
    for stage in ("read", "split", "embed", "write"):
        if stage in rec.times:
            stages[stage]["seconds"] += rec.times[stage]
            stages[stage]["items"] += rec.count() if stage == "embed" else 1
    if rec.fatal:
        raise TritonUnavailable(rec.fatal)
    if rec.stopped:
        ing.stopped(by_kind[name], seen, report, ModelNotReady(rec.stopped))
        return
    report.truncated_chunks += rec.truncated
    t0 = time.perf_counter()
    outcomes: list[FileOutcome] = []
    if rec.outcome is not None:
        outcomes = [replace(rec.outcome, kind=name)]
    elif rec.part is not None:
        outcomes = ing.part(rec.read, *rec.part, rec.units, rec.vectors or [], rec.error)
    else:
        admitted = ing.admit(rec.read)
        if isinstance(admitted, FileOutcome):
            outcomes = [admitted]  # known content, or a copy of content written since this block was planned
            if rec.written is not None:  # ... which the copy's worker wrote again, with its own path
                ing.rewritten(rec.read.sha256)
        elif admitted is not None and (rec.units or rec.written is not None):
            job = _Job(rec.read.path, rec.read.sha256, rec.read.size, rec.read.mtime, rec.units or [],
                       ing.status_of(rec.read.path), vectors=rec.vectors or [], error=rec.error,
                       written=rec.written, chunks=rec.chunks)
            outcomes = ing.finished(job)
        elif admitted is not None:
            outcomes = _here(ing, rec.path)  # the content it matched is gone since: read and embed it here
    for o in outcomes:
        emit(o)
    stages[rules]["seconds"] += time.perf_counter() - t0
    stages[rules]["items"] += rec.part is None or rec.part[0] == 0  # a file, not each of its parts


def _here(ing: Ingestor, path: Path) -> list[FileOutcome]:
    job = ing._prepare(path)
    if not isinstance(job, _Job):
        return [replace(job, kind=ing.kind.name)] if job is not None else []
    embedded = embed_units(ing.kind, [u.item for u in job.units], ing.batch_size)
    job.vectors, job.error = embedded.vectors, next(iter(embedded.errors.values()), "")
    return ing.finished(job)


def _families(kind: Kind) -> list[str]:
    fams = getattr(kind, "families", None) or [kind.family]
    return [f.family for f in fams]
