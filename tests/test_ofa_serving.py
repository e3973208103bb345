"""The served ``ofa_ve`` ensemble equals the reference implementation on the same weights (the tiny
random OFA that conftest exports with the project's code): modelscope's OFAModel (the vendored
copy, loaded straight from the checkpoint's state dict), modelscope's pre-processing and
OfaForAllTasks' trie-constrained scoring transcribed in torch; labels map as OFA's; bad inputs
fail alone. `entail` and `--verify` through the service and the faces: tests/test_ofa_verify.py."""

from __future__ import annotations

import io
import json
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from image_helpers import encode
from ofa_helpers import noise, serve
from PIL import Image, ImageOps
from tritonclient.utils import InferenceServerException

from search.models import ofa
from search.models.export import ofa as ofa_export
from search.models.ofa import OFA
from search.triton.client import TritonClient
from search.triton.steps import ofa_ve as step  # the Python steps' code: pure functions, no Triton needed

TOL = 1e-4  # fp32 ONNX vs PyTorch on logits and probabilities
ANSWERS = ["no", "yes", "maybe"]


@pytest.fixture(scope="module")
def weights(model_repo) -> Path:
    return Path(json.loads(OFA().manifest_path(model_repo).read_text())["weights"])


@pytest.fixture(scope="module")
def ve(model_repo) -> dict:
    return json.loads((model_repo / "ofa_ve_preprocess/1/ve.json").read_text())


def pre_caption(caption: str, max_len: int) -> str:  # modelscope/preprocessors/ofa/base.py
    caption = caption.lower().lstrip(",.!?*#:;~").replace("-", " ").replace("/", " ").replace("<person>", "person")
    caption = re.sub(r"\s{2,}", " ", caption).rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_len]) if len(words) > max_len else caption


def collate(seqs, fill):
    """Token lists -> one long tensor, padded with ``fill``."""
    import torch

    out = torch.full((len(seqs), max(map(len, seqs))), fill, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = torch.as_tensor(s)
    return out


def answer_trie(sequences: list[list[int]]):
    """modelscope's Trie over the answers' token sequences: ``allowed(prefix)``, the tokens that may follow."""
    trie: dict = {}
    for seq in sequences:
        node = trie
        for t in seq:
            node = node.setdefault(t, {})

    def allowed(prefix):
        node = trie
        for t in prefix:
            node = node[t]
        return list(node)

    return allowed


@pytest.fixture(scope="module")
def reference(weights):
    """modelscope's path: OFATokenizer (= BartTokenizer + the <code_i>/<bin_i> tokens), the
    preprocessor's image transform and prompt, OFAModel, and _traverse_inference's scoring."""
    import torch
    from transformers import BartTokenizer

    from search.models.ofa_arch.configuration_ofa import OFAConfig
    from search.models.ofa_arch.modeling_ofa import OFAModel
    from search.models.ofa_arch.utils.utils import expand_mask

    cfg = json.loads((weights / "configuration.json").read_text())["model"]
    size, max_len, prompt_type = cfg["patch_image_size"], cfg["max_src_length"], cfg["prompt_type"]
    model = OFAModel(OFAConfig.from_pretrained(str(weights))).eval()
    model.load_state_dict(torch.load(weights / "pytorch_model.bin", weights_only=True), strict=True)
    tok = BartTokenizer.from_pretrained(str(weights))
    tok.add_tokens([f"<code_{i}>" for i in range(8192)])
    tok.add_tokens([f"<bin_{i}>" for i in range(1000)])
    bos, pad, eos = tok.bos_token_id, tok.pad_token_id, tok.eos_token_id

    def source(hypothesis: str, premise: str | None) -> list[int]:  # visual_entailment.py
        hyp = pre_caption(hypothesis, max_len)
        text = (f' does the image describe " {hyp} "?' if premise is None else
                f' can image and text1 " {pre_caption(premise, max_len)} " imply text2 " {hyp} "?')
        ids = tok(text, max_length=max_len, add_special_tokens=False, truncation=True)["input_ids"]
        return [bos, *ids, eos]

    def image(data: bytes) -> torch.Tensor:  # LoadImage + Resize((S, S), BICUBIC) + ToTensor + Normalize
        img = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB").convert("RGB")
        x = torch.from_numpy(np.array(img.resize((size, size), Image.BICUBIC))).permute(2, 0, 1).float().div(255)
        return (x - 0.5) / 0.5

    answers = [tok(" " + a, add_special_tokens=False)["input_ids"] for a in ANSWERS]

    def score(items, kind=None):
        """items: (image bytes, hypothesis, premise). Returns raw answer logits at the prompt's last
        position, the constrained log-probs summed over each answer + eos, and their softmax."""
        kind = kind or prompt_type
        srcs = [source(h, p) for _, h, p in items]
        prompts = [s[:-1] if kind == "prev_output" else [bos] for s in srcs]
        allowed = answer_trie([[bos, *a, eos] for a in answers])
        n_vocab = model.config.vocab_size

        with torch.no_grad():
            enc = model.encoder(input_ids=collate(srcs, pad), patch_images=torch.stack([image(d) for d, _, _ in items]),
                                patch_masks=torch.ones(len(items), dtype=torch.bool))
            prev, tgt, masks = [], [], []
            for p in prompts:
                for a in answers:
                    prev.append([*p, *a])
                    tgt.append([*p[1:], *a, eos])
                    m = torch.zeros(len(p) + len(a), n_vocab, dtype=torch.bool)
                    for i in range(len(a) + 1):
                        m[len(p) - 1 + i, allowed([bos, *a[:i]])] = True
                    masks.append(m)
            n = len(answers)
            prev_t, tgt_t = collate(prev, pad), collate(tgt, pad)
            mask_t = torch.zeros(len(masks), prev_t.shape[1], n_vocab, dtype=torch.bool)
            for i, m in enumerate(masks):
                mask_t[i, :len(m)] = m
            hid = enc.last_hidden_state.repeat_interleave(n, 0)
            logits = model.decoder(prev_t, encoder_hidden_states=hid,
                                   encoder_attention_mask=expand_mask(enc.padding_mask.repeat_interleave(n, 0), hid.dtype,
                                                                      prev_t.shape[-1]),
                                   src_pos_embed=enc.position_embedding.repeat_interleave(n, 0))[0]
            raw = torch.stack([logits[k * n, len(p) - 1, [a[0] for a in answers]] for k, p in enumerate(prompts)])
            lprobs = torch.log_softmax(logits.masked_fill(~mask_t, -math.inf), dim=-1)
            s = lprobs.gather(-1, tgt_t.unsqueeze(-1)).squeeze(-1)
            s = s.masked_fill(tgt_t.eq(pad), 0).masked_fill((~mask_t).all(2), 0).sum(1).view(-1, n)
        return raw.numpy(), s.numpy(), torch.softmax(s, -1).numpy()

    return SimpleNamespace(score=score, source=source, tok=tok, size=size, max_len=max_len)


def by_label(answer_order: np.ndarray) -> np.ndarray:
    """(no, yes, maybe) columns -> (entailment, neutral, contradiction)."""
    return answer_order[:, [1, 2, 0]]


def mixed_batch():
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: the reference's LoadImage applies the orientation
    return [
        (encode(noise(140, 90), "JPEG", quality=90), "Two dogs run on the beach.", None),
        (encode(noise(200, 300, "L"), "PNG"), "A man is riding a horse", "People are playing football on grass."),
        (encode(noise(64, 64, "RGBA"), "PNG"), "yes -- maybe/no!", None),
        (encode(noise(500, 33), "JPEG", exif=exif.tobytes()), "a cat sleeps on a red sofa in the rain " * 4, None),
    ]


# -- parity through the real Triton
def test_served_logits_and_probs_equal_the_reference(client, reference):
    items = mixed_batch()
    res = serve(client, items)
    raw, scores, probs = reference.score(items)
    d_logits, d_probs = np.abs(res["LOGITS"] - by_label(raw)).max(), np.abs(res["PROBS"] - by_label(probs)).max()
    print(f"served vs reference: max |Δ logits| {d_logits:.1e}, max |Δ probs| {d_probs:.1e}")  # docs/ofa.md records it
    assert d_logits <= TOL and d_probs <= TOL
    # the one-step rule: softmax of the three logits == the trie-constrained scoring
    assert np.abs(by_label(scores) - np.log(res["PROBS"])).max() <= TOL
    labels = [["entailment", "neutral", "contradiction"][i] for i in by_label(probs).argmax(1)]
    assert [x.decode() for x in res["LABEL"].reshape(-1)] == labels
    # max_src_length is 24 tokens here: the premise prompt and the long hypothesis are cut (as the reference cuts them)
    assert res["TRUNCATED"].reshape(-1).tolist() == [False, True, False, True]
    # one at a time (no padding anywhere) gives the same numbers as the padded batch
    for k, item in enumerate(items[:2]):
        alone = serve(client, [item])
        assert np.abs(alone["LOGITS"][0] - res["LOGITS"][k]).max() <= TOL


def test_prompt_type_none_runs_on_the_same_graph(model_repo, reference, ve):
    # prompt_type only changes the pre-processing: the decoder prompt is <s> (one token, last_index 0)
    import onnxruntime as ort

    items = mixed_batch()[:3]
    sess = ort.InferenceSession(str(model_repo / "ofa_ve_onnx/1/model.onnx"), providers=["CPUExecutionProvider"])
    srcs = [step.encode_text(Tokenizer(model_repo), ve, h, p)[0] for _, h, p in items]
    ids, dec, last = step.pad_batch(srcs, ve, prompt_type="none")
    assert dec.shape == (3, 1) and not last.any()
    pixels = np.stack([step.image_pixels(d, ve, 10**8) for d, _, _ in items])
    (logits,) = sess.run(None, {"input_ids": ids, "patch_images": pixels, "decoder_input_ids": dec, "last_index": last})
    raw, _, _ = reference.score(items, kind="none")
    assert np.abs(logits - raw).max() <= TOL


def Tokenizer(model_repo):
    from tokenizers import Tokenizer as T

    return T.from_file(str(model_repo / "ofa_ve_preprocess/1/tokenizer.json"))


def test_tokenizer_and_pixels_equal_the_reference(model_repo, reference, ve):
    tok = Tokenizer(model_repo)
    texts = ["two dogs", "  multiple   spaces\tand\nnewlines ", "Ünïcödé café — 日本語 😀", "numbers 12345 and 3.14",
             "it's we're I'll", "tokens <bin_5> and <code_12> inline", "x <s> y </s> z <pad>", "a<bin_5>b",
             "a " * 100, "Yes. No? MAYBE!"]
    # Not "a <mask> here": modelscope's OFATokenizer (transformers 4's BartTokenizer) strips the space
    # before <mask>, as the served tokenizer does; transformers 5's does not. tools/ofa_reference/
    # checks that string against modelscope itself.
    for t in texts:
        for premise in (None, "a photo of a dog"):
            assert step.encode_text(tok, ve, t, premise)[0] == reference.source(t, premise), t
    for data, _, _ in mixed_batch():
        ref = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB").resize((480, 480), Image.BICUBIC)
        expected = (np.asarray(ref, np.float32) / 255 - 0.5) / 0.5
        assert np.abs(step.image_pixels(data, ve, 10**8) - expected.transpose(2, 0, 1)).max() <= 1e-6


def test_truncation_is_reported(ve, model_repo):
    tok = Tokenizer(model_repo)
    n = ve["max_src_length"]
    short_ids, cut = step.encode_text(tok, ve, "two dogs")
    assert not cut and len(short_ids) <= n + 2
    for long in ("dog " * (n + 1), "dog" * 500, "x" * (n * 64 + 1)):
        ids, cut = step.encode_text(tok, ve, long)
        assert cut and len(ids) == n + 2


# -- labels
def test_label_mapping():
    post = json.loads(json.dumps({"answers": ANSWERS, "relation": ofa.RELATION, "labels": list(ofa.LABELS)}))
    logits = np.array([[5, 0, 0], [0, 5, 0], [0, 0, 5]], np.float32)  # no, yes, maybe
    ordered, probs, labels = step.verdict(logits, post)
    assert [x[0].decode() for x in labels] == ["contradiction", "entailment", "neutral"]
    assert ordered.tolist() == [[0, 0, 5], [5, 0, 0], [0, 5, 0]]  # entailment, neutral, contradiction
    assert np.allclose(probs.sum(1), 1) and probs[1, 0] > 0.98
    assert ofa.RELATION == {"yes": "entailment", "no": "contradiction", "maybe": "neutral"}


def test_build_records_the_checkpoint_configuration(model_repo, weights):
    ve = json.loads((model_repo / "ofa_ve_preprocess/1/ve.json").read_text())
    assert ve["patch_image_size"] == 480 and ve["prompt_type"] == "prev_output" and ve["max_src_length"] == 24
    assert ve["mean"] == ve["std"] == [0.5, 0.5, 0.5] and (ve["bos_id"], ve["pad_id"], ve["eos_id"]) == (0, 1, 2)
    post = json.loads((model_repo / "ofa_ve_post/1/post.json").read_text())
    vocab = json.loads((weights / "vocab.json").read_text())
    assert post["answer_token_ids"] == [vocab["Ġ" + a] for a in ANSWERS]
    manifest = json.loads(OFA().manifest_path(model_repo).read_text())
    assert manifest["max_abs_diff_vs_torch"] <= TOL


def test_missing_weights_are_reported(tmp_path):
    for source, words in (("iic/ofa_visual-entailment_snli-ve_large_en", "modelscope download"),
                          (str(tmp_path / "nowhere"), "not a checkpoint directory"),
                          (str(tmp_path), "missing config.json")):
        report = OFA().build(tmp_path / "repo", source)
        assert report.status == "missing weights" and words in report.detail and "--ofa-source" in report.detail


# -- errors
def test_bad_inputs_fail_alone_and_the_model_keeps_serving(client):
    good = encode(noise(100, 80), "PNG")
    bad = [((b"not an image", "two dogs", None), "IMAGE"), ((b"", "two dogs", None), "empty"),
           ((encode(noise(60, 60), "PNG")[:40], "two dogs", None), "IMAGE"),
           ((good, "", None), "HYPOTHESIS: is empty"), ((good, "...", None), "HYPOTHESIS: is empty after normalisation"),
           ((good, "\x00\x01 ?!", None), None)]  # odd characters: served, not an error

    def run(item):
        try:
            return serve(TritonClient(client.url), [item])
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, [b for b, _ in bad] + [(good, "two dogs", None)] * 4))
    for (item, words), res in zip(bad, results):
        if words is None:
            assert isinstance(res, dict), res
            continue
        assert isinstance(res, InferenceServerException) and "INVALID_ARG" in str(res.status()), (item[1], res)
        assert words in res.message()
    first = results[len(bad)]["PROBS"]
    assert all(np.abs(r["PROBS"] - first).max() <= TOL for r in results[len(bad):])
    # in a batch the message names the item
    with pytest.raises(InferenceServerException, match="item 2 of 2: IMAGE"):
        serve(client, [(good, "two dogs", None), (b"junk", "two dogs", None)])
    assert client.model_ready("ofa_ve") and serve(client, [(good, "two dogs", None)])["PROBS"].shape == (1, 3)


def test_weights_in_external_files_are_gathered_into_one(model_repo, ve, tmp_path):
    # What the exporter does over 2 GB (OFA-large): one file per tensor next to the graph. fix_graph
    # must gather them into model.onnx.data and give the same numbers (checked here on the tiny graph).
    import onnx
    import onnxruntime as ort

    src = model_repo / "ofa_ve_onnx/1/model.onnx"
    tmp, dest = tmp_path / "model.onnx.tmp", tmp_path / "model.onnx"
    onnx.save(onnx.load(str(src)), str(tmp), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    scattered = set(p.name for p in tmp_path.iterdir()) - {tmp.name}
    assert len(scattered) > 10
    ofa_export.fix_graph(tmp, dest)
    os.replace(tmp, dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    srcs = [step.encode_text(Tokenizer(model_repo), ve, "two dogs")[0]]
    ids, dec, last = step.pad_batch(srcs, ve)
    feeds = {"input_ids": ids, "patch_images": np.zeros((1, 3, 480, 480), np.float32), "decoder_input_ids": dec,
             "last_index": last}
    run = [ort.InferenceSession(str(f), providers=["CPUExecutionProvider"]).run(None, feeds)[0] for f in (src, dest)]
    assert np.array_equal(run[0], run[1])
