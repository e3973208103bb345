"""`indexer ingest` of a large generated library: does memory stay flat and throughput steady from
the first to the last files, and does a run killed at 60 % resume without duplicates or loss?

    python bench/bench_ingest_scale.py [--files 100000] [--kind texts|photos] [--repo triton_repo] [--work DIR]

Generates --files small files under --work, 100 a folder: texts (two or three sentences each,
embedded by MiniLM, real weights) or photos (320x240 JPEGs with EXIF camera, date and GPS; embedded
by the tests' tiny CLIP, which gives CLIP-sized 512-d vectors for little compute, so the engine's
and the store's costs per file are what is measured). It serves the model with a local Triton and
runs, each in a fresh process:
  1. the whole ingest into an empty store: files/s over the first and the last 10 % of the files
     and overall, the process's RSS and its anonymous part (RssAnon: without the store's mapped
     files) when 10 %, 50 % and 90 % of the files are done, and its peak;
  2. the same ingest into a second empty store, with the Python heap traced (tracemalloc: what the
     engine keeps per file, apart from the embedded store's native memory), killed (SIGKILL) once
     60 % are done, then run
     again: the points afterwards against the files (one point a file: no duplicate, none lost),
     and what the second run found unchanged and indexed.
The baseline in the same run is the first 10 % (throughput) and the RSS at 10 % (memory).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import load, record  # noqa: E402

WORDS = ("printer queue badge reader password reset vpn laptop docking station monitor invoice budget meeting "
         "room schedule backup restore release policy travel expense contract review network drive folder").split()


def generate(root: Path, n: int) -> None:
    """n text files, 100 a folder, each different (its number is in it)."""
    if (root / "done").exists() and int((root / "done").read_text()) == n:
        return
    for i in range(n):
        folder = root / "library" / f"{i // 10000:02d}" / f"{(i // 100) % 100:02d}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        words = [WORDS[(i * 7 + k * 11) % len(WORDS)] for k in range(24)]
        (folder / f"note-{i:06d}.txt").write_text(
            f"Note {i}: the {words[0]} {words[1]} needs a {words[2]} before the {words[3]} {words[4]}. "
            f"Ask about the {' '.join(words[5:12])} on day {i % 28 + 1}. {' '.join(words[12:])}.\n")
    (root / "done").write_text(str(n))


CAMERAS = (("Canon", "EOS 5D Mark IV"), ("NIKON CORPORATION", "NIKON D750"), ("Apple", "iPhone 12"), ("SONY", "ILCE-7M3"))


def generate_photos(root: Path, n: int) -> None:
    """n small JPEGs, 100 a folder, each different (its number sets its colours and its EXIF date)."""
    from PIL import Image, ImageDraw  # noqa: PLC0415

    if (root / "done").exists() and int((root / "done").read_text()) == n:
        return
    for i in range(n):
        folder = root / "library" / f"{i // 10000:02d}" / f"{(i // 100) % 100:02d}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        im = Image.new("RGB", (320, 240), ((i * 37) % 256, (i * 91) % 256, (i * 53) % 256))
        draw = ImageDraw.Draw(im)
        draw.rectangle((i % 200, (i // 7) % 120, i % 200 + 100, (i // 7) % 120 + 100), fill=((i * 13) % 256, 200, (i * 29) % 256))
        draw.text((10, 10), f"photo {i}", fill=(255, 255, 255))
        exif = Image.Exif()
        exif[0x010F], exif[0x0110] = CAMERAS[i % len(CAMERAS)]
        exif.get_ifd(0x8769)[0x9003] = f"20{10 + i % 15}:{i % 12 + 1:02d}:{i % 28 + 1:02d} {i % 24:02d}:{i % 60:02d}:00"
        gps = exif.get_ifd(0x8825)
        gps[1], gps[2], gps[3], gps[4] = "N", (45.0 + i % 10, float(i % 60), 0.0), "E", (6.0, float(i % 60), 0.0)
        im.save(folder / f"img-{i:06d}.jpg", "JPEG", quality=85, exif=exif.tobytes())
    (root / "done").write_text(str(n))


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident memory (VmRSS), or its anonymous part alone (RssAnon: not the store's
    memory-mapped files, which the kernel can drop)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(args) -> None:
    """One ingest in this process; one JSON line of progress every 1 % of the files, then the report."""
    from indexer.service import IngestService  # noqa: PLC0415  (after the parent set the environment)
    from search.config import Settings  # noqa: PLC0415

    if args.trace:  # the Python heap alone (the embedded store's memory is native: not traced)
        import tracemalloc  # noqa: PLC0415

        tracemalloc.start()
    settings = Settings()
    svc = IngestService(settings)
    done, step, start = [0], max(args.files // 100, 1), time.perf_counter()

    def on_file(_outcome) -> None:
        done[0] += 1
        if done[0] % step == 0:
            print(json.dumps({"done": done[0], "s": time.perf_counter() - start, "rss_mb": rss_mb(), "anon_mb": rss_mb("RssAnon"),
                              **({"py_heap_mb": tracemalloc.get_traced_memory()[0] / 2**20} if args.trace else {})}), flush=True)

    try:
        report = svc.ingest([Path(args.library)], on_file=on_file)
        print(json.dumps({"report": report.as_dict(), "s": time.perf_counter() - start,
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
    finally:
        svc.close()


def run(env: dict, library: Path, files: int, kill_at: float | None = None, trace: bool = False) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--library", str(library), "--files", str(files),
                             *(["--trace"] if trace else [])],
                            env=env, stdout=subprocess.PIPE, text=True)
    marks, final = [], None
    for line in proc.stdout:
        row = json.loads(line)
        if "report" in row:
            final = row
            continue
        marks.append(row)
        if kill_at is not None and row["done"] >= kill_at * files:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    return {"marks": marks, "final": final, "returncode": proc.returncode}


def rate(marks: list[dict], lo: float, hi: float, files: int) -> float:
    """Files/s between the marks at lo and hi (fractions of the files)."""
    a = min(marks, key=lambda m: abs(m["done"] - lo * files))
    b = min(marks, key=lambda m: abs(m["done"] - hi * files))
    return (b["done"] - a["done"]) / max(b["s"] - a["s"], 1e-9)


def at(marks: list[dict], fraction: float, files: int, key: str = "rss_mb") -> float:
    return min(marks, key=lambda m: abs(m["done"] - fraction * files))[key]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--kind", choices=("texts", "photos"), default="texts")
    ap.add_argument("--repo", type=Path, default=None,
                    help="model repository with MiniLM built (texts; default: the settings'); for photos, the tiny CLIP "
                         "is built into a copy of it under --work")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-ingest-scale")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--library", help=argparse.SUPPRESS)
    ap.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    from search.config import Settings  # noqa: PLC0415
    from search.models import CLIP, MiniLM  # noqa: PLC0415
    from search.store import DOCUMENTS, IMAGES, open_location  # noqa: PLC0415
    from search.triton.local import LocalTriton  # noqa: PLC0415

    load_before = load()
    repo = args.repo or Settings().triton_repo
    photos = args.kind == "photos"
    if photos:
        from tests import tiny_clip  # noqa: PLC0415  (torch, only to build the model)

        built = args.work / "repo"
        if not (built / "done").exists():
            subprocess.run(["rm", "-rf", str(built)], check=True)
            shutil.copytree(repo, built)
            tiny_clip.build_into(built, args.work / "tiny-clip")
            (built / "done").write_text("tiny CLIP")
        repo = built
    (generate_photos if photos else generate)(args.work, args.files)
    library = args.work / "library"
    out: dict = {"files": args.files, "kind": args.kind,
                 "model": "tiny CLIP (tests/tiny_clip.py: 512-d vectors, little compute)" if photos else "MiniLM (real weights)"}
    family = CLIP() if photos else MiniLM()
    collection = IMAGES if photos else DOCUMENTS.name
    with LocalTriton(repo, args.work / "triton", models=list(family.triton_models)) as server:
        base = {k: v for k, v in os.environ.items() if not k.startswith("SEARCH_")}
        for name, kill in (("full", None), ("killed_at_60", 0.6)):
            data = args.work / f"data-{name}"
            subprocess.run(["rm", "-rf", str(data)], check=True)
            env = {**base, "SEARCH_DATA_DIR": str(data), "SEARCH_TRITON_REPO": str(repo), "SEARCH_SEARCH_MODE": "semantic",
                   "SEARCH_TRITON_URL": f"127.0.0.1:{server.grpc_port}"}
            first = run(env, library, args.files, kill, trace=kill is not None)
            if kill is None:
                marks = first["marks"]
                out["full"] = {"seconds": round(first["final"]["s"], 1), "files_per_s": round(args.files / first["final"]["s"], 1),
                               "first_10pct_files_per_s": round(rate(marks, 0.01, 0.1, args.files), 1),
                               "last_10pct_files_per_s": round(rate(marks, 0.9, 1.0, args.files), 1),
                               "rss_mb_at_10pct": round(at(marks, 0.1, args.files)), "rss_mb_at_50pct": round(at(marks, 0.5, args.files)),
                               "rss_mb_at_90pct": round(at(marks, 0.9, args.files)),
                               **{f"anon_mb_at_{p}pct": round(at(marks, p / 100, args.files, "anon_mb")) for p in (10, 50, 90)},
                               "peak_rss_mb": round(first["final"]["peak_rss_mb"]),
                               "report": first["final"]["report"]}
                full = out["full"]
                full["last_vs_first_10pct"] = round(full["last_10pct_files_per_s"] / full["first_10pct_files_per_s"], 3)
                full["rss_90_minus_10pct_mb"] = full["rss_mb_at_90pct"] - full["rss_mb_at_10pct"]
                full["anon_90_minus_10pct_mb"] = full["anon_mb_at_90pct"] - full["anon_mb_at_10pct"]
                full["anon_kb_per_file"] = round(full["anon_90_minus_10pct_mb"] * 1024 / (0.8 * args.files), 2)
            else:
                again = run(env, library, args.files)
                store = open_location("edge", str(data / "store-edge"))
                try:
                    points = store.count(collection)
                finally:
                    store.close()
                heap = first["marks"]
                out["resume"] = {"py_heap_mb_at_10pct": round(at(heap, 0.1, args.files, "py_heap_mb"), 1),
                                 "py_heap_mb_at_60pct": round(at(heap, 0.6, args.files, "py_heap_mb"), 1),
                                 "py_heap_bytes_per_file": round((at(heap, 0.6, args.files, "py_heap_mb")
                                                                  - at(heap, 0.1, args.files, "py_heap_mb")) * 2**20 / (0.5 * args.files)),
                                 "killed_after_files": first["marks"][-1]["done"], "killed_rc": first["returncode"],
                                 "second_run": again["final"]["report"], "points_after": points,
                                 "points_equal_files": points == args.files}
            print(name, json.dumps(out.get("full") if kill is None else out["resume"]), flush=True)
    record("bench_ingest_scale", out, load_before=load_before)


if __name__ == "__main__":
    main()
