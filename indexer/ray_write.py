"""The Ray executor's write stage on the workers, when they write to a Qdrant server: new content's
points through the engine and its one writer (indexer/writer.py), as a local run writes them, with
the paths the store held when the run was planned; the driver applies the content rules."""

from __future__ import annotations

import time

from indexer.engine import Ingestor
from indexer.kinds import Kind
from indexer.ray_plan import Plan, _Rec, _stored
from indexer.report import FileOutcome
from indexer.stages import FileJob, content_paths, signature_of
from search.config import Settings
from search.store import Store, StoredFile


def workers_write(settings: Settings) -> bool:
    """Whether the workers write new content themselves: only to a Qdrant server, which many
    processes may open (the embedded store admits one)."""
    return settings.store_backend == "server"


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
