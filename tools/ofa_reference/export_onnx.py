"""Export OFA (modelscope OFAModel) for visual entailment to ONNX: encoder + one decoder step.
Run: ./venv/bin/python export_onnx.py [model_dir] [out_dir]

encoder.onnx:      input_ids[B,L] int64, patch_images[B,3,S,S] f32
                   -> encoder_out[B,P+L,D], encoder_padding_mask[B,P+L] bool, position_embedding[B,P+L,D]
decoder_step.onnx: decoder_input_ids[B,T] int64 (right-padded with pad), last_index[B] int64,
                   encoder_out, encoder_padding_mask, position_embedding
                   -> answer_logits[B,A] (decoder logits at last_index, gathered at the answer token ids)
"""
import json
import os
import sys
import time

import torch
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()
if os.environ.get("OFA_IMPL", "modelscope") == "vendored":
    # project-venv path (transformers 5.x): the project's vendored copy of modelscope's modeling
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    import json as _j

    from search.models.ofa_arch.modeling_ofa import OFAModel  # noqa: E402
    from search.models.ofa_arch.utils.utils import expand_mask  # noqa: E402

    class _Tok:  # answer ids / special ids straight from vocab.json (no transformers tokenizer needed)
        def __init__(self, d):
            from tokenizers import ByteLevelBPETokenizer
            self.tk = ByteLevelBPETokenizer(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt"))
            v = _j.load(open(os.path.join(d, "vocab.json")))
            self.bos_token_id, self.pad_token_id, self.eos_token_id = v["<s>"], v["<pad>"], v["</s>"]

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": self.tk.encode(text).ids}
    import ofa_common as C  # noqa: E402
    C.load_ofa_tokenizer = _Tok
else:
    import ofa_common as C  # noqa: E402
    from modelscope.models.multi_modal.ofa import OFAModel  # noqa: E402
    from modelscope.models.multi_modal.ofa.utils.utils import expand_mask  # noqa: E402


def fix_bool_where(path):
    """onnxruntime's CPU Where has no bool kernel ("Could not find an implementation for Where(16)").
    The encoder's `image_padding_mask[~patch_masks] = True` (modeling_ofa.py:1320) exports as a bool Where:
    rewrite every bool-typed Where as Cast(int32) -> Where -> Cast(bool). Graph-level, modelscope untouched."""
    import onnx
    from onnx import TensorProto, helper
    m = onnx.load(path)
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in
             list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
    nodes, n_fixed = [], 0
    for n in m.graph.node:
        if n.op_type == "Where" and types.get(n.output[0]) == TensorProto.BOOL:
            a, b = n.input[1] + "_i32", n.input[2] + "_i32"
            nodes.append(helper.make_node("Cast", [n.input[1]], [a + f"_{n_fixed}"], to=TensorProto.INT32))
            nodes.append(helper.make_node("Cast", [n.input[2]], [b + f"_{n_fixed}"], to=TensorProto.INT32))
            out = n.output[0]
            nodes.append(helper.make_node("Where", [n.input[0], a + f"_{n_fixed}", b + f"_{n_fixed}"], [out + "_i32"]))
            nodes.append(helper.make_node("Cast", [out + "_i32"], [out], to=TensorProto.BOOL))
            n_fixed += 1
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, path)
    return n_fixed


class Encoder(torch.nn.Module):
    def __init__(self, model, patch_image_size):
        super().__init__()
        self.encoder = model.encoder
        with torch.no_grad():  # number of image patches for the fixed input size (ResNet stride 16)
            h, w = model.encoder.embed_images(torch.zeros(1, 3, patch_image_size, patch_image_size)).shape[-2:]
        self.num_patches = int(h * w)

    def forward(self, input_ids, patch_images):
        # modelscope passes patch_masks=[B] (all True for VE). `image_padding_mask[~patch_masks] = True`
        # (modeling_ofa.py:1320) with a [B] mask exports to a Where that broadcasts [B] against [B,P] (wrong,
        # fails for B != 1). A [B,P] all-True mask is the same indexing semantically and exports correctly.
        patch_masks = torch.ones(patch_images.shape[0], self.num_patches, dtype=torch.bool)
        out = self.encoder(input_ids=input_ids, patch_images=patch_images, patch_masks=patch_masks)
        return out.last_hidden_state, out.padding_mask, out.position_embedding


class DecoderStep(torch.nn.Module):
    def __init__(self, model, answer_ids):
        super().__init__()
        self.decoder = model.decoder
        self.register_buffer("answer_ids", torch.tensor(answer_ids, dtype=torch.long), persistent=False)

    def forward(self, decoder_input_ids, last_index, encoder_out, encoder_padding_mask, position_embedding):
        mask = expand_mask(encoder_padding_mask, encoder_out.dtype, decoder_input_ids.shape[-1])
        out = self.decoder(decoder_input_ids, encoder_hidden_states=encoder_out, encoder_attention_mask=mask,
                           src_pos_embed=position_embedding)
        h = out[0]  # [B,T,V] logits
        idx = last_index.view(-1, 1, 1).expand(-1, 1, h.shape[-1])
        last = h.gather(1, idx).squeeze(1)  # [B,V]
        return last.index_select(1, self.answer_ids)


def main(model_dir, out_dir):
    t0 = time.time()
    os.makedirs(out_dir, exist_ok=True)
    tok = C.load_ofa_tokenizer(model_dir)
    ans = C.answer_token_ids(tok)
    assert all(len(a) == 1 for a in ans), f"answers must be single BPE tokens for one-step scoring: {ans}"
    answer_ids = [a[0] for a in ans]
    cfg = json.load(open(os.path.join(model_dir, "configuration.json")))["model"]
    S = cfg.get("patch_image_size", 480)
    model = OFAModel.from_pretrained(model_dir).eval()
    t_load = time.time()

    # example with padding (has_pads=True branch is traced: it is exact for unpadded inputs too)
    ids = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 5, 6, 2, 1, 1]])
    img = torch.randn(2, 3, S, S)
    enc = Encoder(model, S).eval()
    with torch.no_grad():
        e_out = enc(ids, img)
    torch.onnx.export(enc, (ids, img), os.path.join(out_dir, "encoder.onnx"), opset_version=17, dynamo=False,
                      input_names=["input_ids", "patch_images"],
                      output_names=["encoder_out", "encoder_padding_mask", "position_embedding"],
                      dynamic_axes={"input_ids": {0: "B", 1: "L"}, "patch_images": {0: "B"},
                                    "encoder_out": {0: "B", 1: "N"}, "encoder_padding_mask": {0: "B", 1: "N"},
                                    "position_embedding": {0: "B", 1: "N"}})
    print("bool Where nodes rewritten:", fix_bool_where(os.path.join(out_dir, "encoder.onnx")))
    t_enc = time.time()
    dec = DecoderStep(model, answer_ids).eval()
    dids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 1, 1]])
    last = torch.tensor([4, 2])
    torch.onnx.export(dec, (dids, last) + tuple(e_out), os.path.join(out_dir, "decoder_step.onnx"), opset_version=17,
                      dynamo=False,
                      input_names=["decoder_input_ids", "last_index", "encoder_out", "encoder_padding_mask",
                                   "position_embedding"],
                      output_names=["answer_logits"],
                      dynamic_axes={"decoder_input_ids": {0: "B", 1: "T"}, "last_index": {0: "B"},
                                    "encoder_out": {0: "B", 1: "N"}, "encoder_padding_mask": {0: "B", 1: "N"},
                                    "position_embedding": {0: "B", 1: "N"}, "answer_logits": {0: "B"}})
    print("decoder bool Where nodes rewritten:", fix_bool_where(os.path.join(out_dir, "decoder_step.onnx")))
    json.dump({"answers": list(C.ANS2LABEL), "answer_token_ids": answer_ids, "patch_image_size": S,
               "pad_id": tok.pad_token_id, "bos_id": tok.bos_token_id, "eos_id": tok.eos_token_id},
              open(os.path.join(out_dir, "ve_meta.json"), "w"), indent=1)
    t_dec = time.time()
    print(f"timing: load {t_load - t0:.1f}s export encoder {t_enc - t_load:.1f}s export decoder {t_dec - t_enc:.1f}s")
    for f in ("encoder.onnx", "decoder_step.onnx"):
        print(f, os.path.getsize(os.path.join(out_dir, f)) // 1024, "KiB")


if __name__ == "__main__":
    md = sys.argv[1] if len(sys.argv) > 1 else os.path.join(C.HERE, "tiny_ofa")
    main(md, sys.argv[2] if len(sys.argv) > 2 else os.path.join(C.HERE, "onnx"))
