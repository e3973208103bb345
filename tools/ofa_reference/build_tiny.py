"""Build a tiny randomly initialised OFA (modelscope architecture) + tiny BPE tokenizer, save it like a
modelscope OFA checkpoint dir, and run one VE step. Run with ./venv/bin/python build_tiny.py [out_dir]."""
import json
import os
import sys
import time

import numpy as np
import torch
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()

import ofa_common as C

t0 = time.time()
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(C.HERE, "tiny_ofa")
PATCH = 128  # real checkpoints: 480 (configuration.json model.patch_image_size)

from modelscope.models.multi_modal.ofa import OFAModel  # noqa: E402
from modelscope.models.multi_modal.ofa.configuration_ofa import OFAConfig  # noqa: E402

t_imp = time.time()
C.train_tiny_bpe(OUT)
tok = C.load_ofa_tokenizer(OUT)
t_tok = time.time()

torch.manual_seed(0)
cfg = OFAConfig(
    vocab_size=len(tok), d_model=64, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
    resnet_type="resnet18",  # smallest OFA supports: ResNet([2,2,2]) bottlenecks, 1024-ch output, stride 16
    dropout=0.0, max_position_embeddings=1024, token_bucket_size=256, image_bucket_size=42,
)
model = OFAModel(cfg).eval()
# make the random model less trivial: random LayerNorm affine + BatchNorm statistics
with torch.no_grad():
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm) and m.weight is not None:
            m.weight.uniform_(0.5, 1.5); m.bias.uniform_(-0.2, 0.2)
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1); m.running_var.uniform_(0.5, 1.5)
            m.weight.uniform_(0.5, 1.5); m.bias.uniform_(-0.1, 0.1)
model.save_pretrained(OUT, safe_serialization=False)  # modelscope OFA ckpts are pytorch_model.bin; tied embeddings
json.dump({"task": "visual-entailment",
           "model": {"type": "ofa", "patch_image_size": PATCH, "max_image_size": PATCH, "max_src_length": 80,
                     "prompt_type": "prev_output", "gen_type": "traverse", "answer2label": "answer2label.json",
                     "imagenet_default_mean_and_std": False, "language": "en"}},
          open(os.path.join(OUT, "configuration.json"), "w"), indent=1)
json.dump(C.ANS2LABEL, open(os.path.join(OUT, "answer2label.json"), "w"))
t_build = time.time()

# one VE forward: encoder + one decoder step
from modelscope.models.multi_modal.ofa.utils.utils import expand_mask  # noqa: E402
from PIL import Image  # noqa: E402

img = Image.fromarray(np.random.RandomState(0).randint(0, 255, (90, 140, 3), dtype=np.uint8))
src = C.tokenize_text(tok, C.build_prompt("Two dogs run on the beach."), 80)
ids = torch.tensor([src])
with torch.no_grad():
    enc = model.encoder(input_ids=ids, patch_images=torch.from_numpy(C.patch_image(img, PATCH))[None],
                        patch_masks=torch.tensor([True]))
    dec_in = ids[:, :-1]  # prompt_type prev_output: decoder prompt = source without eos
    out = model.decoder(dec_in, encoder_hidden_states=enc.last_hidden_state,
                        encoder_attention_mask=expand_mask(enc.padding_mask, enc.last_hidden_state.dtype, dec_in.shape[-1]),
                        src_pos_embed=enc.position_embedding)
    logits = out[0][:, -1]
ans = C.answer_token_ids(tok)
print("vocab", len(tok), "answer ids", ans, "prompt ids", src)
print("answer logits", logits[0, [a[0] for a in ans]].tolist())
print("params", sum(p.numel() for p in model.parameters()))
print(f"timing: imports {t_imp - t0:.1f}s tokenizer {t_tok - t_imp:.1f}s build+save {t_build - t_tok:.1f}s "
      f"forward {time.time() - t_build:.2f}s")
