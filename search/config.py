"""All settings in one typed place.

Every field can be set by an environment variable named ``SEARCH_<FIELD>`` (for example
``SEARCH_TRITON_GRPC_PORT=9001``); ``QDRANT_URL`` is also read without the prefix because it
is the name Qdrant users know. The CLIs override fields with flags through ``Settings(**overrides)``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, PositiveInt, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from search.locations import DEFAULT_DATA_DIR, PROJECT_ROOT

Port = Annotated[int, Field(ge=1, le=65535)]


# Knowledge bases' names (search/store/schema.py: one documents and one images collection each); here
# so that the query specs, which the CLI loads, need no store
DEFAULT_KB = "default"
KB_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
MAX_IMAGE_BYTES = 100_000_000  # the default; a client reading a photo for a server bounds it so too
MAX_IMAGE_PIXELS = 100_000_000  # the default (max_image_pixels)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SEARCH_", extra="ignore")

    # Where everything the project writes lives: the embedded store, Triton's run state, logs.
    data_dir: Path = DEFAULT_DATA_DIR

    # Triton
    triton_repo: Path = PROJECT_ROOT / "triton_repo"
    triton_host: str = "127.0.0.1"
    triton_http_port: Port = 8000
    triton_grpc_port: Port = 8001
    triton_metrics_port: Port = 8002
    # When set, clients talk to this gRPC address instead of the local server (e.g. "triton:8001").
    triton_url: str | None = None
    # Several Triton replicas for a distributed ingest (`indexer ingest --ray`), comma-separated
    # gRPC addresses ("t1:8001,t2:8001"): spread across the embed actors, and a request that fails
    # on one is retried on another. Unset: the one address above.
    triton_urls: str | None = None
    # A call's deadline grows with its batch: this base, plus so much a row and a MiB of input (a batch
    # of 16 long chunks, a large scan). A call that misses it, is refused while Triton is there, or loses
    # its stream is tried again (exponential backoff with jitter) while the batch's retry budget lasts;
    # a query tries twice within its base deadline. Triton down (nothing listens) fails at once.
    triton_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    triton_timeout_per_row_s: float = Field(default=0.5, ge=0, le=600)
    triton_timeout_per_mib_s: float = Field(default=1.0, ge=0, le=600)
    triton_retry_budget_s: float = Field(default=120.0, ge=0, le=3600)  # 0: no retries
    triton_start_timeout_s: float = 120.0

    # Qdrant: a server when QDRANT_URL is set, else the embedded store under data_dir.
    qdrant_url: str | None = Field(
        default=None, validation_alias=AliasChoices("SEARCH_QDRANT_URL", "QDRANT_URL", "qdrant_url")
    )
    qdrant_api_key: str | None = Field(
        default=None,
        validation_alias=AliasChoices("SEARCH_QDRANT_API_KEY", "QDRANT_API_KEY", "qdrant_api_key"),
    )
    # A Qdrant server's idempotent calls (reads, upserts by id, deletes and payloads by filter) that fail
    # for a moment (a timeout, a connection dropped mid-call, 429/502/503/504) are tried again with
    # backoff for so long; 0: never. A refused connection (nothing listens) fails at once.
    store_retry_budget_s: float = Field(default=30.0, ge=0, le=3600)
    # The embedded store when no QDRANT_URL is set (env SEARCH_STORE): "edge" = Qdrant's own engine
    # in-process (HNSW, payload indexes, WAL) in <data_dir>/store-edge; "local" = qdrant-client's
    # local mode (exact search in Python, for small stores) in <data_dir>/qdrant.
    store: Literal["edge", "local"] = "edge"
    # A directory instead of the default one, or ":memory:" (qdrant-client local mode, tests).
    qdrant_path: str | None = None
    collection_prefix: str = ""
    # Qdrant distributed mode: shards and copies of each shard for collections created from now on
    # (None: the server's defaults, 1 and 1). See docs/deploy.md, "Scaling".
    qdrant_shards: int | None = Field(default=None, ge=1)
    qdrant_replication_factor: int | None = Field(default=None, ge=1)
    # "scalar": int8 copies of the dense vectors, kept in RAM, the HNSW graph built on them (2.6x
    # faster at 300k points) and every search rescored with the originals. The embedded store applies
    # it to the segments built from then on; a server, to collections created from then on. See
    # docs/store.md, "A library of a million".
    store_quantization: Literal["none", "scalar"] = "none"

    # Model sources, one per family (Family.source_setting; what each takes: `search models build --help`)
    minilm_source: str = "package"
    clip_source: str = "openai/clip-vit-base-patch32"
    bge_m3_source: str = "BAAI/bge-m3"
    ofa_source: str = "iic/ofa_visual-entailment_snli-ve_large_en"
    ppocr_source: str = "ppocrv5"

    # Ingest. Tokens per chunk: at most what the model that embeds documents reads of a chunk (its
    # window less its special tokens, Family.chunk_window), checked when a run starts (the model
    # registry sits above the settings); the default is cut to a smaller window. The bound here is a sanity bound.
    chunk_tokens: int = Field(default=200, ge=1, le=1_000_000)
    chunk_overlap: int = Field(default=40, ge=0)
    embed_batch_size: PositiveInt = 16  # the ingest's best batch on 2 CPU cores
    embed_concurrency: PositiveInt = 2
    # How long an ingest waits for a Triton that does not answer (down, stopped, or too busy to meet
    # its deadline) before it stops; it pauses "waiting for Triton" meanwhile and goes on by itself
    # when Triton answers. What it wrote stays. 0: stop at once.
    ingest_triton_wait_s: float = Field(default=600.0, ge=0)
    max_file_bytes: PositiveInt = 20_000_000
    max_image_bytes: PositiveInt = MAX_IMAGE_BYTES
    # Pillow's decompression-bomb guard stays on; this is its limit (the indexer and the server's step).
    max_image_pixels: PositiveInt = MAX_IMAGE_PIXELS
    # What parsing one document may cost; past it the file is "too complex" and skipped. The counts
    # stop bombs early; the CPU seconds are the backstop, well above what real files take. Elements:
    # a Word file at the 5M-character text limit has ~250-500k.
    max_parse_seconds: float = Field(default=30.0, gt=0)
    max_parse_elements: int = Field(default=500_000, ge=1)  # DOCX XML elements, HTML elements, PDF objects
    max_read_pages: int = Field(default=100, ge=1)  # pages one `search ocr` / POST /ocr reads (a PDF, a TIFF's frames)
    max_pdf_pages: int = Field(default=2_000, ge=1)  # ~5M characters, the text limit, at ~2,500 a page
    # What reading the text in one file's scans (OCR, in Triton) may take, wall time: the file, and
    # any one page (its request's deadline). Past them, or once the pace of its first pages says the
    # rest cannot fit, the file is "too long to read" and skipped. A scanned page takes ~1-5 s on CPU:
    # 600 s is a few hundred pages, not a 2,000-page scan (an hour of the server's OCR).
    max_ocr_seconds: float = Field(default=600.0, gt=0, le=86_400)
    max_ocr_page_seconds: float = Field(default=60.0, gt=0, le=3_600)
    # Photos and image files are documents too, their text read by OCR (a model that reads text must be
    # served): off by default, since reading a photo costs several times its embedding (docs/ocr.md).
    ocr_photos: bool = False
    # Which model reads text (scans, photos, `search ocr`) when several are registered; unset: the one there is.
    text_reader: str | None = None

    # `indexer ingest --ray` without an address: "auto" joins the running Ray cluster (`ray start`),
    # "ray://head:10001" or "head:6379" a given one; unset, a local Ray is started for the run.
    ray_address: str | None = None

    # Document search: "auto" = the best mode of an optional family that is served, else the required
    # family's (search.services.documents); or a mode a model offers (`search models list`). The modes
    # are the model registry's, which sits above the settings: `search serve` and each search check it.
    search_mode: str = Field(default="auto", min_length=1, max_length=64)

    # REST API (`search serve`) and the page (`search ui`)
    api_host: str = "127.0.0.1"
    api_port: Port = 8080
    ui_port: Port = 8501
    # When set, requests must send it in the X-API-Key header: for every endpoint ("all") or only
    # for those that change the index ("writes").
    api_key: str | None = None
    api_key_scope: Literal["all", "writes"] = "all"
    # Keys scoped to knowledge bases and rights (search/keys.py, managed with `search keys`): this file,
    # which must then exist, else <data_dir>/api-keys.json when it exists.
    api_keys_file: Path | None = None
    # Requests without a key pass, with every right, even where keys are required (an API key or a
    # keys file, even an empty one). Only this explicit setting opens such a server, and only as "true"
    # (any case; 1, yes, on are refused at start); it is logged as a WARNING at start. Without an API
    # key and a keys file a server is open anyway.
    open_access: bool = False
    # Folders the API may ingest from (server-side paths); empty = none, uploads only.
    api_roots: list[Path] = []
    # Ingest jobs `search serve` runs at once, each of another knowledge base (a KB's own jobs run
    # one after another): one KB's long job does not hold another's; each adds its load on Triton.
    ingest_jobs: int = Field(default=2, ge=1, le=8)
    max_upload_bytes: PositiveInt = 50_000_000
    max_request_bytes: PositiveInt = 60_000_000
    # The largest body of a request that passes without a key where keys are required (reads with
    # api_key_scope "writes"): 4 MB holds any JSON query, /v1/embeddings' 500,000 characters included
    # (ASCII, or \u-escaped at 6 bytes each: 3 MB), not photos; a key lifts it to max_request_bytes.
    max_anonymous_request_bytes: PositiveInt = 4_000_000
    # OCR requests (POST /ocr, MCP read_text) read at once per process: each holds its decoded image
    # (up to ~0.7 GB for a 100 MP one) while Triton reads it. Up to ocr_queue more wait their turn;
    # past that a request is answered 503 with Retry-After ("busy").
    ocr_concurrency: int = Field(default=2, ge=1, le=16)
    ocr_queue: int = Field(default=8, ge=0, le=1000)
    # /metrics (Prometheus) is open like /healthz, for a scraper on the internal network; true makes
    # it need the API key too (X-API-Key, or "Authorization: Bearer KEY" as Prometheus sends it).
    metrics_require_key: bool = False
    # `search serve` logs: "text", or "json" (one object per line, with request_id / job_id).
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    # `/readyz?verify=1` answers with a verification report at most this many seconds old (its
    # `age_s` says how old), so a probe that polls costs one run (~seconds of CPU) per window; 0 runs
    # one every time. `search models verify`, `/models/verify` and the page always run afresh.
    verify_reuse_s: float = Field(default=30.0, ge=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("open_access", mode="before")
    @classmethod
    def _exactly_true(cls, value: object) -> object:
        """Only "true" (any case) opens a server, not pydantic's 1, yes, on: a value written for
        something else never opens it by chance; anything but true or false is refused."""
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ValueError(f"must be true or false (true opens the server to requests without a key), got {value!r}")

    @property
    def triton_run_dir(self) -> Path:
        """Where `search triton up` keeps the local server's state, log and backends."""
        return self.data_dir / "triton"

    @property
    def grpc_url(self) -> str:
        return self.triton_url or f"{self.triton_host}:{self.triton_grpc_port}"

    @property
    def triton_replicas(self) -> list[str]:
        """SEARCH_TRITON_URLS as a list (empty when unset)."""
        return [u.strip() for u in (self.triton_urls or "").split(",") if u.strip()]

    @property
    def store_backend(self) -> str:
        """"server" when QDRANT_URL is set, "local" for ':memory:', else the ``store`` setting."""
        if self.qdrant_url:
            return "server"
        return "local" if self.qdrant_path == ":memory:" else self.store

    @property
    def qdrant_location(self) -> str:
        """What the store opens: a URL, ':memory:', or a directory."""
        if self.qdrant_url:
            return self.qdrant_url
        return self.qdrant_path or str(self.default_store_path(self.store))

    def default_store_path(self, backend: str) -> Path:
        return self.data_dir / ("store-edge" if backend == "edge" else "qdrant")



def load_settings(**overrides) -> Settings:
    """Settings from the environment and ``overrides``; a bad value raises ValueError naming the
    environment variable it came from."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{_env_name(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())) from None


def _env_name(loc: tuple) -> str:
    name = str(loc[0]) if loc else "?"
    field = Settings.model_fields.get(name)
    alias = getattr(field, "validation_alias", None) if field else None
    if alias is not None:  # e.g. QDRANT_URL, read with or without the prefix
        return "/".join(str(c) for c in alias.choices[:2])
    return "SEARCH_" + name.upper()
