"""The stages one file goes through, as plain functions both executors run (indexer/engine.py):
read -> load -> read its text (a model: OCR) -> units -> embed (one batching policy) -> points. No
threads, no Ray, no store writes."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from qdrant_client import models

from indexer.confine import OUTSIDE, Confinement, Refused, unreadable
from indexer.kinds import Embedded, Kind, Loaded, Unit
from indexer.loaders import read_bytes
from indexer.report import FAILED, UNCHANGED, FileOutcome
from search.paths import stored
from search.store import PARTIAL, StoredFile, folders_of, point_id

SORT_WINDOW = 4  # requests whose units are sorted by size together
LOOKUP_BATCH = 256  # paths whose stored records one query reads (the unchanged checks of the next files)

T = TypeVar("T")


@dataclass(frozen=True)
class Read:
    """A file as the first stage read it: its content's hash and bytes (``data``; empty once it
    has been split, when the bytes need not travel further)."""
    path: str
    sha256: str
    size: int
    mtime: float
    data: bytes = b""


@dataclass
class FileJob:
    """New content on its way to the store: its units, and their vectors as they are embedded."""
    path: str
    sha256: str
    size: int
    mtime: float
    units: list[Unit]
    status: str
    vectors: list = field(default_factory=list)
    remaining: int = 0
    copies: list[tuple[str, str]] = field(default_factory=list)  # other paths met with it in this run: (path, status)
    error: str = ""  # the model rejected one of its units
    # Units other than 0 embedded and not written yet, and their vector values; ``streamed``: some
    # were written before the file was complete (indexer/writer.py).
    ready: list[int] = field(default_factory=list)
    ready_values: int = 0
    streamed: bool = False
    signature: str = ""  # what its points were written under, when its units are not here (``signature_of``)

    @classmethod
    def of(cls, got: Read, units: list[Unit], status: str = "") -> FileJob:
        return cls(got.path, got.sha256, got.size, got.mtime, units, status, [None] * len(units), len(units))


def current(kind: Kind, chunker: str) -> bool:
    """Whether content stored under ``chunker`` is what ``kind`` makes now: its signature, or for a
    document whose text OCR read, its read_signature (which extends it with the reader's weights:
    only such a chunker has the reader asked who it is)."""
    return chunker == kind.signature or (chunker.startswith(kind.signature) and chunker == kind.read_signature)


def signature_of(kind: Kind, job: FileJob) -> str:
    """The signature ``job``'s points are written under: the read_signature for a document OCR read,
    else the kind's."""
    if job.signature:
        return job.signature
    read = next((u.read for u in job.units if u is not None), False)
    return kind.read_signature if read and kind.read_signature else kind.signature


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
    if seen and seen.size == st.st_size and seen.mtime == st.st_mtime and current(kind, seen.chunker):
        return FileOutcome(key, UNCHANGED, chunks=seen.chunks)
    try:  # confined: the opened file is checked again, so a symlink swapped in since cannot lead out
        data = confine.read(path, kind.max_bytes) if confine else read_bytes(path, kind.max_bytes)
    except (*kind.errors, Refused) as exc:
        return FileOutcome(key, FAILED, str(exc))
    return Read(key, hashlib.sha256(data).hexdigest(), st.st_size, st.st_mtime, data)


def split(got: Read, kind: Kind, stop: Callable[[], bool] | None = None) -> list[Unit] | FileOutcome:
    """Stages 2 to 4 in one call, as a local run runs them on the thread that read the file: decode
    (``load``), read the text in its scans (``read_text``), and split it into the units its model
    embeds (``units``). ``stop``: asked as a long file is read (its scans' pages); Cancelled comes
    out when it says so."""
    loaded = load(got, kind, stop)
    if not isinstance(loaded, FileOutcome) and loaded.to_read:
        loaded = read_text(loaded, kind)
    return loaded if isinstance(loaded, FileOutcome) else units_of(loaded, kind)


def load(got: Read, kind: Kind, stop: Callable[[], bool] | None = None) -> Loaded | FileOutcome:
    """Stage 2 (CPU): decode a file's content; what a model must still read in it is ``to_read``."""
    try:
        return kind.load(Path(got.path), got.data, got.sha256, stop=stop)
    except kind.errors as exc:
        return FileOutcome(got.path, FAILED, str(exc))


def read_text(loaded: Loaded, kind: Kind) -> Loaded | FileOutcome:
    """Stage 3 (a model: OCR): the text in ``loaded``'s scans, read through ``kind``'s Triton. What the
    server raises as a whole (TritonUnavailable, ModelNotReady) comes out, for the executor to wait,
    fail over to another replica or stop the kind, as it does for embedding."""
    try:
        kind.read(loaded)
    except kind.errors as exc:
        return FileOutcome(str(loaded.path), FAILED, str(exc))
    return loaded


def units_of(loaded: Loaded, kind: Kind) -> list[Unit] | FileOutcome:
    """Stage 4 (CPU): a file's content, its text read, as the units its model embeds."""
    try:
        units = kind.units(loaded)
    except kind.errors as exc:
        return FileOutcome(str(loaded.path), FAILED, str(exc))
    if not units:
        return FileOutcome(str(loaded.path), FAILED, "nothing to index")
    return units


def requests(members: list[T], item: Callable[[T], object], kind: Kind, size: int) -> Iterator[list[T]]:
    """The embed stage's batching policy: ``members`` sorted by their items' size, so each request pads
    little (on CPU padding costs more than batching saves), in requests of ``size``."""
    members = sorted(members, key=lambda m: kind.sort_key(item(m)))
    for k in range(0, len(members), size):
        yield members[k:k + size]


def last_requests(units: int, batch_size: int, slots: int) -> int:
    """The request size for a run's last units: as many requests as fill the slots evenly, so the
    model's instances finish together instead of one running the last request alone."""
    n = -(-max(units, 1) // batch_size)
    n = -(-n // slots) * slots
    return max(1, -(-units // n))


def embed_units(kind: Kind, items: list, batch_size: int) -> Embedded:
    """The embed stage in one call: ``items`` embedded in the requests ``requests`` makes."""
    out = Embedded([None] * len(items))
    for idx in requests(list(range(len(items))), items.__getitem__, kind, batch_size):
        got = kind.embed([items[i] for i in idx])
        out.truncated += got.truncated
        for j, i in enumerate(idx):
            out.vectors[i] = got.vectors[j]
            if j in got.errors:
                out.errors[i] = got.errors[j]
    return out


def content_paths(job: FileJob, previous: StoredFile | None) -> list[str]:
    """The paths new content is written with: its file's, those of copies met while it was embedded,
    and those of the same content stored with other settings (``previous``) that still exist."""
    return list(dict.fromkeys([job.path, *(p for p, _ in job.copies), *existing(previous.paths if previous else ())]))


def build_points(job: FileJob, paths: list[str], signature: str,
                 units: Iterable[int] | None = None) -> list[models.PointStruct]:
    """The write stage: the points of new content, one per unit (``units``: those units only), in the order
    given (all: unit order, unit 0 first). Ids come from the content, the signature and the unit
    number, so writing them again duplicates nothing."""
    kept = [stored(p) for p in paths]  # names that are not UTF-8 kept losslessly (search/paths.py)
    common = {"path": kept[0], "paths": kept, "folders": sorted({f for p in kept for f in folders_of(p)}),
              "suffix": suffix(job.path), "n_chunks": len(job.units), "sha256": job.sha256, "size": job.size,
              "mtime": job.mtime, "chunker": signature, PARTIAL: 0.0}
    assert len(job.vectors) == len(job.units)
    return [
        # Built, not validated: ids, lists of floats and SparseVectors are made right above, and
        # validating multivector (ColBERT) rows (a 1024-float list per token) cost more than the upsert.
        models.PointStruct.model_construct(id=point_id(job.sha256, signature, i), vector=job.vectors[i],
                                           payload={**common, "chunk": i, **job.units[i].payload})
        for i in (range(len(job.units)) if units is None else units)
    ]


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


def values(vector) -> int:
    """The vector values in one unit's vectors (what a write request's memory follows)."""
    total = 0
    for v in vector.values() if isinstance(vector, dict) else [vector]:
        if isinstance(v, np.ndarray):
            total += v.size
        elif isinstance(v, list):
            total += len(v) * (len(v[0]) if v and isinstance(v[0], list) else 1)
    return total


def suffix(path: str) -> str:
    return Path(path).suffix.lower()


def existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.exists(p)]
