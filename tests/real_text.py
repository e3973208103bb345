"""Real English sentences and their real MiniLM vectors, from what is installed: the docstrings of
the Python packages in this interpreter's site-packages (written by people, on every topic their
libraries touch), split into sentences and deduplicated. Nothing is downloaded, so a fresh clone has
them; the tests need real embeddings' geometry, which synthetic clusters do not have."""

from __future__ import annotations

import ast
import re
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import numpy as np

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PROSE = re.compile(r"[A-Za-z][A-Za-z ,;:'()-]*[.!?]")


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if doc := ast.get_docstring(node, clean=True):
                yield doc


def sentences(n: int, root: Path | None = None) -> list[str]:
    """``n`` distinct English sentences (25-200 characters, prose: letters and punctuation, no code)
    from the docstrings under ``root`` (default: site-packages), in a fixed order; fewer if there
    are not that many."""
    root = root or Path(sysconfig.get_paths()["purelib"])
    seen: dict[str, None] = {}
    for path in sorted(root.rglob("*.py")):
        for doc in _docstrings(path):
            for para in doc.split("\n\n"):
                flat = " ".join(para.split())
                for s in _SENTENCE_END.split(flat):
                    if 25 <= len(s) <= 200 and _PROSE.fullmatch(s) and len(s.split()) >= 5:
                        seen.setdefault(s)
                        if len(seen) == n:
                            return list(seen)
    return list(seen)


def embed(texts: list[str], model_repo: Path, batch: int = 32) -> np.ndarray:
    """The texts' MiniLM vectors as the served model gives them (the repository's CPU graph and
    tokenizer, in-process onnxruntime), float32, L2-normalised; sorted by length so batches carry
    little padding (batches of 32 took ~12 % less CPU than of 128)."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_repo / "minilm_tokenize/1/tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)
    sess = ort.InferenceSession(str(model_repo / "minilm_onnx/1/model.cpu.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    ids = [e.ids for e in tok.encode_batch(texts)]
    out = np.zeros((len(texts), 384), np.float32)
    order = np.argsort([len(i) for i in ids], kind="stable")
    for start in range(0, len(order), batch):
        rows = order[start:start + batch]
        width = max(len(ids[r]) for r in rows)
        mask = np.zeros((len(rows), width), np.int64)
        x = np.zeros_like(mask)
        for k, r in enumerate(rows):
            x[k, :len(ids[r])] = ids[r]
            mask[k, :len(ids[r])] = 1
        feeds = {"input_ids": x, "attention_mask": mask, "token_type_ids": np.zeros_like(x)}
        vec = sess.run(None, {k: v for k, v in feeds.items() if k in names})[-1]
        out[rows] = vec.reshape(len(rows), -1)[:, :384]
    return out / np.linalg.norm(out, axis=1, keepdims=True)
