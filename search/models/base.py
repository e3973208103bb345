"""What a model family is: its name, the Triton models it serves, the store vectors it fills and
the ingest kinds that use it, where its weights come from, how it is built and how it is called.

Client side only (numpy, tritonclient): the export code lives in ``search.models.export`` and is
imported by ``Family.build`` when a build runs, so serving never loads torch.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np


class WeightsUnavailable(Exception):
    """The model's weights cannot be reached; the message says how to supply them."""


@dataclass(frozen=True)
class BuildReport:
    family: str
    status: str  # "built" | "up to date" | "missing weights" | "refused" (a precision the family does not offer)
    detail: str


PRECISIONS = ("fp32", "int8")  # what `search models build --precision` takes; fp32 is the default
# int8 is called measured only with these figures (int8 vs fp32 on the same served path, real
# weights, ../shared/data), each within its tolerance: STS-B dev Spearman x100 and MS MARCO nDCG@10 x100.
INT8_TOLERANCE = {"stsb_spearman": 0.5, "msmarco_ndcg10": 1.0}
# The least cosine an int8 graph's vectors keep with fp32's: `search models verify` holds served int8
# models to it, and the int8 build quantizes a graph that meets it on the check inputs.
INT8_MIN_COSINE = 0.98


class Int8Rejected(RuntimeError):
    """The int8 graph missed INT8_MIN_COSINE or batch invariance: the build refuses it (the fp32 files stay)."""


@dataclass(frozen=True)
class Int8Quality:
    """int8 against fp32, measured by a quality script on real weights (the figures x100)."""

    weights_sha256: str  # the weights file measured: other weights are unmeasured
    figures: dict[str, tuple[float, float]]  # metric -> (fp32, int8)
    measured_by: str  # the script and date

    def within_tolerance(self) -> bool:
        return all(m in self.figures and self.figures[m][0] - self.figures[m][1] <= tol
                   for m, tol in INT8_TOLERANCE.items())

    def summary(self) -> str:
        return ", ".join(f"{m} {fp32:.2f} -> {int8:.2f}" for m, (fp32, int8) in self.figures.items())


@dataclass(frozen=True)
class Vector:
    """One named vector a family stores per item."""

    kind: Literal["dense", "sparse", "multivector"] = "dense"
    dim: int | None = None  # None for dense: the built model's width (Family.dim); sparse has none
    distance: Literal["cosine", "dot"] = "cosine"  # how the model's scores compare vectors


class TextVector(NamedTuple):
    """One text's unit vector and the tokens the model saw (start and end tokens included): what a
    query, or a one-text embeddings request, gets from a text ensemble."""

    vector: np.ndarray
    n_tokens: int


def text_vectors(out: dict[str, np.ndarray]) -> list[TextVector]:
    """Per text, from a text ensemble's EMBEDDING and NUM_TOKENS outputs."""
    return [TextVector(v, int(n)) for v, n in zip(out["EMBEDDING"], out["NUM_TOKENS"].reshape(-1), strict=True)]


@dataclass
class Encoded:
    """A family's vectors for a batch of items, keyed as ``Family.vectors``."""

    vectors: list[dict[str, object]]  # per item: dense [D] / multivector [n, D] arrays, sparse {token id: weight}
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))  # per item: cut to the model's length


@dataclass(frozen=True)
class EmbeddingModel:
    """One model `POST /v1/embeddings` offers (a family lists its own in ``Family.embedding_models``)."""

    name: str  # what clients send as `model`
    family: str  # the model family (search.models)
    ensemble: str  # the Triton model that computes it
    input: str  # "text" or "image" (base64)
    dim: int | None  # None: the built model's width (when it depends on the weights)
    aliases: tuple[str, ...] = ()
    description: str = ""
    listed: int = 0  # its place in GET /v1/models (the order clients have always seen)


@dataclass(frozen=True)
class Ranking:
    """How a document mode ranks the store: by store vector ``vector`` against ``query`` (dense: a
    list, sparse: {token id: weight}, multivector: rows), scores times ``scale``; with ``fused``, the
    candidates are first the (store vector, query) searches fused by rank (RRF)."""

    vector: str
    query: object
    scale: float = 1.0
    fused: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class SearchQuery:
    """A document query as the family that runs its mode takes it: the item for its query model's
    batcher (``Resources.batchers[model]``), and how the batcher's answer ranks the documents
    (None: the query has no evidence to rank by, e.g. nothing but special tokens for a lexical mode)."""

    model: str
    item: object
    rank: Callable[[object], Ranking | None]


class Family:
    family: str  # lower-case, e.g. "ocr": the registry key, build reports, the "models" payload tag
    display: str  # e.g. "OCR": in messages
    ensembles: tuple[str, ...]  # what callers ask Triton for
    steps: tuple[str, ...]  # the ensembles' composing models; the last one holds the build manifest
    kinds: dict[str, str] = {}  # ingest kind ("documents", "images") -> the ensemble that embeds its items
    optional: bool = False  # adds vectors to a kind another family embeds; the kind works without it
    vectors: dict[str, Vector] = {}  # store vector name -> what it holds
    # The search modes that need this family served (document modes such as "semantic"; "entail"):
    # mode -> the store vector its hits are ranked by (None: it ranks no stored vector)
    modes: dict[str, str | None] = {}
    mode_help: dict[str, str] = {}  # mode -> what the faces' help says it does
    best_mode: str | None = None  # the mode "auto" runs in when this family is the best one served
    source_setting: str  # the Settings field naming the weights, "<family>_source"
    cli_option: str  # the `search models build` option overriding it, "--<family>-source"
    source_help: str  # that option's help: what a source may be
    hub_hint: str  # the hub id to suggest when weights are missing
    doc_page: str = ""  # the docs/ page on building it, where it has one
    build_hint: str = ""  # what `search models build --<family>-source DIR` needs, when no default source exists
    export_module: str  # the module with build(family, repo, source, precision, allow_unmeasured): torch & co. live there
    # What `--precision` may ask of this family: fp32 always; "int8" only where the export can
    # quantize it. Whether int8 counts as measured is int8_quality's to say (precision_status).
    precisions: tuple[str, ...] = ("fp32",)
    int8_quality: Int8Quality | None = None  # measured int8 quality for specific weights, if any
    # The weight products an int8 build keeps float (fragments of their names, quantize_per_token);
    # empty: the first that narrows
    int8_float: tuple[str, ...] = ()
    # The published checkpoints (hub ids) whose publishers' examples `search models verify` checks,
    # weight files known by sha256 -> checkpoint, and organisations whose bare ORG/NAME download
    # folders identify a checkpoint (search.models.published.identify).
    checkpoints: tuple[str, ...] = ()
    known_weights: dict[str, str] = {}
    checkpoint_orgs: tuple[str, ...] = ()
    published_module: str | None = None  # the module whose run(ctx) makes the published checks

    def published_checks(self, ctx) -> list:
        """`search models verify`: the publisher's example against the served model (``Check`` list)."""
        return importlib.import_module(self.published_module).run(ctx) if self.published_module else []

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

    # The text model's window: the tokens it reads, the special tokens it adds to every text
    # included (a longer text is cut there; 0: the family reads no text).
    max_tokens: int = 0
    special_tokens: int = 0

    @property
    def chunk_window(self) -> int:
        """The most tokens of text a chunk may hold for the family to read it whole: the window
        less its special tokens (the family that embeds documents bounds the chunk size)."""
        return self.max_tokens - self.special_tokens

    def chunk_tokenizer(self, repo: Path) -> Path:
        """tokenizer.json of the served text model, when the family is the one whose tokens count chunk budgets."""
        raise NotImplementedError(f"{self.family} has no chunk tokenizer")

    def dim(self, repo: Path) -> int:
        """The embedding width the export recorded for the built model."""
        return int(json.loads(self.manifest_path(repo).read_text())["dim"])

    def source(self, settings) -> str:
        """The configured weight source."""
        return getattr(settings, self.source_setting)

    def precision(self, repo: Path) -> str | None:
        """The precision of the current build (builds from before precisions existed: fp32)."""
        manifest = self.manifest(repo)
        return None if manifest is None else manifest.get("precision", "fp32")

    def precision_status(self, precision: str) -> str | None:
        """"reference" (fp32), "measured" (int8 with quality figures within tolerance),
        "unmeasured" (int8 the export can make but nobody has measured), None (not offered)."""
        if precision not in self.precisions:
            return None
        if precision == "fp32":
            return "reference"
        return "measured" if self.int8_quality is not None and self.int8_quality.within_tolerance() else "unmeasured"

    def build(self, repo: Path, source: str, *, force: bool = False, precision: str = "fp32",
              allow_unmeasured: bool = False) -> BuildReport:
        """Export the weights at ``source`` into ``repo`` at ``precision`` unless the files there
        already come from them at that precision. An unmeasured int8 needs ``allow_unmeasured``."""
        status = self.precision_status(precision)
        if status is None:
            return BuildReport(self.family, "refused", f"{self.display} is served in {', '.join(self.precisions)} only, "
                               f"not {precision}")
        if status == "unmeasured" and not allow_unmeasured:
            return BuildReport(self.family, "refused", f"{precision} {self.display} is unmeasured (no quality figures "
                               "for it): pass --allow-unmeasured-int8 to build it anyway")
        if not force and self.built_from(repo) == source and self.precision(repo) == precision:
            return BuildReport(self.family, "up to date", f"from {source}, {precision}")
        export = importlib.import_module(self.export_module)  # here, not at import: it needs torch & co.
        try:
            return export.build(self, repo, source, precision, allow_unmeasured)
        except Int8Rejected as exc:
            return BuildReport(self.family, "refused", str(exc))

    # Search queries: the served model they go to, where concurrent queries of a process share requests
    # (one batcher each, Resources.batchers); None: the family serves no queries.
    query_model: str | None = None
    query_batch: int = 0  # queries per request at most: the query model's max_batch_size
    query_in_flight: int = 1  # requests out at once: the query model's instances that run side by side

    def served_golden(self, client, gold) -> dict[str, np.ndarray] | None:
        """`search models verify`: the served outputs on the golden inputs (``search.models.golden.Inputs``),
        keyed as the build's golden file; None: the family has no verify hook."""
        return None

    # `POST /v1/embeddings`: the models it offers there
    embedding_models: tuple[EmbeddingModel, ...] = ()

    def embedding_query(self, text: str):
        """One embeddings text as the family's query batcher takes it."""
        return text

    def query_text_vector(self, out) -> TextVector:
        """A query batcher's answer as a text vector and its token count."""
        return out

    def image_vectors(self, client, images: list[bytes]) -> np.ndarray:
        """Unit vectors [n, D] for encoded images (any number: requests of the model's batch size)."""
        raise NotImplementedError(f"{self.family} serves no image vectors")

    def encode(self, client, items: list, **options) -> Encoded:
        """The family's vectors for ``items`` from its served ensembles."""
        raise NotImplementedError(f"{self.family} serves no vectors")

    reads_text: bool = False  # reads the text in images: scanned pages and photos become documents' text
    layout_version: int = 1  # how read lines become text (rows, blocks): a new layout reads the scans again

    def read_text(self, client, images: list[bytes]) -> list[list]:
        """Each encoded image's text lines (``text``, ``score``, ``box``, and ``block``: its paragraph
        or column, from 0), in reading order: a family that ``reads_text``."""
        raise NotImplementedError(f"{self.family} reads no text")

    def entail(self, client, images: list[bytes], hypotheses: list[str], premises: list[str | None] | None = None) -> list[dict]:
        """One verdict {"label", "probs", "truncated"} (the services' Verdict) per (image, hypothesis[, premise]): a family that claims
        the "entail" mode. A request holding a bad image fails whole: callers retry one by one."""
        raise NotImplementedError(f"{self.family} serves no entailment")

    def encode_options(self, vector: str) -> dict:
        """``encode``'s options when only store vector ``vector`` is wanted."""
        return {}

    def relevance_probes(self, client, items: list, vector: str) -> list[tuple[object, float]]:
        """Relevance backgrounds' probes: ``items`` (fixed texts or photos) as store vector ``vector``
        (dense: a list, sparse: {token id: weight}, multivector: rows), each with its score factor (a
        multivector's score sums its rows: 1 / rows); items without sparse weights or rows are left out."""
        kind, out = self.vectors[vector].kind, []
        for v in self.encode(client, items, **self.encode_options(vector)).vectors:
            value = v[vector]
            if kind == "sparse" and value:
                out.append((value, 1.0))
            elif kind == "multivector" and len(value):
                out.append((value.tolist(), 1.0 / len(value)))
            elif kind == "dense":
                out.append((value.tolist(), 1.0))
        return out

    def search_query(self, mode: str, text: str) -> SearchQuery:
        """A document query in one of the family's ``modes``: all a search asks of the family."""
        raise NotImplementedError(f"{self.family} ranks no documents")

    def encode_queries(self, client, queries: list) -> list:
        """Search queries sent together to ``query_model`` as one request (at most ``query_batch``):
        one answer per query. What a batcher sends."""
        raise NotImplementedError(f"{self.family} serves no queries")

    def capabilities(self) -> tuple:
        """What the family adds to every face (``search.models.capability.Capability``s): a command, a
        route, an MCP tool and a section of the page each, made from the capability alone."""
        return ()

    def text_vectors(self, client, texts: list[str]) -> list[TextVector]:
        """Each text's unit vector and token count, as an embeddings request asks for them (any number
        of texts: requests of the model's batch size)."""
        raise NotImplementedError(f"{self.family} serves no text vectors")


def read_as_text(lines: list) -> str:
    """Lines a family read (``Family.read_text``) as text: a line each, a blank line between blocks."""
    blocks: list[list[str]] = []
    for k, line in enumerate(lines):
        if k == 0 or line.block != lines[k - 1].block:
            blocks.append([])
        blocks[-1].append(line.text)
    return "\n\n".join("\n".join(block) for block in blocks)


def image_tensor(images: list[bytes]) -> np.ndarray:
    """A [batch, 1] BYTES tensor of encoded images (JPEG, PNG, ...)."""
    arr = np.empty((len(images), 1), dtype=np.object_)
    for i, data in enumerate(images):
        arr[i, 0] = bytes(data)
    return arr

