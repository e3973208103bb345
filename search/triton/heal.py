"""Telling a dead model from a live one, and bringing it back: the recovery half of ``TritonClient``
(see ``search.triton.client`` for what a stub death and a stall look like).

``Healing`` holds the state between a request that found a step dead, stalled or mixed up and its
one retry: the reload (``heal``) and the marks of answers that may be late (``_in_trouble``).
``probe``/``health`` ask a tiny real question, since Triton keeps a dead model READY."""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np
from tritonclient.utils import InferenceServerException

from search.errors import ModelNotReady, ModelUnhealthy, TritonUnavailable

log = logging.getLogger("search.triton.client")  # one logger for the client's two halves

PROBE_TTL_S = 10.0  # a healthy probe is reused this long: the page and /readyz ask often, entailment is slow on CPU
RELOAD_PARAMETER = "search_reloaded_ns"  # set by heal: when the model was last reloaded
RESTART_HINT = "restart Triton (`search triton down && search triton up`, or restart the Triton container)"


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str = ""  # why not, in a few words

    def as_dict(self) -> dict:
        return asdict(self)


class Healing:
    """The recovery and health half of ``TritonClient``: it relies on the client's ``_client`` (this
    thread's blocking gRPC client), ``_infer`` (one request, failures mapped) and ``_unreachable``."""

    heal_enabled: bool
    heal_timeout_s: float

    def _init_healing(self, heal: bool, heal_timeout_s: float) -> None:
        self.heal_enabled, self.heal_timeout_s = heal, heal_timeout_s
        self._heal_lock = threading.Lock()
        self._healed_at: dict[str, float] = {}  # step -> monotonic time of its last reload
        self._healthy_at: dict[str, float] = {}  # model -> monotonic time of its last healthy probe
        # When a request last found a step dead, stalled or mixed up, and when what followed (a reload,
        # or the error) was over: an answer to a request that was out in between may be a late one.
        self._trouble_at = self._settled_at = float("-inf")

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
        calls = cfg.get("parameters", {}).get("calls", {}).get("string_value", "")  # a Python model's BLS calls
        return [s["model_name"] for s in cfg.get("ensemble_scheduling", {}).get("step", [])] + [c for c in calls.split(",") if c]

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
            self._infer(model, probe, None, timeout_s, batched=int(cfg.get("max_batch_size", 0)) > 0)
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
                 *, mixed_up: bool = False, rows: str = "", dropped: bool = False) -> None:
        super().__init__(cause.message())
        self.instance, self.ensemble, self.cause, self.mixed_up = instance, ensemble, cause, mixed_up
        self.dropped = dropped  # "Failed to process the requests": a step dropped them, which one unsaid
        self.rows = rows  # why an answer that reached the client is not its request's

    @property
    def what(self) -> str:
        if self.rows:
            return f"its answer was not this request's ({self.rows}; as after a step stalled)"
        if self.mixed_up:
            return "a step was handed another request's outputs (after a step stalled)"
        if self.dropped:
            return "a step dropped its requests (it stalled or died)"
        where = f"the process of its step '{re.sub(r'_[0-9]+_[0-9]+$', '', self.instance)}'" if self.instance else "its process"
        return f"{where} stopped answering (it died, or stalled for over a second)"

    def error(self, model: str, fix: str) -> ModelUnhealthy:
        return ModelUnhealthy(f"model '{model}' failed in Triton: {self.what}: {fix}")


def _fresh(stamps: dict[str, float], name: str, max_age_s: float) -> bool:
    """Whether ``name``'s last good answer (a monotonic time in ``stamps``) is younger than ``max_age_s``."""
    return time.monotonic() - stamps.get(name, float("-inf")) < max_age_s


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


def _load_error(exc: InferenceServerException) -> str:
    """The cause of a failed load, without Triton's "load failed for model ...: version N is at ..." lead."""
    lines = (exc.message() or str(exc)).strip().splitlines() or [type(exc).__name__]
    msg = re.sub(r"^load failed for model '[^']+': (version \d+ is at \w+ state: )?", "", lines[0])
    return msg if len(msg) <= 160 else msg[:159] + "…"


def _short(exc: Exception) -> str:
    msg = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
    return (msg or type(exc).__name__).splitlines()[0][:200]
