"""What OCR may cost (issue 68): a tiny thin tall PNG (RapidOCR would make it a 736×49056 detector
input, GBs of activations) is read with the OCR processes' peak RSS under 1 GB through POST /ocr,
MCP read_text and ingest, measured from /proc of the session's Triton (VmHWM, reset before each
request); OCR requests past the queue are told the service is busy (503, Retry-After); the API's
preparation of a large RGBA image is bounded; a 95 MP scan is within the documented 100 MP limit at
ingest; a corrupt TIFF gives one line of error, no warnings."""

from __future__ import annotations

import base64
import io
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path

import anyio
import numpy as np
import pytest
from api_helpers import make_client
from ingest_helper import ingest
from mcp import Client
from PIL import Image, ImageDraw, ImageOps
from processes import run_cli

from indexer.loaders import BadDocument, load_document
from search.mcp import build
from search.models.ppocr import prepared, read
from search.services import SearchService
from search.services.ocr_gate import gate
from search.triton.client import TritonClient

pytestmark = pytest.mark.served("ppocr")
MB = 1 << 20
LIMIT_MB = 1024
PATIENT = {"triton_timeout_s": 900.0}  # a 3.7 M pixel detector run on a loaded machine: bounds, not speed, are tested


def tall_png(width: int, height: int) -> bytes:
    """A strip of letters, as the attack's few-hundred-byte PNGs."""
    img = Image.new("L", (width, height), 255)
    for y in range(0, height, 40):
        ImageDraw.Draw(img).text((2, y), "A", fill=0)
    buf = io.BytesIO()
    img.save(buf, "PNG", optimize=True)
    return buf.getvalue()


def _group(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def ocr_memory(server):
    """Per process of the Triton group: its peak RSS while the block ran (VmHWM reset to the current
    RSS first) and its growth over the RSS it had. Filled in on exit: {"peaks": {name: bytes}, "growth": bytes}."""
    pids = _group(server.state.pid)
    before = {}
    for pid in pids:
        before[pid] = _kb(pid, "VmRSS")
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    seen: dict = {}
    yield seen
    peaks, growth = {}, 0
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
            peak = _kb(pid, "VmHWM")
        except OSError:  # a process gone during the request (OOM-killed): its peak is unknown, never fine
            peaks[f"{pid} (gone)"], growth = float("inf"), float("inf")
            continue
        if any("ppocr" in arg for arg in cmd[1:2]):  # the OCR step's and its models' stubs
            peaks[f"{Path(cmd[1]).parts[-3]} {pid}"] = peak
        growth += peak - before[pid]
    seen.update(peaks=peaks, growth=growth)


@pytest.fixture(scope="module")
def warmed(triton):
    """The session's Triton after an ordinary 2000×2000 page was read: what a tall image adds to a
    server in use is measured, not the stubs' first allocations."""
    page = Image.new("L", (2000, 2000), 255)
    ImageDraw.Draw(page).text((100, 100), "an ordinary page", fill=0)
    buf = io.BytesIO()
    page.save(buf, "PNG")
    read(TritonClient(f"127.0.0.1:{triton.grpc_port}", timeout_s=900), buf.getvalue())
    return triton


def assert_bounded(seen: dict) -> None:
    """Each OCR process under 1 GB at its peak (the detector's was OOM-killed at 4.15 GB); the whole
    group grew by less than 1.5 GB (a thin image scaled to the detector's full budget, in a step
    instance that had not run yet, grows it by ~1.1 GB; RapidOCR's input for a 30×600 strip: 2.3 GB)."""
    summary = {k: round(v / MB) for k, v in seen["peaks"].items()}, round(seen["growth"] / MB)
    assert seen["peaks"] and all(v < LIMIT_MB * MB for v in seen["peaks"].values()), summary
    assert seen["growth"] < 1.5 * LIMIT_MB * MB, summary


@pytest.mark.parametrize("height", [600, 2000])
def test_a_thin_tall_png_is_read_within_a_memory_bound_through_rest(settings, warmed, height):
    data = tall_png(30, height)
    assert len(data) < 2000
    with make_client(settings, **PATIENT) as api, ocr_memory(warmed) as seen:
        answer = api.post("/ocr", files={"image": ("tall.png", data, "image/png")})
    assert answer.status_code == 200, answer.text
    assert answer.json()["lines"]  # read, not refused: the detector's input was scaled to its budget
    assert_bounded(seen)


def test_a_thin_tall_png_is_read_within_a_memory_bound_through_mcp(settings, warmed):
    svc = SearchService(settings.model_copy(update=PATIENT))

    async def main():
        async with Client(build(lambda: nullcontext(svc))) as client:
            image = base64.b64encode(tall_png(30, 2000)).decode()
            return await client.call_tool("read_text", {"image_base64": image}, read_timeout_seconds=900)
    try:
        with ocr_memory(warmed) as seen:
            result = anyio.run(main)
    finally:
        svc.close()
    assert not result.is_error, result.content
    assert result.structured_content["lines"]
    assert_bounded(seen)


def test_a_thin_tall_scan_is_ingested_within_a_memory_bound(settings, warmed, tmp_path):
    folder = tmp_path / "scans"
    folder.mkdir()
    (folder / "strip.png").write_bytes(tall_png(30, 2000))
    svc = SearchService(settings.model_copy(update={"ocr_photos": True, **PATIENT}))
    try:
        with ocr_memory(warmed) as seen:
            report = ingest(svc, [folder])
    finally:
        svc.close()
    by_name = {(Path(o.path).name, o.kind): o.status for o in report.outcomes}
    assert by_name[("strip.png", "documents")] == "indexed", report.outcomes
    assert_bounded(seen)


def test_ocr_past_its_queue_is_answered_busy_with_retry_after(settings):
    """One request reads, none may wait (SEARCH_OCR_CONCURRENCY=1, SEARCH_OCR_QUEUE=0): while the
    test holds that one place, another is a 503 saying so, with Retry-After; then it is read."""
    data = tall_png(200, 60)
    with make_client(settings, ocr_concurrency=1, ocr_queue=0) as api:
        with gate(1, 0).admitted():
            busy = api.post("/ocr", files={"image": ("a.png", data, "image/png")})
        assert busy.status_code == 503 and int(busy.headers["Retry-After"]) > 0, busy.text
        assert "busy" in busy.json()["detail"] and "\n" not in busy.json()["detail"]
        assert api.post("/ocr", files={"image": ("a.png", data, "image/png")}).status_code == 200


def _peak_growth(fn) -> tuple[object, int]:
    """``fn()`` and how far it took this process's RSS above where it was."""
    base = _kb(os.getpid(), "VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    out = fn()
    return out, _kb(os.getpid(), "VmHWM") - base


def _old_prepared(data: bytes) -> np.ndarray:
    """The preparation as it was written before its copies were cut (the reference for the pixels)."""
    with Image.open(io.BytesIO(data)) as img:
        img = ImageOps.exif_transpose(img)
        rgba = img.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return np.asarray(flat)


def test_preparing_a_large_rgba_image_is_bounded_and_unchanged():
    """A 7000² RGBA PNG of ~200 KB took the API process +795 MB to prepare (copies of the decoded
    image); now at most the decoded image and its RGB picture (~350 MB). The pixels are the same."""
    pixels = np.full((7000, 7000, 4), 255, np.uint8)
    pixels[::50, :, 3] = 0
    pixels[100:200, 100:3000, :3] = 0
    buf = io.BytesIO()
    Image.fromarray(pixels, "RGBA").save(buf, "PNG")
    data = buf.getvalue()
    del pixels, buf
    out, growth = _peak_growth(lambda: prepared(data))
    assert growth < 500 * MB, growth / MB
    small = Image.new("RGBA", (120, 80), (0, 0, 0, 0))
    ImageDraw.Draw(small).text((5, 5), "RE16", fill=(200, 30, 30, 255))
    exif = Image.Exif()
    exif[0x0112] = 6
    for img, kw in ((small, {}), (small.convert("P"), {}), (small.convert("LA"), {}), (small.convert("RGB"), {"exif": exif})):
        buf = io.BytesIO()
        img.save(buf, "PNG", **kw)
        want = _old_prepared(buf.getvalue())
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(prepared(buf.getvalue()))).convert("RGB")), want)
    assert Image.open(io.BytesIO(out)).size == (7000, 7000)


def test_a_95_mp_scan_is_within_the_100_mp_limit_at_ingest():
    """Pillow warns from 89.5 MP; the documented limit (and /ocr's) is 100 MP: a 1-bit image keeps
    the file small (a few tens of KB) and is not decoded by the loader."""
    def png(width, height) -> bytes:
        buf = io.BytesIO()
        Image.new("1", (width, height), 1).save(buf, "PNG")
        return buf.getvalue()
    doc = load_document(".png", png(10_000, 9_500), scans=True)
    assert len(doc.pages) == 1 and doc.pages[0].scan
    for width, height in ((10_000, 10_001), (20_000, 10_000)):  # over 100 MP; over Pillow's own hard limit
        with pytest.raises(BadDocument, match=r"^image too large: .*MP > 100 MP limit$") as err:
            load_document(".png", png(width, height), scans=True)
        assert "\n" not in str(err.value) and "decompression bomb" not in str(err.value)


def test_a_corrupt_tiff_gives_one_line_and_no_warning(settings, tmp_path):
    buf = io.BytesIO()
    Image.new("RGB", (64, 32), "white").save(buf, "TIFF")
    data = bytearray(buf.getvalue())
    ifd = int.from_bytes(data[4:8], "little")
    data[ifd + 2:ifd + 14] = b"\x01\x01\x04\x00\xff\xff\xff\x0f\x00\x00\x00\x00"  # its width tag points past the file
    path = tmp_path / "corrupt.tiff"
    path.write_bytes(bytes(data))
    proc = run_cli("search", "ocr", str(path), settings=settings)
    assert proc.returncode != 0
    assert len(proc.stderr.strip().splitlines()) == 1 and "Warning" not in proc.stderr, proc.stderr
