"""Query options as the store's filter conditions."""

from __future__ import annotations

from pathlib import Path

from qdrant_client import models

from search.errors import BadRequest
from search.paths import stored
from search.services.options import ImageFilters


def image_filter(f: ImageFilters) -> models.Filter | None:
    must: list[models.Condition] = []
    if f.after is not None or f.before is not None:
        must.append(models.FieldCondition(key="taken_at", range=models.Range(gte=f.after, lt=f.before)))
    for word in (f.camera or "").lower().split():
        must.append(models.FieldCondition(key="camera_terms", match=models.MatchValue(value=word)))
    if f.near:
        lat, lon, km = f.near
        must.append(models.FieldCondition(key="location", geo_radius=models.GeoRadius(
            center=models.GeoPoint(lat=lat, lon=lon), radius=km * 1000)))
    if f.folder:
        must.append(folder_condition(f.folder))
    if f.types:
        must.append(suffix_condition(f.types))
    return models.Filter(must=must) if must else None


def document_filter(folder: str | None, types) -> models.Filter | None:
    must = ([folder_condition(folder)] if folder else []) + ([suffix_condition(types)] if types else [])
    return models.Filter(must=must) if must else None


def folder_condition(folder: str) -> models.FieldCondition:
    try:
        path = Path(folder).expanduser()
    except RuntimeError as exc:  # '~name' where no user has that name
        raise BadRequest(f"folder: no home folder for {folder.split('/', 1)[0]!r}") from exc
    folder = str(path.absolute()).rstrip("/") or "/"
    return models.FieldCondition(key="folders", match=models.MatchValue(value=stored(folder)))


def suffix_condition(types) -> models.FieldCondition:
    """File types as stored (lower case, with the dot): 'PDF' and '.pdf' both mean '.pdf'."""
    norm = sorted({"." + str(x).strip().lower().lstrip(".") for x in types if str(x).strip(". ")})
    if not norm:
        raise BadRequest(f"types: expected file types such as .pdf or jpg, got {list(types)!r}")
    return models.FieldCondition(key="suffix", match=models.MatchAny(any=norm))




def path_condition(path: str) -> models.FieldCondition:
    """A file by one of the paths it is stored under."""
    if "\0" in path:
        raise BadRequest("path: must not contain NUL", "path")
    try:
        full = str(Path(path).expanduser().absolute())
    except RuntimeError as exc:
        raise BadRequest(f"path: cannot use {path!r}", "path") from exc
    return models.FieldCondition(key="paths", match=models.MatchValue(value=stored(full)))


def content_condition(sha256: str) -> models.FieldCondition:
    """A file's content by its hash (the id that hits give a document or photo)."""
    return models.FieldCondition(key="sha256", match=models.MatchValue(value=sha256.strip()))
