"""OCR quality of the served ``ppocr`` model: character error rate (CER) and line exact-match, on
(1) a dev set drawn here (text lines in several fonts, sizes, rotations and backgrounds; the texts
are written for this script, the fonts are DejaVu and Liberation (free licences) and Pillow's
built-in Aileron (CC0)), (2) the 500 scanned UW-III text lines of ../shared/data/ocr (measured,
never committed), where present, and (3) pages rendered here in German, French, Spanish (accents,
ß, ñ, € amounts) and English, five lines each, in DejaVu where installed, and (4) with --eszett, four
words with ß in five fonts at nine sizes. Appends its run to
bench/results/quality_ocr.jsonl.

    python bench/quality_ocr.py [--lines 200] [--uw3 500] [--pages 4] [--eszett] [--sources ppocrv4,ppocrv5] [--rec-only]

For each weight source: "raw" is the served model's lines as it returns them (RapidOCR's order),
joined by spaces; "as read" is what users get (``PPOCR.read_text``: the served model's as-read mode,
rows joined left to right with spaces, thin images letterboxed with their background). CER is reported
with and without spaces (no_space_cer: both sides without spaces): PP-OCRv4 often drops the spaces
inside a box. --in-process: "raw" is RapidOCR in-process (which the served model equals), "as read"
the served step's own code in-process on ONNX Runtime.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image, ImageDraw, ImageFilter, ImageFont  # noqa: E402

from bench.common import append, load, served_family  # noqa: E402
from search.config import PROJECT_ROOT  # noqa: E402
from search.models.export.ppocr import find_models  # noqa: E402
from search.models.export.ppocr_golden import read as reference_read  # noqa: E402
from search.models.export.ppocr_golden import reference  # noqa: E402
from search.models.ppocr import PPOCR, TextLine, as_read, prepared, read  # noqa: E402

SOURCES = ("ppocrv4", "ppocrv5")

UW3 = PROJECT_ROOT.parent / "shared" / "data" / "ocr" / "uw3-500.tgz"
FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
         "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf", "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
         None]  # None: Pillow's built-in font
WORDS = ("the printer on the third floor is jammed again please call the help desk before noon reset your password "
         "every ninety days guest wifi network backup finished at invoice total due meeting room booked for the "
         "quarterly review asset tag shipping label order number delivered on monday room temperature sensor").split()


def edit_distance(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def drawn_set(n: int, seed: int = 7) -> list[tuple[str, bytes, str]]:
    """(id, image, truth): one line each, in a font, size, rotation and background chosen by seed."""
    rng, out = random.Random(seed), []
    for k in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(2, 6))]
        if rng.random() < 0.3:
            words.append(f"{rng.choice('ABCDEFGHRX')}{rng.choice('ABCDEFGHRX')}{rng.randint(10, 9999)}")
        text = " ".join(words)
        path, size = rng.choice(FONTS), rng.choice((16, 20, 24, 32, 40))
        font = ImageFont.truetype(path, size) if path and Path(path).exists() else ImageFont.load_default(size=size)
        fg, bg = rng.choice([((20, 20, 20), (255, 255, 255)), ((40, 40, 90), (235, 235, 225)),
                             ((250, 250, 250), (30, 60, 40)), ((0, 0, 0), (200, 200, 200))])
        width = int(font.getlength(text)) + 40
        img = Image.new("RGB", (width, size * 2 + 20), bg)
        ImageDraw.Draw(img).text((20, 10), text, font=font, fill=fg)
        angle = rng.choice((0, 0, 0, 2, -2, 180))
        if angle:
            img = img.rotate(angle, expand=True, fillcolor=bg, resample=Image.Resampling.BICUBIC)
        if rng.random() < 0.3:
            img = img.filter(ImageFilter.GaussianBlur(0.8))
        buf = io.BytesIO()
        img.save(buf, "JPEG" if rng.random() < 0.5 else "PNG")
        out.append((f"drawn-{k}", buf.getvalue(), text))
    return out


PAGES = {
    "de": ["Rechnung Nr. 2024-117 vom 3. März", "Schöne Grüße aus Köln, Straße 5", "Bürostühle und Tische: 1.249,90 €",
           "Größe: übergroß, Farbe: grün", "Zahlbar bis Ende März: 19,00 €"],
    "fr": ["Facture n° 88-421 du 12 février", "Château de Versailles, allée des Marronniers",
           "Déjeuner à la crème brûlée : 24,50 €", "Reçu avec remerciements, garçon", "Total TTC : 312,00 €"],
    "es": ["Factura número 5567, pagada mañana", "Señora Muñoz, calle de la Montaña 12", "Café con leche y churros: 4,75 €",
           "¿Dónde está la estación? ¡Gracias!", "Total a pagar: 1.020,00 €"],
    "en": ["Invoice 2024-117 dated 3 March", "Please reset the printer queue first", "Two office chairs: 1,249.90 €",
           "Delivered on Monday to room 4B", "Total due within 30 days: 19.00 €"],
}
PAGE_FONTS = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"]


def pages_set(language: str, n: int) -> list[tuple[str, bytes, str]]:
    """(id, image, truth): ``n`` pages of PAGES[language], in turns of font and size (none without DejaVu)."""
    fonts = [f for f in PAGE_FONTS if Path(f).exists()]
    out = []
    for k in range(n if fonts else 0):
        font = ImageFont.truetype(fonts[k % len(fonts)], (30, 40, 24)[k % 3])
        step = int(font.size * 1.8)
        img = Image.new("RGB", (int(max(font.getlength(t) for t in PAGES[language])) + 80, 60 + step * 5), (255, 255, 255))
        for row, text in enumerate(PAGES[language]):
            ImageDraw.Draw(img).text((40, 30 + step * row), text, font=font, fill=(15, 15, 15))
        buf = io.BytesIO()
        img.save(buf, "PNG")
        out.append((f"page-{language}-{k}", buf.getvalue(), " ".join(PAGES[language])))
    return out


ESZETT = ["Grüße", "Straße 5", "Schöne Grüße aus Köln", "Größe: übergroß"]
ESZETT_FONTS = [*PAGE_FONTS, "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
                "/usr/share/fonts/truetype/liberation/LiberationSerif-Regular.ttf"]


def eszett_set() -> list[tuple[str, bytes, str]]:
    """(id, image, truth): each of ESZETT in each font at nine sizes, black on white, a margin of a
    size around it ("exact" is the share read with every ß right)."""
    out = []
    for path in (f for f in ESZETT_FONTS if Path(f).exists()):
        for size in (14, 18, 20, 24, 28, 32, 40, 48, 64):
            font = ImageFont.truetype(path, size)
            for k, text in enumerate(ESZETT):
                img = Image.new("RGB", (int(font.getlength(text)) + 2 * size, 3 * size), (255, 255, 255))
                ImageDraw.Draw(img).text((size, size), text, font=font, fill=(0, 0, 0))
                buf = io.BytesIO()
                img.save(buf, "PNG")
                out.append((f"eszett-{Path(path).stem}-{size}-{k}", buf.getvalue(), text))
    return out


def uw3_set(n: int, path: Path = UW3) -> list[tuple[str, bytes, str]]:
    if not path.exists():
        return []
    out = []
    with tarfile.open(path) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.name.endswith(".bin.png"))[:n]
        for name in names:
            truth = tar.extractfile(name.replace(".bin.png", ".gt.txt")).read().decode().strip()
            out.append((name, tar.extractfile(name).read(), truth))
    return out


def score(reader, items: list[tuple[str, bytes, str]]) -> dict:
    """``reader(bytes)`` -> the text it reads, against each item's truth."""
    errors = chars = errors_ns = chars_ns = exact = 0
    worst = []
    for item_id, data, truth in items:
        got = reader(data)
        d = edit_distance(got, truth)
        errors, chars = errors + d, chars + len(truth)
        g, t = got.replace(" ", ""), truth.replace(" ", "")
        errors_ns, chars_ns = errors_ns + edit_distance(g, t), chars_ns + len(t)
        exact += got == truth
        worst.append((d / max(len(truth), 1), item_id, got, truth))
    worst.sort(reverse=True)
    return {"lines": len(items), "cer": round(errors / max(chars, 1), 4), "no_space_cer": round(errors_ns / max(chars_ns, 1), 4),
            "exact": round(exact / max(len(items), 1), 4),
            "worst": [{"id": i, "got": g, "truth": t} for _, i, g, t in worst[:3]]}


def _readers(client, source: str, rec_only: bool) -> dict:
    fam = PPOCR()
    readers = {"raw": lambda data: " ".join(line.text for line in read(client, data)),
               "as_read": lambda data: " ".join(line.text for line in fam.read_text(client, [data])[0])}
    if client is None:  # RapidOCR in-process, which the served model equals (`search models verify`)
        engine, step = reference(*find_models(source)), _served_step(source)
        readers = {"raw": lambda data: " ".join(line.text for line in reference_read(engine, data)),
                   "as_read": lambda data: " ".join(line.text for line in _in_process_as_read(step, data))}
    if rec_only:  # where the served pipeline loses more than this, the detector or the crop did
        engine = reference(*find_models(source))
        readers["recogniser_only"] = lambda data: " ".join(t for t, _ in (engine(data, use_det=False, use_cls=False)[0] or []))
    return readers


def _served_step(source: str):
    """The served step's own code (``search.triton.steps.ppocr.run``) on ONNX Runtime in-process, in
    its as-read mode: ``step(bytes)`` -> its lines."""
    import onnxruntime  # noqa: PLC0415
    import yaml  # noqa: PLC0415

    from search.models.export.ppocr import _dictionary, characters_from_onnx  # noqa: PLC0415
    from search.triton.steps import ppocr as steps  # noqa: PLC0415

    models, dictionary, config_yaml = find_models(source)
    characters = _dictionary(dictionary) if dictionary else characters_from_onnx(models["rec"])
    cfg = steps.config_from_rapidocr(yaml.safe_load(config_yaml.read_text()), characters)
    sessions = {role: onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]) for role, path in models.items()}

    def infer(role: str, x):
        return sessions[role].run(None, {sessions[role].get_inputs()[0].name: x})[0]
    return lambda data: [TextLine(line.text, line.score, line.box, turned=line.turned)
                         for line in steps.run(data, infer, cfg, as_read=True)]


def _in_process_as_read(step, data: bytes) -> list:
    """What ``PPOCR.read_text`` does around the served model, around its step in-process."""
    return as_read(step(prepared(data)))


def _scores(source: str, readers: dict, sets: dict) -> dict:
    got = {}
    for name, items in sets.items():
        for how, reader in readers.items():
            if items:
                f = got[f"{name}_{how}"] = score(reader, items)
                print(f"{source} {name} {how}: {f['lines']} lines: CER {f['cer']:.2%} (without spaces "
                      f"{f['no_space_cer']:.2%}), exact lines {f['exact']:.1%}; worst: {f['worst'][:1]}", flush=True)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200, help="drawn lines")
    ap.add_argument("--uw3", type=int, default=500, help="UW-III lines (0: none)")
    ap.add_argument("--uw3-tgz", type=Path, default=UW3, help="where uw3-500.tgz is")
    ap.add_argument("--pages", type=int, default=4, help="rendered pages per language (0: none)")
    ap.add_argument("--eszett", action="store_true", help="also words with ß in five fonts at nine sizes")
    ap.add_argument("--sources", default=",".join(SOURCES), help="weight sources to compare")
    ap.add_argument("--in-process", action="store_true", help="RapidOCR in-process instead of the served model "
                    "(its equal: quicker where Triton shares a busy machine)")
    ap.add_argument("--rec-only", action="store_true", help="also the recogniser alone (RapidOCR in-process, no detection)")
    args = ap.parse_args()
    load_before = load()
    sets = {"drawn": drawn_set(args.lines), **({"uw3": uw3_set(args.uw3, args.uw3_tgz)} if args.uw3 else {}),
            **{f"pages_{lang}": pages_set(lang, args.pages) for lang in PAGES}, **({"eszett": eszett_set()} if args.eszett else {})}
    figures: dict = {}
    for source in args.sources.split(","):
        if args.in_process:
            figures[source] = _scores(source, _readers(None, source, args.rec_only), sets)
            continue
        with served_family(PPOCR(), source) as client:
            client.timeout_s = 600.0  # a long scanned line takes seconds on a busy machine
            figures[source] = _scores(source, _readers(client, source, args.rec_only), sets)
    append("quality_ocr", figures, load_before=load_before, command="python bench/quality_ocr.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
