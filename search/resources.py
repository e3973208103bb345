"""The two servers every service talks to, opened once per process and shared: the vector store
and the Triton client. Query and ingest services in one process (the REST API) must share them,
because the embedded store admits one opener."""

from __future__ import annotations

from functools import cached_property

from search.blas import one_blas_thread
from search.config import Settings
from search.datadir import private
from search.flight import SingleFlight
from search.models import bge_m3, clip, minilm
from search.models.base import TextVector
from search.store import Store, open_store
from search.triton.client import START_HINT, TritonClient
from search.triton.coalesce import Coalescer, LoopCoalescer
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
        return TritonClient(self.triton_url(), self.settings.triton_timeout_s, hint=self.triton_hint)

    @cached_property
    def clip_queries(self) -> Coalescer[str, TextVector]:
        """A text query's CLIP vector: the queries of this process's concurrent searches (and one-text
        embeddings requests) go to ``clip_text`` as one request (one text-tower execution, padded to
        the longest of them)."""
        return Coalescer(self._clip_query_vectors, clip.TEXT_BATCH)

    @cached_property
    def clip_aqueries(self) -> LoopCoalescer[str, TextVector]:
        """``clip_queries`` for the texts an event loop awaits (the REST API's `/v1/embeddings`), sent
        from threads of their own so that Triton is not kept waiting by the loop's other work."""
        return LoopCoalescer(self._clip_query_vectors, clip.TEXT_BATCH)

    @cached_property
    def minilm_queries(self) -> Coalescer[str, TextVector]:
        """A document query's MiniLM vector: concurrent queries (and one-text embeddings requests) go to
        the query deployment together, one request per instance at most (each padded to its longest text)."""
        return Coalescer(self._minilm_query_vectors, minilm.BATCH, minilm.QUERY_INSTANCES)

    @cached_property
    def minilm_aqueries(self) -> LoopCoalescer[str, TextVector]:
        """``minilm_queries`` for the texts an event loop awaits (the REST API's)."""
        return LoopCoalescer(self._minilm_query_vectors, minilm.BATCH, minilm.QUERY_INSTANCES)

    @cached_property
    def bge_m3_queries(self) -> Coalescer[tuple[str, bool], bge_m3.M3Output]:
        """A document query's BGE-M3 outputs, given (text, with ColBERT vectors): concurrent queries (and
        one-text embeddings requests) go to ``bge_m3`` as one request (its one instance), padded to the
        longest of them."""
        return Coalescer(self._bge_m3_query_outputs, bge_m3.BATCH)

    @cached_property
    def bge_m3_aqueries(self) -> LoopCoalescer[tuple[str, bool], bge_m3.M3Output]:
        """``bge_m3_queries`` for the texts an event loop awaits (the REST API's)."""
        return LoopCoalescer(self._bge_m3_query_outputs, bge_m3.BATCH)

    @cached_property
    def verify_runs(self) -> SingleFlight[dict]:
        """The model verifications of this process: one at a time, and callers asking for the same
        check while it runs share its report (each costs seconds of CPU on every served model)."""
        return SingleFlight()

    def _clip_query_vectors(self, texts: list[str]) -> list[TextVector]:
        return clip.embed_queries(self.triton, texts)

    def _minilm_query_vectors(self, texts: list[str]) -> list[TextVector]:
        return minilm.embed_queries(self.triton, texts)

    def _bge_m3_query_outputs(self, queries: list[tuple[str, bool]]) -> list[bge_m3.M3Output]:
        return bge_m3.encode_queries(self.triton, queries)

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
