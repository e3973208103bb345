"""A thin gRPC client for the served models, mapping transport failures to ServiceErrors."""

from __future__ import annotations

import threading

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from search.errors import ModelNotReady, TritonUnavailable


class TritonClient:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._local = threading.local()  # one channel per thread: ingest embeds from a pool

    @property
    def _client(self) -> grpcclient.InferenceServerClient:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = grpcclient.InferenceServerClient(self.url)
        return client

    def _unreachable(self, exc: Exception) -> TritonUnavailable:
        return TritonUnavailable(
            f"Triton is not reachable at {self.url} ({_short(exc)}): start it with `search triton up`"
        )

    def is_live(self) -> bool:
        try:
            return self._client.is_server_live(client_timeout=2)
        except Exception:
            return False

    def model_ready(self, name: str) -> bool:
        try:
            return self._client.is_model_ready(name, client_timeout=5)
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

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        tensors = []
        for name, array in inputs.items():
            t = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            t.set_data_from_numpy(array)
            tensors.append(t)
        try:
            result = self._client.infer(
                model, tensors, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                client_timeout=self.timeout_s,
            )
        except InferenceServerException as exc:
            status = str(exc.status() or "")
            if "UNAVAILABLE" in status or "DEADLINE" in status:
                raise self._unreachable(exc) from exc
            if "NOT_FOUND" in status or "unknown model" in str(exc) or "not ready" in str(exc):
                raise ModelNotReady(f"model '{model}' is not available in Triton ({_short(exc)})") from exc
            raise
        return {o: result.as_numpy(o) for o in outputs}


def text_tensor(texts: list[str]) -> np.ndarray:
    """A [batch, 1] BYTES tensor, the input shape every text model here takes."""
    return np.array([t.encode("utf-8") for t in texts], dtype=np.object_).reshape(-1, 1)


def _short(exc: Exception) -> str:
    msg = exc.message() if isinstance(exc, InferenceServerException) else str(exc)
    return (msg or type(exc).__name__).splitlines()[0][:200]
