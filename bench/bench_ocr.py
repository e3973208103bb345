"""OCR speed: images/s and scanned pages/s through the served ``ppocr`` model against RapidOCR's own
pipeline in-process on the same files and weights (--source, the default's unless given), with 1
client and with 4 concurrent clients, each against RapidOCR shared by as many threads (one engine,
as a server process would share it); the rounds take turns, the ratios are of the medians. Appends
its run to bench/results/bench_ocr.jsonl.

    python bench/bench_ocr.py [--rounds 3] [--clients 1 4] [--pages 50] [--source ppocrv4]

Files: the golden images with text, the demo's whiteboard photo and text images drawn here
("images"), and pages: the golden scanned page, the demo's scanned PDF page rendered as ingest
renders it, and ../shared/data/ocr's two scanned pages where present.

With --pages N it also measures ingest: a scanned PDF of N drawn pages (no text layer) through
`indexer ingest` (render, OCR, chunk, MiniLM, store) against OCR alone of the same rendered pages,
one after another as ingest reads one file's pages (goal: ingest >= 0.85x of OCR alone).
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image, ImageDraw, ImageFont  # noqa: E402

from bench.common import append, load, machine, served_family  # noqa: E402
from indexer.loaders import load_document  # noqa: E402
from search.config import PROJECT_ROOT, Settings  # noqa: E402
from search.models import golden  # noqa: E402
from search.models.export.ppocr import find_models  # noqa: E402
from search.models.export.ppocr_golden import reference  # noqa: E402
from search.models.minilm import MiniLM  # noqa: E402
from search.models.ppocr import PPOCR, read  # noqa: E402

SHARED = PROJECT_ROOT.parent / "shared" / "data" / "ocr"
GOALS = {1: 0.9, 4: 1.0}  # served / in-process with as many threads, by clients (issue 71)


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


def scanned_pdf(n: int) -> bytes:
    """N A4 pages at 150 dpi, ~30 lines of drawn text each, as images in a PDF (no text layer)."""
    words = ["invoice", "wifi", "password", "meeting", "room", "printer", "exit", "total", "backup", "laptop",
             "the", "queue", "is", "stuck", "call", "desk", "on", "floor", "three", "before", "noon"]
    font = ImageFont.load_default(size=26)
    pages = []
    for k in range(n):
        img = Image.new("L", (1240, 1754), 250)
        draw = ImageDraw.Draw(img)
        for row in range(30):
            text = " ".join(words[(k * 7 + row * 3 + j) % len(words)] for j in range(9)) + f" {k + 1}.{row + 1}"
            draw.text((90, 100 + 52 * row), text, font=font, fill=25)
        pages.append(img)
    buf = io.BytesIO()
    pages[0].save(buf, "PDF", resolution=150, save_all=True, append_images=pages[1:])
    return buf.getvalue()


def ingest_ratio(client, n: int, rounds: int) -> dict:
    """Ingest of an N-page scanned PDF vs OCR alone of its pages as ingest renders them (1 client)."""
    from indexer.service import IngestService  # noqa: PLC0415  (only this measurement needs the indexer)

    pdf = scanned_pdf(n)
    pages = [p.scan for p in load_document(".pdf", pdf, scans=True).pages]
    alone, ingest = [], []
    for r in range(rounds):
        alone.append(timed(lambda d: read(client, d), pages, 1))
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "scans"
            folder.mkdir()
            (folder / "scan.pdf").write_bytes(pdf)
            settings = Settings(data_dir=Path(tmp) / "data", triton_repo=client.repo, triton_url=client.url,
                                max_pdf_pages=max(n, 500))
            svc = IngestService(settings)
            try:
                start = time.perf_counter()
                report = svc.ingest([folder])
                ingest.append(n / (time.perf_counter() - start))
            finally:
                svc.close()
            statuses = {o.status for o in report.outcomes}
            if statuses != {"indexed"}:
                raise SystemExit(f"ingest failed: {[(o.path, o.status, o.error) for o in report.outcomes]}")
        print(f"  round {r + 1}: OCR alone {alone[-1]:.2f} pages/s, ingest {ingest[-1]:.2f} pages/s", flush=True)
    a, i = statistics.median(alone), statistics.median(ingest)
    print(f"ingest of a {n}-page scanned PDF: {i:.2f} pages/s vs OCR alone {a:.2f} pages/s = {i / a:.2f}x (goal >= 0.85x)")
    return {"pages": n, "ocr_alone_pages_per_s": round(a, 3), "ingest_pages_per_s": round(i, 3),
            "ratio": round(i / a, 3), "rounds_ocr_alone": [round(x, 3) for x in alone],
            "rounds_ingest": [round(x, 3) for x in ingest]}


def instances(repo: Path) -> dict:
    """Each served OCR model's instances and threads, as its config.pbtxt sets them."""
    out = {}
    for cfg in sorted(repo.glob("ppocr*/config.pbtxt")):
        text = cfg.read_text()
        count = re.search(r"instance_group \[ \{ count: (\d+)", text)
        threads = re.search(r'"intra_op_thread_count" value \{ string_value: "(\d+)"', text)
        out[cfg.parent.name] = f"{count.group(1) if count else '?'}x{threads.group(1) if threads else '-'}"
    return out


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
    ap.add_argument("--pages", type=int, default=0, help="also measure ingest of a scanned PDF of this many pages")
    ap.add_argument("--only-ingest", action="store_true", help="with --pages: skip the images and pages rows")
    ap.add_argument("--source", default=Settings.model_fields["ppocr_source"].default, help="the weights (ppocr_source)")
    args = ap.parse_args()
    load_before = load()
    figures: dict = {"source": args.source}
    with served_family(PPOCR(), args.source, also=[(MiniLM(), "package")] if args.pages else ()) as client:
        figures["instances"] = instances(client.repo)  # count x intra-op threads
        if args.pages:
            figures["ingest"] = ingest_ratio(client, args.pages, args.rounds)
        if args.only_ingest:
            sets = {}
        else:
            sets = files()
        engine = reference(*find_models(args.source))
        for data in sets.get("images", [])[:2]:  # warm both
            read(client, data)
            engine(data)
        for what, items in sets.items():
            local, served = {c: [] for c in args.clients}, {c: [] for c in args.clients}
            for _ in range(args.rounds):
                for c in args.clients:
                    local[c].append(timed(engine, items, c))
                    served[c].append(timed(lambda d: read(client, d), items, c))
            figures[what] = {"files": len(items)}
            for c in args.clients:
                base, med = statistics.median(local[c]), statistics.median(served[c])
                figures[what][f"in_process_{c}_threads_per_s"] = round(base, 2)
                figures[what][f"rounds_in_process_{c}_threads"] = [round(x, 2) for x in local[c]]
                figures[what][f"served_{c}_clients_per_s"] = round(med, 2)
                figures[what][f"rounds_served_{c}_clients"] = [round(x, 2) for x in served[c]]
                figures[what][f"ratio_{c}_clients"] = round(med / base, 3)
                goal = GOALS.get(c)
                print(f"{what}: {len(items)} files, {c} client(s): served {med:.2f}/s vs in-process ({c} thread(s)) "
                      f"{base:.2f}/s = {med / base:.2f}x" + (f" (goal >= {goal}x)" if goal else ""), flush=True)
            if len(args.clients) > 1:
                many, one = max(args.clients), min(args.clients)
                figures[what][f"served_{many}_vs_{one}_clients"] = round(
                    statistics.median(served[many]) / statistics.median(served[one]), 3)
    figures["rounds"] = args.rounds
    path = append("bench_ocr", figures, load_before=load_before, command="python bench/bench_ocr.py " + " ".join(sys.argv[1:]))
    print(f"machine: {machine()}; load {load_before} -> {load()}; appended to {path}")


if __name__ == "__main__":
    main()
