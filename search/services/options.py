"""Query options shared by every face: photo filters, dates and places, and the rules on which
options go together. Plain Python (no store types), so a face can build them before it knows
whether the query runs here or through a server."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from search.errors import BadRequest

MAX_TOP_K = 100  # photos per search
# Documents come in pages: top_k hits (or documents, grouped) after skipping ``offset``. The cap on
# offset + top_k bounds what one request makes the store rank.
MAX_PAGE = 1_000
MAX_DEPTH = 10_000
MAX_GROUP_SIZE = 20  # passages per document when grouped
GROUP_BY = ("document",)
# Characters of text per document hit unless the caller asks for more: about twice the longest chunk the
# chunker makes of prose (254 tokens ~ 1,100 characters), so an ordinary passage comes back whole and only
# pathological ones (a long "word" is one [UNK] token) are cut; 100 hits stay near 200,000 characters.
HIT_CHARS = 2_000
HIT_CHARS_LIMIT = 100_000  # the most a request may ask for; the whole text is full_text
SORTS = ("score", "newest", "oldest")
DEFAULT_MIN_RELEVANCE = 0.97  # calibrated relevance: better than 97 unrelated questions in 100 find (docs/relevance.md)


def __getattr__(name: str):
    """Read from the model registry at each use, not at import: the CLI starts without numpy,
    the model client or the store's client, which the registry and the schemas import; and a family
    registered later is in them. MODES: the document search modes (``search.models.search_modes``:
    "auto", then each mode of each family that embeds documents, the required family's first); auto =
    the optional family's best mode when it is served, else the required one's. PHOTO_MODEL,
    ENTAIL_MODEL: the display names the faces' descriptions give the photos' model and the
    entailment model."""
    if name not in ("MODES", "PHOTO_MODEL", "ENTAIL_MODEL"):  # e.g. dunder probes: no registry for those
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from search.models import for_mode, required, search_modes  # noqa: PLC0415  (see above)
    from search.store.schema import DOCUMENTS_NAME, IMAGES  # noqa: PLC0415

    values = {"MODES": lambda: search_modes(DOCUMENTS_NAME),
              "PHOTO_MODEL": lambda: required(IMAGES).display, "ENTAIL_MODEL": lambda: for_mode("entail").display}
    return values[name]()


def check_search_mode(mode: str) -> str:
    """The search_mode setting (SEARCH_SEARCH_MODE), one of MODES: a BadRequest that lists them when
    it is not. Checked where searches run (the registry sits above the settings)."""
    modes = __getattr__("MODES")
    if mode not in modes:
        raise BadRequest(f"SEARCH_SEARCH_MODE: must be one of {', '.join(modes)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class ImageFilters:
    after: float | None = None  # capture time, UTC unix seconds, inclusive
    before: float | None = None  # exclusive
    camera: str | None = None  # words that must all occur in "make model"
    near: tuple[float, float, float] | None = None  # latitude, longitude, radius in km
    folder: str | None = None
    types: tuple[str, ...] = ()  # file types, e.g. (".jpg", ".png"); empty = all

    @classmethod
    def parse(cls, *, after: str | None = None, before: str | None = None, camera: str | None = None,
              near: str | None = None, folder: str | None = None, types=()) -> ImageFilters:
        """Filters from the text the faces receive (flags, form fields, JSON)."""
        return cls(after=parse_date(after, "after") if after else None,
                   before=parse_date(before, "before") if before else None,
                   camera=camera or None, near=parse_near(near) if near else None,
                   folder=str(folder) if folder else None, types=tuple(types or ()))

    def as_fields(self) -> dict:
        """The filters as the REST API's fields take them."""
        return {"after": _iso(self.after), "before": _iso(self.before), "camera": self.camera,
                "near": ",".join(map(str, self.near)) if self.near else None, "folder": self.folder,
                "types": list(self.types) or None}


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat() if t is not None else None


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
        raise BadRequest(f"near: latitude must be in -90..90, longitude in -180..180 and the radius in 0..20000 km, got {value!r}")
    return lat, lon, km


def check_top_k(top_k: int) -> None:
    if not 1 <= top_k <= MAX_TOP_K:
        raise BadRequest(f"top_k: must be between 1 and {MAX_TOP_K}, got {top_k}")


def check_page(top_k: int, offset: int) -> None:
    if not 1 <= top_k <= MAX_PAGE:
        raise BadRequest(f"top_k: must be between 1 and {MAX_PAGE}, got {top_k}")
    if offset < 0:
        raise BadRequest(f"offset: must be 0 or more, got {offset}")
    if offset + top_k > MAX_DEPTH:
        raise BadRequest(f"offset: offset + top_k must be at most {MAX_DEPTH}, got {offset + top_k}")


def check_group_size(group_size: int) -> None:
    if not 1 <= group_size <= MAX_GROUP_SIZE:
        raise BadRequest(f"group_size: must be between 1 and {MAX_GROUP_SIZE}, got {group_size}")


def check_query_options(*, photos: bool, text: bool, like: bool, mode: str | None = None, verify: bool = False,
                        min_entailment: float | None = None, full_text: bool = False,
                        photo_only: dict[str, object] | None = None,
                        document_only: dict[str, object] | None = None) -> None:
    """Which options go together, named as the caller names them (``photo_only``: option name -> value;
    for the CLI the names are its flags). Raises BadRequest naming what is wrong."""
    if photos and full_text:
        raise BadRequest("--full-text applies to document search; photo hits carry no text")
    if photos and mode:
        raise BadRequest(f"--mode applies to document search; photos are always searched with {__getattr__('PHOTO_MODEL')}")
    if photos and (used := [name for name, value in (document_only or {}).items() if value]):
        raise BadRequest(f"{', '.join(used)} only apply to document search")
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


def check_max_chars(max_chars: int | None, full_text: bool) -> int | None:
    """The characters of text a document hit may carry: None for the whole text."""
    if full_text:
        if max_chars is not None:
            raise BadRequest("max_chars: leave it out with full_text, which returns the whole text")
        return None
    if max_chars is None:
        return HIT_CHARS
    if not 1 <= max_chars <= HIT_CHARS_LIMIT:
        raise BadRequest(f"max_chars: must be between 1 and {HIT_CHARS_LIMIT}, got {max_chars} (or ask for full_text)")
    return max_chars
