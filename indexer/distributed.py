"""The Ray executor's driver (`indexer ingest --ray`): the engine's stages (indexer/stages.py) spread
over a Ray cluster (indexer/ray_workers.py); content rules and the remaining writes are applied here
by the same engine as a local run (indexer/engine.py).

    driver: listing ──► blocks of paths ──► read+split (map_batches tasks, CPU; scans left to read)
            ──► read scans (OCR) + split them, embed (actor pool, one or more per Triton replica, failing
                over between them) [──► write new content: Qdrant server]
            ──► driver: rules + store writes

Files and the data dir must be at the same path on every node (checked first:
indexer/ray_cluster.py). With a Qdrant server the embed
actors write new content themselves; what needs one view of the store (known content, paths the
rules changed since planning, prune) stays on the driver. With the embedded store the driver writes
everything, a long file arriving in slices. Content-derived ids make a block run twice harmless."""

from __future__ import annotations

import logging
import pickle
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from indexer.confine import Confinement
from indexer.engine import Ingestor, listing
from indexer.kinds import Kind
from indexer.ray_cluster import LOOPBACK, RayUnavailable, check_nodes, connect, loopback
from indexer.ray_plan import Plan, _pack, _Rec
from indexer.ray_workers import (
    EMBED_ACTOR_CPUS,
    FILES_PER_EMBED_BATCH,
    FILES_PER_READ_BATCH,
    UNITS_PER_EMBED_SLICE,
    Embedder,
    read_and_split,
)
from indexer.ray_write import workers_write, write_new
from indexer.report import FileOutcome, IngestReport
from indexer.stages import FileJob, embed_units
from search.config import Settings
from search.errors import ModelNotReady, TritonUnavailable
from search.store import Store, kb_thumbnails

# Importable from here, as before the executor's worker side and cluster had modules of their own.
__all__ = ["LOOPBACK", "UNITS_PER_EMBED_SLICE", "Embedder", "RayUnavailable", "_Rec", "_pack", "connect", "ingest",
           "loopback", "make_plan", "read_and_split", "write_new"]


def ingest(store: Store, kinds: list[Kind], roots: list[Path], *, settings: Settings, urls: list[str],
           address: str | None, prune: bool = False, unavailable: dict | None = None,
           on_start: Callable[[int], None] | None = None, on_file: Callable[[FileOutcome], None] | None = None,
           stop: Callable[[], bool] | None = None, gone_ok: bool = False,
           confine_to: list[Path] | Confinement | None = None, kb: str | None = None) -> IngestReport:
    """pipeline.ingest on a Ray cluster: same arguments, same report, plus per-stage costs. ``kb``: the
    knowledge base the kinds write (the workers build theirs for it)."""
    started = time.perf_counter()
    report = IngestReport()
    roots, by_kind, confine, done = listing(report, kinds, roots, unavailable=unavailable, gone_ok=gone_ok,
                                            confine_to=confine_to, on_start=on_start, on_file=on_file)
    ray, connected = connect(address)
    try:
        _run(ray, store, kinds, roots, by_kind, confine, done, report, settings=settings, urls=urls, prune=prune,
             stop=stop, kb=kb)
    except ray.exceptions.RayError as exc:  # what a task raised, or a cluster that went away: one line
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise RayUnavailable(f"the Ray pipeline failed: {lines[-1] if lines else type(exc).__name__}") from None
    finally:
        if connected:
            ray.shutdown()
    report.seconds = time.perf_counter() - started
    return report


def _run(ray, store, kinds, roots, by_kind, confine, done, report: IngestReport, *, settings: Settings, urls: list[str],
         prune: bool, stop, kb: str | None) -> None:
    ingestors: dict[str, Ingestor] = {}
    for kind in kinds:
        if not (by_kind[kind.name] or prune):
            continue
        ing = Ingestor(store, kind, batch_size=settings.embed_batch_size, confine=confine, whole=True)
        try:
            ing.open()
            kind.signature, kind.read_signature  # noqa: B018  (probed here, once, for every worker)
        except ModelNotReady as exc:
            ing.stopped(len(by_kind[kind.name]), report, exc)
            continue
        ingestors[kind.name] = ing
    files = [(f, name) for name in ingestors for f in by_kind[name]]
    write = workers_write(settings)
    rules = "apply" if write else "write"  # the driver's stage: the rules, and the writes the workers do not do
    stages = {s: {"items": 0, "seconds": 0.0} for s in ("read", "split", "ocr", "embed", "write", "apply")}
    seen: set[str] = set()

    def emit(outcome: FileOutcome) -> None:
        seen.add(outcome.path)
        done(outcome)

    if files:
        thumbs = [kb_thumbnails(settings.data_dir, kb)] if "images" in ingestors else []
        for t in thumbs:
            t.mkdir(parents=True, exist_ok=True)
        check_nodes(ray, roots, thumbs)
        plan = make_plan(settings, ingestors, urls, confine_to=confine, kb=kb, write=write)
        parts: dict[str, FileJob | None] = {}  # long files arriving in parts: path -> its job (None: not admitted)
        for rec in _stream(ray, plan, files, settings):
            if stop is not None and stop():
                report.cancelled = True
                for ing in ingestors.values():
                    ing.abandon()  # a long file cut between its parts
                break
            ing = ingestors[rec.kind]
            if rec.kind in report.stopped:
                continue  # counted as not indexed when its model stopped
            try:
                _apply(rec, ing, report, emit, stages, parts, rules)
            except ModelNotReady as exc:  # as a local run stops the kind
                ing.stopped(sum(str(f) not in seen for f in by_kind[rec.kind]), report, exc)
            except TritonUnavailable:  # no replica answered within the wait: the files completed stay, as locally
                for each in ingestors.values():
                    each.abandon()
                    each.writer.flush()
                raise
    t0 = time.perf_counter()
    for name, ing in ingestors.items():
        if name not in report.stopped:
            ing.finish(roots, by_kind[name], report, emit, prune=prune)
    stages[rules]["seconds"] += time.perf_counter() - t0
    report.stages = {k: {"items": v["items"], "seconds": round(v["seconds"], 3)} for k, v in stages.items() if v["items"]}


def make_plan(settings: Settings, ingestors: dict[str, Ingestor], urls: list[str], *,
              confine_to: list[Path] | Confinement | None,
              kb: str | None, write: bool) -> Plan:
    """The plan the workers get, from the opened ``ingestors`` (kind name -> Ingestor)."""
    return Plan(
        token=uuid.uuid4().hex, settings=settings,
        kinds={name: (tuple(_families(ing.kind)), ing.kind.signature, ing.kind.read_signature)
               for name, ing in ingestors.items()},
        known={name: {p: f for p in ing.ledger.by_path if (f := ing.ledger.known(p)) is not None}
               for name, ing in ingestors.items()},
        current={name: ing.ledger.current() for name, ing in ingestors.items()},
        urls=tuple(urls), batch_size=settings.embed_batch_size,
        confine=confine_to if confine_to is None or isinstance(confine_to, Confinement) else Confinement(list(confine_to)),
        kb=kb, write=write)


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


def _apply(rec: _Rec, ing: Ingestor, report: IngestReport, emit, stages: dict, parts: dict[str, FileJob | None],
           rules: str = "write") -> None:
    """The driver's part: the rules and the writes (those the workers did not do), through the same
    engine as a local run. ``parts``: the jobs of long files arriving in parts (the embedded store),
    by path. ``rules``: the stage its time is counted in."""
    for stage in ("read", "split", "ocr", "embed", "write"):
        if stage in rec.times:
            stages[stage]["seconds"] += rec.times[stage]
            stages[stage]["items"] += rec.count() if stage == "embed" else 1
    if rec.failure is not None:
        raise rec.failure
    report.truncated_chunks += rec.truncated
    t0 = time.perf_counter()
    start, n = rec.part or (0, len(rec.units or ()))
    outcomes: list[FileOutcome] = []
    if rec.outcome is not None:
        outcomes = [replace(rec.outcome, kind=rec.kind)]
    elif rec.written is not None:
        outcomes = _written_by_worker(ing, rec)
    elif rec.units and start:
        outcomes = _arrived(ing, parts.get(rec.read.path), rec, start, n, parts)
    else:
        admitted = ing.ledger.admit(rec.read)
        if isinstance(admitted, FileOutcome):
            outcomes = [admitted]  # known content, or a copy of content written since this block was planned
        elif admitted is not None and rec.units:
            outcomes = _arrived(ing, ing.begin(rec.read, [None] * n), rec, start, n, parts)
        elif admitted is not None:
            outcomes = _here(ing, rec.path)  # the content it matched is gone since: read and embed it here
        if rec.part and admitted is not rec.read:
            parts[rec.read.path] = None  # its later parts are dropped
    for o in outcomes:
        emit(o)
    stages[rules]["seconds"] += time.perf_counter() - t0
    stages[rules]["items"] += start == 0  # a file, not each of its parts


def _arrived(ing: Ingestor, job: FileJob | None, rec: _Rec, start: int, n: int, parts: dict) -> list[FileOutcome]:
    """Units of ``job`` embedded on a worker: a whole file, or one part of a long one (parts in order;
    a part the model rejected is the last that comes)."""
    if job is None:
        return []
    end = start + len(rec.units)
    job.units[start:end] = rec.units
    last = end == n or bool(rec.error)
    if last:
        parts.pop(job.path, None)
    else:
        parts[job.path] = job
    return ing.arrived(job, range(start, end), rec.vectors or [None] * len(rec.units), rec.error, last=last)


def _written_by_worker(ing: Ingestor, rec: _Rec) -> list[FileOutcome]:
    """New content a worker wrote itself, with the paths of the store's view when the run was planned;
    known content or a copy met since is put back as the store held it."""
    admitted = ing.ledger.admit(rec.read)
    if isinstance(admitted, FileOutcome):
        ing.ledger.restore(rec.read.sha256)
        return [admitted]
    if admitted is None:
        return []
    job = FileJob(rec.read.path, rec.read.sha256, rec.read.size, rec.read.mtime, [], ing.ledger.status_of(rec.read.path),
                  signature=rec.signature)
    return ing.ledger.stored(job, ing.ledger.paths_for(job), rec.chunks, written=rec.written)


def _here(ing: Ingestor, path: Path) -> list[FileOutcome]:
    job = ing.start(path)
    if not isinstance(job, FileJob):
        return [replace(job, kind=ing.kind.name)] if job is not None else []
    embedded = embed_units(ing.kind, [u.item for u in job.units], ing.batch_size)
    return ing.arrived(job, range(len(job.units)), embedded.vectors, next(iter(embedded.errors.values()), ""))


def _families(kind: Kind) -> list[str]:
    fams = [*(getattr(kind, "families", None) or [kind.family]), *getattr(kind, "readers", ())]
    return [f.family for f in fams]
