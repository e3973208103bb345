"""Parity: modelscope OFA reference (OFAModel + transcription of OfaForAllTasks._traverse_inference, the
constrained scoring over the answer trie) vs. the ONNX encoder + one decoder step run by onnxruntime, with a
serving-side pipeline that does not import modelscope/transformers (tokenizers + PIL + numpy).
Run: ./venv/bin/python parity.py [model_dir] [onnx_dir]"""
import json
import math
import os
import sys
import time

import numpy as np
import ofa_common as C
import torch
from PIL import Image
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
from modelscope.models.multi_modal.ofa import OFAModel  # noqa: E402
from modelscope.models.multi_modal.ofa.utils.utils import expand_mask  # noqa: E402
from modelscope.utils.trie import Trie  # noqa: E402

MD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(C.HERE, "tiny_ofa")
OD = sys.argv[2] if len(sys.argv) > 2 else os.path.join(C.HERE, "onnx")
cfg = json.load(open(os.path.join(MD, "configuration.json")))["model"]
S, MAXLEN, PROMPT_TYPE = cfg["patch_image_size"], cfg.get("max_src_length", 256), cfg.get("prompt_type", "none")


def collate_tokens(values, pad_idx):  # modelscope/preprocessors/ofa/utils/collate.py:111 (right pad)
    size = max(v.size(0) for v in values)
    res = values[0].new(len(values), size, *values[0].shape[1:]).fill_(pad_idx)
    for i, v in enumerate(values):
        res[i][:len(v)].copy_(v)
    return res


def reference(model, tok, samples):
    """Reference path: returns (scores[B,A] = summed constrained log-probs, probs = softmax(scores))."""
    pad, bos, eos = tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    eos_item = torch.tensor([eos])
    sources, images, prompts = [], [], []
    for s in samples:
        src = torch.tensor(C.tokenize_text(tok, C.build_prompt(s["text"], s.get("text2"), MAXLEN), MAXLEN))
        sources.append(src)
        images.append(torch.from_numpy(C.patch_image(s["image"], S)))
        prompts.append(src[:-1].tolist() if PROMPT_TYPE == "prev_output" else [bos])  # visual_entailment.py:156-163
    # build_trie (ofa_for_all_tasks.py:442-475), valid_batch_size = all answers
    trie = Trie(eos)
    val_ans = []
    for ans in C.ANS2LABEL:
        item = tok(' ' + ans, return_tensors='pt', add_special_tokens=False).input_ids.squeeze(0)
        val_ans.append(item)
        trie.insert([bos] + item.tolist() + [eos])
    val_masks = []
    for item in val_ans:
        m = torch.zeros((len(item) + 1, len(tok.get_vocab()))).bool()
        for i in range(len(item) + 1):
            m[i][trie.get_next_layer([bos] + item[:i].tolist())] = True
        val_masks.append(m)
    with torch.no_grad():
        enc = model.encoder(input_ids=collate_tokens(sources, pad), patch_images=torch.stack(images),
                            patch_masks=torch.ones(len(samples), dtype=torch.bool))
        n = len(val_ans)
        tgt = collate_tokens([torch.cat([torch.tensor(p[1:], dtype=torch.long), a, eos_item]) for p in prompts for a in val_ans], pad)
        prev = collate_tokens([torch.cat([torch.tensor(p, dtype=torch.long), a]) for p in prompts for a in val_ans], pad)
        masks = collate_tokens([torch.cat([torch.zeros(len(p) - 1, m.size(1)).bool(), m], 0)
                                for p in prompts for m in val_masks], pad)
        hid = enc.last_hidden_state.repeat_interleave(n, 0)
        dout = model.decoder(prev, encoder_hidden_states=hid,
                             encoder_attention_mask=expand_mask(enc.padding_mask.repeat_interleave(n, 0), hid.dtype,
                                                                prev.shape[-1]),
                             src_pos_embed=enc.position_embedding.repeat_interleave(n, 0))
        logits = dout[0].masked_fill(~masks, -math.inf)
        lprobs = model.get_normalized_probs((logits,), log_probs=True)
        scores = lprobs.gather(-1, tgt.unsqueeze(-1)).squeeze(-1)
        scores = scores.masked_fill(tgt.eq(pad), 0).masked_fill((~masks).all(2), 0).sum(1).view(-1, n)
    return scores.numpy(), torch.softmax(scores, -1).numpy()


class ServingPipeline:
    """What the Triton python steps + ONNX would do: no modelscope/transformers imports."""

    def __init__(self, model_dir, onnx_dir):
        import onnxruntime as ort
        from tokenizers import AddedToken, ByteLevelBPETokenizer
        self.tk = ByteLevelBPETokenizer(os.path.join(model_dir, "vocab.json"), os.path.join(model_dir, "merges.txt"),
                                        add_prefix_space=False)
        self.tk.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False)])
        self.tk.add_tokens([f"<code_{i}>" for i in range(8192)] + [f"<bin_{i}>" for i in range(1000)])
        self.meta = json.load(open(os.path.join(onnx_dir, "ve_meta.json")))
        so = ort.SessionOptions(); so.intra_op_num_threads = 1
        self.enc = ort.InferenceSession(os.path.join(onnx_dir, "encoder.onnx"), so, providers=["CPUExecutionProvider"])
        self.dec = ort.InferenceSession(os.path.join(onnx_dir, "decoder_step.onnx"), so,
                                        providers=["CPUExecutionProvider"])

    def encode(self, text):
        ids = self.tk.encode(text).ids[:MAXLEN]
        return [self.meta["bos_id"]] + ids + [self.meta["eos_id"]]

    def __call__(self, samples):
        m = self.meta
        srcs = [self.encode(C.build_prompt(s["text"], s.get("text2"), MAXLEN)) for s in samples]
        L = max(map(len, srcs))
        ids = np.full((len(srcs), L), m["pad_id"], np.int64)
        for i, s in enumerate(srcs):
            ids[i, :len(s)] = s
        imgs = np.stack([C.patch_image(s["image"], S) for s in samples])
        e, pm, pe = self.enc.run(None, {"input_ids": ids, "patch_images": imgs})
        if PROMPT_TYPE == "prev_output":  # decoder prompt = source without eos
            dids = ids[:, :-1].copy()
            for i, s in enumerate(srcs):
                dids[i, len(s) - 1:] = m["pad_id"]
            last = np.array([len(s) - 2 for s in srcs], np.int64)
        else:
            dids = np.full((len(srcs), 1), m["bos_id"], np.int64)
            last = np.zeros(len(srcs), np.int64)
        logits = self.dec.run(None, {"decoder_input_ids": dids, "last_index": last, "encoder_out": e,
                                     "encoder_padding_mask": pm, "position_embedding": pe})[0]
        z = logits - logits.max(1, keepdims=True)
        return logits, np.exp(z) / np.exp(z).sum(1, keepdims=True), srcs


def main():
    rs = np.random.RandomState(1)
    samples = [
        {"image": Image.fromarray(rs.randint(0, 255, (90, 140, 3), dtype=np.uint8)), "text": "Two dogs run on the beach."},
        {"image": Image.fromarray(rs.randint(0, 255, (300, 200), dtype=np.uint8), "L"),
         "text": "A man is riding a horse", "text2": "People are playing football on grass."},
        {"image": Image.fromarray(rs.randint(0, 255, (64, 64, 4), dtype=np.uint8), "RGBA"), "text": "yes -- maybe/no!"},
        {"image": Image.fromarray(rs.randint(0, 255, (33, 500, 3), dtype=np.uint8)),
         "text": "a cat sleeps on a red sofa in the rain while a woman holds an umbrella " * 3},
    ]
    from modelscope.models.multi_modal.ofa import OFATokenizer  # noqa: F401
    tok = C.load_ofa_tokenizer(MD)
    model = OFAModel.from_pretrained(MD).eval()
    t0 = time.time(); ref_scores, ref_p = reference(model, tok, samples); t_ref = time.time() - t0
    pipe = ServingPipeline(MD, OD)
    t0 = time.time(); logits, p, srcs = pipe(samples); t_srv = time.time() - t0

    # tokenizer parity on the prompts and some awkward strings
    texts = [C.build_prompt(s["text"], s.get("text2"), MAXLEN) for s in samples] + [
        "  multiple   spaces\tand\nnewlines ", "Ünïcödé café — 日本語 😀", "numbers 12345 and 3.14", "it's we're I'll",
        "tokens <bin_5> and <code_12> inline", "a <mask> here", " does the image describe \" x \"?"]
    tok_mismatch = [t for t in texts if tok(t, add_special_tokens=False)["input_ids"] != pipe.tk.encode(t).ids]
    src_ok = all(C.tokenize_text(tok, C.build_prompt(s["text"], s.get("text2"), MAXLEN), MAXLEN) == srcs[i]
                 for i, s in enumerate(samples))

    # one-step rule: constrained log-softmax over the answers == log_softmax(answer logits)
    lsm = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(1, keepdims=True)
    res = {
        "prompt_type": PROMPT_TYPE, "patch_image_size": S, "batch": len(samples),
        "image_sizes": [s["image"].size for s in samples], "image_modes": [s["image"].mode for s in samples],
        "tokenizer_ids_identical": {"prompts_with_bos_eos": src_ok, "mismatching_texts": tok_mismatch},
        "ref_scores(log p)": ref_scores.round(6).tolist(), "onnx_log_softmax(answer logits)": lsm.round(6).tolist(),
        "max_abs_diff_scores": float(np.abs(ref_scores - lsm).max()),
        "ref_probs": ref_p.round(6).tolist(), "onnx_probs": p.round(6).tolist(),
        "max_abs_diff_probs": float(np.abs(ref_p - p).max()),
        "argmax_equal": bool((ref_p.argmax(1) == p.argmax(1)).all()),
        "labels": [C.ANSWER_TO_RELATION[list(C.ANS2LABEL)[i]] for i in p.argmax(1)],
        "seconds": {"reference": round(t_ref, 3), "onnx_pipeline": round(t_srv, 3)},
    }
    # batch of one (no padding anywhere: the traced has_pads=True branch must still be exact)
    r1, _ = reference(model, tok, samples[1:2]); l1, _, _ = pipe(samples[1:2])
    l1 = l1 - l1.max(1, keepdims=True); l1 = l1 - np.log(np.exp(l1).sum(1, keepdims=True))
    res["max_abs_diff_scores_batch1"] = float(np.abs(r1 - l1).max())
    print(json.dumps(res, indent=1, ensure_ascii=False))
    assert src_ok and not tok_mismatch and res["max_abs_diff_scores"] < 1e-4 and res["max_abs_diff_scores_batch1"] < 1e-4 and res["argmax_equal"]
    print("PARITY OK")


if __name__ == "__main__":
    main()
