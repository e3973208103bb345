"""The served `bge_m3` ensemble equals an independent plain-PyTorch BGE-M3 (FlagEmbedding's
formulas, written out here on XLMRobertaModel and the two heads) on the tiny random BGE-M3 that
conftest exports with the project's code: dense and ColBERT vectors, sparse weights, both scores,
truncation, skipping ColBERT, concurrent batches; and the offline build reports missing weights."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tiny_bge_m3

from search.models.bge_m3 import BGEM3, colbert_score, encode, encode_queries, sparse_score
from search.models.export.bge_m3 import HEADS
from search.triton.client import text_tensor

TEXTS = [
    "How do I reset my password?",
    "Wie setze ich mein Passwort zurück?",
    "如何重置我的密码？",
    "Как сбросить пароль?",
    "VPN von zu Hause 🏠 verbinden 🔒 😀👍",
    "",
    "   ",
    "café café café naïve",  # repeated tokens: the max weight per id
    "a" * 40 + " " + "x y z " * 10,
]
LONG = " ".join(["The VPN client needs a certificate before it connects from home."] * 60)


@pytest.fixture(scope="module")
def weights(model_repo) -> Path:
    return Path(json.loads(BGEM3().manifest_path(model_repo).read_text())["weights"])


@pytest.fixture(scope="module")
def reference(weights):
    """BGE-M3 as FlagEmbedding computes it, one text at a time, in plain PyTorch."""
    import torch
    from transformers import AutoTokenizer, XLMRobertaModel

    tok = AutoTokenizer.from_pretrained(str(weights))
    model = XLMRobertaModel.from_pretrained(str(weights), add_pooling_layer=False, attn_implementation="eager").eval()
    heads = {}
    for name, out in (("sparse_linear", 1), ("colbert_linear", model.config.hidden_size)):
        heads[name] = torch.nn.Linear(model.config.hidden_size, out)
        heads[name].load_state_dict(torch.load(weights / f"{name}.pt", map_location="cpu"))
    unused = {tok.cls_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id}

    def run(text: str, max_length: int = tiny_bge_m3.MAX_TOKENS) -> dict:
        enc = tok([text], truncation=True, max_length=max_length, return_tensors="pt")
        with torch.no_grad():
            h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            dense = torch.nn.functional.normalize(h[:, 0], dim=-1)[0].numpy()
            weights_ = torch.relu(heads["sparse_linear"](h)).squeeze(-1)[0].numpy()
            colbert = heads["colbert_linear"](h[:, 1:]) * enc["attention_mask"][:, 1:][:, :, None].float()
            colbert = torch.nn.functional.normalize(colbert, dim=-1)[0].numpy()
        ids = enc["input_ids"][0].tolist()
        sparse: dict[int, float] = {}
        for w, idx in zip(weights_.tolist(), ids):
            if idx not in unused and w > 0 and w > sparse.get(idx, 0):
                sparse[idx] = w
        n = len(ids)
        return {"dense": dense, "sparse": sparse, "colbert": colbert[:n - 1], "n_tokens": n,
                "truncated": len(tok(text)["input_ids"]) > max_length}

    return run


pytestmark = pytest.mark.served("bge_m3")  # the shared `client` (conftest.py) checks it is loaded


def assert_same(out, ref) -> None:
    assert out.n_tokens == ref["n_tokens"] and out.truncated == ref["truncated"]
    np.testing.assert_allclose(out.dense, ref["dense"], atol=1e-4)
    assert abs(np.linalg.norm(out.dense) - 1) < 1e-5
    assert out.sparse.keys() == ref["sparse"].keys()
    for k, v in ref["sparse"].items():
        assert abs(out.sparse[k] - v) < 1e-4
    if out.colbert is not None:
        assert out.colbert.shape == ref["colbert"].shape
        np.testing.assert_allclose(out.colbert, ref["colbert"], atol=1e-4)


def test_outputs_equal_the_pytorch_reference(client, reference):
    outs = encode(client, TEXTS)
    assert len(outs) == len(TEXTS)
    for text, out in zip(TEXTS, outs):
        assert_same(out, reference(text))
    # Not vacuous: random heads give some tokens positive weights (which ones depends on the tiny model).
    assert sum(len(out.sparse) for out in outs[:5]) >= 5, [len(o.sparse) for o in outs[:5]]
    assert outs[5].n_tokens == 2 and outs[5].sparse == {} and outs[5].colbert.shape == (1, 1024)  # "" -> <s></s>
    assert len(outs[7].sparse) < outs[7].n_tokens - 2  # "café" thrice: one weight per token id


def test_scores_equal_the_reference(client, reference):
    q, *docs = encode(client, ["reset password vpn", *TEXTS[:5]])
    ref_q = reference("reset password vpn")
    for text, d in zip(TEXTS[:5], docs):
        ref_d = reference(text)
        ref_sparse = sum(w * ref_d["sparse"][t] for t, w in ref_q["sparse"].items() if t in ref_d["sparse"])
        ref_colbert = float((ref_q["colbert"] @ ref_d["colbert"].T).max(axis=1).sum() / len(ref_q["colbert"]))
        assert abs(sparse_score(q.sparse, d.sparse) - ref_sparse) < 1e-4
        assert abs(colbert_score(q.colbert, d.colbert) - ref_colbert) < 1e-4
        assert abs(float(q.dense @ d.dense) - float(ref_q["dense"] @ ref_d["dense"])) < 1e-4


def test_score_functions():
    assert sparse_score({1: 0.5, 2: 2.0}, {2: 0.25, 3: 9.0}) == pytest.approx(0.5)
    assert sparse_score({}, {1: 1.0}) == 0.0
    q = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    d = np.array([[1.0, 0.0], [0.6, 0.8]], np.float32)
    assert colbert_score(q, d) == pytest.approx((1.0 + 0.8) / 2)
    assert colbert_score(np.zeros((0, 2)), d) == 0.0


def test_truncation_is_reported(client, reference):
    full, short = encode(client, [LONG, "short text"])
    assert full.truncated and full.n_tokens == tiny_bge_m3.MAX_TOKENS  # the tiny model's own limit (the config says 8192)
    assert not short.truncated
    assert_same(full, reference(LONG, tiny_bge_m3.MAX_TOKENS))
    lowered = encode(client, [LONG, "short text", "a b"], max_length=16)
    assert lowered[0].truncated and lowered[0].n_tokens == 16 and lowered[0].colbert.shape == (15, 1024)
    assert_same(lowered[0], reference(LONG, 16))
    assert_same(lowered[2], reference("a b", 16))
    assert encode(client, [LONG], max_length=100_000)[0].n_tokens == tiny_bge_m3.MAX_TOKENS  # never past the model's limit


def test_colbert_can_be_skipped(client):
    with_c = encode(client, TEXTS[:4])
    without = encode(client, TEXTS[:4], colbert=False)
    for a, b in zip(with_c, without):
        assert b.colbert is None
        np.testing.assert_allclose(a.dense, b.dense, atol=1e-6)
        assert a.sparse.keys() == b.sparse.keys()
    raw = client.infer("bge_m3", {"TEXT": text_tensor(TEXTS[:2]), "WITH_COLBERT": np.zeros((2, 1), bool)}, ["COLBERT"])
    assert raw["COLBERT"].shape == (2, 0, 1024)


def test_queries_sent_together_equal_the_reference(client, reference):
    """Document search's queries in one request (Resources.batchers["bge_m3"]): hybrid ones want ColBERT
    vectors, dense and sparse ones do not; each gets the reference's outputs, and ColBERT only if asked."""
    texts = [t for t in TEXTS if t]  # an empty query is refused before it is encoded
    asked = [i % 2 == 0 for i in range(len(texts))]
    outs = encode_queries(client, list(zip(texts, asked)))
    for text, colbert, out in zip(texts, asked, outs):
        assert (out.colbert is not None) == colbert
        assert_same(out, reference(text))
    assert all(o.colbert is None for o in encode_queries(client, [(texts[0], False), (texts[1], False)]))


def test_family_encode_gives_the_store_vectors(client):
    direct = encode(client, [TEXTS[0], LONG])
    enc = BGEM3().encode(client, [TEXTS[0], LONG])
    assert enc.truncated.tolist() == [o.truncated for o in direct] == [False, True]
    for got, want in zip(enc.vectors, direct):
        assert set(got) == set(BGEM3().vectors) and got["bge_sparse"] == want.sparse
        np.testing.assert_array_equal(got["bge_dense"], want.dense)
        np.testing.assert_array_equal(got["bge_colbert"], want.colbert)
    assert set(BGEM3().encode(client, ["x"], colbert=False).vectors[0]) == {"bge_dense", "bge_sparse"}


def test_optional_inputs_may_be_left_out(client):
    raw = client.infer("bge_m3", {"TEXT": text_tensor(["hello world", LONG])},
                       ["DENSE", "COLBERT", "SPARSE_INDICES", "SPARSE_VALUES", "NUM_TOKENS", "TRUNCATED"])
    assert raw["NUM_TOKENS"].reshape(-1).tolist()[1] == tiny_bge_m3.MAX_TOKENS and raw["TRUNCATED"].reshape(-1).tolist() == [False, True]
    assert raw["COLBERT"].shape == (2, tiny_bge_m3.MAX_TOKENS - 1, 1024)  # padded to the request's longest text
    short = int(raw["NUM_TOKENS"].reshape(-1)[0])
    assert not raw["COLBERT"][0, short - 1:].any()  # zero rows past a text's own vectors
    assert (raw["SPARSE_INDICES"][0] == -1).any() and not raw["SPARSE_VALUES"][0][raw["SPARSE_INDICES"][0] == -1].any()


def test_concurrent_mixed_lengths_equal_one_at_a_time(client):
    texts = [*TEXTS, LONG, LONG[:300], "ok"] * 2
    alone = [encode(client, [t])[0] for t in texts]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda t: encode(client, [t])[0], texts))
    batched = encode(client, texts)
    for a, b, c in zip(alone, together, batched):
        for other in (b, c):
            assert other.n_tokens == a.n_tokens and other.truncated == a.truncated
            np.testing.assert_allclose(other.dense, a.dense, atol=1e-5)
            np.testing.assert_allclose(other.colbert, a.colbert, atol=1e-5)
            assert other.sparse.keys() == a.sparse.keys()
            assert max((abs(other.sparse[k] - v) for k, v in a.sparse.items()), default=0) < 1e-5


def test_empty_request(client):
    assert encode(client, []) == []


def test_offline_hub_id_is_missing_weights(tmp_path):
    report = BGEM3().build(tmp_path / "repo", "BAAI/bge-m3")
    assert report.status == "missing weights"
    assert "--bge-m3-source" in report.detail and "BAAI/bge-m3" in report.detail


def test_folder_without_heads_is_missing_weights(tmp_path, weights):
    folder = tmp_path / "no-heads"
    folder.mkdir()
    for f in weights.iterdir():
        if f.name not in HEADS:
            (folder / f.name).write_bytes(f.read_bytes())
    report = BGEM3().build(tmp_path / "repo", str(folder))
    assert report.status == "missing weights" and "sparse_linear.pt" in report.detail


def test_rebuild_is_up_to_date(model_repo, weights):
    assert BGEM3().build(model_repo, str(weights)).status == "up to date"
