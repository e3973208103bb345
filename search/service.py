"""The service layer: the one implementation of search and ingest that the CLI, the REST API
and the Streamlit page all call."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path

from qdrant_client import models

from search.config import Settings
from search.errors import BadRequest, EmptyCollection, ModelNotReady
from search.models import FAMILIES, minilm
from search.store import COLLECTIONS, DOCUMENTS, Migrated, Store, migrate, open_location, open_store, parse_spec
from search.triton.client import TritonClient
from search.triton.local import LocalTriton

MAX_TOP_K = 100
SORTS = ("score", "newest", "oldest")
# Document search modes: semantic = MiniLM; dense / sparse = one BGE-M3 vector kind; hybrid = BGE-M3
# dense + sparse fused (RRF), re-ranked by ColBERT; auto = hybrid when BGE-M3 is served, else semantic.
MODES = ("auto", "semantic", "dense", "sparse", "hybrid")
HYBRID_CANDIDATES = 50  # per prefetch (dense, sparse) before fusion and the ColBERT re-rank


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

    @property
    def taken(self) -> str | None:
        return datetime.fromtimestamp(self.taken_at, UTC).strftime("%Y-%m-%d %H:%M") if self.taken_at is not None else None

    def as_dict(self) -> dict:
        return {**asdict(self), "taken": self.taken}


@dataclass(frozen=True)
class ImageFilters:
    after: float | None = None  # capture time, UTC unix seconds, inclusive
    before: float | None = None  # exclusive
    camera: str | None = None  # words that must all occur in "make model"
    near: tuple[float, float, float] | None = None  # latitude, longitude, radius in km
    folder: str | None = None
    suffixes: tuple[str, ...] = ()  # file types, e.g. (".jpg", ".png"); empty = all

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
            must.append(_folder_condition(self.folder))
        if self.suffixes:
            must.append(_suffix_condition(self.suffixes))
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
        raise BadRequest(f"near: latitude must be in -90..90, longitude in -180..180 and the radius in 0..20000 km, got {value!r}")
    return lat, lon, km


class SearchService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def store(self) -> Store:
        return open_store(self.settings)

    @cached_property
    def triton(self) -> TritonClient:
        return TritonClient(self.triton_url(), self.settings.triton_timeout_s)

    def triton_url(self) -> str:
        """An explicit URL, else the local server that `search triton up` recorded, else the defaults."""
        if self.settings.triton_url:
            return self.settings.triton_url
        local = LocalTriton.attach(self.run_dir)
        if local is not None and local.is_running():
            return f"{local.host}:{local.grpc_port}"
        return self.settings.grpc_url

    @property
    def run_dir(self) -> Path:
        return self.settings.data_dir / "triton"

    def close(self) -> None:
        if "store" in self.__dict__:
            self.store.close()

    # -- queries
    def search_documents(self, query: str, *, top_k: int = 5, min_score: float | None = None,
                         folder: str | None = None, mode: str | None = None,
                         suffixes: tuple[str, ...] | list[str] = ()) -> list[DocumentHit]:
        """Passages that match ``query``, with citations. ``mode``: one of MODES (default: the
        ``search_mode`` setting, "auto")."""
        mode = mode or self.settings.search_mode
        if mode not in MODES:
            raise BadRequest(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        query = (query or "").strip()
        if not query:
            raise BadRequest("query: must not be empty")
        if not 1 <= top_k <= MAX_TOP_K:
            raise BadRequest(f"top_k: must be between 1 and {MAX_TOP_K}, got {top_k}")
        if self.store.count(DOCUMENTS.name) == 0:
            raise EmptyCollection("nothing indexed yet: run `indexer ingest PATH` (e.g. `indexer ingest samples/docs`)"
                                  + self._legacy_hint())
        mode = self._document_mode(mode)
        must = ([_folder_condition(folder)] if folder else []) + ([_suffix_condition(suffixes)] if suffixes else [])
        flt = models.Filter(must=must) if must else None
        if mode == "semantic":
            vectors, _ = minilm.embed(self.triton, [query])
            points = self.store.search(DOCUMENTS.name, "minilm", vectors[0].tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [_document_hit(p, mode) for p in points]
        return self._search_bge_m3(query, mode, top_k=top_k, min_score=min_score, flt=flt)

    def _document_mode(self, mode: str) -> str:
        """auto -> hybrid when the index has BGE-M3 vectors and the model is served, else semantic."""
        if mode == "semantic":
            return mode
        served = self.triton.model_ready("bge_m3")
        indexed = self.store.count_where(DOCUMENTS.name, "models", "bge_m3") > 0
        if mode == "auto":
            return "hybrid" if served and indexed else "semantic"
        if not served:
            raise ModelNotReady(_not_served("bge_m3", "BGE-M3") + " (or use --mode semantic)")
        if not indexed:
            raise EmptyCollection(f"no documents have BGE-M3 vectors yet (needed for --mode {mode}): "
                                  "run `indexer ingest PATH` again now that BGE-M3 is served, or use --mode semantic")
        return mode

    def _search_bge_m3(self, query: str, mode: str, *, top_k: int, min_score: float | None,
                       flt: models.Filter | None) -> list[DocumentHit]:
        from search.models import bge_m3  # noqa: PLC0415

        q = bge_m3.encode(self.triton, [query], colbert=mode == "hybrid")[0]
        sparse = models.SparseVector(indices=list(q.sparse), values=list(q.sparse.values()))
        if mode == "dense":
            points = self.store.search(DOCUMENTS.name, "bge_dense", q.dense.tolist(), limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [_document_hit(p, mode) for p in points]
        if mode == "sparse":
            if not q.sparse:
                return []  # nothing but special tokens: no lexical evidence
            points = self.store.search(DOCUMENTS.name, "bge_sparse", sparse, limit=top_k,
                                       query_filter=flt, score_threshold=min_score)
            return [_document_hit(p, mode) for p in points]
        # hybrid: dense and sparse candidates, fused by rank (RRF), re-ranked by ColBERT late interaction.
        depth = max(HYBRID_CANDIDATES, top_k)
        candidates = [models.Prefetch(query=q.dense.tolist(), using="bge_dense", limit=depth, filter=flt)]
        if q.sparse:
            candidates.append(models.Prefetch(query=sparse, using="bge_sparse", limit=depth, filter=flt))
        fused = models.Prefetch(prefetch=candidates, query=models.FusionQuery(fusion=models.Fusion.RRF), limit=depth)
        points = self.store.search(DOCUMENTS.name, "bge_colbert", q.colbert.tolist(), limit=top_k,
                                   query_filter=flt, prefetch=[fused])
        # Qdrant's MAX_SIM sums over query vectors; BGE-M3's ColBERT score is their mean.
        n = len(q.colbert)
        hits = [_document_hit(p, mode, scale=1.0 / n) for p in points]
        return [h for h in hits if min_score is None or h.score >= min_score]

    def search_images(self, text: str | None = None, *, like: Path | bytes | None = None, top_k: int = 12,
                      min_score: float | None = None, filters: ImageFilters = ImageFilters(),
                      sort: str = "score", verify: bool = False, min_entailment: float | None = None) -> list[ImageHit]:
        """Text-to-image (``text``) or image-to-image (``like``, a photo's path or bytes) search over the
        photo collection; filters first, then the ``min_score`` cut-off, then (``verify``) the re-rank
        of the top-k hits by OFA's entailment probability of ``text`` (hits below ``min_entailment``
        dropped), then the sort."""
        from search.models import clip  # noqa: PLC0415

        text = (text or "").strip() or None
        if (text is None) == (like is None):
            raise BadRequest("give either a text query or an example image (like), not both or neither")
        if min_entailment is not None and not verify:
            raise BadRequest("min_entailment: applies only with verify")
        if min_entailment is not None and not 0 <= min_entailment <= 1:
            raise BadRequest(f"min_entailment: must be a probability in 0..1, got {min_entailment}")
        if verify and text is None:
            raise BadRequest("verify: needs a text query (it checks that each photo entails the text)")
        if not 1 <= top_k <= MAX_TOP_K:
            raise BadRequest(f"top_k: must be between 1 and {MAX_TOP_K}, got {top_k}")
        if sort not in SORTS:
            raise BadRequest(f"sort: must be one of {', '.join(SORTS)}, got {sort!r}")
        if self.store.count("images") == 0:
            raise EmptyCollection("no photos indexed yet: run `indexer ingest ./photos`" + self._legacy_hint())
        model = "clip_text" if text else "clip_image"
        if not self.triton.model_ready(model):
            raise ModelNotReady(_not_served(model, "CLIP"))
        if text:
            vector = clip.embed_texts(self.triton, [text])[0][0]
        else:
            vector = clip.embed_images(self.triton, [self._example_image(like)])[0]
        points = self.store.search("images", "clip", vector.tolist(), limit=top_k,
                                   query_filter=filters.to_qdrant(), score_threshold=min_score)
        hits = [_image_hit(p) for p in points]
        if verify:
            hits = self._verify(text, hits, min_entailment)
        if sort != "score":
            dated = sorted((h for h in hits if h.taken_at is not None), key=lambda h: h.taken_at, reverse=sort == "newest")
            hits = dated + [h for h in hits if h.taken_at is None]
        return hits

    def _verify(self, text: str, hits: list[ImageHit], min_entailment: float | None) -> list[ImageHit]:
        """Re-rank by P(entailment) of ``text`` per photo (OFA). A photo whose file can no longer be
        read or decoded is kept last, unverified (dropped under a threshold)."""
        from dataclasses import replace  # noqa: PLC0415

        self._require("ofa_ve", "OFA")
        readable = {}
        for i, h in enumerate(hits):
            try:
                readable[i] = self._read_image(Path(h.path), "image")
            except BadRequest:
                continue
        verdicts = dict(zip(readable, self._entail_many(list(readable.values()), text)))
        checked = [replace(h, entailment=v.probs["entailment"], entailment_label=v.label)
                   for i, h in enumerate(hits) if (v := verdicts.get(i)) is not None]
        checked.sort(key=lambda h: h.entailment, reverse=True)  # stable: CLIP's order breaks ties
        if min_entailment is not None:
            return [h for h in checked if h.entailment >= min_entailment]
        return checked + [h for i, h in enumerate(hits) if verdicts.get(i) is None]

    def _entail_many(self, images: list[bytes], text: str) -> list:
        """Verdicts for many photos (one request each: ofa.PAIRS_PER_REQUEST), None for a photo the
        model refuses (undecodable), so one bad file cannot sink the others."""
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        from search.models import ofa  # noqa: PLC0415

        out = []
        for data in images:
            try:
                out.append(ofa.entail(self.triton, [data], [text])[0])
            except InferenceServerException as exc:
                if "INVALID_ARG" not in str(exc.status() or ""):
                    raise
                out.append(None)
        return out

    def entail(self, image: Path | str | bytes, hypothesis: str, premise: str | None = None):
        """Does the photo (a path or its bytes) support ``hypothesis``, optionally given a text
        ``premise``? An ``ofa.Entailment``: label, the three probabilities, truncated."""
        from tritonclient.utils import InferenceServerException  # noqa: PLC0415

        from search.models import ofa  # noqa: PLC0415

        hypothesis = (hypothesis or "").strip()
        if not hypothesis:
            raise BadRequest("hypothesis: must not be empty")
        premise = (premise or "").strip() or None
        data = image if isinstance(image, bytes) else self._read_image(Path(image), "image")
        if not data:
            raise BadRequest("image: the image is empty (0 bytes)")
        if len(data) > self.settings.max_image_bytes:
            raise BadRequest(f"image: too large: {len(data) / 1e6:.1f} MB > {self.settings.max_image_bytes / 1e6:.1f} MB limit")
        self._require("ofa_ve", "OFA")
        try:
            return ofa.entail(self.triton, [data], [hypothesis], [premise])[0]
        except InferenceServerException as exc:
            if "INVALID_ARG" not in str(exc.status() or ""):
                raise
            msg = (exc.message() or str(exc)).split("in ensemble 'ofa_ve', ")[-1]
            for tensor in ("HYPOTHESIS", "IMAGE"):  # the step names the tensor at fault
                if msg.startswith(tensor + ": "):
                    raise BadRequest(f"{tensor.lower()}: {msg[len(tensor) + 2:]}") from None
            raise BadRequest(f"image: {msg}") from None

    def _require(self, model: str, family: str) -> None:
        if not self.triton.model_ready(model):
            raise ModelNotReady(_not_served(model, family))

    def _read_image(self, path: Path, field_name: str) -> bytes:
        path = path.expanduser()
        try:
            if path.stat().st_size > self.settings.max_image_bytes:
                raise BadRequest(f"{field_name}: {path}: too large: {path.stat().st_size / 1e6:.1f} MB > "
                                 f"{self.settings.max_image_bytes / 1e6:.1f} MB limit")
            return path.read_bytes()
        except FileNotFoundError:
            raise BadRequest(f"{field_name}: {path}: no such file") from None
        except IsADirectoryError:
            raise BadRequest(f"{field_name}: {path}: is a directory, not an image") from None
        except OSError as exc:
            raise BadRequest(f"{field_name}: {path}: cannot be read ({exc.strerror or exc})") from None

    def _example_image(self, like: Path | bytes) -> bytes:
        from indexer.images import BadImage, decode_photo, open_photo  # noqa: PLC0415
        from indexer.loaders import BadDocument  # noqa: PLC0415

        try:
            if isinstance(like, bytes):
                if len(like) > self.settings.max_image_bytes:
                    raise BadDocument(f"too large: {len(like) / 1e6:.1f} MB > {self.settings.max_image_bytes / 1e6:.1f} MB limit")
                photo, _ = decode_photo(like, max_pixels=self.settings.max_image_pixels)
            else:
                photo, _ = open_photo(Path(like).expanduser(), max_pixels=self.settings.max_image_pixels,
                                      max_bytes=self.settings.max_image_bytes)
        except (BadImage, BadDocument) as exc:
            where = "the uploaded image" if isinstance(like, bytes) else str(like)
            raise BadRequest(f"like: {where}: {exc}") from exc
        return photo.data

    # -- ingest
    def ingest(self, paths: list[Path], *, prune: bool = False,
               on_start: Callable[[int], None] | None = None, on_file: Callable | None = None):
        """Documents and photos under ``paths``, each into its collection. A kind whose model is
        not served is reported (with how to fix it) while the other kinds are indexed."""
        from indexer import pipeline  # noqa: PLC0415
        from indexer.chunking import Chunker  # noqa: PLC0415
        from indexer.images import IMAGE_SUFFIXES  # noqa: PLC0415
        from indexer.kinds import Documents, Photos  # noqa: PLC0415
        from indexer.loaders import DOCUMENT_SUFFIXES  # noqa: PLC0415

        s = self.settings
        kinds, unavailable = [], {}
        if self.triton.model_ready("minilm"):
            chunker = Chunker(self.chunk_tokenizer(), max_tokens=s.chunk_tokens, overlap=s.chunk_overlap)
            kinds.append(Documents(self.triton, chunker, s.max_file_bytes, bge_m3=self.triton.model_ready("bge_m3"), max_seconds=s.max_parse_seconds, max_elements=s.max_parse_elements, max_pages=s.max_pdf_pages))
        else:
            unavailable["documents"] = (DOCUMENT_SUFFIXES, _not_served("minilm", "MiniLM"))
        if self.triton.model_ready("clip_image"):
            kinds.append(Photos(self.triton, s.data_dir / "thumbnails", max_bytes=s.max_image_bytes,
                                max_pixels=s.max_image_pixels))
        else:
            unavailable["images"] = (IMAGE_SUFFIXES, _not_served("clip_image", "CLIP"))
        return pipeline.ingest(self.store, kinds, paths, prune=prune, unavailable=unavailable,
                               batch_size=s.embed_batch_size, concurrency=s.embed_concurrency,
                               on_start=on_start, on_file=on_file)

    def chunk_tokenizer(self):
        """The tokenizer the served model uses, so chunk budgets are counted in its tokens."""
        from tokenizers import Tokenizer  # noqa: PLC0415

        path = minilm.MiniLM().tokenizer_path(self.settings.triton_repo)
        if not path.exists():
            path = minilm.package_weights() / "tokenizer.json"
        return Tokenizer.from_file(str(path))

    # -- the store itself
    def store_stats(self) -> dict:
        """Points, segments, index status, payload indexes and disk size per collection."""
        store = self.store
        out = {"backend": store.backend, "location": store.location, "collections": {}}
        for name in [c for c in COLLECTIONS if store.exists(c)]:
            out["collections"][name] = asdict(store.stats(name))
        sizes = [c["disk_bytes"] for c in out["collections"].values()]
        out["disk_bytes"] = sum(sizes) if sizes and None not in sizes else None
        hint = self._legacy_hint().strip(" ;")
        if hint:
            out["note"] = hint
        return out

    def optimize_store(self) -> None:
        for name in COLLECTIONS:
            self.store.optimize(name)

    def migrate_store(self, to: str, source: str | None = None,
                      progress: Callable[[str, int, int], None] | None = None) -> list[Migrated]:
        """Copy every collection from ``source`` (default: the configured store) to ``to``:
        'edge[:PATH]', 'local[:PATH]' or a server URL (see store.parse_spec)."""
        s = self.settings
        src_spec = parse_spec(source, s) if source else (s.store_backend, s.qdrant_location)
        dst_spec = parse_spec(to, s)
        if src_spec == dst_spec:
            raise BadRequest(f"to: the target is the source ({dst_spec[0]} at {dst_spec[1]})")
        if src_spec[0] != "server" and not Path(src_spec[1]).exists():
            raise BadRequest(f"from: no {src_spec[0]} store at {src_spec[1]}")
        self.close()
        self.__dict__.pop("store", None)
        key = s.qdrant_api_key
        with open_location(*src_spec, api_key=key, prefix=s.collection_prefix) as src, \
                open_location(*dst_spec, api_key=key, prefix=s.collection_prefix) as dst:
            if not any(src.count(c) for c in src.collections()):
                raise EmptyCollection(f"nothing to migrate: the {src.describe()} is empty")
            return migrate(src, dst, progress=progress)

    def _legacy_hint(self) -> str:
        """A store in the old default layout (qdrant-client local mode under <data dir>/qdrant) that
        the embedded engine does not read: say how to bring it over."""
        s = self.settings
        old = s.default_store_path("local") / "collection"
        if s.store_backend != "edge" or s.qdrant_path or not old.is_dir() or not any(old.iterdir()):
            return ""
        return (f"; found an older store (qdrant-client local mode) at {old.parent}: copy it with "
                "`search store migrate --from local --to edge`, or keep using it with SEARCH_STORE=local")

    # -- status
    def status(self) -> dict:
        out: dict = {"triton": {"url": self.triton_url(), "live": self.triton.is_live(), "models": {}},
                     "store": {"backend": self.settings.store_backend, "location": self.settings.qdrant_location}}
        for fam in FAMILIES:
            built = fam.is_built(self.settings.triton_repo)
            for name in fam.ensembles:
                ready = out["triton"]["live"] and self.triton.model_ready(name)
                out["triton"]["models"][name] = {"built": built, "ready": bool(ready)}
        out["store"]["collections"] = {name: self.store.count(name) for name in COLLECTIONS}
        out["store"]["documents_with_bge_m3"] = self.store.count_where(DOCUMENTS.name, "models", "bge_m3")
        if hint := self._legacy_hint().strip(" ;"):
            out["store"]["note"] = hint
        return out


def _not_served(model: str, family: str) -> str:
    return (f"the {family} model is not served ('{model}' is not loaded in Triton): build it with "
            f"`search models build` (see `search models build --help` for weight sources), then restart Triton")


def _folder_condition(folder: str) -> models.FieldCondition:
    folder = str(Path(folder).expanduser().absolute()).rstrip("/") or "/"
    return models.FieldCondition(key="folders", match=models.MatchValue(value=folder))


def _suffix_condition(suffixes) -> models.FieldCondition:
    """File types as stored (lower case, with the dot): 'PDF' and '.pdf' both mean '.pdf'."""
    norm = sorted({"." + str(x).strip().lower().lstrip(".") for x in suffixes if str(x).strip(". ")})
    if not norm:
        raise BadRequest(f"suffixes: expected file types such as .pdf or jpg, got {list(suffixes)!r}")
    return models.FieldCondition(key="suffix", match=models.MatchAny(any=norm))


def _image_hit(p: models.ScoredPoint) -> ImageHit:
    pl = p.payload or {}
    loc = pl.get("location") or {}
    return ImageHit(score=float(p.score), path=pl.get("path", ""), sha256=pl.get("sha256", ""),
                    paths=list(pl.get("paths", [])), width=pl.get("width"), height=pl.get("height"),
                    taken_at=pl.get("taken_at"), camera=pl.get("camera"), latitude=loc.get("lat"),
                    longitude=loc.get("lon"), thumbnail=pl.get("thumbnail"))


def _document_hit(p: models.ScoredPoint, mode: str, scale: float = 1.0) -> DocumentHit:
    pl = p.payload or {}
    return DocumentHit(score=float(p.score) * scale, path=pl.get("path", ""), chunk=int(pl.get("chunk", 0)),
                       text=pl.get("text", ""), sha256=pl.get("sha256", ""), paths=list(pl.get("paths", [])),
                       start=pl.get("start"), end=pl.get("end"), page=pl.get("page"), title=pl.get("title"),
                       section=pl.get("section"), mode=mode)


def to_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)
