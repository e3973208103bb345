"""A thin gRPC client for the served models, mapping transport failures to ServiceErrors: the one
way to Triton, blocking, one channel per thread. An event loop awaits it through a batcher
(``search.triton.coalesce``) or a worker thread; recovery and probes are ``search.triton.heal``.

A model can be READY yet dead: when a step's Python-backend stub dies, Triton fails each request
with "Stub process '<instance>' is not healthy". The client raises ``ModelUnhealthy`` after first
reloading the step (``heal``) and retrying once; ``probe`` tells such a model from a healthy one.

Triton 2.51 says the same of a stub that merely stalled (a suspended machine), then hands its late
answers to later requests: a step that sees another request's outputs fails with ``MIXED_UP``, and
an answer without one row per input row is refused; both are reloaded as a death
(docs/reliability.md). A request out while a step was dead, stalled or reloading is asked again.

A busy machine is not a dead server: a call that misses its deadline, is refused while Triton is
there, or loses its stream is tried again within its budget (``search.triton.retry``), and fails as
``TritonTimeout`` ("timed out after N s"); only a Triton whose health probe is refused is "not
reachable" (``down``)."""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from search.errors import ModelNotReady, TritonTimeout, TritonUnavailable
from search.triton.heal import RESTART_HINT, Healing, Health, _fresh, _short, _StubDied
from search.triton.retry import QUERY, Deadline, Retry, Tries
from search.triton.steps.requests import MIXED_UP

__all__ = ["QUERY", "RESTART_HINT", "START_HINT", "Deadline", "Health", "Retry", "TritonClient", "text_tensor"]

log = logging.getLogger("search.triton.client")

START_HINT = "start it with `search triton up`"
# tritonclient's own message limits, and gRPC's reconnect backoff cut from 1 s (growing 1.6x per failed
# try, up to 120 s) to 0.1-1 s: with the default, a client kept failing long after a restarted local
# Triton was serving again (its supervisor's restart, `search triton down && up`).
# Not grpc.min_reconnect_backoff_ms: gRPC also takes it as each connection attempt's timeout (20 s),
# and at 100 ms a loaded machine's connects timed out ("before receiving SETTINGS frame").
CHANNEL_ARGS = [("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)]
_STUB_DEAD = re.compile(r"Stub process(?: '([^']+)')? is not healthy")
# A step's process that stalled under load drops what it was given with only this, no instance
# named (seen with its sibling's "not healthy" and the reloads that followed): the same trouble.
_STEP_DROPPED = re.compile(r"^(?:in ensemble '[^']+', )?Failed to process the requests\.?$")
_ENSEMBLE = re.compile(r"in ensemble '([^']+)'")
# A step inside an ensemble refused the inputs the ensemble gave it: only another request's outputs
# do that (the caller's inputs were checked at the ensemble), as after a stalled step.
_STEP_MISFIT = re.compile(r"in ensemble '[^']+'.*(?:batch size does not match other inputs|expected number of inputs)", re.S)
_CONNECT_TIMED_OUT = re.compile(r"timed out|Deadline Exceeded", re.I)  # a port that takes the connection, then nothing
_STREAM_LOST = re.compile(r"Stream removed|Socket closed|Connection reset", re.I)  # gRPC's UNKNOWN for a dropped stream
T = TypeVar("T")
READY_PROBE_S = 5.0  # a readiness probe's least deadline: a short call deadline is for inferences, not for it


class TritonClient(Healing):
    def __init__(self, url: str, timeout_s: float = 30.0, *, heal: bool = True, heal_timeout_s: float = 180.0,
                 hint: Callable[[], str] | None = None, per_row_s: float = 0.0, per_mib_s: float = 0.0,
                 retry: Retry | None = None) -> None:
        """``hint``: what to do when Triton is not reachable (default: start it), asked then.
        ``timeout_s``, ``per_row_s``, ``per_mib_s``: a call's ``Deadline``; ``retry``: how each call
        rides out a busy Triton (default: no second try)."""
        self.url = url
        self.hint = hint or (lambda: START_HINT)
        self.timeout_s = timeout_s
        self.deadline = Deadline(timeout_s, per_row_s, per_mib_s)
        self.retry = retry or Retry()
        self._init_healing(heal, heal_timeout_s)
        self._local = threading.local()  # one channel per thread: ingest embeds from a pool, batchers send from theirs
        self._ready_at: dict[str, float] = {}  # model -> monotonic time it last answered ready

    @property
    def _client(self) -> grpcclient.InferenceServerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = grpcclient.InferenceServerClient(self.url, channel_args=CHANNEL_ARGS)
        return client

    def _unreachable(self, exc: Exception) -> TritonUnavailable:
        return TritonUnavailable(f"Triton is not reachable at {self.url} ({_short(exc)}): {self.hint()}")

    def _timed_out(self, model: str, exc: Exception, tries: Tries) -> TritonTimeout:
        budget = "within its deadline" if tries.retry.tries else "(SEARCH_TRITON_RETRY_BUDGET_S)"
        retried = f", {tries.count} tries in {tries.elapsed():.0f} s {budget}" if tries.count > 1 else ""
        if isinstance(exc, TritonTimeout):  # a call's deadline, or a connection's (gRPC's own)
            what = f"timed out after {tries.timeout:.3g} s (SEARCH_TRITON_TIMEOUT_S){retried}"
        else:
            what = f"kept failing ({_short(exc.__cause__ or exc)}){retried}"
        return TritonTimeout(f"Triton at {self.url} did not answer '{model}' in time: {what}; it is there but busy "
                             "or stopped: try again later, or give its calls more time")

    def is_live(self) -> bool:
        try:
            return self._client.is_server_live(client_timeout=2)
        except Exception:
            return False

    def down(self) -> bool:
        """Whether Triton is down by its health probe: it says it is not live, or it does not answer and
        nothing listens at its address. A server whose port still takes connections (stopped, swamped,
        its gRPC channel given up by a keepalive) is not down: it comes back by itself."""
        try:
            if self._client.is_server_live(client_timeout=2):
                return False
            log.info("Triton at %s is down: it says it is not live", self.url)
            return True
        except InferenceServerException as exc:
            if _listening(self.url):
                return False
            log.info("Triton at %s is down: its health probe failed (%s) and nothing takes connections there", self.url, _short(exc))
            return True

    def model_ready(self, name: str, *, max_age_s: float = 0.0, retry: Retry | None = None) -> bool:
        """Whether Triton serves ``name``. ``max_age_s``: a "ready" younger than that is reused (a
        "not ready" never is, and a request that finds the model gone forgets it). A probe that times
        out while Triton is there is tried again like a call (``infer``): a swamped Triton is busy."""
        if self.known_ready(name, max_age_s):
            return True
        tries = Tries(retry or self.retry, max(self.deadline.base_s, READY_PROBE_S))
        ready = self._tried(name, lambda timeout: self._is_ready(name, timeout), tries)
        if ready:
            self._ready_at[name] = time.monotonic()
        else:
            self._ready_at.pop(name, None)
        return ready

    def _is_ready(self, name: str, timeout: float) -> bool:
        """One try of ``model_ready``: its timeout is a ``TritonTimeout``, anything else unreachable."""
        try:
            return self._client.is_model_ready(name, client_timeout=timeout)
        except InferenceServerException as exc:
            if "DEADLINE" in str(exc.status() or ""):
                raise TritonTimeout(_short(exc)) from exc
            raise self._unreachable(exc) from exc

    def known_ready(self, name: str, max_age_s: float) -> bool:
        """Whether ``name`` answered ready within ``max_age_s``, asking nothing (an event loop checks
        this before it hands ``model_ready`` to a thread)."""
        return _fresh(self._ready_at, name, max_age_s)

    def model_config(self, name: str) -> dict:
        """The configuration Triton loaded for ``name``, as JSON (e.g. its TensorRT precision)."""
        try:
            return self._client.get_model_config(name, as_json=True, client_timeout=10)["config"]
        except InferenceServerException as exc:
            if "UNAVAILABLE" in str(exc.status() or ""):
                raise self._unreachable(exc) from exc
            raise ModelNotReady(f"model '{name}' is not available in Triton ({_short(exc)})") from exc

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], *,
              retry: Retry | None = None) -> dict[str, np.ndarray]:
        """``outputs`` of ``model`` for ``inputs`` (batched: [batch, ...] each), within the batch's
        deadline. A call that timed out, was refused or lost its stream while Triton is there is tried
        again under ``retry`` (default: the client's); a Triton found down fails at once."""
        tries = Tries(retry or self.retry, self.deadline.of(inputs))
        return self._tried(model, lambda timeout: self._healed(model, inputs, outputs, timeout), tries)

    def _tried(self, model: str, attempt: Callable[[float], T], tries: Tries) -> T:
        """``attempt(timeout)`` under ``tries``: one that timed out, was refused or lost its stream while
        Triton is there is tried again after a backoff; a Triton found down fails at once."""
        while True:
            timeout = tries.next_timeout()
            try:
                return attempt(timeout)
            except TritonUnavailable as exc:
                if self.down():
                    raise (exc if type(exc) is TritonUnavailable else self._unreachable(exc.__cause__ or exc)) from exc.__cause__
                wait = tries.backoff(timed_out=isinstance(exc, TritonTimeout))
                if wait is None:
                    raise self._timed_out(model, exc, tries) from exc.__cause__
                log.info("Triton call to '%s' failed (%s: %s), Triton is there; trying again in %.1f s (try %d)", model,
                         "timed out" if isinstance(exc, TritonTimeout) else "refused", _short(exc.__cause__ or exc),
                         wait, tries.count + 1)
                time.sleep(wait)

    def _healed(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], timeout: float) -> dict[str, np.ndarray]:
        """One try of ``infer``. A step found dead or mixed up is reloaded (``heal``) and the request asked
        once more; so is an answer that came while a step was in such trouble."""
        started = time.monotonic()
        try:
            got = self._infer(model, inputs, outputs, timeout)
            if not self._in_trouble(started):
                return got
            self._after_trouble(model)
        except _StubDied as dead:
            if dead.dropped and self._in_trouble(started):
                self._after_trouble(model)  # dropped in the stall another request found: its reload is enough
            else:
                self._after_death(model, dead, started)
        try:  # once: a step that dies on every request must not loop
            return self._infer(model, inputs, outputs, timeout)
        except _StubDied as again:
            self._trouble_at = self._settled_at = time.monotonic()
            raise self._died_again(model, again) from None

    def with_retry(self, retry: Retry) -> TritonClient:
        """This client (its channels, its healing state: steps are shared) whose calls default to ``retry``:
        a query's two tries within its deadline (``QUERY``) where the client's own are an ingest batch's."""
        return _WithRetry(self, retry)  # type: ignore[return-value]  - a TritonClient by its methods

    async def aclose(self) -> None:
        """Nothing to close: the channels are per thread, blocking, and go with their threads. Kept
        because the REST app's shutdown awaits it (search/api/app.py)."""

    def _infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str] | None, timeout: float, *,
               batched: bool = True) -> dict[str, np.ndarray]:
        """One request, its failures mapped (``_error``); ``batched``: its answer must have a row per input row."""
        try:
            result = self._client.infer(model, _tensors(inputs), outputs=_requested(outputs), client_timeout=timeout)
        except InferenceServerException as exc:
            if (error := self._error(model, exc, timeout)) is None:
                raise
            raise error from exc
        return _outputs(result, outputs, _rows(inputs) if batched else None)

    def _error(self, model: str, exc: InferenceServerException, timeout: float | None = None) -> Exception | None:
        """A failed inference as this project's errors (None: none applies). A deadline missed is a
        ``TritonTimeout``, a refusal or a lost stream "not reachable": ``infer`` asks the health probe
        whether either is worth another try."""
        status = str(exc.status() or "")
        if "DEADLINE" in status:
            return TritonTimeout(f"Triton at {self.url} did not answer '{model}' in time: timed out after "
                                 f"{timeout or self.timeout_s:.3g} s (SEARCH_TRITON_TIMEOUT_S)")
        if "UNAVAILABLE" in status and _CONNECT_TIMED_OUT.search(exc.message() or ""):
            return TritonTimeout(f"Triton at {self.url} did not answer '{model}' in time: its connection timed out "
                                 f"({_short(exc)})")
        if "UNAVAILABLE" in status or _STREAM_LOST.search(exc.message() or ""):
            return self._unreachable(exc)
        if "NOT_FOUND" in status or "unknown model" in str(exc) or "not ready" in str(exc):
            self._ready_at.pop(model, None)
            return ModelNotReady(f"model '{model}' is not available in Triton ({_short(exc)})")
        message = exc.message() or ""
        ens = _ENSEMBLE.search(message)
        if m := _STUB_DEAD.search(message):
            return _StubDied(m.group(1), ens.group(1) if ens else None, exc)
        if _STEP_DROPPED.match(message.strip()):
            return _StubDied(None, ens.group(1) if ens else None, exc, dropped=True)
        if MIXED_UP in message or _STEP_MISFIT.search(message):  # any step's late answer may be the cause
            return _StubDied(None, ens.group(1) if ens else None, exc, mixed_up=True)
        return None


class _WithRetry:
    """A ``TritonClient`` whose ``infer`` and ``model_ready`` default to another ``Retry``; everything else is the client's."""

    def __init__(self, base: TritonClient, retry: Retry) -> None:
        self._base, self._retry = base, retry

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], *,
              retry: Retry | None = None) -> dict[str, np.ndarray]:
        return self._base.infer(model, inputs, outputs, retry=retry or self._retry)

    def model_ready(self, name: str, *, max_age_s: float = 0.0, retry: Retry | None = None) -> bool:
        return self._base.model_ready(name, max_age_s=max_age_s, retry=retry or self._retry)

    def __getattr__(self, name: str):
        return getattr(self._base, name)


def _listening(url: str, timeout: float = 2.0) -> bool:
    """Whether something takes TCP connections at ``url`` ("host:port"); a connect that times out counts
    as listening (a full backlog), a refusal does not."""
    host, _, port = url.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except TimeoutError:
        return True
    except (OSError, ValueError):
        return False


def client_options(settings) -> dict:
    """``TritonClient``'s deadline and retry keywords from ``search.config.Settings``."""
    return {"timeout_s": settings.triton_timeout_s, "per_row_s": settings.triton_timeout_per_row_s,
            "per_mib_s": settings.triton_timeout_per_mib_s, "retry": Retry(settings.triton_retry_budget_s)}


def _requested(outputs: list[str] | None) -> list | None:
    return [grpcclient.InferRequestedOutput(o) for o in outputs] if outputs else None


def _rows(inputs: dict[str, np.ndarray]) -> int:
    """The request's batch: every model this client calls is batched, its inputs [batch, ...]."""
    return len(next(iter(inputs.values())))


def _outputs(result, outputs: list[str] | None, rows: int | None) -> dict[str, np.ndarray]:
    """The answer's tensors, refused (as a mix-up) without one row per input row: Triton hands a late
    answer to the next request without checking its shapes (a zip over it would pair texts with
    other texts' vectors, or drop some)."""
    names = outputs or [o.name for o in result.get_response().outputs]
    got = {o: result.as_numpy(o) for o in names}
    wrong = [f"{o} has {len(a) if a.ndim else 0}" for o, a in got.items()
             if rows is not None and a is not None and (a.ndim == 0 or len(a) != rows)]
    if wrong:
        rows_said = f"{', '.join(wrong)} rows for {rows} inputs"
        raise _StubDied(None, None, InferenceServerException(rows_said, "StatusCode.INTERNAL"), mixed_up=True, rows=rows_said)
    return got


def _tensors(inputs: dict[str, np.ndarray]) -> list:
    tensors = []
    for name, array in inputs.items():
        t = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        t.set_data_from_numpy(array)
        tensors.append(t)
    return tensors


def text_tensor(texts: list[str]) -> np.ndarray:
    """A [batch, 1] BYTES tensor, the input shape every text model here takes."""
    return np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)
