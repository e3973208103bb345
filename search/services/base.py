"""What every query service shares: settings, the shared store and Triton client, and the
messages that say how to make a missing model or an old store usable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from search.config import Settings
from search.errors import BadRequest, ModelNotReady, ModelUnhealthy, not_served
from search.media.files import Refused, photo_reason, read_regular
from search.resources import Resources
from search.store import Store, kb_collection
from search.triton.client import TritonClient


@contextmanager
def served(model: str, family: str) -> Iterator[None]:
    """A model Triton does not serve, found by the request itself and named as ``_require`` names it.
    Asking Triton first would cost each query a gRPC round trip of the serving process's CPU."""
    try:
        yield
    except ModelUnhealthy:  # served, but its process died: that message says what to do
        raise
    except ModelNotReady as exc:
        raise ModelNotReady(not_served(model, family)) from exc


class ServiceBase:
    def __init__(self, settings: Settings, resources: Resources | None = None) -> None:
        self.settings = settings
        self.resources = resources or Resources(settings)

    @property
    def store(self) -> Store:
        return self.resources.store

    @property
    def triton(self) -> TritonClient:
        return self.resources.triton

    def triton_url(self) -> str:
        return self.resources.triton_url()

    def close(self) -> None:
        self.resources.close()

    def _collection(self, kb: str | None, kind: str) -> str:
        """The collection of ``kind`` in knowledge base ``kb`` (None: the default KB)."""
        try:
            return kb_collection(kb, kind)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def _require(self, model: str, family: str) -> None:
        if not self.triton.model_ready(model):
            raise ModelNotReady(not_served(model, family))

    def _legacy_hint(self) -> str:
        """A store in the old default layout (qdrant-client local mode under <data dir>/qdrant) that
        the embedded engine does not read: say how to bring it over."""
        s = self.settings
        old = s.default_store_path("local") / "collection"
        if s.store_backend != "edge" or s.qdrant_path or not old.is_dir() or not any(old.iterdir()):
            return ""
        return (f"; found an older store (qdrant-client local mode) at {old.parent}: copy it with "
                "`search store migrate --from local --to edge`, or keep using it with SEARCH_STORE=local")

    def _image_bytes(self, image: Path | str | bytes) -> bytes:
        """An image as bytes, given or read from a file (``_read_image``); empty or too large: BadRequest."""
        data = image if isinstance(image, bytes) else self._read_image(Path(image), "image")
        if not data:
            raise BadRequest("image: the image is empty (0 bytes)")
        if len(data) > self.settings.max_image_bytes:
            raise BadRequest(f"image: too large: {len(data) / 1e6:.1f} MB > {self.settings.max_image_bytes / 1e6:.1f} MB limit")
        return data

    def _read_image(self, path: Path, field_name: str) -> bytes:
        """A photo file named by the machine's own user (the CLI, `search mcp`): any regular file,
        but opened without blocking (a FIFO would hold the thread for ever) and bounded in size."""
        path = path.expanduser()
        try:
            return read_regular(path, self.settings.max_image_bytes)
        except Refused as exc:
            raise BadRequest(f"{field_name}: {path}: {photo_reason(exc)}") from None
