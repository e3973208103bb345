"""The points bench_store.py writes and the queries it asks: synthetic vectors shaped like
embeddings (photos, documents) or real MiniLM vectors of real English text (real), with the payloads
the indexer writes.

real: sentences from MS MARCO passages and queries and STS-B (../shared/data, when there), then
the installed packages' docstrings (tests/real_text.py) up to the size, embedded by the MiniLM of
SEARCH_TEST_MODELS (the tests' model folder: its triton_repo) in-process; the vectors are cached in the work folder
(real-<n>.npy), the queries are the sentences after the first n."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from qdrant_client import models

from bench.common import DIM, SEED, payload, pid, sample
from search.store import DOCUMENTS

CHUNK = 10_000
OVERSAMPLING = (2.0, 4.0)  # the quantized backends' rescored candidates, x the hits asked
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
REAL_QUERIES = 1_000  # held-out sentences after the points; a run asks the first --queries of them
_real: dict[int, np.ndarray] = {}

# kind -> (collection, vector, width)
KINDS = {"photos": ("images", "clip", DIM), "documents": (DOCUMENTS.name, "minilm", 384),
         "real": (DOCUMENTS.name, "minilm", 384)}
WORDS = ("printer queue badge reader password reset vpn laptop docking station monitor invoice budget "
         "meeting room schedule backup restore release policy travel expense contract review").split()


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def dataset(n: int, kind: str = "photos", workdir: Path | None = None) -> np.ndarray:
    """The first n points (the same points at every size): fixed 10k chunks, each with its own seed;
    documents' 384-d vectors are the first 384 coordinates, renormalised (the clusters stay)."""
    if kind == "real":
        return real_vectors(n, workdir)[:n]
    width = KINDS[kind][2]
    return np.concatenate([unit(sample(CHUNK, SEED + 1 + k)[:, :width]) for k in range(-(-n // CHUNK))])[:n]


def doc_payload(i: int) -> dict:
    """A passage's payload as the indexer writes it: 8 passages a file, ~700 characters of text."""
    f, year = i // 8, 2010 + (i // 8) % 15
    path = f"/srv/wiki/{year}/{f % 97:02d}/page-{f:07d}.md"
    text = " ".join(WORDS[(i * 7 + k * 13) % len(WORDS)] for k in range(100))
    return {"path": path, "paths": [path], "folders": [f"/srv/wiki/{year}/{f % 97:02d}", f"/srv/wiki/{year}", "/srv/wiki",
                                                     "/srv", "/"], "suffix": ".md", "sha256": f"{f:064x}", "chunk": i % 8,
            "n_chunks": 8, "chunker": "minilm-bench", "mtime": 1.3e9 + i * 3000.0, "size": 40_000 + f, "title": f"Page {f}",
            "models": ["minilm"], "partial": 0.0, "text": text, "start": (i % 8) * 700, "end": (i % 8) * 700 + len(text)}


def point(i: int, v: np.ndarray, kind: str) -> models.PointStruct:
    _, vector, _ = KINDS[kind]
    return models.PointStruct(id=pid(i), vector={vector: v.tolist()}, payload=payload(i) if kind == "photos" else doc_payload(i))


def query_vectors(n_queries: int, kind: str, n: int, workdir: Path | None = None) -> np.ndarray:
    """Fresh points from the data's distribution; for real, held-out sentences' vectors."""
    if kind == "real":
        return real_vectors(n, workdir)[n:n + n_queries]
    return unit(sample(n_queries, SEED + 999)[:, :KINDS[kind][2]])


def real_sentences(n: int) -> list[str]:
    """n distinct real sentences: MS MARCO and STS-B from ../shared/data first, then docstrings."""
    import sys  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from real_text import sentences  # noqa: PLC0415

    seen: dict[str, None] = {}
    marco = SHARED / "beir-msmarco-mini"
    for name in ("queries.jsonl", "corpus.jsonl"):
        if (marco / name).is_file():
            for line in (marco / name).read_text(encoding="utf-8").split("\n"):  # not splitlines: passages hold U+2028
                if line.strip():
                    seen.setdefault(" ".join(json.loads(line)["text"].split()))
    if (SHARED / "stsb/dev.tsv").is_file():
        for line in (SHARED / "stsb/dev.tsv").read_text(encoding="utf-8").splitlines()[1:]:
            for s in line.split("\t")[-2:]:
                seen.setdefault(s.strip())
    for s in sentences(n):
        if len(seen) >= n:
            break
        seen.setdefault(s)
    return [s for s in seen if s][:n]


def real_vectors(n: int, workdir: Path | None) -> np.ndarray:
    """The n points' and REAL_QUERIES queries' MiniLM vectors, embedded once (cached in workdir)."""
    if n in _real:
        return _real[n]
    cache = (workdir or Path(".")) / f"real-{n}.npy"
    if not cache.is_file():
        import sys  # noqa: PLC0415

        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from real_text import embed  # noqa: PLC0415

        texts = real_sentences(n + REAL_QUERIES)
        if len(texts) < n + REAL_QUERIES:
            raise SystemExit(f"only {len(texts)} real sentences found, {n + REAL_QUERIES} needed")
        models_dir = os.environ.get("SEARCH_TEST_MODELS")
        if not models_dir:
            raise SystemExit("--kind real embeds with the MiniLM of SEARCH_TEST_MODELS: set it (tests/conftest.py builds it)")
        np.save(cache, embed(texts, Path(models_dir) / "triton_repo"))
    _real[n] = np.load(cache)
    return _real[n]



def filters(kind: str, n: int) -> dict[str, tuple[models.Filter, np.ndarray]]:
    """name -> (filter, which of the n points it keeps)."""
    i = np.arange(n)
    year = (2010 + i % 15) if kind == "photos" else (2010 + (i // 8) % 15)
    top = "/home/me/Pictures/2015" if kind == "photos" else "/srv/wiki/2015"
    lo, hi = 1.3e9 + int(n * 0.45) * 3000.0, 1.3e9 + int(n * 0.55) * 3000.0  # dates: 10 % of the points
    date_key = "taken_at" if kind == "photos" else "mtime"
    out = {"folder": (models.Filter(must=[models.FieldCondition(key="folders", match=models.MatchValue(value=top))]), year == 2015),
           "date": (models.Filter(must=[models.FieldCondition(key=date_key, range=models.Range(gte=lo, lt=hi))]),
                    (1.3e9 + i * 3000.0 >= lo) & (1.3e9 + i * 3000.0 < hi))}
    if kind == "photos":
        out["camera"] = (models.Filter(must=[models.FieldCondition(key="camera_terms", match=models.MatchValue(value="cam3"))]),
                         i % 10 == 3)
    return out


