"""What a search returns: hits with their provenance, and the forms the faces print them in.

A hit's ``path`` is the file's real path (a name that is not UTF-8 comes back surrogate-escaped,
so ``open(hit.path)`` works); ``display_path`` is its readable form. In ``as_dict()`` (JSON),
``path`` is the readable form and ``path_bytes`` the exact bytes, base64, when they differ."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # hits are also built from REST answers, without qdrant-client
    from qdrant_client import models

from search.paths import from_stored, path_bytes, readable
from search.terms import highlight_spans


class _Paths:
    """The path forms every hit has (see the module's docstring)."""

    path: str
    paths: list[str]

    @property
    def display_path(self) -> str:
        return readable(self.path)

    def _json_paths(self) -> dict:
        return {"path": readable(self.path), "path_bytes": path_bytes(self.path), "paths": [readable(p) for p in self.paths]}

    def _json(self, **extra) -> dict:
        """The fields one level deep, then the path forms and ``extra`` (dataclasses.asdict deep-copies,
        which a large answer pays for several times over)."""
        return {**{name: getattr(self, name) for name in self.__dataclass_fields__}, **self._json_paths(), **extra}


@dataclass(frozen=True)
class DocumentHit(_Paths):
    """One passage with its citation: file, page (PDFs), section heading and chunk number."""

    score: float
    path: str
    chunk: int
    text: str
    sha256: str
    paths: list[str] = field(default_factory=list)
    start: int | None = None  # character offsets into the page's text (the file's, without pages)
    end: int | None = None
    page: int | None = None  # 1-based, PDFs only
    title: str | None = None
    section: str | None = None  # the nearest heading above the passage
    mode: str = ""  # how it was found: a search mode, or "lookup" (the score's meaning depends on it)
    relevance: float | None = None  # calibrated: the share of unrelated questions that find less (docs/relevance.md)
    length: int = 0  # characters in the whole passage; text may hold fewer (truncated)
    truncated: bool = False
    ocr: dict | None = None  # text read in an image (a scanned page, a photo): {"model", "score": mean confidence}
    thumbnail: str | None = None  # a passage read in a photo: the photo's thumbnail
    exact: bool = False  # it holds every number and code of the query as typed (ranked first: search.terms.codes)
    # The query's content words in text, as (start, end) character spans (search.terms.highlight_spans)
    highlights: list[tuple[int, int]] = field(default_factory=list)

    @cached_property  # an answer reads it twice per hit: in the hit and in the prompt context
    def citation(self) -> str:
        where = [f"p. {self.page}" if self.page else None, f"§ {self.section}" if self.section else None,
                 f"chunk {self.chunk}", f"OCR {self.ocr['score']:.2f}" if self.ocr else None]
        return f"{self.display_path} (" + ", ".join(w for w in where if w) + ")"

    def snippet(self, width: int = 240) -> str:
        flat = " ".join(self.text.split())
        return flat if len(flat) <= width else flat[: width - 1].rsplit(" ", 1)[0] + "…"

    def as_dict(self) -> dict:
        return self._json(citation=self.citation)

    def marked(self, query: str) -> DocumentHit:
        """This hit with the spans of the query's content words in its text."""
        return replace(self, highlights=highlight_spans(self.text, query))

    def bounded(self, max_chars: int | None) -> DocumentHit:
        """This hit with at most ``max_chars`` characters of text (None: all of it), cut at a word
        boundary when there is one in the second half."""
        if max_chars is None or len(self.text) <= max_chars:
            return self
        head = self.text[:max_chars]
        if not self.text[max_chars].isspace():  # mid-word: drop the word's start, unless that loses over half
            before = head.rsplit(None, 1)
            if len(before) == 2 and len(before[0]) >= max_chars // 2:
                head = before[0]
        return replace(self, text=head.rstrip(), truncated=True)

    @classmethod
    def from_point(cls, p: models.ScoredPoint | models.Record, mode: str, scale: float = 1.0) -> DocumentHit:
        """A hit from a search's point, or from a record looked up by id (score 0)."""
        pl = p.payload or {}
        text = pl.get("text", "")
        return cls(score=float(getattr(p, "score", 0.0)) * scale, path=from_stored(pl.get("path", "")), chunk=int(pl.get("chunk", 0)),
                   text=text, sha256=pl.get("sha256", ""), paths=[from_stored(x) for x in pl.get("paths", [])],
                   start=pl.get("start"), end=pl.get("end"), page=pl.get("page"), title=pl.get("title"),
                   section=pl.get("section"), mode=mode, length=len(text), ocr=pl.get("ocr"), thumbnail=pl.get("thumbnail"))


@dataclass(frozen=True)
class DocumentGroup:
    """One document (one content, by sha256) of a per-document search: its best passages, best
    first, and how many more of its passages were among those the search ranked."""

    hits: list[DocumentHit]  # at least one; hits[0] is the document's best passage
    more: int = 0  # further passages of this document among the passages searched (not shown)

    @property
    def score(self) -> float:
        return self.hits[0].score

    @property
    def sha256(self) -> str:
        return self.hits[0].sha256

    @property
    def path(self) -> str:
        return self.hits[0].path

    def as_dict(self) -> dict:
        best = self.hits[0].as_dict()
        return {"score": self.score, "sha256": self.sha256, "path": best["path"], "path_bytes": best["path_bytes"],
                "paths": best["paths"], "title": best["title"], "more": self.more,
                "hits": [h.as_dict() for h in self.hits]}


@dataclass(frozen=True)
class ImageHit(_Paths):
    score: float
    path: str
    sha256: str
    paths: list[str] = field(default_factory=list)
    width: int | None = None
    height: int | None = None
    taken_at: float | None = None
    camera: str | None = None
    latitude: float | None = None
    longitude: float | None = None
    thumbnail: str | None = None
    # --verify: the entailment model's probability that the photo entails the query, and its label (None: not verified)
    entailment: float | None = None
    entailment_label: str | None = None
    relevance: float | None = None  # calibrated: the share of unrelated questions that find less (docs/relevance.md)
    text: str | None = None  # the words read in the photo at ingest (--ocr-photos), None when none were
    # How a text search found it: "image" (the image model: score is its cosine) and/or "words" (its text
    # holds words_share of the query's content words; score is that share when only its words found it)
    found_by: tuple[str, ...] = ("image",)
    words_share: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "found_by", tuple(self.found_by))  # a list from JSON (RemoteService)

    @property
    def taken(self) -> str | None:
        return datetime.fromtimestamp(self.taken_at, UTC).strftime("%Y-%m-%d %H:%M") if self.taken_at is not None else None

    def as_dict(self) -> dict:
        return self._json(taken=self.taken)

    @classmethod
    def from_point(cls, p: models.ScoredPoint | models.Record) -> ImageHit:
        pl = p.payload or {}
        loc = pl.get("location") or {}
        return cls(score=float(getattr(p, "score", 0.0)), path=from_stored(pl.get("path", "")), sha256=pl.get("sha256", ""),
                   paths=[from_stored(x) for x in pl.get("paths", [])], width=pl.get("width"), height=pl.get("height"),
                   taken_at=pl.get("taken_at"), camera=pl.get("camera"), latitude=loc.get("lat"),
                   longitude=loc.get("lon"), thumbnail=pl.get("thumbnail"))

    @classmethod
    def from_passage(cls, pl: dict) -> ImageHit:
        """A photo known only by a passage of its text (no photo point: no image model built)."""
        return cls(score=0.0, path=from_stored(pl.get("path", "")), sha256=pl.get("sha256", ""),
                   paths=[from_stored(x) for x in pl.get("paths", [])], thumbnail=pl.get("thumbnail"))

    def found(self, found_by: tuple[str, ...], words_share: float | None) -> ImageHit:
        score = self.score if "image" in found_by else words_share
        return replace(self, found_by=found_by, words_share=words_share, score=score)


@dataclass(frozen=True)
class Verdict:
    """Visual entailment of one photo and hypothesis."""

    label: str  # entailment | neutral | contradiction
    probs: dict[str, float]  # the three, summing to 1
    truncated: bool = False  # the hypothesis (or premise) was cut to the model's length

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TextRead:
    """The text lines read in an image or a scan, page by page, each page's in reading order."""

    lines: list[dict]  # {"text", "score" (0..1), "box" (four x, y corners in its page's pixels), "page" (1-based),
    #                     "block" (its paragraph or column on the page, from 0 in reading order)}
    model: str  # the model that read them
    pages: int = 1  # a multi-page TIFF's frames, a PDF's pages

    @property
    def blocks(self) -> list[dict]:
        """The lines' blocks (paragraphs, a column's), page by page in reading order: each with its
        ``page``, ``lines`` (indexes into ``lines``), ``text`` (its lines) and ``box`` (around its lines)."""
        out: dict[tuple[int, int], list[int]] = {}
        for k, line in enumerate(self.lines):
            out.setdefault((line.get("page", 1), line.get("block", 0)), []).append(k)
        return [{"page": page, "lines": ks, "text": "\n".join(self.lines[k]["text"] for k in ks),
                 "box": _around([self.lines[k]["box"] for k in ks])} for (page, _), ks in out.items()]

    @property
    def text(self) -> str:
        """The lines, a blank line between blocks (paragraphs) and between pages."""
        return "\n\n".join(block["text"] for block in self.blocks)

    def as_dict(self) -> dict:
        return {"model": self.model, "pages": self.pages, "text": self.text, "lines": self.lines, "blocks": self.blocks}

    def confident(self, min_score: float) -> TextRead:
        """Only the lines read with at least this confidence (OcrQuery.min_score)."""
        return replace(self, lines=[line for line in self.lines if line["score"] >= min_score])


def _around(boxes: list) -> list[list[float]]:
    """The upright rectangle around boxes of four (x, y) corners, as four corners (tl, tr, br, bl)."""
    xs, ys = [p[0] for b in boxes for p in b], [p[1] for b in boxes for p in b]
    x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


def prompt_context(hits: list[DocumentHit]) -> str:
    """Numbered passages with their citations, ready to paste into a bot's prompt (a cut passage ends in …)."""
    return "\n\n".join(f"[{i}] {h.citation}\n{h.text.strip()}" + (" …" if h.truncated else "")
                       for i, h in enumerate(hits, 1))


class HitList(list):
    """Hits (a plain list to every caller) with what the calibration says about them."""

    def __init__(self, hits=(), *, no_match: bool = False, note: str | None = None,
                 min_relevance: float | None = None, best: float | None = None) -> None:
        super().__init__(hits)
        self.no_match = no_match  # hits were found, but none is clearly above the background
        self.note = note  # why relevance is missing (a collection too small), else None
        self.min_relevance = min_relevance
        self.best = best  # the best relevance among the hits before the cut-off

    def rewrap(self, hits) -> HitList:
        return HitList(hits, no_match=self.no_match, note=self.note, min_relevance=self.min_relevance, best=self.best)

    def relevance_fields(self) -> dict:
        """What every face answers beside the hits: no_match (hits were found but none passes
        min_relevance: say "no good match"), relevance_note (why hits carry no relevance),
        best_relevance (the best hit's relevance before the cut-off)."""
        return {"no_match": self.no_match, "relevance_note": self.note,
                "best_relevance": None if self.best is None else float(self.best)}
