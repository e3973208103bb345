#!/usr/bin/env bash
# Reference environment for OFA parity (separate from the project venv).
# modelscope's OFA modeling imports fairseq (vit.py: fairseq.modules.LayerNorm; ofa/__init__ -> modeling_mmspeech).
# fairseq 0.12.2 (PyPI) cannot be installed (omegaconf<2.1 metadata rejected by pip>=24.1) nor imported on
# Python 3.11 (dataclass mutable-default ValueError). The fork `fairseq-fixed==0.12.3.1` (sdist) imports on 3.11;
# we use its pure-Python source tree on sys.path (its C/C++ extensions are not built: OFA's VE path does not use them).
set -euo pipefail
cd "$(dirname "$0")"  # creates ./venv and ./third_party here (both git-ignored)
python3 -m venv venv
venv/bin/pip install -q torch==2.13.0
venv/bin/pip install -q modelscope==1.40.2 "transformers==4.57.6" "tokenizers==0.22.2" addict hydra-core omegaconf \
    bitarray sacrebleu scikit-learn cython onnx onnxruntime pillow "numpy<2"
mkdir -p third_party /tmp/fairseq_fixed_dl
venv/bin/pip download -q --no-deps --no-build-isolation fairseq-fixed==0.12.3.1 -d /tmp/fairseq_fixed_dl
tar xzf /tmp/fairseq_fixed_dl/fairseq_fixed-0.12.3.1.tar.gz -C /tmp/fairseq_fixed_dl
rm -rf third_party/fairseq && cp -r /tmp/fairseq_fixed_dl/fairseq_fixed-0.12.3.1/fairseq third_party/
