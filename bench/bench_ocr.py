"""OCR speed: images/s and scanned pages/s through the served ``ppocr`` model against RapidOCR's own
pipeline in-process on the same files (the same PP-OCRv4 weights from the rapidocr-onnxruntime
wheel), with 1 client and with 4 concurrent clients; the rounds take turns, the ratios are of the
medians. Appends its run to bench/results/bench_ocr.jsonl.

    python bench/bench_ocr.py [--rounds 3] [--clients 1 4]

Files: the golden images with text, the demo's whiteboard photo and text images drawn here
("images"), and pages: the golden scanned page, the demo's scanned PDF page rendered as ingest
renders it, and ../shared/data/ocr's two scanned pages where present.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from bench.common import append, load, machine, served_family  # noqa: E402
from indexer.loaders import load_document  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models import golden  # noqa: E402
from search.models.export.ppocr import find_models  # noqa: E402
from search.models.export.ppocr_golden import reference  # noqa: E402
from search.models.ppocr import PPOCR, read  # noqa: E402

SHARED = PROJECT_ROOT.parent / "shared" / "data" / "ocr"
GOALS = {1: 0.9, 4: 1.2}  # served / in-process, by clients (issue "Words inside pictures and scans")


def drawn(k: int) -> bytes:
    words = ["invoice", "wifi", "password", "meeting", "room", "printer", "exit", "total", "backup", "laptop"]
    img = Image.new("RGB", (640, 200), (250, 250, 245))
    draw = ImageDraw.Draw(img)
    for row in range(3):
        text = " ".join(words[(k + row + j) % len(words)] for j in range(4)) + f" {k}{row}"
        draw.text((20, 20 + 58 * row), text, font=ImageFont.load_default(size=30), fill=(20, 20, 20))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def files() -> dict[str, list[bytes]]:
    scans = {s.id: s.data for s in golden.inputs().scans}
    images = [scans[k] for k in ("rendered", "sign", "upside-down")]
    images += [(PROJECT_ROOT / "samples/scans/whiteboard-wifi.jpg").read_bytes(), *(drawn(k) for k in range(12))]
    pdf = (PROJECT_ROOT / "samples/scans/printer-queue-scan.pdf").read_bytes()
    pages = [scans["page"], load_document(".pdf", pdf, scans=True).pages[0].scan]
    for name in ("testpage.png", "aim916.tiff"):
        if (SHARED / name).exists():
            buf = io.BytesIO()
            Image.open(SHARED / name).convert("RGB").save(buf, "PNG")
            pages.append(buf.getvalue())
    return {"images": images, "pages": pages}


def timed(fn, items: list[bytes], clients: int) -> float:
    """Items per second: ``fn`` over ``items``, by ``clients`` threads at once."""
    start = time.perf_counter()
    if clients == 1:
        for data in items:
            fn(data)
    else:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(fn, items))
    return len(items) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    args = ap.parse_args()
    load_before = load()
    with served_family(PPOCR(), "package") as client:
        engine = reference(*find_models("package"))
        sets = files()
        for data in sets["images"][:2]:  # warm both
            read(client, data)
            engine(data)
        figures: dict = {}
        for what, items in sets.items():
            local, served = [], {c: [] for c in args.clients}
            for _ in range(args.rounds):
                local.append(timed(engine, items, 1))
                for c in args.clients:
                    served[c].append(timed(lambda d: read(client, d), items, c))
            base = statistics.median(local)
            figures[what] = {"files": len(items), "in_process_per_s": round(base, 2),
                             "rounds_in_process": [round(x, 2) for x in local]}
            for c in args.clients:
                med = statistics.median(served[c])
                figures[what][f"served_{c}_clients_per_s"] = round(med, 2)
                figures[what][f"rounds_served_{c}_clients"] = [round(x, 2) for x in served[c]]
                figures[what][f"ratio_{c}_clients"] = round(med / base, 3)
                goal = GOALS.get(c)
                print(f"{what}: {len(items)} files, {c} client(s): served {med:.2f}/s vs in-process {base:.2f}/s "
                      f"= {med / base:.2f}x" + (f" (goal >= {goal}x)" if goal else ""), flush=True)
    figures["rounds"] = args.rounds
    path = append("bench_ocr", figures, load_before=load_before, command="python bench/bench_ocr.py " + " ".join(sys.argv[1:]))
    print(f"machine: {machine()}; load {load_before} -> {load()}; appended to {path}")


if __name__ == "__main__":
    main()
