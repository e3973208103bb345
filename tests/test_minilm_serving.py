"""The served `minilm` ensemble equals sentence-transformers on the same weights."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from search.models import minilm
from search.triton.client import TritonClient

SUBJECTS = ["my laptop", "the printer", "the VPN", "our shared drive", "the guest Wi-Fi", "Outlook", "the badge reader",
            "a phishing email", "the backup job", "my password"]
PROBLEMS = ["will not start", "is very slow today", "keeps asking me to sign in", "shows error 0x80070005",
            "stopped working after the update", "needs to be set up for a new hire", "was reported stolen"]


def sentences() -> list[str]:
    rnd = random.Random(7)
    out = [f"{s} {p}" for s in SUBJECTS for p in PROBLEMS]  # 70
    out += [
        "password", "VPN", "a", "?", "",  # one word, one char, punctuation, empty
        "   ", "\n\t  \n",  # whitespace only
        "Wie setze ich mein Passwort zurück?", "¿Cómo restablezco mi contraseña?", "パスワードをリセットする方法",
        "Как сбросить пароль?", "كيف أعيد تعيين كلمة المرور", "密码重置", "Mot de passe oublié, que faire ?",
        "🔥🔥🔥", "printer on fire 🔥🖨️", "👍", "naïve café résumé", "C'est l'été à Zürich",
        "URL https://example.com/reset?token=abc123 and e-mail help@example.com",
    ]
    out += [f"{s.capitalize()} — {p}!" for s, p in zip(SUBJECTS, reversed(PROBLEMS * 2))]
    long_text = " ".join(rnd.choice(SUBJECTS + PROBLEMS) for _ in range(400))
    out += [long_text, "word " * 1000, "x" * 5000]  # truncated at 256 tokens
    return out


@pytest.fixture(scope="module")
def reference():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm.package_weights()), device="cpu")
    assert model.max_seq_length == minilm.MAX_TOKENS
    return model


def test_served_embeddings_equal_sentence_transformers(client, reference):
    texts = sentences()
    assert len(texts) >= 100
    served = np.concatenate([minilm.embed(client, texts[i:i + 32])[0] for i in range(0, len(texts), 32)])
    expected = reference.encode(texts, normalize_embeddings=True, batch_size=32)
    assert served.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    cos = (served * expected).sum(1) / np.linalg.norm(expected, axis=1)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {texts[worst]!r}"
    # one text at a time goes to the query deployment (minilm_query): the same vectors
    alone = np.concatenate([minilm.embed(client, [t])[0] for t in texts])
    cos = (alone * expected).sum(1) / np.linalg.norm(expected, axis=1)
    assert cos.min() >= 0.9999, f"minilm_query: cosine {cos.min():.6f} for {texts[int(cos.argmin())]!r}"
    np.testing.assert_allclose(alone, served, atol=2e-5)


def test_concurrent_queries_share_requests_and_equal_sentence_transformers(settings, reference):
    """Document search's queries (Resources.batchers["minilm_query"], called from threads and awaited
    in the REST API's event loop): queries that wait on the requests in flight go to the query deployment together,
    padded to the longest of them (truncated texts included), and each gets sentence-transformers'
    vector; a lone query goes alone."""
    from search.resources import Resources

    texts = sentences()
    expected = reference.encode(texts, normalize_embeddings=True, batch_size=32)
    resources = Resources(settings)
    queries = resources.batchers[minilm.QUERY_ENSEMBLE]
    with ThreadPoolExecutor(16) as pool:
        threaded = np.stack([q.vector for q in pool.map(queries, texts)])
    from_threads = (queries.requests, queries.items)

    async def together():
        try:
            return np.stack([q.vector for q in await asyncio.gather(*(queries.acall(t) for t in texts))])
        finally:
            await resources.triton.aclose()

    awaited = asyncio.run(together())
    for way, got in (("threads", threaded), ("event loop", awaited)):
        cos = (got * expected).sum(1) / np.linalg.norm(expected, axis=1)
        assert cos.min() >= 0.9999, f"{way}: cosine {cos.min():.6f} for {texts[int(cos.argmin())]!r}"
    # The queries waited on the first requests and shared the next ones: 103 queries need 2 requests of 64,
    # plus the first ones, whose split depends on when the two senders wake (3 on a quiet machine, 4 seen
    # under the full suite's load)
    assert queries.items == 2 * len(texts) and queries.requests - from_threads[0] < len(texts) / 10
    assert from_threads[1] == len(texts) and from_threads[0] < len(texts)
    before = queries.requests
    np.testing.assert_allclose(queries(texts[0]).vector, minilm.embed(TritonClient(resources.triton.url), [texts[0]])[0][0], atol=1e-6)
    assert queries.requests == before + 1


def test_truncation_is_reported(client):
    _, truncated = minilm.embed(client, ["short", "word " * 300, "word " * 254, "word " * 255])
    # 254 words + [CLS] + [SEP] = 256 tokens fits exactly; one more does not.
    assert truncated.tolist() == [False, True, False, True]


def test_mixed_lengths_batch_together_correctly(client, triton):
    """Concurrent one-text requests (the query deployment, minilm_query) are batched by the server
    and each still gets its own vector."""
    texts = ["hi"] + [f"{SUBJECTS[i % 10]} " * (i * 3 + 1) for i in range(47)]
    alone = np.concatenate([minilm.embed(client, [t])[0] for t in texts])

    def one(i: int) -> np.ndarray:
        return minilm.embed(TritonClient(client.url), [texts[i]])[0][0]

    stats_before = _batch_sizes(triton)
    with ThreadPoolExecutor(16) as pool:
        together = np.stack(list(pool.map(one, range(len(texts)))))
    np.testing.assert_allclose(together, alone, atol=2e-5)
    stats_after = _batch_sizes(triton)
    grown = {b for b, n in stats_after.items() if n > stats_before.get(b, 0)}
    assert max(grown) > 1, f"the encoder never ran more than one request at once: {stats_after}"


def _batch_sizes(triton) -> dict[int, int]:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}")
    stats = c.get_inference_statistics("minilm_query_onnx", as_json=True)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def test_family_encode_gives_the_store_vectors(client):
    from search.models import family

    texts = ["short", "word " * 300]
    enc = family("minilm").encode(client, texts)
    vectors, truncated = minilm.embed(client, texts)
    assert [set(v) for v in enc.vectors] == [{"minilm"}] * 2 and enc.truncated.tolist() == truncated.tolist() == [False, True]
    np.testing.assert_array_equal(np.stack([v["minilm"] for v in enc.vectors]), vectors)
    assert vectors.shape[1] == family("minilm").vectors["minilm"].dim == 384  # the width the store declares


def test_bad_requests_do_not_break_the_model(client):
    bad = np.array([[b"\xff\xfe not utf-8"]], dtype=np.object_)
    with pytest.raises(Exception, match="UTF-8"):
        client.infer("minilm", {"TEXT": bad}, ["EMBEDDING"])
    vectors, _ = minilm.embed(client, ["still serving"])
    assert vectors.shape == (1, 384)


def test_a_server_without_the_query_deployment_still_answers_queries(model_repo, tmp_path, monkeypatch):
    """A Triton that loaded its repository before the query deployment existed (an upgrade whose
    `search models build` and restart have not happened yet) serves one-text requests through
    `minilm`; the client asks for `minilm_query` again after QUERY_RECHECK_S."""
    from search.triton.local import LocalTriton

    old = LocalTriton(model_repo, tmp_path / "run", models=["minilm_tokenize", "minilm_onnx", "minilm"]).start(timeout=120)
    try:
        client = TritonClient(f"127.0.0.1:{old.grpc_port}")
        assert not client.model_ready(minilm.QUERY_ENSEMBLE)
        texts = ["reset my password", "the VPN will not connect"]
        together, _ = minilm.embed(client, texts)
        alone = np.concatenate([minilm.embed(client, [t])[0] for t in texts])
        np.testing.assert_allclose(alone, together, atol=2e-5)
        assert client.url in minilm._NO_QUERY_ENSEMBLE
        monkeypatch.setattr(minilm, "QUERY_RECHECK_S", 0.0)  # asked again: still not there, still answered
        assert minilm.embed(client, ["printer"])[0].shape == (1, 384)
    finally:
        old.stop()
        minilm._NO_QUERY_ENSEMBLE.clear()
