"""`POST /v1/embeddings` and `GET /v1/models` as OpenAI's own Python client meets them, against a
real `search serve` subprocess over the session's Triton: the vectors are the ones search uses,
usage counts the model's tokens, and bad requests raise the client's own exceptions."""

from __future__ import annotations

import base64
import io

import numpy as np
import openai
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from processes import SearchServer
from tokenizers import Tokenizer

from search.api import create_app
from search.config import Settings
from search.errors import ModelNotReady
from search.models import bge_m3, clip, minilm
from search.services.images import example_image
from search.triton.client import TritonClient
from search.triton.local import free_port
from search.triton.steps import tokens

KEY = "bot-key-1"
TEXTS = ["reset password", "The VPN client needs WireGuard and an intranet account.", "ünïcödé – 日本語"]


@pytest.fixture
def server(settings, tmp_path):
    srv = SearchServer(settings, tmp_path / "serve.log", SEARCH_API_KEY=KEY)
    yield srv
    srv.stop()


@pytest.fixture
def sdk(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=120)


def png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def cos(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def token_counts(repo, step: str, texts: list[str], limit: int) -> list[int]:
    tok = Tokenizer.from_file(str(repo / step / "1" / "tokenizer.json"))
    return [len(e.ids) for e in tokens.encode(tok, texts, limit)]


def test_vectors_are_the_served_models_and_usage_counts_tokens(sdk, settings):
    triton = TritonClient(settings.triton_url)
    served = {m.id: m for m in sdk.models.list().data}
    assert set(served) == {"minilm", "bge-m3", "clip-text", "clip-image"}
    assert served["minilm"].dimensions == 384 and served["bge-m3"].dimensions == 1024
    assert sdk.models.retrieve("minilm").id == "minilm"

    out = sdk.embeddings.create(model="minilm", input=TEXTS)  # the client asks for base64 by default
    vectors = np.array([d.embedding for d in out.data])
    expected, _ = minilm.embed(triton, TEXTS)  # what document search embeds a query with
    assert vectors.shape == (3, 384) and [d.index for d in out.data] == [0, 1, 2] and out.model == "minilm"
    assert cos(vectors, expected).min() >= 0.9999
    counts = token_counts(settings.triton_repo, "minilm_tokenize", TEXTS, minilm.MAX_TOKENS)
    assert out.usage.prompt_tokens == out.usage.total_tokens == sum(counts)

    floats = sdk.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[0], encoding_format="float")
    assert len(floats.data) == 1 and cos(floats.data[0].embedding, expected[0]) >= 0.9999
    assert sdk.embeddings.create(model="minilm", input="x", dimensions=384).data[0].embedding

    dense = np.array([d.embedding for d in sdk.embeddings.create(model="bge-m3", input=TEXTS).data])
    m3 = bge_m3.encode(triton, TEXTS, colbert=False)
    assert dense.shape == (3, bge_m3.DIM) and cos(dense, [o.dense for o in m3]).min() >= 0.9999
    assert sdk.embeddings.create(model="bge-m3", input=TEXTS).usage.prompt_tokens == sum(o.n_tokens for o in m3)

    text = sdk.embeddings.create(model="clip-text", input=TEXTS)
    expected, _ = clip.embed_texts(triton, TEXTS)  # what photo search embeds a text query with
    assert cos([d.embedding for d in text.data], expected).min() >= 0.9999
    assert text.usage.prompt_tokens == sum(token_counts(settings.triton_repo, "clip_text_tokenize", TEXTS, clip.CONTEXT_LENGTH))
    assert len(text.data[0].embedding) == served["clip-text"].dimensions

    images = [png(1), png(2)]
    inputs = [base64.b64encode(images[0]).decode(), "data:image/png;base64," + base64.b64encode(images[1]).decode()]
    pics = sdk.embeddings.create(model="clip-image", input=inputs)
    expected = clip.embed_images(triton, [example_image(settings, b) for b in images])  # as search by example does
    assert cos([d.embedding for d in pics.data], expected).min() >= 0.9999 and pics.usage.prompt_tokens == 0


def test_bad_requests_raise_the_clients_own_errors(sdk, server):
    def refused(exc_type, param=None, **kwargs) -> dict:
        with pytest.raises(exc_type) as info:
            sdk.embeddings.create(**kwargs)
        err = info.value.body
        assert err["message"] and err["type"] and (param is None or err["param"] == param), err
        return err

    assert refused(openai.NotFoundError, "model", model="ada-002", input="x")["code"] == "model_not_found"
    assert "384" in refused(openai.BadRequestError, "dimensions", model="minilm", input="x", dimensions=128)["message"]
    refused(openai.BadRequestError, "input", model="minilm", input="")
    refused(openai.BadRequestError, "input", model="minilm", input=["fine", "  "])
    assert "token arrays" in refused(openai.BadRequestError, "input", model="minilm", input=[[101, 2054, 102]])["message"]
    assert "at most 256" in refused(openai.BadRequestError, "input", model="minilm", input=["x"] * 257)["message"]
    refused(openai.BadRequestError, "input", model="clip-image", input="not base64!")
    refused(openai.BadRequestError, "input", model="clip-image", input=base64.b64encode(b"GIF89a broken").decode())
    refused(openai.BadRequestError, "encoding_format", model="minilm", input="x", encoding_format="int8")
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("gpt-4")

    for key in ("wrong", ""):
        other = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key or "-", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as info:
            other.embeddings.create(model="minilm", input="x")
        assert info.value.body["code"] == "invalid_api_key"


def test_one_request_embeds_at_most_500k_characters(tmp_path):
    """256 inputs of 100,000 characters each (25.6M: half a minute of tokenizing that held concurrent
    searches for seconds) are refused before anything is tokenized, as OpenAI bounds each request;
    at the bound a request goes on (to a Triton that is down here: 503)."""
    down = Settings(data_dir=tmp_path / "data", triton_url=f"127.0.0.1:{free_port()}", qdrant_url=None)
    with TestClient(create_app(down)) as c:
        for path in ("/v1/embeddings", "/v1/embeddings?via=fastapi"):  # the hot route's fast way and FastAPI's
            for inputs, total in ((["x" * 100_000] * 256, "25,600,000"), (["x" * 100_000] * 5 + ["y"], "500,001")):
                r = c.post(path, json={"model": "minilm", "input": inputs})
                assert r.status_code == 400, r.text
                assert r.json()["error"] == {"message": f"input: at most 500,000 characters in one request, got {total}",
                                             "type": "invalid_request_error", "param": "input", "code": None}
        r = c.post("/v1/embeddings", json={"model": "bge-m3", "input": ["x" * 100_000] * 5})
        assert r.status_code == 503, r.text


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
def test_triton_down_is_a_503_in_openais_shape(settings):
    with TestClient(create_app(settings.model_copy(update={"triton_url": f"127.0.0.1:{free_port()}"}))) as c:
        r = c.post("/v1/embeddings", json={"model": "minilm", "input": "x"})
    assert r.status_code == 503, r.text
    assert r.json()["error"]["type"] == "server_error" and "Triton" in r.json()["error"]["message"]


def test_a_model_triton_does_not_serve_is_a_503_that_says_how_to_serve_it(settings, model_repo, tmp_path):
    """Requests ask Triton for no readiness first: the inference itself finds the model missing, and
    the answer names it as the readiness check did (one text and several, threads and event loop)."""
    from search.models import built_triton_models
    from search.triton.local import LocalTriton

    only = LocalTriton(model_repo, tmp_path / "run", models=[m for m in built_triton_models(model_repo) if m.startswith("minilm")]).start(timeout=120)
    try:
        app = create_app(settings.model_copy(update={"triton_url": f"127.0.0.1:{only.grpc_port}"}))
        with TestClient(app) as c:
            for model, inputs in (("bge-m3", "x"), ("bge-m3", ["x", "y"]), ("clip-text", "x"), ("clip-text", ["x", "y"]),
                                  ("clip-image", base64.b64encode(png(0)).decode())):
                r = c.post("/v1/embeddings", json={"model": model, "input": inputs})
                assert r.status_code == 503, (model, r.text)
                assert "is not served" in r.json()["error"]["message"] and "search models build" in r.json()["error"]["message"]
            assert c.post("/v1/embeddings", json={"model": "minilm", "input": ["x", "y"]}).status_code == 200
            assert c.post("/v1/embeddings", json={"model": "minilm", "input": "x"}).status_code == 200
            svc = app.state.backend.service()
            with pytest.raises(ModelNotReady, match="is not served"):
                svc.embed("bge-m3", "x").run()
            with pytest.raises(ModelNotReady, match="is not served"):
                svc.embed("clip-text", ["x", "y"]).run()
    finally:
        only.stop()


@pytest.mark.parametrize("model", ["minilm", "bge-m3", "clip-text"])
def test_concurrent_one_text_requests_share_requests_and_equal_a_batch(settings, model):
    """One-text requests go through their family's query coalescer (Resources), which search
    queries share: concurrent ones, from threads and from an event loop, go to Triton together and
    each gets the vector and token count that one batch request of all the texts gives."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from search.services.query import SearchService

    texts = [*TEXTS, "a", "word " * 300, "Wie setze ich mein Passwort zurück?", "🔥", "two dogs on a beach at night"]
    svc = SearchService(settings)
    batch = svc.embed(model, texts).run()  # several texts: one request of their own, not coalesced
    queries = svc.resources.batchers[{"minilm": "minilm_query", "bge-m3": "bge_m3", "clip-text": "clip_text"}[model]]
    with ThreadPoolExecutor(len(texts)) as pool:
        threaded = list(pool.map(lambda t: svc.embed(model, t).run(), texts))
    from_threads = (queries.requests, queries.items)

    async def together():
        try:
            return await asyncio.gather(*(svc.embed(model, [t]) for t in texts))
        finally:
            await svc.triton.aclose()

    awaited = asyncio.run(together())
    for way, got in (("threads", threaded), ("event loop", awaited)):
        vectors = np.concatenate([g.vectors for g in got])
        assert vectors.shape == batch.vectors.shape, way
        c = cos(vectors, batch.vectors)
        assert c.min() >= 0.9999, f"{way}: cosine {c.min():.6f} for {texts[int(c.argmin())]!r}"
        assert [g.tokens[0] for g in got] == batch.tokens, way
    assert from_threads[1] == len(texts) and queries.items == 2 * len(texts)  # one batcher for threads and loops
    assert from_threads[0] < len(texts) and queries.requests - from_threads[0] < len(texts)  # some went to Triton together
