"""What an ingest run reports: one outcome per file, and the run's totals."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from search.paths import path_bytes, readable

INDEXED, UNCHANGED, UPDATED, FAILED, PRUNED = "indexed", "unchanged", "updated", "failed", "pruned"


@dataclass(frozen=True)
class FileOutcome:
    path: str
    status: str
    reason: str = ""
    chunks: int = 0
    embedded: int = 0  # units sent through the model (0 when vectors were reused)
    kind: str = ""
    still_failing: bool = False  # failed the same way in the last run, and the file is unchanged since


# Outcomes kept one by one (besides every failure): a run over a large library keeps its totals,
# not a record per file, so its memory does not grow with the number of files.
KEEP_OUTCOMES = 10_000


@dataclass
class IngestReport:
    # The first KEEP_OUTCOMES files' outcomes and every failure; the totals count every file (``add``).
    outcomes: list[FileOutcome] = field(default_factory=list)
    not_kept: int = 0  # outcomes counted in the totals but not kept in ``outcomes``
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, why): not read at all
    unavailable: dict[str, tuple[int, str]] = field(default_factory=dict)  # kind -> (files, why)
    stopped: dict[str, str] = field(default_factory=dict)  # kind -> why its model failed mid-run
    cancelled: bool = False  # stopped on request between two files: what was written is whole
    seconds: float = 0.0
    truncated_chunks: int = 0
    # A distributed run's stages: name -> {"items": files or units, "seconds": busy seconds over all
    # workers}; items/seconds is one worker's throughput in that stage.
    stages: dict[str, dict] = field(default_factory=dict)

    _counts: Counter = field(default_factory=Counter, repr=False)
    _by_kind: Counter = field(default_factory=Counter, repr=False)
    _embedded: int = field(default=0, repr=False)

    def add(self, outcome: FileOutcome) -> None:
        """Count one file's outcome; keep it while fewer than KEEP_OUTCOMES are kept, or if it failed."""
        self._counts[outcome.status] += 1
        self._embedded += outcome.embedded
        if outcome.status in (INDEXED, UPDATED, UNCHANGED):
            self._by_kind[outcome.kind] += 1
        if len(self.outcomes) < KEEP_OUTCOMES or outcome.status == FAILED:
            self.outcomes.append(outcome)
        else:
            self.not_kept += 1

    @property
    def counts(self) -> Counter:
        return Counter(self._counts)

    @property
    def failures(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def skipped(self) -> int:
        return len(self.skipped_files)

    @property
    def skipped_by_reason(self) -> dict[str, int]:
        return dict(Counter(why for _, why in self.skipped_files).most_common())

    @property
    def still_failing(self) -> int:
        return sum(o.still_failing for o in self.failures)

    @property
    def embedded_chunks(self) -> int:
        return self._embedded

    def as_dict(self) -> dict:
        c = self.counts
        return {
            **{k: c.get(k, 0) for k in (INDEXED, UNCHANGED, UPDATED, FAILED, PRUNED)},
            "skipped": self.skipped, "skipped_by_reason": self.skipped_by_reason, "still_failing": self.still_failing,
            "embedded_chunks": self.embedded_chunks,
            "truncated_chunks": self.truncated_chunks, "seconds": round(self.seconds, 3),
            "by_kind": dict(self._by_kind),
            "unavailable": {k: {"files": n, "reason": why} for k, (n, why) in self.unavailable.items()},
            "stopped": dict(self.stopped), "cancelled": self.cancelled,
            "failures": [{"path": readable(o.path), "path_bytes": path_bytes(o.path), "reason": o.reason,
                          "still_failing": o.still_failing} for o in self.failures],
            **({"stages": {k: {**v, "per_second": round(v["items"] / v["seconds"], 1) if v["seconds"] else None}
                           for k, v in self.stages.items()}} if self.stages else {}),
        }
