"""What the routes share: the query and ingest services over one store, the folders the API may
read, and the ingest jobs.

Concurrency: one store per app. Document searches on the embedded engine await Triton in the event
loop and call the store there (``store_in_loop``); other calls run in the query threads.
qdrant-client's local mode is not thread-safe, so there every call into its client takes one lock
(``_Serialised``), held for a single store operation, not for a whole request or job: a search
issued while a job runs waits at most for one upsert batch, and embedding (Triton) runs outside the
lock. The embedded engine and a server take concurrent calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from indexer.jobs import JOBS_FILE, JobStore
from indexer.service import IngestService
from search import owner
from search.api.jobs import Jobs
from search.api.watches import Watches
from search.config import Settings
from search.keys import key_file
from search.observability import ApiMetrics
from search.owner import Owner
from search.resources import Resources
from search.services import SearchService

QUERY_THREADS = 40  # requests in flight at once, each waiting on Triton in its thread (Starlette's pool has as many)


def _query_threads() -> ThreadPoolExecutor:
    """Where the query routes run their service call: a blocking call (Triton, the store) per request.
    asyncio's executor hands a call over for ~35-70 us less of the event loop's time than Starlette's
    thread pool (bench/bench_api_stack.py); threads start on demand."""
    return ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="query")


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
    def __init__(self, settings: Settings, metrics: ApiMetrics | None = None) -> None:
        self.settings = settings
        self.resources = Resources(settings)
        self.store_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._opened = False
        self.uploads = (settings.data_dir / "uploads").resolve()
        self.roots = [Path(r).expanduser().resolve() for r in settings.api_roots] + [self.uploads]
        self.metrics = metrics
        self.keys = key_file(settings)
        self.keys.load()  # a missing (when configured), unreadable or altered keys file stops the start
        self.owner: Owner | None = None  # set by `search serve` when it owns the embedded store
        self.jobs = Jobs(self._ingest, JobStore(settings.data_dir / JOBS_FILE), metrics)
        self._pool = _query_threads()
        self.watches = Watches(self.jobs, self.jobs.store, ignore=[settings.data_dir], outside_link=self.outside_link,
                               optimize=lambda: self.indexer().optimize())

    async def run(self, fn, /, *args, **kwargs):
        """``fn(*args, **kwargs)`` in a query thread, off the event loop, in the request's context
        (its id in the log lines the call writes)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def store_in_loop(self) -> bool:
        """Whether a query's store calls run in the event loop: for the embedded engine once it is open.
        Its calls are in-process and take well under a millisecond on a query's scale, less than the hop
        to a thread costs under load, so a search awaits only Triton (``aencode_query``). A Qdrant server
        (a network wait) and local mode (a lock wait) keep their calls in the query threads."""
        return self._opened and self.resources.store.backend == "edge"

    def _ingest(self, paths: list[Path], *, local: bool = False, **options):
        """A job's run. The roots are checked again as each file is opened (a path allowed when the
        job was submitted may be a symlink out by then); the owner's local faces read any path."""
        return self.indexer().ingest(paths, confine_to=None if local else self.roots, **options)

    def _open(self) -> None:
        """Open the store on first use, so a busy or absent store is a 503 for that request (and
        retried on the next), not a crash at start-up."""
        if not self._opened:
            with self._open_lock:
                if not self._opened:
                    store = self.resources.store
                    if store.backend == "local":  # qdrant-client local mode is not built for threads; edge and a server are
                        store.client = _Serialised(store.client, self.store_lock)
                    self._opened = True

    def service(self) -> SearchService:
        """The query service with its store open."""
        self._open()
        return SearchService(self.settings, self.resources)

    def indexer(self) -> IngestService:
        """The ingest service on the same store."""
        self._open()
        return IngestService(self.settings, self.resources)

    def embedder(self) -> SearchService:
        """The query service for embeddings on request: Triton only, so the store is not opened."""
        return SearchService(self.settings, self.resources)

    def unopened_service(self) -> SearchService:
        """The query service without opening the store: for reporting on a store that may be busy."""
        return SearchService(self.settings, self.resources)

    def open_store(self) -> None:
        """Open the store now: `search serve` takes the embedded store's lock before it says it owns it."""
        self._open()

    def inside_roots(self, path: Path) -> bool:
        return any(path.is_relative_to(root) for root in self.roots)

    def may_read(self, request, path: Path) -> bool:
        """Whether an HTTP request may have the server read ``path`` (a file it names, not an upload):
        the owner's local faces read anything; anyone else only files inside the API's roots."""
        return bool(getattr(request.state, "local", False)) or self.inside_roots(path.expanduser().resolve())

    def outside_link(self, path: Path) -> Path | None:
        """The first symbolic link at or under ``path`` that leads out of the roots (the indexer reads
        the symlinked files it finds in folders), or None."""
        if path.is_symlink():  # a file, or a folder a batch would walk
            return None if self.inside_roots(path.resolve()) else path
        if path.is_dir():
            for dirpath, _dirs, files in os.walk(path):
                for f in files:
                    p = Path(dirpath, f)
                    if p.is_symlink() and not self.inside_roots(p.resolve()):
                        return p
        return None

    def close(self) -> None:
        """Stop the watches, finish the running job, then release the store. The app may start again
        after this (test clients run the lifespan per request): the next call opens the store again."""
        self.watches.close()
        self.jobs.close()
        pool, self._pool = self._pool, _query_threads()  # a fresh one, unstarted, for an app that starts again
        pool.shutdown(wait=False)
        self.jobs.store.close()
        if self.owner is not None:  # here, not after uvicorn.run: uvicorn re-raises SIGTERM once it has shut down
            owner.release(self.settings.data_dir)
            self.owner = None
        with self._open_lock:
            self.resources.close()  # the store's close() takes the store lock like every other call
            self._opened = False
