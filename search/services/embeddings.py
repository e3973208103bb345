"""Embeddings on request: the served models' vectors for texts (and images), as OpenAI-compatible
clients ask for them (`POST /v1/embeddings`). The same Triton ensembles that index and search
compute them, so a bot that embeds here gets the vectors the index holds."""

from __future__ import annotations

import base64
import binascii
import functools
import re
from dataclasses import dataclass

import numpy as np

from search.errors import BadRequest, ModelNotReady, NotFound, not_served
from search.models import FAMILIES, family
from search.models.base import EmbeddingModel, Family, TextVector
from search.services.base import ServiceBase, served
from search.services.images import example_image
from search.services.steps import Batched, Blocking, Steps

MAX_INPUTS = 256  # per request: OpenAI allows 2048, but on a CPU that is minutes of one request
MAX_INPUT_CHARS = 100_000  # per text; the models cut longer texts at their token limit anyway
# Per request, all texts together, as OpenAI bounds a request (300,000 tokens). The tokenizers read a
# whole text before they cut it (in the Triton step that search queries share), so a request of 256
# texts at MAX_INPUT_CHARS would hold searches up for seconds. 500,000 covers 256
# texts cut at 256 tokens (~1,000-2,000 characters each) or a batch of 16 cut at 8,192.
MAX_REQUEST_CHARS = 500_000
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)


# Every family's, in the order GET /v1/models has always listed them
MODELS: tuple[EmbeddingModel, ...] = tuple(sorted((m for f in FAMILIES for m in f.embedding_models), key=lambda m: m.listed))


@dataclass
class EmbeddedInputs:
    model: EmbeddingModel
    vectors: np.ndarray  # [n, D] float32, unit length
    tokens: list[int]  # per input: tokens the model saw (0 for images)


def embedding_model(name: str) -> EmbeddingModel:
    """The model called ``name`` (or one of its aliases); NotFound names the ones there are."""
    for m in MODELS:
        if name == m.name or name in m.aliases:
            return m
    raise NotFound(f"model: no embedding model {name!r} (models: {', '.join(m.name for m in MODELS)})", "model")


class Embeddings(ServiceBase):
    def embedding_models(self) -> list[dict]:
        """Every embedding model with whether Triton serves it now and its width where known."""
        out = []
        for m in MODELS:
            ready = self.triton.model_ready(m.ensemble)
            out.append({"id": m.name, "input": m.input, "ready": ready, "dimensions": self._dim(m) if ready else m.dim,
                        "aliases": list(m.aliases), "description": m.description})
        return out

    def embed(self, model: str, inputs: str | list[str], *, dimensions: int | None = None) -> Steps[EmbeddedInputs]:
        """Unit vectors for ``inputs`` (texts; base64 images for an image model), one per input in
        order, from the served model ``model``: ``.run()`` in a thread, or ``await`` it in an event loop.
        ``dimensions``: only the model's own width (no model here is trained to be cut shorter),
        anything else is refused. One text shares a request with concurrent searches and other one-text
        requests (its family's batcher, Resources.batchers); anything else is a request of its own."""
        return Steps(self._embedding(model, inputs, dimensions), self.resources.batchers)

    def _embedding(self, model: str, inputs: str | list[str], dimensions: int | None):
        m, items = self._checked(model, inputs)
        if dimensions is not None:
            self._check_served(m, (yield Blocking(lambda: self.triton.model_ready(m.ensemble))), dimensions)
        fam = family(m.family)
        with served(m.ensemble, fam.display):
            if m.input == "image":  # decoding the images is work too: in the thread with the request
                where = [None] if isinstance(inputs, str) else range(len(items))
                vectors = yield Blocking(lambda: fam.image_vectors(self.triton, list(map(functools.partial(self._image, m),
                                                                                        items, where))))
                return EmbeddedInputs(m, vectors, [0] * len(items))
            if len(items) == 1:
                return _one(m, fam, (yield Batched(fam.query_model, fam.embedding_query(items[0]))))
            return _vectors(m, (yield Blocking(lambda: fam.text_vectors(self.triton, items))))

    def _checked(self, model: str, inputs: str | list[str]) -> tuple[EmbeddingModel, list[str]]:
        """The model asked for and the inputs as a list, every input checked."""
        m = embedding_model(model)
        items = [inputs] if isinstance(inputs, str) else list(inputs)
        if not items:
            raise BadRequest("input: must not be empty", "input")
        if len(items) > MAX_INPUTS:
            raise BadRequest(f"input: at most {MAX_INPUTS} inputs per request, got {len(items)}", "input")
        total = sum(len(item) for item in items if isinstance(item, str))
        if m.input == "text" and total > MAX_REQUEST_CHARS:  # images are bounded by the request's bytes
            raise BadRequest(f"input: at most {MAX_REQUEST_CHARS:,} characters in one request, got {total:,}", "input")
        for i, item in enumerate(items):
            where = "input" if isinstance(inputs, str) else f"input[{i}]"
            if not isinstance(item, str):
                raise BadRequest(f"{where}: must be a string (token arrays are not accepted: send the text)", "input")
            if not item.strip():
                raise BadRequest(f"{where}: must not be empty", "input")
            if m.input == "text" and len(item) > MAX_INPUT_CHARS:
                raise BadRequest(f"{where}: longer than {MAX_INPUT_CHARS:,} characters", "input")
            try:
                item.encode("utf-8")  # JSON may carry lone surrogates, which the tokenizers cannot take
            except UnicodeEncodeError:
                raise BadRequest(f"{where}: must be valid UTF-8 text", "input") from None
        return m, items

    def _check_served(self, m: EmbeddingModel, ready: bool, dimensions: int | None) -> None:
        if not ready:
            raise ModelNotReady(not_served(m.ensemble, family(m.family).display))
        if dimensions is not None and dimensions != (m.dim or self._dim(m)):
            raise BadRequest(f"dimensions: {m.name} gives {m.dim or self._dim(m)}-dimensional vectors only "
                             f"(it cannot shorten them), got {dimensions}", "dimensions")

    def _dim(self, m: EmbeddingModel) -> int | None:
        if m.dim:
            return m.dim
        try:
            return family(m.family).dim(self.settings.triton_repo)
        except (OSError, ValueError, KeyError):  # a remote Triton's repository is not on this machine
            return None

    def _image(self, m: EmbeddingModel, item: str, index: int | None) -> bytes:
        where = "input" if index is None else f"input[{index}]"
        text = _DATA_URL.sub("", item.strip(), count=1)
        try:
            data = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{where}: {m.name} takes base64-encoded images (or data: URLs)", "input") from None
        try:
            return example_image(self.settings, data)
        except BadRequest as exc:
            raise BadRequest(f"{where}: {str(exc).removeprefix('like: the uploaded image: ')}", "input") from None


def _one(m: EmbeddingModel, fam: Family, out) -> EmbeddedInputs:
    """A one-text request's answer, from its family's query batcher."""
    vector = fam.query_text_vector(out)
    return EmbeddedInputs(m, vector.vector[None], [vector.n_tokens])


def _vectors(m: EmbeddingModel, outs: list[TextVector]) -> EmbeddedInputs:
    """A text model's vectors and token counts, one per text."""
    return EmbeddedInputs(m, np.stack([o.vector for o in outs]), [o.n_tokens for o in outs])
