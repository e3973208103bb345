"""What every benchmark shares: the machine, the load, the commit, and its run appended as one JSON
line to bench/results/<bench>.jsonl (the results are data; docs/benchmarks.md explains the method);
a local Triton for a built repository; the synthetic photo vectors of the store benches; random
models of real size. No bench script imports another: what two of them need lives here or, for
CPU time and timing, in bench/timing.py."""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    cpu = "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "gpu": bool(shutil.which("nvidia-smi"))}


def machine_line() -> str:
    """The machine in one line, as most benches print and record it."""
    m = machine()
    usable = m["usable_cores"]  # a run pinned to some CPUs (bench_api --server-cpus) says so
    pinned = f", {usable} of them this run's" if usable < (m["cores"] or usable) else ""
    gpu = "a GPU present, unused" if m["gpu"] else "no GPU"
    return f"{platform.machine()}, {m['cores']} cores{pinned} ({m['cpu']}), Python {m['python']}, {gpu}"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def fmt_load(load: list[float] | tuple[float, ...] | None = None) -> str:
    """A load average (default: now) as "0.12 0.34 0.56"."""
    return " ".join(f"{x:.2f}" for x in (os.getloadavg() if load is None else load))


def commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent.parent)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def append(bench: str, figures: dict, *, load_before: list[float], command: str) -> Path:
    """One run as one JSON line: when, where, on which commit, under which load, and its figures."""
    RESULTS.mkdir(exist_ok=True)
    record = {"bench": bench, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit(),
              "machine": machine(), "load_before": load_before, "load_after": load(), "command": command, **figures}
    path = RESULTS / f"{bench}.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def jsonable(value):
    """``value`` as JSON can hold it: numpy numbers and arrays as numbers and lists, tuples and sets
    as lists, paths and anything else unknown as text, dictionary keys as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tolist"):  # a numpy scalar or array (numpy need not be loaded here)
        return jsonable(value.tolist())
    return str(value)


def slug(text) -> str:
    """``text`` as a measure's key part: runs of anything but letters and digits as one "_"."""
    return re.sub(r"[^0-9A-Za-z]+", "_", str(text)).strip("_").lower()


def keyed(rows: list[dict], *fields: str) -> dict[str, dict]:
    """A bench's table rows (a list, which bench/report.py does not read figures from) as a dict keyed
    by the values of ``fields`` (e.g. "search_http_uvicorn_fastapi_8"); a repeated key gets _2, _3."""
    out: dict[str, dict] = {}
    for row in rows:
        key = "_".join(slug(row.get(f)) for f in fields) or "row"
        name, n = key, 1
        while name in out:
            n += 1
            name = f"{key}_{n}"
        out[name] = row
    return out


def record(bench: str, results: dict, *, load_before: list[float], quick: bool = False) -> Path:
    """``results`` (what the bench writes for --json) appended as its run (``append``), made JSON-safe;
    a "machine" of its own (its one-line description) kept as "machine_line", since append records
    the machine; "quick": true for a smoke run, which bench/report.py leaves out. The command is this
    process's arguments after ``python bench/<bench>.py``."""
    figures = jsonable(results)
    for key in ("bench", "date", "commit", "load_before", "load_after", "command"):
        figures.pop(key, None)  # append's own
    if "machine" in figures:
        figures["machine_line"] = figures.pop("machine")
    if quick:
        figures["quick"] = True
    command = " ".join(["python", f"bench/{bench}.py", *map(shlex.quote, sys.argv[1:])])
    path = append(bench, figures, load_before=load_before, command=command)
    print(f"appended to {path}", flush=True)
    return path


@contextmanager
def served_family(fam, source: str, timeout: float = 300, *, also=()) -> Iterator:
    """``fam`` built from ``source`` (and each (family, source) of ``also``) into a temporary copy of
    their triton_repo folders and served by a local Triton on free loopback ports: yields a
    TritonClient of it; ``client.repo`` is the repository."""
    from search.config import PROJECT_ROOT  # noqa: PLC0415  (numpy and the client load only here)
    from search.triton.client import TritonClient  # noqa: PLC0415
    from search.triton.local import LocalTriton  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix=f"bench-{fam.family}-"))
    try:
        repo, names = work / "repo", []
        for f, src in ((fam, source), *also):
            for name in f.triton_models:
                shutil.copytree(PROJECT_ROOT / "triton_repo" / name, repo / name)
            report = f.build(repo, src)
            print(f"build {f.family}: {report.status} — {report.detail}", flush=True)
            names += f.triton_models
        with LocalTriton(repo, work / "triton", models=names).start(timeout=timeout) as server:
            client = TritonClient(f"127.0.0.1:{server.grpc_port}")
            client.repo, client.url = repo, f"127.0.0.1:{server.grpc_port}"
            yield client
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_api(settings, port: int, log: Path, **env: str) -> subprocess.Popen:
    """`search serve`'s app on ``port`` for ``settings`` (and ``env``, more SEARCH_ variables), its
    stderr (a log line per request) going to the file ``log``: a pipe nobody reads fills after a few
    hundred requests and blocks the server on its next log write."""
    import httpx  # noqa: PLC0415  (only the benches that serve need it)

    from search.config import PROJECT_ROOT  # noqa: PLC0415

    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "SEARCH_SEARCH_MODE": "semantic", **env}
    env.pop("QDRANT_URL", None)
    env.pop("SEARCH_QDRANT_URL", None)
    code = f"from search.api import serve; from search.config import Settings; serve(Settings(), '127.0.0.1', {port})"
    with log.open("ab") as err:
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=PROJECT_ROOT,
                                stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the API exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    sys.exit("the API did not answer /healthz within 180 s")


@contextmanager
def busy(processes: int) -> Iterator[list[int]]:
    """``processes`` CPU burners (Python loops) beside what runs inside, as on a machine also running
    other work (a build, a browser): yields their pids; they are killed on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
             for _ in range(processes)]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def serve(repo: Path, run_dir: Path, fam, timeout: float = 180):
    """A local Triton serving ``fam``'s models of the built repository ``repo`` on free ports."""
    from search.triton.local import LocalTriton  # noqa: PLC0415

    return LocalTriton(repo, run_dir, models=list(fam.triton_models)).start(timeout=timeout)


# -- synthetic photo vectors (bench_store.py, bench_clip.py): realistic, not random
DIM, CLUSTERS, LATENT = 512, 200, 32
SEED = 20261123
NS = uuid.UUID("0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0")


def _basis():
    import numpy as np  # noqa: PLC0415

    rng = np.random.default_rng(SEED)
    shared = rng.normal(size=DIM).astype(np.float32)  # real embeddings sit in a cone: random pairs have cosine > 0
    centres = rng.normal(size=(CLUSTERS, DIM)).astype(np.float32)
    bases = rng.normal(size=(CLUSTERS, DIM, LATENT)).astype(np.float32) / np.sqrt(DIM * LATENT)
    return shared / np.linalg.norm(shared), centres / np.linalg.norm(centres, axis=1, keepdims=True), bases


def sample(n: int, seed: int) -> np.ndarray:
    """Cosine to the nearest neighbour ~0.8, to a random point ~0.27 (measured at 20k)."""
    import numpy as np  # noqa: PLC0415

    shared, centres, bases = _basis()
    rng = np.random.default_rng(seed)
    c = rng.integers(0, CLUSTERS, size=n)
    z = rng.normal(size=(n, LATENT)).astype(np.float32)
    x = (0.8 * shared + centres[c] + 0.8 * np.einsum("ndl,nl->nd", bases[c], z)
         + 0.3 * rng.normal(size=(n, DIM)).astype(np.float32) / np.sqrt(DIM))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def pid(i: int) -> str:
    return str(uuid.uuid5(NS, str(i)))


def payload(i: int) -> dict:
    year = 2010 + i % 15
    path = f"/home/me/Pictures/{year}/{i % 97:02d}/IMG_{i:07d}.jpg"
    p = {"path": path, "paths": [path], "folders": [f"/home/me/Pictures/{year}/{i % 97:02d}", f"/home/me/Pictures/{year}",
                                                     "/home/me/Pictures", "/home/me", "/home", "/"],
         "suffix": ".jpg", "sha256": f"{i:064x}", "chunk": 0, "n_chunks": 1, "chunker": "clip-bench", "size": 3_000_000 + i,
         "mtime": 1.6e9 + i, "taken_at": 1.3e9 + i * 3000.0, "camera": f"Camera {i % 10}", "camera_terms": [f"cam{i % 10}"],
         "width": 4000, "height": 3000, "thumbnail": f"thumbnails/{i:064x}.jpg"}
    if i % 2:
        p["location"] = {"lat": 45.0 + (i % 1000) / 100, "lon": 6.0 + (i % 777) / 100}
    return p


# -- random models of real size: the costs are real, the vectors meaningless
XLMR_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # ids 0-3, as in XLM-R


def save_vit_b32(folder: Path) -> Path:
    """A random CLIP with ViT-B/32's architecture, in Hugging Face format (tokenizer: a small
    CLIP-style BPE vocabulary; the text tower is full size, only its embedding table is smaller)."""
    import torch  # noqa: PLC0415
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizerFast  # noqa: PLC0415

    from tests.tiny_clip import image_processor, save_tokenizer  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(folder)
    tok = CLIPTokenizerFast.from_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    base = CLIPConfig()
    text = {**base.text_config.to_dict(), "vocab_size": len(tok), "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    config = CLIPConfig(text_config=text, vision_config=base.vision_config.to_dict(), projection_dim=512)
    torch.manual_seed(0)
    CLIPModel(config).eval().save_pretrained(str(folder))
    image_processor().save_pretrained(str(folder))
    return folder


def save_xlmr_tokenizer(folder: Path, texts: list[str], vocab_size: int = 8000) -> None:
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors, trainers  # noqa: PLC0415
    from tokenizers.models import Unigram  # noqa: PLC0415
    from transformers import XLMRobertaTokenizerFast  # noqa: PLC0415

    tok = Tokenizer(Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=XLMR_SPECIALS, unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", 0), ("</s>", 2)])
    XLMRobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                            cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<unk>",
                            model_max_length=8192).save_pretrained(str(folder))


def save_random_bge_m3(folder: Path, layers: int, texts: list[str]) -> Path:
    """xlm-roberta-large's / BGE-M3's config with `layers` layers (24 = real size), random weights
    (seed 0), random Linear(1024, 1) sparse and Linear(1024, 1024) ColBERT heads."""
    import torch  # noqa: PLC0415
    from transformers import XLMRobertaConfig, XLMRobertaModel  # noqa: PLC0415
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    save_xlmr_tokenizer(folder, texts)
    config = XLMRobertaConfig(vocab_size=250002, hidden_size=1024, num_hidden_layers=layers, num_attention_heads=16,
                              intermediate_size=4096, max_position_embeddings=8194, type_vocab_size=1,
                              pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
                              attn_implementation="eager")  # as search/models/export/bge_m3.py loads it
    torch.manual_seed(0)
    hf_logging.disable_progress_bar()
    model = XLMRobertaModel(config, add_pooling_layer=False).eval()
    model.save_pretrained(str(folder))
    del model
    torch.save(torch.nn.Linear(1024, 1).state_dict(), folder / "sparse_linear.pt")
    torch.save(torch.nn.Linear(1024, 1024).state_dict(), folder / "colbert_linear.pt")
    return folder
