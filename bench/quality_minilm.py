"""Quality check: STS-B dev Spearman (cosine) of the served `minilm` ensemble versus in-process
sentence-transformers on the same weights and the same 1,500 pairs.

    python bench/quality_minilm.py

Needs `search models build`; starts its own Triton on free ports; reads ../shared/data/stsb.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import MiniLM, minilm  # noqa: E402
from search.triton.client import TritonClient  # noqa: E402
from search.triton.local import LocalTriton, free_port  # noqa: E402

STSB = PROJECT_ROOT.parent / "shared" / "data" / "stsb" / "dev.tsv"


def pairs() -> tuple[list[str], list[str], np.ndarray]:
    a, b, gold = [], [], []
    for line in STSB.read_text().splitlines()[1:]:
        cols = line.rstrip("\r").split("\t")  # split genre dataset year sid score sentence1 sentence2
        if len(cols) >= 8:
            gold.append(float(cols[5]))
            a.append(cols[6])
            b.append(cols[7])
    return a, b, np.array(gold)


def spearman(va: np.ndarray, vb: np.ndarray, gold: np.ndarray) -> float:
    cos = (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
    return float(spearmanr(cos, gold).statistic)


def main() -> None:
    repo = Settings().triton_repo
    if not MiniLM().is_built(repo):
        sys.exit("build the model first: search models build")
    a, b, gold = pairs()
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(minilm.package_weights()), device="cpu")
    ref = spearman(st.encode(a, batch_size=32), st.encode(b, batch_size=32), gold)
    with LocalTriton(repo, Path(tempfile.mkdtemp(prefix="quality-")), http_port=free_port(), grpc_port=free_port(),
                     metrics_port=free_port(), models=list(MiniLM().triton_models)) as server:
        client = TritonClient(f"127.0.0.1:{server.grpc_port}")

        def served(texts: list[str]) -> np.ndarray:
            return np.concatenate([minilm.embed(client, texts[i:i + 32])[0] for i in range(0, len(texts), 32)])

        va, vb = served(a), served(b)
    got = spearman(va, vb, gold)
    print(f"STS-B dev, {len(gold)} pairs, Spearman (cosine) x100:")
    print(f"  in-process sentence-transformers  {ref * 100:.2f}")
    print(f"  Triton minilm (served)            {got * 100:.2f}")
    print(f"  difference                        {(got - ref) * 100:+.4f}")


if __name__ == "__main__":
    main()
