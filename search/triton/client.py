"""A thin gRPC client for the served models, mapping transport failures to ServiceErrors.

A model can be loaded (READY) yet dead: every model here runs in a Python-backend stub process,
and when that process dies Triton keeps the model READY and fails each request with INTERNAL
"Stub process '<instance>' is not healthy". The client turns that into ``ModelUnhealthy``, and
(``heal``) first reloads the dead step through Triton's model-control API and retries once, so
a crash costs one slow request instead of a manual `search triton down && search triton up`.
``probe`` tells such a model apart from a healthy one with a tiny real inference.

Triton 2.51 says the same of a stub that merely stalled for over a second (a suspended machine),
and then hands that step's late answers to the next requests: a step that finds another
request's outputs in its inputs fails with ``MIXED_UP`` (``search.triton.steps.requests``), and
the client reloads the ensemble's steps as for a death (docs/reliability.md, "A stalled step").
Triton passes a step's answer on unchecked, so the client also refuses an answer without one row
per input row (every model here is batched), and treats it the same way. A late answer of the same
shape cannot be told from a right one: an answer to a request that was out while a step was found
dead or stalled, or was being reloaded, is asked for again once the reload is done.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aio
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from search.errors import ModelNotReady, ModelUnhealthy, TritonUnavailable
from search.triton.steps.requests import MIXED_UP

log = logging.getLogger(__name__)

PROBE_TTL_S = 10.0  # a healthy probe is reused this long: the page and /readyz ask often, OFA is slow on CPU
RELOAD_PARAMETER = "search_reloaded_ns"  # set by heal: when the model was last reloaded
START_HINT = "start it with `search triton up`"
RESTART_HINT = "restart Triton (`search triton down && search triton up`, or restart the Triton container)"
# tritonclient's own message limits, and gRPC's reconnect backoff cut from 1 s (growing 1.6x per failed
# try, up to 120 s) to 0.1-1 s: with the default, a client kept failing for 16 s after a local Triton
# that had been down for 30 s was serving again (its supervisor's restart, `search triton down && up`).
# Not grpc.min_reconnect_backoff_ms: gRPC also takes it as each connection attempt's timeout (20 s),
# and at 100 ms a loaded machine's connects timed out ("before receiving SETTINGS frame").
CHANNEL_ARGS = [("grpc.max_send_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", grpcclient.MAX_GRPC_MESSAGE_SIZE),
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)]
_STUB_DEAD = re.compile(r"Stub process(?: '([^']+)')? is not healthy")
_ENSEMBLE = re.compile(r"in ensemble '([^']+)'")
# A step inside an ensemble refused the inputs the ensemble gave it: only another request's outputs
# do that (the caller's inputs were checked at the ensemble), as after a stalled step.
_STEP_MISFIT = re.compile(r"in ensemble '[^']+'.*(?:batch size does not match other inputs|expected number of inputs)", re.S)


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str = ""  # why not, in a few words

    def as_dict(self) -> dict:
        return asdict(self)


class TritonClient:
    def __init__(self, url: str, timeout_s: float = 30.0, *, heal: bool = True, heal_timeout_s: float = 180.0,
                 hint: Callable[[], str] | None = None) -> None:
        """``hint``: what to do when Triton is not reachable (default: start it), asked then."""
        self.url = url
        self.hint = hint or (lambda: START_HINT)
        self.timeout_s = timeout_s
        self.heal_enabled, self.heal_timeout_s = heal, heal_timeout_s
        self._local = threading.local()  # one channel per thread: ingest embeds from a pool
        self._heal_lock = threading.Lock()
        self._healed_at: dict[str, float] = {}  # step -> monotonic time of its last reload
        self._healthy_at: dict[str, float] = {}  # model -> monotonic time of its last healthy probe
        # When a request last found a step dead, stalled or mixed up, and when what followed (a reload,
        # or the error) was over: an answer to a request that was out in between may be a late one.
        self._trouble_at = self._settled_at = float("-inf")
        self._ready_at: dict[str, float] = {}  # model -> monotonic time it last answered ready
        self._aio_client: tuple[asyncio.AbstractEventLoop, aio.InferenceServerClient] | None = None

    @property
    def _client(self) -> grpcclient.InferenceServerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = grpcclient.InferenceServerClient(self.url, channel_args=CHANNEL_ARGS)
        return client

    def _unreachable(self, exc: Exception) -> TritonUnavailable:
        return TritonUnavailable(f"Triton is not reachable at {self.url} ({_short(exc)}): {self.hint()}")

    def is_live(self) -> bool:
        try:
            return self._client.is_server_live(client_timeout=2)
        except Exception:
            return False

    def model_ready(self, name: str, *, max_age_s: float = 0.0) -> bool:
        """Whether Triton serves ``name``. ``max_age_s``: a "ready" younger than that is reused (a
        "not ready" never is, and a request that finds the model gone forgets it)."""
        if _fresh(self._ready_at, name, max_age_s):
            return True
        try:
            return self._noted(name, self._client.is_model_ready(name, client_timeout=5))
        except InferenceServerException as exc:
            raise self._unreachable(exc) from exc

    def ensure_ready(self, name: str) -> None:
        if not self.is_live():
            raise self._unreachable(ConnectionError("no answer"))
        if not self.model_ready(name):
            raise ModelNotReady(
                f"model '{name}' is not loaded in Triton: build it with `search models build`, "
                "then restart the server (`search triton down && search triton up`)"
            )

    def model_config(self, name: str) -> dict:
        """The configuration Triton loaded for ``name``, as JSON (e.g. its TensorRT precision)."""
        try:
            return self._client.get_model_config(name, as_json=True, client_timeout=10)["config"]
        except InferenceServerException as exc:
            if "UNAVAILABLE" in str(exc.status() or ""):
                raise self._unreachable(exc) from exc
            raise ModelNotReady(f"model '{name}' is not available in Triton ({_short(exc)})") from exc

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        tensors, rows = _tensors(inputs), _rows(inputs)
        started = time.monotonic()
        try:
            got = self._infer(model, tensors, outputs, self.timeout_s, rows)
            if not self._in_trouble(started):
                return got
            self._after_trouble(model)
        except _StubDied as dead:
            self._after_death(model, dead, started)
        try:  # once: a step that dies on every request must not loop
            return self._infer(model, tensors, outputs, self.timeout_s, rows)
        except _StubDied as again:
            self._trouble_at = self._settled_at = time.monotonic()
            raise self._died_again(model, again) from None

    async def ainfer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        """``infer`` for an event loop: awaited on Triton's asyncio client, so a request waits for the
        model without holding a thread. A dead step is reloaded in a worker thread, as ``infer`` does."""
        tensors, rows = _tensors(inputs), _rows(inputs)
        started = time.monotonic()
        try:
            got = await self._ainfer(model, tensors, outputs, rows)
            if not self._in_trouble(started):
                return got
            await asyncio.to_thread(self._after_trouble, model)
        except _StubDied as dead:
            await asyncio.to_thread(self._after_death, model, dead, started)
        try:
            return await self._ainfer(model, tensors, outputs, rows)
        except _StubDied as again:
            self._trouble_at = self._settled_at = time.monotonic()
            raise self._died_again(model, again) from None

    async def amodel_ready(self, name: str, *, max_age_s: float = 0.0) -> bool:
        if _fresh(self._ready_at, name, max_age_s):
            return True
        try:
            return self._noted(name, await self._aio().is_model_ready(name, client_timeout=5))
        except InferenceServerException as exc:
            raise self._unreachable(exc) from exc

    def _noted(self, name: str, ready: bool) -> bool:
        if ready:
            self._ready_at[name] = time.monotonic()
        else:
            self._ready_at.pop(name, None)
        return ready

    def _aio(self) -> aio.InferenceServerClient:
        """The asyncio client of the running loop (a gRPC asyncio channel belongs to one loop)."""
        loop = asyncio.get_running_loop()
        held = self._aio_client
        if held is None or held[0] is not loop:
            held = self._aio_client = (loop, aio.InferenceServerClient(self.url, channel_args=CHANNEL_ARGS))
        return held[1]

    async def aclose(self) -> None:
        """Close the running loop's asyncio channel (an app's shutdown)."""
        held, self._aio_client = self._aio_client, None
        if held is not None and held[0] is asyncio.get_running_loop():
            await held[1].close()

    def _infer(self, model: str, tensors: list, outputs: list[str] | None, timeout: float,
               rows: int | None) -> dict[str, np.ndarray]:
        try:
            result = self._client.infer(model, tensors, outputs=_requested(outputs), client_timeout=timeout)
        except InferenceServerException as exc:
            if (error := self._error(model, exc)) is None:
                raise
            raise error from exc
        return _outputs(result, outputs, rows)

    async def _ainfer(self, model: str, tensors: list, outputs: list[str], rows: int | None) -> dict[str, np.ndarray]:
        try:
            result = await self._aio().infer(model, tensors, outputs=_requested(outputs), client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            if (error := self._error(model, exc)) is None:
                raise
            raise error from exc
        return _outputs(result, outputs, rows)

    def _error(self, model: str, exc: InferenceServerException) -> Exception | None:
        """A failed inference as this project's errors (None: none applies)."""
        status = str(exc.status() or "")
        if "UNAVAILABLE" in status or "DEADLINE" in status:
            return self._unreachable(exc)
        if "NOT_FOUND" in status or "unknown model" in str(exc) or "not ready" in str(exc):
            self._ready_at.pop(model, None)
            return ModelNotReady(f"model '{model}' is not available in Triton ({_short(exc)})")
        message = exc.message() or ""
        ens = _ENSEMBLE.search(message)
        if m := _STUB_DEAD.search(message):
            return _StubDied(m.group(1), ens.group(1) if ens else None, exc)
        if MIXED_UP in message or _STEP_MISFIT.search(message):  # any step's late answer may be the cause
            return _StubDied(None, ens.group(1) if ens else None, exc, mixed_up=True)
        return None

    def _after_death(self, model: str, dead: _StubDied, started: float) -> None:
        """A request found ``model``'s step dead: reload it (the caller retries once), or say how to."""
        self._trouble_at = time.monotonic()
        self._healthy_at.pop(model, None)
        try:
            if not self.heal_enabled:
                raise dead.error(model, RESTART_HINT) from None
            self._recover(model, dead, started)
        finally:
            self._settled_at = time.monotonic()

    def _in_trouble(self, started: float) -> bool:
        """Whether a request out since ``started`` overlapped a step found dead, stalled or mixed up
        (any model's: steps are shared), or its reload. Triton 2.51 hands a stalled step's late answer
        to the next request, and one of the same shape passes every check (docs/reliability.md)."""
        return self._trouble_at > started or self._settled_at > started or self._trouble_at > self._settled_at

    def _after_trouble(self, model: str) -> None:
        """Before asking again for an answer that may be a late one: wait for the reload under way."""
        log.info("Triton model '%s': asking again for an answer that came while a step was found dead or "
                 "stalled, or was being reloaded", model)
        with self._heal_lock:
            pass

    @staticmethod
    def _died_again(model: str, again: _StubDied) -> ModelUnhealthy:
        return again.error(model, "again right after a reload (see Triton's log for why): " + RESTART_HINT)

    # -- recovery
    def _recover(self, model: str, dead: _StubDied, started: float) -> None:
        """Reload the dead step, unless another thread already did since our request started."""
        step = self._dead_step(dead, model)
        key = step or model
        with self._heal_lock:
            if self._healed_at.get(key, float("-inf")) > started:
                return
            try:
                reloaded = self.heal(model, step)
            except InferenceServerException as exc:
                raise dead.error(model, f"reloading it failed ({_load_error(exc)}): fix that, then {RESTART_HINT}") from None
            self._healed_at[key] = time.monotonic()
        log.warning("Triton model '%s': %s; reloaded %s", model, dead.what, ", ".join(reloaded))

    def heal(self, model: str, step: str | None = None) -> list[str]:
        """Reload ``step`` (unknown: every step of the ensemble ``model``, or ``model`` itself) through
        model control. Triton starts a fresh backend process and swaps it in; the ensemble keeps
        serving. Raises InferenceServerException when the server refuses or the load fails."""
        targets = [step] if step else (self._steps(model) or [model])
        for name in targets:
            cfg = self._client.get_model_config(name, as_json=True, client_timeout=10)["config"]
            # Triton reloads a model only when the config it is given differs from the loaded one: an
            # unchanged model is left as it is, dead instances and all (the first reload's config, read
            # back, is the loaded one). A parameter no step reads makes each reload's config new.
            cfg.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time_ns())}
            self._client.load_model(name, config=json.dumps(cfg), client_timeout=self.heal_timeout_s)
        return targets

    def _steps(self, model: str) -> list[str]:
        try:
            cfg = self._client.get_model_config(model, as_json=True, client_timeout=10)["config"]
        except InferenceServerException:
            return []
        return [s["model_name"] for s in cfg.get("ensemble_scheduling", {}).get("step", [])]

    def _dead_step(self, dead: _StubDied, model: str) -> str | None:
        """The model behind a stub instance name: '<model>_<group>_<n>' unless the group is named."""
        if not dead.instance:
            return None
        name = re.sub(r"_\d+_\d+$", "", dead.instance)
        steps = self._steps(dead.ensemble or model)
        if name in steps or (not steps and name == model):
            return name
        return None

    # -- health
    def probe(self, model: str, timeout_s: float = 10.0, max_age_s: float = PROBE_TTL_S) -> Health:
        """A tiny real inference: the model-ready flag stays true when a model's process has died.
        A healthy answer younger than ``max_age_s`` is reused; an unhealthy one never is."""
        if _fresh(self._healthy_at, model, max_age_s):
            return Health(True)
        try:
            cfg = self._client.get_model_config(model, as_json=True, client_timeout=timeout_s)["config"]
            probe = _probe_inputs(cfg)
            self._infer(model, _tensors(probe), None, timeout_s, _rows(probe) if int(cfg.get("max_batch_size", 0)) > 0 else None)
        except _StubDied as dead:
            return Health(False, dead.what)
        except TritonUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, InferenceServerException) and "DEADLINE" in str(cause.status() or ""):
                return Health(False, f"no answer to a tiny request within {timeout_s:g} s")
            return Health(False, "Triton is not reachable")
        except (ModelNotReady, InferenceServerException) as exc:
            msg = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
            return Health(False, (msg or type(exc).__name__).splitlines()[0][:200])
        self._healthy_at[model] = time.monotonic()
        return Health(True)

    def health(self, models: list[str] | None = None, timeout_s: float = 10.0) -> dict[str, Health]:
        """``probe`` for each of ``models`` (default: every READY ensemble and standalone model)."""
        if models is None:
            try:
                models = self._entry_models()
            except InferenceServerException as exc:
                raise self._unreachable(exc) from exc
        return {m: self.probe(m, timeout_s) for m in models}

    def _entry_models(self) -> list[str]:
        """READY models that callers use: ensembles, and models that are no ensemble's step."""
        index = self._client.get_model_repository_index(as_json=True, client_timeout=5).get("models", [])
        ready = [m["name"] for m in index if m.get("state") == "READY"]
        steps = {s for m in ready for s in self._steps(m)}
        return [m for m in ready if m not in steps]


class _StubDied(Exception):
    """A step's process stopped answering (died, or stalled past Triton's 1 s), or a step was handed
    another request's outputs (``mixed_up``), which Triton 2.51 does after such a stall."""

    def __init__(self, instance: str | None, ensemble: str | None, cause: InferenceServerException,
                 *, mixed_up: bool = False, rows: str = "") -> None:
        super().__init__(cause.message())
        self.instance, self.ensemble, self.cause, self.mixed_up = instance, ensemble, cause, mixed_up
        self.rows = rows  # why an answer that reached the client is not its request's

    @property
    def what(self) -> str:
        if self.rows:
            return f"its answer was not this request's ({self.rows}; as after a step stalled)"
        if self.mixed_up:
            return "a step was handed another request's outputs (after a step stalled)"
        where = f"the process of its step '{re.sub(r'_[0-9]+_[0-9]+$', '', self.instance)}'" if self.instance else "its process"
        return f"{where} stopped answering (it died, or stalled for over a second)"

    def error(self, model: str, fix: str) -> ModelUnhealthy:
        return ModelUnhealthy(f"model '{model}' failed in Triton: {self.what}: {fix}")


def _fresh(stamps: dict[str, float], name: str, max_age_s: float) -> bool:
    """Whether ``name``'s last good answer (a monotonic time in ``stamps``) is younger than ``max_age_s``."""
    return time.monotonic() - stamps.get(name, float("-inf")) < max_age_s


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


_NUMPY = {"TYPE_BOOL": np.bool_, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
          "TYPE_INT64": np.int64, "TYPE_UINT8": np.uint8, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32,
          "TYPE_FP64": np.float64}


def _probe_inputs(cfg: dict) -> dict[str, np.ndarray]:
    """One item for every required input of the model's config: a short text, a tiny PNG for image
    inputs, zeros for numbers (variable dimensions of length 1)."""
    batched = int(cfg.get("max_batch_size", 0)) > 0
    out = {}
    for spec in cfg.get("input", []):
        if spec.get("optional"):
            continue
        shape = ([1] if batched else []) + [max(int(d), 1) for d in spec.get("dims", [])]
        if spec["data_type"] == "TYPE_STRING":
            value = _tiny_png() if "IMAGE" in spec["name"].upper() else b"probe"
            arr = np.empty(shape, dtype=np.object_)
            arr.fill(value)
        else:
            arr = np.zeros(shape, dtype=_NUMPY.get(spec["data_type"], np.float32))
        out[spec["name"]] = arr
    return out


def _tiny_png() -> bytes:
    from PIL import Image  # noqa: PLC0415

    buf = io.BytesIO()
    Image.new("RGB", (32, 32), (127, 64, 200)).save(buf, "PNG")
    return buf.getvalue()


def text_tensor(texts: list[str]) -> np.ndarray:
    """A [batch, 1] BYTES tensor, the input shape every text model here takes."""
    return np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)


def _load_error(exc: InferenceServerException) -> str:
    """The cause of a failed load, without Triton's "load failed for model ...: version N is at ..." lead."""
    lines = (exc.message() or str(exc)).strip().splitlines() or [type(exc).__name__]
    msg = re.sub(r"^load failed for model '[^']+': (version \d+ is at \w+ state: )?", "", lines[0])
    return msg if len(msg) <= 160 else msg[:159] + "…"


def _short(exc: Exception) -> str:
    msg = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
    return (msg or type(exc).__name__).splitlines()[0][:200]
