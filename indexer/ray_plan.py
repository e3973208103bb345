"""What the Ray executor's driver and workers share: the run's ``Plan``, a file's record on its way
through the stages (``_Rec``, pickled whole between them), and what a worker process keeps per plan
(each replica's kinds with their Triton clients, the stored-file maps)."""

from __future__ import annotations

import atexit
import pickle
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from indexer.confine import Confinement
from indexer.kinds import Kind, Loaded, Unit, make_kind
from indexer.report import FileOutcome
from indexer.stages import Read
from search.config import Settings
from search.errors import ServiceError
from search.models import family
from search.store import StoredFile
from search.triton.client import TritonClient, client_options


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


def _stored(plan: Plan) -> dict[str, dict[str, StoredFile]]:
    return _recent(_STORED, plan.token,
                   lambda: {name: {f.sha256: f for f in known.values()} for name, known in plan.known.items()})
