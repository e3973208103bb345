"""Is the project's vendored OFA code (search/models/ofa_arch, run on the project venv's transformers 5)
bit-identical to modelscope 1.40.2 itself (reference venv, transformers 4.57.6)? Same checkpoint, same inputs.

  venv/bin/python probe.py ref MODEL_DIR OUT.npz                    # modelscope's OFAModel (reference venv)
  /work/main/.venv/bin/python probe.py vendored MODEL_DIR OUT.npz   # search.models.ofa_arch, compares
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
mode, model_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "ref":
    sys.path.insert(0, os.path.join(HERE, "third_party"))  # fairseq-fixed source (setup_ref_env.sh)
    from modelscope.models.multi_modal.ofa import OFAModel
    from modelscope.models.multi_modal.ofa.utils.utils import expand_mask
else:
    sys.path.insert(0, os.path.join(HERE, "..", ".."))  # the project root
    from search.models.ofa_arch.modeling_ofa import OFAModel
    from search.models.ofa_arch.utils.utils import expand_mask
import transformers  # noqa: E402

model = OFAModel.from_pretrained(model_dir).eval()
size = int(__import__("json").load(open(os.path.join(model_dir, "configuration.json")))["model"]["patch_image_size"])
g = torch.Generator().manual_seed(0)
ids = torch.tensor([[0, 350, 265, 281, 305, 386, 266, 306, 383, 86, 2], [0, 350, 265, 281, 305, 2, 1, 1, 1, 1, 1]])
img = torch.randn(2, 3, size, size, generator=g)
with torch.no_grad():
    enc = model.encoder(input_ids=ids, patch_images=img, patch_masks=torch.tensor([True, True]))
    d = ids[:, :-1]
    logits = model.decoder(d, encoder_hidden_states=enc.last_hidden_state,
                           encoder_attention_mask=expand_mask(enc.padding_mask, enc.last_hidden_state.dtype, d.shape[-1]),
                           src_pos_embed=enc.position_embedding)[0].numpy()
if mode == "ref":
    np.savez(out, logits=logits)
    print(f"modelscope OFAModel (transformers {transformers.__version__}): logits {logits.shape} saved to {out}")
else:
    ref = np.load(out)["logits"]
    print(f"search.models.ofa_arch (transformers {transformers.__version__}) vs modelscope: "
          f"max |Δ logits| = {float(np.abs(ref - logits).max())} over {logits.size} values")
