"""The one writer of new content, on the driver and on Ray workers alike: every file's other units
before its unit 0 (the file-complete marker), long files streamed under one memory budget.

Other units are marked ``partial`` until unit 0 is written, so a stop between leaves them to the
next run's sweep (indexer/ledger.py). A long file's units are written as they are embedded, every
WRITE_VALUES vector values, so memory follows a request, not a file."""

from __future__ import annotations

import time

from qdrant_client import models

from indexer.kinds import Kind
from indexer.stages import FileJob, bounded_runs, build_points, signature_of, values
from search.paths import stored
from search.store import PARTIAL, Store

WRITE_BATCH = 256  # points buffered before they are written
# Vector values per write request, and held for a long file before its units are written. The engine's
# memory follows the request: one request holding all of a long document's points with multivectors
# (ColBERT rows: a 1,024-value row per token) would take gigabytes.
WRITE_VALUES = 4_000_000


class Writer:
    """Writes the points of one kind's new content, buffered up to ``batch`` points."""

    def __init__(self, store: Store, kind: Kind, batch: int | None = None) -> None:
        self.store, self.kind = store, kind
        self.batch = batch or WRITE_BATCH
        self._rest: list[models.PointStruct] = []
        self._heads: list[models.PointStruct] = []

    def add(self, job: FileJob, paths: list[str]) -> None:
        """A file whose units are all embedded: its points (those not streamed yet), buffered."""
        points = build_points(job, paths, signature_of(self.kind, job), [i for i, v in enumerate(job.vectors) if v is not None])
        self._rest += points[1:]
        self._heads += points[:1]
        if job.streamed:  # its other points went earlier, with the paths known then: complete them
            self.flush()
            self.store.mark_complete(self.kind.schema.name, job.sha256, signature_of(self.kind, job), [stored(p) for p in paths])
        elif len(self._rest) + len(self._heads) >= self.batch:
            self.flush()

    def embedded(self, job: FileJob, units: range | list[int]) -> bool:
        """``units`` of an unfinished file were embedded; whether its embedded other units now hold
        the budget's vector values (``stream`` them)."""
        for i in units:
            if i and job.vectors[i] is not None:
                job.ready.append(i)
                job.ready_values += values(job.vectors[i])
        return job.ready_values >= WRITE_VALUES

    def stream(self, job: FileJob, paths: list[str]) -> None:
        """Write an unfinished file's embedded units (not unit 0) now, and let go of their vectors;
        ``add`` completes the file."""
        write_marked(self.store, self.kind.schema.name, build_points(job, paths, signature_of(self.kind, job), job.ready), [])
        for i in job.ready:
            job.vectors[i] = None
        job.ready, job.ready_values, job.streamed = [], 0, True

    def discard(self, job: FileJob) -> None:
        """A file that will not complete: what was streamed of it goes now, not at the next sweep."""
        if job.streamed:
            self.store.delete_chunking(self.kind.schema.name, job.sha256, signature_of(self.kind, job))

    def flush(self) -> None:
        """Write buffered points: all later units first, then the unit-0 points that mark their
        files complete. Every other store write flushes first, so it sees these points."""
        rest, heads, self._rest, self._heads = self._rest, self._heads, [], []
        write_marked(self.store, self.kind.schema.name, rest, heads)


def write_marked(store: Store, collection: str, rest: list[models.PointStruct], heads: list[models.PointStruct],
                 batch: int | None = None) -> None:
    """Write files' points, every unit but unit 0 (``rest``) first, then the unit-0 points (``heads``)
    that mark their files complete. ``rest`` is written marked ``partial`` (the time; set on the
    points given), and the points of the files whose unit 0 is in ``heads`` lose the mark once it is
    written. ``batch``: points per request (None: no limit); a request also holds at most
    WRITE_VALUES vector values."""
    mark = time.time()
    for p in rest:
        p.payload[PARTIAL] = mark
    for points in (rest, heads):
        for part in bounded_runs(points, lambda p: values(p.vector), WRITE_VALUES, batch):
            store.upsert(collection, part)
    done = {_chunking(p) for p in heads}
    if ids := [p.id for p in rest if _chunking(p) in done]:
        store.clear_partial(collection, ids)


def _chunking(point: models.PointStruct) -> tuple[str, str]:
    return point.payload["sha256"], point.payload["chunker"]
