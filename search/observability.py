"""What operators see of the REST API: Prometheus metrics, request ids and one-line logs.

- ``ApiMetrics``: requests, latency, errors and ingest progress, in a registry per app.
- ``RequestObserver``: ASGI middleware giving every request an id (a usable ``X-Request-ID``, else a
  new one; echoed back), timing it, counting it under its route template (never the raw path, so
  series stay few) and logging one line.
- ``configure_logging``: text or JSON lines; records carry the ``request_id`` / ``job_id`` of the
  request or job (context variables, copied into FastAPI's threads)."""

from __future__ import annotations

import json
import logging
import logging.config
import os
import re
import time
from contextvars import ContextVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
job_id: ContextVar[str | None] = ContextVar("job_id", default=None)

_USABLE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # what a caller may choose; anything else gets a new id
UNMATCHED = "<unmatched>"  # the route label of requests no route matched (404s for random paths)
# Seconds: from a cached health check to a slow hybrid search or a large upload.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Fields a record may carry (from the context or ``extra=``) that JSON lines include.
FIELDS = ("request_id", "job_id", "method", "route", "path", "status", "duration_ms", "client", "error",
          "state", "files", "paths")


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        labels = ("method", "route")
        self.requests = Counter("search_api_requests", "HTTP requests answered, by route template and status",
                                (*labels, "status"), registry=self.registry)
        self.latency = Histogram("search_api_request_duration_seconds", "Time to answer a request",
                                 labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.errors = Counter("search_api_errors", "Requests answered with a 5xx, by cause (the service error's "
                              "class, e.g. TritonUnavailable, or the unhandled exception's)",
                              (*labels, "error"), registry=self.registry)
        self.in_progress = Gauge("search_api_requests_in_progress", "Requests being answered now",
                                 registry=self.registry)
        self.ingest_files = Counter("search_ingest_files", "Files processed by ingest jobs, by outcome",
                                    ("status",), registry=self.registry)
        self.ingest_jobs = Counter("search_ingest_jobs", "Ingest jobs finished, by final state",
                                   ("state",), registry=self.registry)
        self._series: dict[tuple[str, str, int], tuple] = {}  # the request series per method, route and status

    def observe(self, method: str, route: str, status: int, seconds: float, error: str | None) -> None:
        series = self._series.get((method, route, status))
        if series is None:  # labels() looks the series up anew each time, on every request: kept here
            series = self._series[method, route, status] = (self.requests.labels(method, route, str(status)),
                                                            self.latency.labels(method, route))
        series[0].inc()
        series[1].observe(seconds)
        if status >= 500:
            self.errors.labels(method, route, error or f"http_{status}").inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def note_error(request, exc: Exception) -> None:
    """Remember what caused an error response, for the errors counter (called by exception handlers)."""
    request.state.error = type(exc).__name__


def new_request_id(offered: bytes | None) -> str:
    if offered:
        text = offered.decode("latin-1")
        if _USABLE_ID.match(text):
            return text
    return os.urandom(16).hex()  # as uuid4().hex reads, in a seventh of its time


class RequestObserver:
    """Request id in and out, metrics and one log line per HTTP request (pure ASGI: nothing buffered)."""

    def __init__(self, app, metrics: ApiMetrics, logger: str = "search.api.access") -> None:
        self.app, self.metrics, self.log = app, metrics, logging.getLogger(logger)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = new_request_id(dict(scope["headers"]).get(b"x-request-id"))
        token = request_id.set(rid)
        status, error = 500, None
        start = time.perf_counter()

        async def send_with_id(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(message)

        self.metrics.in_progress.inc()
        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # answered with a 500 by Starlette's outermost middleware
            status, error = 500, type(exc).__name__
            raise
        finally:
            seconds = time.perf_counter() - start
            self.metrics.in_progress.dec()
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            error = error or (scope.get("state") or {}).get("error")
            self.metrics.observe(scope["method"], route, status, seconds, error)
            client = scope.get("client")
            fields = {"method": scope["method"], "route": route, "path": scope["path"], "status": status,
                      "duration_ms": round(seconds * 1000, 2), "client": client[0] if client else None}
            if error:
                fields["error"] = error
            level = logging.ERROR if status >= 500 else logging.INFO
            self.log.log(level, "%s %s %d %.1f ms", scope["method"], scope["path"], status, seconds * 1000,
                         extra=fields)
            request_id.reset(token)


class ContextFilter(logging.Filter):
    """Stamp the current request and job ids on every record (as attributes, for any formatter)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in (("request_id", request_id), ("job_id", job_id)):
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the known fields that are set."""

    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
                "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        line.update({k: getattr(record, k) for k in FIELDS if getattr(record, k, None) is not None})
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = [f"{k}={getattr(record, k)}" for k in ("request_id", "job_id") if getattr(record, k, None)]
        return f"{text} [{' '.join(ids)}]" if ids else text


JsonFormatter.converter = TextFormatter.converter = time.gmtime  # UTC timestamps in either format


def logging_config(fmt: str = "text", level: str = "INFO") -> dict:
    """A dictConfig for the API process (uvicorn's loggers included): one handler on stderr."""
    formatter = {"()": JsonFormatter} if fmt == "json" else \
        {"()": TextFormatter, "format": "%(asctime)sZ %(levelname)s %(name)s: %(message)s"}
    return {
        "version": 1, "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}},
        "formatters": {"default": formatter},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "default", "filters": ["context"],
                                "stream": "ext://sys.stderr"}},
        "loggers": {
            "search": {"level": level.upper()}, "indexer": {"level": level.upper()},
            "uvicorn": {"level": level.upper()}, "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"level": "WARNING"},  # RequestObserver logs every request, with its id
        },
        "root": {"handlers": ["stderr"], "level": "WARNING"},
    }


def configure_logging(fmt: str = "text", level: str = "INFO") -> dict:
    config = logging_config(fmt, level)
    logging.config.dictConfig(config)
    # Neither format shows the caller's file and line, the thread, the process or the asyncio task, so
    # no record looks them up, which makes each request's log line cheaper (the logging HOWTO's "Optimization")
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.logAsyncioTasks = False  # Python 3.12+
    return config
