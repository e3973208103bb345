"""Query options shared by every face: photo filters, dates and places, folder and file-type
conditions, and the rules on which options go together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from qdrant_client import models

from search.errors import BadRequest

MAX_TOP_K = 100
SORTS = ("score", "newest", "oldest")
# Document search modes: semantic = MiniLM; dense / sparse = one BGE-M3 vector kind; hybrid = BGE-M3
# dense + sparse fused (RRF), re-ranked by ColBERT; auto = hybrid when BGE-M3 is served, else semantic.
MODES = ("auto", "semantic", "dense", "sparse", "hybrid")


@dataclass(frozen=True)
class ImageFilters:
    after: float | None = None  # capture time, UTC unix seconds, inclusive
    before: float | None = None  # exclusive
    camera: str | None = None  # words that must all occur in "make model"
    near: tuple[float, float, float] | None = None  # latitude, longitude, radius in km
    folder: str | None = None
    suffixes: tuple[str, ...] = ()  # file types, e.g. (".jpg", ".png"); empty = all

    @classmethod
    def parse(cls, *, after: str | None = None, before: str | None = None, camera: str | None = None,
              near: str | None = None, folder: str | None = None, suffixes=()) -> ImageFilters:
        """Filters from the text the faces receive (flags, form fields, JSON)."""
        return cls(after=parse_date(after, "after") if after else None,
                   before=parse_date(before, "before") if before else None,
                   camera=camera or None, near=parse_near(near) if near else None,
                   folder=str(folder) if folder else None, suffixes=tuple(suffixes or ()))

    def to_qdrant(self) -> models.Filter | None:
        must: list[models.Condition] = []
        if self.after is not None or self.before is not None:
            must.append(models.FieldCondition(key="taken_at", range=models.Range(gte=self.after, lt=self.before)))
        for word in (self.camera or "").lower().split():
            must.append(models.FieldCondition(key="camera_terms", match=models.MatchValue(value=word)))
        if self.near:
            lat, lon, km = self.near
            must.append(models.FieldCondition(key="location", geo_radius=models.GeoRadius(
                center=models.GeoPoint(lat=lat, lon=lon), radius=km * 1000)))
        if self.folder:
            must.append(folder_condition(self.folder))
        if self.suffixes:
            must.append(suffix_condition(self.suffixes))
        return models.Filter(must=must) if must else None


def parse_date(value: str, field_name: str) -> float:
    """'2021-07-14' or '2021-07-14T09:30' (UTC unless an offset is given) -> unix seconds."""
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise BadRequest(f"{field_name}: expected a date like 2021-07-14 or 2021-07-14T09:30, got {value!r}") from exc
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def parse_near(value: str) -> tuple[float, float, float]:
    """'LAT,LON,KM' -> a validated triple."""
    try:
        lat, lon, km = (float(x) for x in value.split(","))
    except ValueError as exc:
        raise BadRequest(f"near: expected LAT,LON,KM such as 51.5,-0.12,10, got {value!r}") from exc
    if not (-90 <= lat <= 90 and -180 <= lon <= 180 and 0 < km <= 20_000) or any(map(math.isnan, (lat, lon, km))):
        raise BadRequest("near: latitude must be in -90..90, longitude in -180..180 and the radius in 0..20000 km, "
                         f"got {value!r}")
    return lat, lon, km


def document_filter(folder: str | None, suffixes) -> models.Filter | None:
    must = ([folder_condition(folder)] if folder else []) + ([suffix_condition(suffixes)] if suffixes else [])
    return models.Filter(must=must) if must else None


def folder_condition(folder: str) -> models.FieldCondition:
    try:
        path = Path(folder).expanduser()
    except RuntimeError as exc:  # '~name' where no user has that name
        raise BadRequest(f"folder: no home folder for {folder.split('/', 1)[0]!r}") from exc
    folder = str(path.absolute()).rstrip("/") or "/"
    return models.FieldCondition(key="folders", match=models.MatchValue(value=folder))


def suffix_condition(suffixes) -> models.FieldCondition:
    """File types as stored (lower case, with the dot): 'PDF' and '.pdf' both mean '.pdf'."""
    norm = sorted({"." + str(x).strip().lower().lstrip(".") for x in suffixes if str(x).strip(". ")})
    if not norm:
        raise BadRequest(f"suffixes: expected file types such as .pdf or jpg, got {list(suffixes)!r}")
    return models.FieldCondition(key="suffix", match=models.MatchAny(any=norm))


def check_top_k(top_k: int) -> None:
    if not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(f"top_k: must be between 1 and {MAX_TOP_K}, got {top_k}")


def check_query_options(*, photos: bool, text: bool, like: bool, mode: str | None = None, verify: bool = False,
                        min_entailment: float | None = None, photo_only: dict[str, object] | None = None) -> None:
    """Which options go together, named as the caller names them (``photo_only``: option name -> value;
    for the CLI the names are its flags). Raises BadRequest naming what is wrong."""
    if photos and mode:
        raise BadRequest("--mode applies to document search; photos are always searched with CLIP")
    if (verify or min_entailment is not None) and not (photos and text):
        raise BadRequest("--verify and --min-entailment apply to photo search by text: add --images")
    if min_entailment is not None and not verify:
        raise BadRequest("--min-entailment needs --verify")
    if not photos:
        used = [name for name, value in (photo_only or {}).items() if value]
        if used:
            raise BadRequest(f"{', '.join(used)} only apply to photo search: add --images (text) or --like PHOTO")
        if not text:
            raise BadRequest('give a query, e.g. search "reset password" (or --like PHOTO for photos)')
