"""What the routes share: the query and ingest services over one store, the folders the API may
read, and the ingest jobs.

Concurrency: one store per app. Document searches on the embedded engine await Triton in the event
loop and call the store there (``store_in_loop``); other calls run in the query threads.
qdrant-client's local mode is not thread-safe, so each call into it takes one lock
(``_Serialised``) for a single store operation only: a search waits at most one upsert batch, and
embedding runs outside the lock."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from indexer.confine import Confinement
from indexer.jobs import JOBS_FILE, JobStore
from indexer.service import IngestService
from search import owner
from search.api.jobs import Jobs
from search.api.watches import Watches
from search.config import Settings
from search.keys import EVERYTHING, key_file
from search.observability import ApiMetrics
from search.owner import Owner
from search.resources import Resources
from search.services import SearchService
from search.store.schema import DEFAULT_KB

log = logging.getLogger("search.api")
LEGACY_UPLOAD = re.compile(r"[0-9a-f]{32}")  # uploads/<id>/ of the layout before uploads were kept per KB
QUERY_THREADS = 40  # requests in flight at once, each waiting on Triton in its thread (Starlette's pool has as many)


def _query_threads() -> ThreadPoolExecutor:
    """Where the query routes run their service call: a blocking call (Triton, the store) per request.
    asyncio's executor hands a call over for less of the event loop's time than Starlette's thread
    pool; threads start on demand."""
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
        self.data_dir = settings.data_dir.expanduser().resolve()
        self.uploads = self.data_dir / "uploads"  # uploads/<kb>/<id>/: each KB's own (roots_for)
        configured = [Path(r).expanduser().resolve() for r in settings.api_roots]
        # A root inside the data dir (its uploads, say) would open other KBs' files to every KB: none is.
        self.roots = [r for r in configured if not r.is_relative_to(self.data_dir)]
        for r in configured:
            if r not in self.roots:
                log.warning("api_roots: %s is inside the data dir %s: not a root", r, self.data_dir)
        self.metrics = metrics
        self.keys = key_file(settings)
        self.keys.load()  # a missing (when configured), unreadable or altered keys file stops the start
        self.owner: Owner | None = None  # set by `search serve` when it owns the embedded store
        self.jobs = Jobs(self._ingest, JobStore(settings.data_dir / JOBS_FILE), metrics, parallel=settings.ingest_jobs)
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
        to a thread costs under load, so a search awaits only Triton (``await encode_query(...)``). A Qdrant server
        (a network wait) and local mode (a lock wait) keep their calls in the query threads."""
        return self._opened and self.resources.store.backend == "edge"

    def _ingest(self, paths: list[Path], *, local: bool = False, kb: str = DEFAULT_KB, **options):
        """A job's run. Its KB's roots are checked again as each file is opened (a path allowed when
        the job was submitted may be a symlink out by then); the owner's local faces read any path."""
        return self.indexer().ingest(paths, confine_to=None if local else self.confinement(kb), kb=kb, **options)

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

    def roots_for(self, kb: str) -> list[Path]:
        """The folders a request or job for ``kb`` may read: the configured roots and that KB's uploads.
        A KB named like an upload folder of the old layout (files directly in it) does not get that
        folder: those folders are no KB's root (only the owner's local faces, which read any path)."""
        own = self.uploads / kb
        if LEGACY_UPLOAD.fullmatch(kb) and _holds_files(own):
            return list(self.roots)
        return [*self.roots, own]

    def confinement(self, kb: str) -> Confinement:
        """``roots_for(kb)`` without the data dir (store, keys, jobs, other KBs' uploads), even where
        a configured root holds it."""
        return Confinement(self.roots_for(kb), exclude=[self.data_dir])

    def inside_roots(self, path: Path, kb: str = DEFAULT_KB) -> bool:
        """Whether ``path`` (resolved) is one a request for ``kb`` may have the server read."""
        return self.confinement(kb).contains(str(path))

    def may_read(self, request, real: Path) -> bool:
        """Whether an HTTP request may have the server read the file at ``real``, a real path (the
        opened file's, as the kernel gave it: resolving it again could follow a link swapped in
        since): the owner's local faces read anything; anyone else the configured roots (not the
        data dir) and the uploads of the KBs its key may read."""
        if getattr(request.state, "local", False):
            return True
        if real.is_relative_to(self.uploads) and len(parts := real.relative_to(self.uploads).parts) > 1:
            who = getattr(request.state, "principal", EVERYTHING)
            return who.may(parts[0]) and self.inside_roots(real, parts[0])
        return self.inside_roots(real)

    def outside_link(self, path: Path, kb: str = DEFAULT_KB) -> Path | None:
        """The first symbolic link at or under ``path`` that leads out of ``kb``'s roots (the indexer
        reads the symlinked files it finds in folders), or None."""
        confine = self.confinement(kb)
        if path.is_symlink():  # a file, or a folder a batch would walk
            return None if confine.contains(os.path.realpath(path)) else path
        if path.is_dir():
            for dirpath, _dirs, files in os.walk(path):
                for f in files:
                    p = Path(dirpath, f)
                    if p.is_symlink() and not confine.contains(os.path.realpath(p)):
                        return p
        return None

    def close(self) -> None:
        """Stop the watches and the running jobs (they resume at the next start), then release the store. The app may start again
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


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` holds anything but folders (an upload of the old layout holds its files)."""
    try:
        with os.scandir(folder) as entries:
            return any(not e.is_dir(follow_symlinks=False) for e in entries)
    except OSError:
        return False
