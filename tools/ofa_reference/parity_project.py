"""Parity of the project's served OFA files against modelscope itself, in the reference venv.

Reference: modelscope 1.40.2's OFAModel and OFATokenizer (transformers 4.57.6, fairseq-fixed source on
sys.path), its image transform (PIL transcription, ofa_common.patch_image) and prompt, and a line-by-line
transcription of OfaForAllTasks._traverse_inference (trie-constrained log-probs over " no"/" yes"/" maybe").
Served side: what `search models build --ofa-source MODEL_DIR` wrote into REPO (ofa_ve_onnx/1/model.onnx,
ofa_ve_preprocess/1/{tokenizer.json,ve.json}, ofa_ve_post/1/post.json) run with the project's own step
functions (search/triton/steps/ofa_ve.py, which ofa_ve_preprocess and ofa_ve_post run) and onnxruntime,
i.e. the Triton ensemble's code without the server.

  venv/bin/python parity_project.py MODEL_DIR REPO > parity_project_output.txt
"""
import io
import json
import math
import os
import sys

import numpy as np
import ofa_common as C  # noqa: E402  (puts third_party/ on sys.path)
import torch
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the project root
from modelscope.models.multi_modal.ofa import OFAModel  # noqa: E402
from modelscope.models.multi_modal.ofa.utils.utils import expand_mask  # noqa: E402
from modelscope.utils.trie import Trie  # noqa: E402

from search.triton.steps import ofa_ve  # noqa: E402  (numpy and Pillow only)

MD, REPO = sys.argv[1], sys.argv[2]
cfg = json.load(open(os.path.join(MD, "configuration.json")))["model"]
S, MAXLEN, PROMPT_TYPE = cfg["patch_image_size"], cfg.get("max_src_length", 256), cfg.get("prompt_type", "none")


def collate(values, pad):
    out = torch.full((len(values), max(len(v) for v in values)), pad, dtype=torch.long)
    for i, v in enumerate(values):
        out[i, :len(v)] = torch.as_tensor(v)
    return out


def reference(model, tok, samples):
    pad, bos, eos = tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    sources = [C.tokenize_text(tok, C.build_prompt(s["text"], s.get("text2"), MAXLEN), MAXLEN) for s in samples]
    prompts = [src[:-1] if PROMPT_TYPE == "prev_output" else [bos] for src in sources]
    images = [torch.from_numpy(C.patch_image(Image.open(io.BytesIO(s["image"])), S)) for s in samples]
    trie, answers = Trie(eos), []
    for ans in C.ANS2LABEL:
        item = tok(" " + ans, add_special_tokens=False)["input_ids"]
        answers.append(item)
        trie.insert([bos] + item + [eos])
    n_vocab = len(tok.get_vocab())
    with torch.no_grad():
        enc = model.encoder(input_ids=collate(sources, pad), patch_images=torch.stack(images),
                            patch_masks=torch.ones(len(samples), dtype=torch.bool))
        prev, tgt, masks = [], [], []
        for p in prompts:
            for a in answers:
                prev.append(p + a)
                tgt.append(p[1:] + a + [eos])
                m = torch.zeros(len(p) + len(a), n_vocab, dtype=torch.bool)
                for i in range(len(a) + 1):
                    m[len(p) - 1 + i][trie.get_next_layer([bos] + a[:i])] = True
                masks.append(m)
        n = len(answers)
        prev_t, tgt_t = collate(prev, pad), collate(tgt, pad)
        mask_t = torch.zeros(len(masks), prev_t.shape[1], n_vocab, dtype=torch.bool)
        for i, m in enumerate(masks):
            mask_t[i, :len(m)] = m
        hid = enc.last_hidden_state.repeat_interleave(n, 0)
        out = model.decoder(prev_t, encoder_hidden_states=hid,
                            encoder_attention_mask=expand_mask(enc.padding_mask.repeat_interleave(n, 0), hid.dtype,
                                                               prev_t.shape[-1]),
                            src_pos_embed=enc.position_embedding.repeat_interleave(n, 0))[0]
        lprobs = model.get_normalized_probs((out.masked_fill(~mask_t, -math.inf),), log_probs=True)
        scores = lprobs.gather(-1, tgt_t.unsqueeze(-1)).squeeze(-1)
        scores = scores.masked_fill(tgt_t.eq(pad), 0).masked_fill((~mask_t).all(2), 0).sum(1).view(-1, n)
    return sources, scores.numpy(), torch.softmax(scores, -1).numpy()


def main():
    import onnxruntime as ort
    from tokenizers import Tokenizer

    ve = json.load(open(os.path.join(REPO, "ofa_ve_preprocess", "1", "ve.json")))
    post_cfg = json.load(open(os.path.join(REPO, "ofa_ve_post", "1", "post.json")))
    served_tok = Tokenizer.from_file(os.path.join(REPO, "ofa_ve_preprocess", "1", "tokenizer.json"))
    sess = ort.InferenceSession(os.path.join(REPO, "ofa_ve_onnx", "1", "model.onnx"), providers=["CPUExecutionProvider"])

    rs = np.random.RandomState(1)

    def png(arr, mode):
        buf = io.BytesIO()
        Image.fromarray(arr, mode).save(buf, "PNG")
        return buf.getvalue()

    samples = [
        {"image": png(rs.randint(0, 255, (90, 140, 3), dtype=np.uint8), "RGB"), "text": "Two dogs run on the beach."},
        {"image": png(rs.randint(0, 255, (300, 200), dtype=np.uint8), "L"), "text": "A man is riding a horse",
         "text2": "People are playing football on grass."},
        {"image": png(rs.randint(0, 255, (64, 64, 4), dtype=np.uint8), "RGBA"), "text": "yes -- maybe/no!"},
        {"image": png(rs.randint(0, 255, (33, 500, 3), dtype=np.uint8), "RGB"),
         "text": "a cat sleeps on a red sofa in the rain while a woman holds an umbrella " * 3},
    ]
    tok = C.load_ofa_tokenizer(MD)
    model = OFAModel.from_pretrained(MD).eval()
    ref_src, ref_scores, ref_p = reference(model, tok, samples)

    enc = [ofa_ve.encode_text(served_tok, ve, s["text"], s.get("text2")) for s in samples]
    ids, dec, last = ofa_ve.pad_batch([e[0] for e in enc], ve)
    pixels = np.stack([ofa_ve.image_pixels(s["image"], ve, 10**8) for s in samples])
    (logits,) = sess.run(None, {"input_ids": ids, "patch_images": pixels, "decoder_input_ids": dec, "last_index": last})
    ordered, probs, labels = ofa_ve.verdict(logits, post_cfg)
    lsm = logits - logits.max(1, keepdims=True)
    lsm = lsm - np.log(np.exp(lsm).sum(1, keepdims=True))
    order = [1, 2, 0]  # (no, yes, maybe) -> (entailment, neutral, contradiction)

    texts = ["  multiple   spaces\tand\nnewlines ", "Ünïcödé café — 日本語 😀", "numbers 12345 and 3.14", "it's we're I'll",
             "tokens <bin_5> and <code_12> inline", "a <mask> here", "x <s> y </s> z <pad>", "a<bin_5>b"]
    mismatches = [t for t in texts if tok(t, add_special_tokens=False)["input_ids"] != served_tok.encode(t).ids]
    res = {
        "modelscope": __import__("modelscope").__version__, "transformers": __import__("transformers").__version__,
        "prompt_type": PROMPT_TYPE, "patch_image_size": S, "max_src_length": MAXLEN, "batch": len(samples),
        "source_ids_identical": [list(r) == e[0] for r, e in zip(ref_src, enc)],
        "tokenizer_mismatching_texts": mismatches,
        "max_abs_diff_log_probs": float(np.abs(ref_scores - lsm).max()),
        "max_abs_diff_probs": float(np.abs(ref_p[:, order] - probs).max()),
        "labels_reference": [["entailment", "neutral", "contradiction"][i] for i in ref_p[:, order].argmax(1)],
        "labels_served": [x[0].decode() for x in labels],
        "truncated": [e[1] for e in enc],
        "probs_served": probs.round(6).tolist(),
    }
    print(json.dumps(res, indent=1, ensure_ascii=False))
    ok = all(res["source_ids_identical"]) and not mismatches and res["max_abs_diff_log_probs"] < 1e-4 \
        and res["max_abs_diff_probs"] < 1e-4 and res["labels_reference"] == res["labels_served"]
    print("PARITY OK" if ok else "PARITY FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
