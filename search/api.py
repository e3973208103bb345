"""The REST API for knowledge-base bots: `search serve` (FastAPI + uvicorn).

Every search and ingest goes through search.service.SearchService, like the CLI and the page;
this module only validates requests, guards paths and sizes, runs ingest jobs and maps errors.

Concurrency: one SearchService per app. The embedded Qdrant store (qdrant-client local mode) is
not thread-safe, so every call into its client takes one lock (see ``_Serialised``). The lock is
held for a single store operation, not for a whole request or ingest job: a search issued while
a job runs waits at most for one upsert batch, and embedding (Triton) runs outside the lock.
Ingest jobs run one at a time in a background thread; jobs are kept in memory.
"""

from __future__ import annotations

import functools
import hmac
import logging
import os
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Request, Security, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader
from pydantic import AfterValidator, BaseModel, Field
from starlette.concurrency import run_in_threadpool

from search.config import Settings
from search.errors import (BadRequest, EmptyCollection, ModelNotReady, ServiceError, StoreUnavailable,
                           TritonUnavailable)
from search.models import FAMILIES
from search.observability import ApiMetrics, RequestObserver, configure_logging, job_id, note_error, request_id
from search.service import MAX_TOP_K, MODES, SORTS, ImageFilters, SearchService, parse_date, parse_near
from search.store import DOCUMENTS

log = logging.getLogger("search.api")

API_KEY_HEADER = "X-API-Key"
SCOPES = ("all", "writes")
MAX_PATHS = 100  # per ingest request
MAX_FILES = 100  # per upload request
MAX_JOBS_KEPT = 200  # finished jobs beyond this are forgotten, oldest first
CHUNK = 1 << 20
STATUS = {BadRequest: 400, EmptyCollection: 409, ModelNotReady: 503, TritonUnavailable: 503, StoreUnavailable: 503}


# -- request bodies (pydantic: a 422 names the field)
def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")  # JSON may carry lone surrogates, which the tokenizers cannot take
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


Text = Annotated[str, AfterValidator(_utf8)]
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K)]
Score = Annotated[float, Field(allow_inf_nan=False)]


class DocumentQuery(BaseModel):
    query: Text = Field(min_length=1, max_length=2000, examples=["reset password"])
    top_k: TopK = 5
    mode: Literal[MODES] | None = Field(None, description="default: the server's search_mode (auto)")
    min_score: Score | None = None
    folder: Text | None = Field(None, max_length=4096, description="only files under this folder")


class PhotoFilters(BaseModel):
    after: Text | None = Field(None, max_length=64, examples=["2021-07-14"])
    before: Text | None = Field(None, max_length=64)
    camera: Text | None = Field(None, max_length=200)
    near: Text | None = Field(None, max_length=100, description="LAT,LON,KM", examples=["51.5,-0.12,10"])
    folder: Text | None = Field(None, max_length=4096)

    def to_filters(self) -> ImageFilters:
        return ImageFilters(after=parse_date(self.after, "after") if self.after else None,
                            before=parse_date(self.before, "before") if self.before else None,
                            camera=self.camera, near=parse_near(self.near) if self.near else None,
                            folder=self.folder)


class ImageQuery(PhotoFilters):
    text: Text = Field(min_length=1, max_length=2000, examples=["a dog on the beach"])
    top_k: TopK = 12
    min_score: Score | None = None
    sort: Literal[SORTS] = "score"
    verify: bool = Field(False, description="re-rank the top_k hits by OFA's probability that each photo entails the text")
    min_entailment: Annotated[float, Field(ge=0, le=1)] | None = Field(
        None, description="with verify: drop photos whose entailment probability is below this")


class IngestPaths(BaseModel):
    paths: list[Text] = Field(min_length=1, max_length=MAX_PATHS,
                              description="absolute server-side paths inside the configured roots")
    prune: bool = Field(False, description="also remove indexed files under these paths that are gone from disk")


# -- ingest jobs
@dataclass
class Job:
    id: str
    paths: list[str]
    state: str = "queued"  # queued | running | done | failed
    total: int | None = None
    done: int = 0
    counts: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    report: dict | None = None
    error: str | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None
    request_id: str | None = None  # the request that submitted it, for the logs

    def as_dict(self) -> dict:
        return {"id": self.id, "state": self.state, "paths": self.paths, "files_done": self.done,
                "files_total": self.total, "counts": dict(self.counts), "failures": list(self.failures),
                "report": self.report, "error": self.error, "created": self.created, "finished": self.finished}


class _Serialised:
    """A qdrant-client whose calls run one at a time (local mode is not built for threads)."""

    def __init__(self, client, lock: threading.Lock) -> None:
        self._client, self._lock = client, lock

    def __getattr__(self, name: str):
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        @functools.wraps(attr)
        def call(*args, **kwargs):
            with self._lock:
                return attr(*args, **kwargs)
        return call


class Backend:
    """What the routes share: the service, the store lock, the roots and the ingest jobs."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.svc = SearchService(settings)
        self.store_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._opened = False
        self.uploads = (settings.data_dir / "uploads").resolve()
        self.roots = [Path(r).expanduser().resolve() for r in settings.api_roots] + [self.uploads]
        self.jobs: dict[str, Job] = {}
        self._jobs_lock = threading.Lock()
        self.pool: ThreadPoolExecutor | None = None  # one job at a time, started on first use
        self.metrics: ApiMetrics | None = None

    def service(self) -> SearchService:
        """The service with its store open. Opened on first use, so a busy or absent store is a 503
        for that request (and retried on the next), not a crash at start-up."""
        if not self._opened:
            with self._open_lock:
                if not self._opened:
                    store = self.svc.store
                    if store.backend == "local":  # qdrant-client local mode is not built for threads; edge and a server are
                        store.client = _Serialised(store.client, self.store_lock)
                    self._opened = True
        return self.svc

    def inside_roots(self, path: Path) -> bool:
        return any(path.is_relative_to(root) for root in self.roots)

    def submit(self, paths: list[Path], prune: bool) -> Job:
        job = Job(uuid.uuid4().hex, [str(p) for p in paths], request_id=request_id.get())
        with self._jobs_lock:
            finished = [j for j in self.jobs.values() if j.finished]
            for old in finished[: max(0, len(finished) - MAX_JOBS_KEPT)]:
                del self.jobs[old.id]
            self.jobs[job.id] = job
            if self.pool is None:
                self.pool = ThreadPoolExecutor(1, thread_name_prefix="ingest")
            self.pool.submit(self._run, job, paths, prune)
        log.info("ingest job %s queued", job.id, extra={"job_id": job.id, "paths": len(paths)})
        return job

    def _run(self, job: Job, paths: list[Path], prune: bool) -> None:
        job.state = "running"
        tokens = request_id.set(job.request_id), job_id.set(job.id)  # every log line of the job carries both
        log.info("ingest job %s started", job.id, extra={"paths": len(paths)})

        def on_file(outcome) -> None:
            job.done += 1
            job.counts[outcome.status] += 1
            if self.metrics:
                self.metrics.ingest_files.labels(outcome.status).inc()
            if outcome.reason and outcome.status == "failed":
                job.failures.append({"path": outcome.path, "reason": outcome.reason})
                log.warning("ingest job %s: %s: %s", job.id, outcome.path, outcome.reason)

        try:
            report = self.service().ingest(paths, prune=prune, on_start=lambda n: setattr(job, "total", n),
                                           on_file=on_file)
            job.report, job.state = report.as_dict(), "done"
        except Exception as exc:  # the job's status is the only place left to report it
            log.exception("ingest job %s failed", job.id)
            job.error, job.state = str(exc) or type(exc).__name__, "failed"
        job.finished = time.time()
        if self.metrics:
            self.metrics.ingest_jobs.labels(job.state).inc()
        log.info("ingest job %s %s in %.1f s", job.id, job.state, job.finished - job.created,
                 extra={"state": job.state, "files": dict(job.counts)})
        request_id.reset(tokens[0])
        job_id.reset(tokens[1])

    def close(self) -> None:
        """Finish the running job, then release the store. The app may start again after this
        (test clients run the lifespan per request): the next call opens a fresh service."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        for job in self.jobs.values():
            if job.state == "queued":
                job.state, job.error = "failed", "the server shut down before the job started"
        with self._open_lock:
            self.svc.close()  # the store's close() takes the store lock like every other call
            self.svc, self._opened = SearchService(self.settings), False


# -- request size limit (before the body is read)
class _TooLarge(HTTPException):
    pass


class LimitRequestSize:
    """413 for a Content-Length over the limit, and for a chunked body once it passes it."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            response = JSONResponse({"detail": self._message()}, status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise _TooLarge(413, self._message())  # FastAPI re-raises HTTPExceptions from body reading
            return message

        return await self.app(scope, counted, send)

    def _message(self) -> str:
        return f"body: the request is larger than the {self.limit:,} byte limit (max_request_bytes)"


# -- the app
def create_app(settings: Settings) -> FastAPI:
    if settings.api_key_scope not in SCOPES:
        raise ValueError(f"api_key_scope: must be one of {', '.join(SCOPES)}, got {settings.api_key_scope!r}")
    backend = Backend(settings)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        backend.close()

    app = FastAPI(title="Multimodal search API", version="1.0", lifespan=lifespan,
                  description="Document search with citations, photo search (text and example image), "
                              "ingest jobs and health. Send the key in the X-API-Key header when one is configured.")
    app.state.backend = backend
    metrics = backend.metrics = app.state.metrics = ApiMetrics()
    app.add_middleware(LimitRequestSize, limit=settings.max_request_bytes)
    app.add_middleware(RequestObserver, metrics=metrics)  # outermost: sees 413s and every error too
    _add_error_handlers(app)

    key_header = APIKeyHeader(name=API_KEY_HEADER, auto_error=False)

    def guard(writes: bool) -> Callable:
        def check(key: str | None = Security(key_header)) -> None:
            expected = settings.api_key
            if not expected or (settings.api_key_scope == "writes" and not writes):
                return
            if not key:
                raise HTTPException(401, f"{API_KEY_HEADER}: header required", headers={"WWW-Authenticate": "ApiKey"})
            if not hmac.compare_digest(key.encode(), expected.encode()):
                raise HTTPException(401, f"{API_KEY_HEADER}: wrong API key", headers={"WWW-Authenticate": "ApiKey"})
        return check

    public = APIRouter(tags=["health"])
    reads = APIRouter(dependencies=[Depends(guard(writes=False))])
    writes = APIRouter(dependencies=[Depends(guard(writes=True))], tags=["ingest"])

    @public.get("/metrics", include_in_schema=False)
    def prometheus_metrics(request: Request) -> Response:
        """Prometheus text format. Open like /healthz unless metrics_require_key is set (then the API key
        goes in X-API-Key or as 'Authorization: Bearer KEY', which Prometheus can send)."""
        if settings.api_key and settings.metrics_require_key:
            bearer = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            sent = request.headers.get(API_KEY_HEADER) or bearer
            if not sent or not hmac.compare_digest(sent.encode(), settings.api_key.encode()):
                raise HTTPException(401, f"{API_KEY_HEADER}: the API key is required for /metrics",
                                    headers={"WWW-Authenticate": "Bearer"})
        body, content_type = metrics.render()
        return Response(body, media_type=content_type)

    @public.get("/healthz", summary="The process is up")
    def healthz() -> dict:
        return {"status": "ok"}

    @reads.get("/readyz", tags=["health"], summary="Triton and Qdrant, each reported on its own; 503 unless both answer")
    def readyz() -> JSONResponse:
        svc = backend.svc
        triton: dict = {"url": svc.triton_url(), "live": svc.triton.is_live(), "models": {}}
        if triton["live"]:
            try:
                triton["models"] = {n: svc.triton.model_ready(n) for fam in FAMILIES for n in fam.ensembles}
                # READY stays true when a model's process died: probe the ready ones with a tiny inference
                health = svc.triton.health([n for n, ok in triton["models"].items() if ok])
                triton["models"].update({n: h.healthy for n, h in health.items()})
                triton["unhealthy"] = {n: h.reason for n, h in health.items() if not h.healthy}
            except ServiceError:
                triton["live"] = False
        qdrant: dict = {"backend": settings.store_backend, "location": settings.qdrant_location, "reachable": True}
        try:
            backend.service().store.exists(DOCUMENTS.name)
        except ServiceError as exc:
            qdrant.update(reachable=False, error=str(exc))
        ready = triton["live"] and any(triton["models"].values()) and qdrant["reachable"]
        return JSONResponse({"ready": ready, "triton": triton, "qdrant": qdrant}, status_code=200 if ready else 503)

    @reads.get("/collections", tags=["index"], summary="Points per collection")
    def collections() -> dict:
        store = backend.service().store
        return {"collections": {name: store.count(name) for name in (DOCUMENTS.name, "images")},
                "documents_with_bge_m3": store.count_where(DOCUMENTS.name, "models", "bge_m3")}

    @reads.post("/search/documents", tags=["search"], summary="Passages with citations, ready for a prompt")
    def search_documents(body: DocumentQuery) -> dict:
        hits = backend.service().search_documents(body.query, top_k=body.top_k, min_score=body.min_score,
                                                  folder=body.folder, mode=body.mode)
        context = "\n\n".join(f"[{i}] {h.citation}\n{h.text.strip()}" for i, h in enumerate(hits, 1))
        return {"query": body.query, "hits": [h.as_dict() for h in hits], "context": context}

    @reads.post("/search/images", tags=["search"], summary="Photos that match a text (CLIP)")
    def search_images(body: ImageQuery) -> dict:
        hits = backend.service().search_images(body.text, top_k=body.top_k, min_score=body.min_score,
                                               filters=body.to_filters(), sort=body.sort, verify=body.verify,
                                               min_entailment=body.min_entailment)
        return {"text": body.text, "hits": [h.as_dict() for h in hits]}

    @reads.post("/entail", tags=["search"], summary="Does the uploaded photo support the hypothesis? (OFA visual entailment)")
    async def entail(hypothesis: Annotated[str, Form(min_length=1, max_length=20000, examples=["there are two dogs"])],
                     image: UploadFile = File(description="the photo"),
                     premise: Annotated[str | None, Form(max_length=20000, description="an optional text premise")] = None) -> dict:
        data = await _read_limited(image, "image", settings.max_upload_bytes)
        verdict = await run_in_threadpool(backend.service().entail, data, _utf8(hypothesis),
                                          _utf8(premise) if premise else None)
        return {"image": image.filename, "hypothesis": hypothesis, "premise": premise, **verdict.as_dict()}

    @reads.post("/search/images/like", tags=["search"], summary="Photos that look like the uploaded one")
    async def search_like(image: UploadFile = File(description="the example photo"),
                          top_k: Annotated[int, Form(ge=1, le=MAX_TOP_K)] = 12,
                          min_score: Annotated[float | None, Form(allow_inf_nan=False)] = None,
                          sort: Annotated[Literal[SORTS], Form()] = "score",
                          after: Annotated[str | None, Form(max_length=64)] = None,
                          before: Annotated[str | None, Form(max_length=64)] = None,
                          camera: Annotated[str | None, Form(max_length=200)] = None,
                          near: Annotated[str | None, Form(max_length=100)] = None,
                          folder: Annotated[str | None, Form(max_length=4096)] = None) -> dict:
        data = await _read_limited(image, "image", settings.max_upload_bytes)
        filters = PhotoFilters(after=after, before=before, camera=camera, near=near, folder=folder).to_filters()
        hits = await run_in_threadpool(backend.service().search_images, like=data, top_k=top_k, min_score=min_score,
                                       filters=filters, sort=sort)  # off the event loop, like the sync routes
        return {"like": image.filename, "hits": [h.as_dict() for h in hits]}

    @writes.post("/ingest", status_code=202, summary="Index server-side files or folders inside the configured roots")
    def ingest_paths(body: IngestPaths, request: Request) -> dict:
        paths = [_allowed_path(backend, raw, f"paths[{i}]") for i, raw in enumerate(body.paths)]
        return _accepted(request, backend.submit(paths, body.prune))

    @writes.post("/ingest/upload", status_code=202, summary="Upload documents or photos and index them")
    async def ingest_upload(request: Request, files: list[UploadFile] = File(description="documents and photos")) -> dict:
        if len(files) > MAX_FILES:
            raise HTTPException(400, f"files: at most {MAX_FILES} files per request, got {len(files)}")
        names = [_upload_name(f.filename, f"files[{i}]") for i, f in enumerate(files)]
        if len(set(names)) != len(names):
            raise HTTPException(400, "files: two uploads have the same file name")
        folder = backend.uploads / uuid.uuid4().hex
        folder.mkdir(parents=True)
        try:
            for i, (upload, name) in enumerate(zip(files, names)):
                data = await _read_limited(upload, f"files[{i}] ({name})", settings.max_upload_bytes)
                (folder / name).write_bytes(data)
        except HTTPException:
            shutil.rmtree(folder, ignore_errors=True)  # nothing half-uploaded is left to be indexed later
            raise
        return _accepted(request, backend.submit([folder], prune=False))

    @writes.get("/ingest/jobs/{job_id}", summary="An ingest job's state and progress")
    def ingest_job(job_id: str) -> dict:
        job = backend.jobs.get(job_id)
        if job is None:
            raise HTTPException(404, f"job_id: no ingest job {job_id!r} (jobs are kept in memory until restart)")
        return job.as_dict()

    @writes.get("/ingest/jobs", summary="Recent ingest jobs, newest first")
    def ingest_jobs() -> dict:
        return {"jobs": [j.as_dict() for j in sorted(list(backend.jobs.values()), key=lambda j: -j.created)]}

    for router in (public, reads, writes):
        app.include_router(router)
    return app


def _accepted(request: Request, job: Job) -> dict:
    return {"job_id": job.id, "state": job.state, "status_url": str(request.url_for("ingest_job", job_id=job.id))}


def _allowed_path(backend: Backend, raw: str, name: str) -> Path:
    """The resolved path if it lies inside a root (after following symlinks), else a 4xx naming the field."""
    if not os.path.isabs(raw):
        raise HTTPException(400, f"{name}: must be an absolute path, got {raw!r}")
    try:
        path = Path(raw).resolve()  # follows every symlink and '..'; the roots check comes before existence,
        inside = backend.inside_roots(path)  # so nothing outside the roots can be probed
        exists = inside and path.exists()
    except (OSError, ValueError) as exc:  # NUL bytes, names too long, symlink loops
        raise HTTPException(400, f"{name}: not a usable path ({exc})") from exc
    if not inside:
        roots = ", ".join(str(r) for r in backend.roots)
        raise HTTPException(403, f"{name}: {raw} is outside the folders this server may ingest from ({roots})")
    if not exists:
        raise HTTPException(404, f"{name}: {raw} does not exist")
    if path.is_dir():  # the indexer reads symlinked files it finds in folders: none may lead out
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                p = Path(dirpath, f)
                if p.is_symlink() and not backend.inside_roots(p.resolve()):
                    raise HTTPException(403, f"{name}: {p} is a symlink to a file outside the allowed folders")
    return path


def _upload_name(filename: str | None, name: str) -> str:
    base = Path(filename or "").name
    try:
        ok = bool(base) and not base.startswith(".") and "\\" not in base and "\0" not in base \
            and len(base.encode("utf-8")) <= 255
    except UnicodeEncodeError:
        ok = False
    if not ok:
        raise HTTPException(400, f"{name}: unusable file name {filename!r}")
    return base


async def _read_limited(upload: UploadFile, name: str, limit: int) -> bytes:
    parts, size = [], 0
    while chunk := await upload.read(CHUNK):
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"{name}: larger than the {limit:,} byte upload limit (max_upload_bytes)")
        parts.append(chunk)
    return b"".join(parts)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        status = next((code for cls, code in STATUS.items() if isinstance(exc, cls)), 500)
        note_error(request, exc)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """One readable message that starts with the field, plus pydantic's list for programs."""
        messages = []
        for e in exc.errors():
            loc = [str(p) for p in e["loc"][1:]] or [str(e["loc"][0])]  # drop 'body' / 'query' / 'path'
            where = loc[0] + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
            messages.append(f"{where}: {e['msg']}")
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        return JSONResponse({"detail": "; ".join(messages), "errors": errors}, status_code=422)


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> None:
    """Run the API with uvicorn (one process: the embedded store admits one client). Logs are text or
    JSON lines (log_format), one per request, with its id."""
    import uvicorn  # noqa: PLC0415

    host = host or settings.api_host
    log_config = configure_logging(settings.log_format, settings.log_level)
    if not settings.api_key and host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without an API key: anyone who can reach it can search and ingest", host)
    uvicorn.run(create_app(settings), host=host, port=port or settings.api_port, log_config=log_config,
                access_log=False)
