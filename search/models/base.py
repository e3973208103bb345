"""What a model family is: its name, the Triton models it serves, the store vectors it fills and
the ingest kinds that use it, where its weights come from, how it is built and how it is called.

Client side only (numpy, tritonclient): the export code lives in ``search.models.export`` and is
imported by ``Family.build`` when a build runs, so serving never loads torch.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np


class WeightsUnavailable(Exception):
    """The model's weights cannot be reached; the message says how to supply them."""


@dataclass(frozen=True)
class BuildReport:
    family: str
    status: str  # "built" | "up to date" | "missing weights"
    detail: str


@dataclass(frozen=True)
class Vector:
    """One named vector a family stores per item."""

    kind: Literal["dense", "sparse", "multivector"] = "dense"
    dim: int | None = None  # None for dense: the built model's width (Family.dim); sparse has none
    distance: Literal["cosine", "dot"] = "cosine"  # how the model's scores compare vectors


@dataclass
class Encoded:
    """A family's vectors for a batch of items, keyed as ``Family.vectors``."""

    vectors: list[dict[str, object]]  # per item: dense [D] / multivector [n, D] arrays, sparse {token id: weight}
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per item: cut to the model's length


class Family:
    family: str  # e.g. "minilm": the registry key, build reports, the "models" payload tag
    display: str  # e.g. "MiniLM": in messages
    ensembles: tuple[str, ...]  # what callers ask Triton for
    steps: tuple[str, ...]  # the ensembles' composing models; the last one holds the build manifest
    kinds: dict[str, str] = {}  # ingest kind ("documents", "images") -> the ensemble that embeds its items
    optional: bool = False  # adds vectors to a kind another family embeds; the kind works without it
    vectors: dict[str, Vector] = {}  # store vector name -> what it holds
    source_setting: str  # the Settings field naming the weights, e.g. "clip_source"
    cli_option: str  # the `search models build` option overriding it, e.g. "--clip-source"
    source_help: str  # that option's help: what a source may be
    hub_hint: str  # the hub id to suggest when weights are missing
    export_module: str  # the module with build(family, repo, source): torch and co. live there

    @property
    def triton_models(self) -> tuple[str, ...]:
        return (*self.steps, *self.ensembles)

    def artifacts(self, repo: Path) -> list[Path]:
        """Files the export writes into the model repository."""
        raise NotImplementedError

    def is_built(self, repo: Path) -> bool:
        return all(p.exists() for p in self.artifacts(repo))

    def manifest_path(self, repo: Path) -> Path:
        return repo / self.steps[-1] / "1" / "build.json"

    def manifest(self, repo: Path) -> dict | None:
        """What the current build recorded (source, weights, checksums, ...), if it is complete."""
        return json.loads(self.manifest_path(repo).read_text()) if self.is_built(repo) else None

    def built_from(self, repo: Path) -> str | None:
        """The source the current build was exported from, if it is complete."""
        return (self.manifest(repo) or {}).get("source")

    def dim(self, repo: Path) -> int:
        """The embedding width the export recorded for the built model."""
        return int(json.loads(self.manifest_path(repo).read_text())["dim"])

    def vector_dims(self, repo: Path) -> dict[str, int | None]:
        """Store vector name -> width (None: sparse), resolving built-model widths from ``repo``."""
        return {name: v.dim if v.dim or v.kind == "sparse" else self.dim(repo) for name, v in self.vectors.items()}

    def source(self, settings) -> str:
        """The configured weight source."""
        return getattr(settings, self.source_setting)

    def build(self, repo: Path, source: str, *, force: bool = False) -> BuildReport:
        """Export the weights at ``source`` into ``repo`` unless the files there already come from it."""
        if not force and self.built_from(repo) == source:
            return BuildReport(self.family, "up to date", f"from {source}")
        export = importlib.import_module(self.export_module)  # here, not at import: it needs torch & co.
        return export.build(self, repo, source)

    def encode(self, client, items: list, **options) -> Encoded:
        """The family's vectors for ``items`` from its served ensembles."""
        raise NotImplementedError(f"{self.family} serves no vectors")


def image_tensor(images: list[bytes]) -> np.ndarray:
    """A [batch, 1] BYTES tensor of encoded images (JPEG, PNG, ...)."""
    arr = np.empty((len(images), 1), dtype=np.object_)
    for i, data in enumerate(images):
        arr[i, 0] = bytes(data)
    return arr
