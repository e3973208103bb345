"""The two servers every service talks to, opened once per process and shared: the vector store
and the Triton client. Query and ingest services in one process (the REST API) must share them,
because the embedded store admits one opener."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from search.blas import one_blas_thread
from search.config import Settings
from search.datadir import private
from search.flight import SingleFlight
from search.models import FAMILIES, Family
from search.store import Store, open_store
from search.triton.client import QUERY, START_HINT, TritonClient, client_options
from search.triton.coalesce import Coalescer
from search.triton.local import LocalTriton


class Resources:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        private(settings.data_dir)  # every face that opens the store or Triton comes through here
        one_blas_thread()

    @cached_property
    def store(self) -> Store:
        return open_store(self.settings)

    @cached_property
    def triton(self) -> TritonClient:
        return TritonClient(self.triton_url(), hint=self.triton_hint, **client_options(self.settings))

    @cached_property
    def batchers(self) -> dict[str, Coalescer]:
        """Served query model -> the batcher that the queries of this process's concurrent searches (and
        one-text embeddings requests) share: those that wait on the requests in flight go out together,
        one model execution padded to the longest of them (Triton batches only requests of one shape).
        One per family with a ``query_model`` (what a query is, e.g. a text and whether it needs
        multivector rows, is the family's ``encode_queries``). Threads call it, event loops ``acall`` it."""
        return {f.query_model: Coalescer(self._query_sender(f), f.query_batch, f.query_in_flight)
                for f in FAMILIES if f.query_model}

    def _query_sender(self, fam: Family) -> Callable[[list], list]:
        """``fam``'s send, bound here (a lambda in the comprehension would see the last family), asking
        for ``triton`` at each send as the properties it replaces did."""
        return lambda queries: fam.encode_queries(self.triton.with_retry(QUERY), queries)

    @cached_property
    def verify_runs(self) -> SingleFlight[dict]:
        """The model verifications of this process: one at a time, and callers asking for the same
        check while it runs share its report (each costs seconds of CPU on every served model)."""
        return SingleFlight()

    def triton_url(self) -> str:
        """An explicit URL, else the local server that `search triton up` recorded, else the defaults."""
        if self.settings.triton_url:
            return self.settings.triton_url
        local = LocalTriton.attach(self.settings.triton_run_dir)
        if local is not None and local.is_running():
            return f"{local.host}:{local.grpc_port}"
        return self.settings.grpc_url

    def triton_hint(self) -> str:
        """What to do about a Triton that does not answer: wait, while the supervisor of the local
        server starts it again after a crash; else start it."""
        if not self.settings.triton_url:
            local = LocalTriton.attach(self.settings.triton_run_dir)
            if local is not None and (why := local.restarting()):
                return f"it is being started again ({why}): try again in a few seconds"
        return START_HINT

    def store_opened(self) -> bool:
        return "store" in self.__dict__

    def close(self) -> None:
        """Release the store; the next use opens it again."""
        if self.store_opened():
            self.__dict__.pop("store").close()
