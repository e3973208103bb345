"""What a search returns: hits with their provenance, and the forms the faces print them in."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from qdrant_client import models


@dataclass(frozen=True)
class DocumentHit:
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
    mode: str = "semantic"  # how it was found (the score's meaning depends on it)
    relevance: float | None = None  # calibrated: how clearly above the collection's background (docs/relevance.md)

    @property
    def citation(self) -> str:
        where = [f"p. {self.page}" if self.page else None, f"§ {self.section}" if self.section else None,
                 f"chunk {self.chunk}"]
        return f"{self.path} (" + ", ".join(w for w in where if w) + ")"

    def snippet(self, width: int = 240) -> str:
        flat = " ".join(self.text.split())
        return flat if len(flat) <= width else flat[: width - 1].rsplit(" ", 1)[0] + "…"

    def as_dict(self) -> dict:
        return {**asdict(self), "citation": self.citation}

    @classmethod
    def from_point(cls, p: models.ScoredPoint, mode: str, scale: float = 1.0) -> DocumentHit:
        pl = p.payload or {}
        return cls(score=float(p.score) * scale, path=pl.get("path", ""), chunk=int(pl.get("chunk", 0)),
                   text=pl.get("text", ""), sha256=pl.get("sha256", ""), paths=list(pl.get("paths", [])),
                   start=pl.get("start"), end=pl.get("end"), page=pl.get("page"), title=pl.get("title"),
                   section=pl.get("section"), mode=mode)


@dataclass(frozen=True)
class ImageHit:
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
    # --verify: OFA's probability that the photo entails the query, and its label (None: not verified)
    entailment: float | None = None
    entailment_label: str | None = None
    relevance: float | None = None  # calibrated: how clearly above the collection's background (docs/relevance.md)

    @property
    def taken(self) -> str | None:
        return datetime.fromtimestamp(self.taken_at, UTC).strftime("%Y-%m-%d %H:%M") if self.taken_at is not None else None

    def as_dict(self) -> dict:
        return {**asdict(self), "taken": self.taken}

    @classmethod
    def from_point(cls, p: models.ScoredPoint) -> ImageHit:
        pl = p.payload or {}
        loc = pl.get("location") or {}
        return cls(score=float(p.score), path=pl.get("path", ""), sha256=pl.get("sha256", ""),
                   paths=list(pl.get("paths", [])), width=pl.get("width"), height=pl.get("height"),
                   taken_at=pl.get("taken_at"), camera=pl.get("camera"), latitude=loc.get("lat"),
                   longitude=loc.get("lon"), thumbnail=pl.get("thumbnail"))


def prompt_context(hits: list[DocumentHit]) -> str:
    """Numbered passages with their citations, ready to paste into a bot's prompt."""
    return "\n\n".join(f"[{i}] {h.citation}\n{h.text.strip()}" for i, h in enumerate(hits, 1))

