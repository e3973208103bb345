"""The Streamlit page in a real browser: Playwright drives Debian's chromium against `streamlit run
ui/app.py`, which talks to the session's real Triton and an embedded Qdrant store ingested here.
Screenshots land in tests/artifacts/ for a human to look at."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from ingest_helper import ingest
from PIL import Image
from processes import SearchServer, env_for

from search.config import PROJECT_ROOT
from search.services import SearchService
from search.triton.local import free_port

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect, sync_playwright  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = PROJECT_ROOT / "tests" / "artifacts"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
WAIT_MS = 60_000  # generous: 2 shared cores, and the first page load imports the whole app

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (scripts/test.sh installs it)")


def make_photos(root: Path) -> list[Path]:
    """A few distinct pictures: big blocks of colour from a seed."""
    root.mkdir(parents=True)
    out = []
    for seed, name in enumerate(("red-barn.jpg", "blue-lake.jpg", "green-field.jpg", "grey-city.jpg")):
        blocks = np.random.default_rng(seed).integers(0, 256, (4, 6, 3), dtype=np.uint8)
        Image.fromarray(blocks).resize((300, 200), Image.NEAREST).save(root / name, quality=92)
        out.append(root / name)
    return out


class StreamlitApp:
    """`streamlit run ui/app.py` on a free port, with the settings passed as SEARCH_* variables. The page
    works through the search server that owns the data dir: one is started first unless ``server`` is
    False (then the page must say how to start one)."""

    def __init__(self, settings, log: Path, server: bool = True) -> None:
        self.server = SearchServer(settings, log.with_suffix(".serve.log")) if server else None
        self.port = free_port()
        env = env_for(settings)
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "ui" / "app.py"),
             "--server.address", "127.0.0.1", "--server.port", str(self.port), "--server.headless", "true",
             "--client.toolbarMode", "viewer", "--browser.gatherUsageStats", "false"],
            cwd=PROJECT_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        self._wait()

    def _wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}: see {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"streamlit did not answer on {self.url} within {timeout}s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        if self.server is not None:
            self.server.stop()


@pytest.fixture
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture
def app_factory(tmp_path):
    apps = []

    def start(settings, server: bool = True) -> StreamlitApp:
        apps.append(StreamlitApp(settings, tmp_path / f"streamlit-{len(apps)}.log", server=server))
        return apps[-1]

    yield start
    for app in apps:
        app.stop()


def hit_names(page, suffix: str):
    """The bold file names of the hits, in page order."""
    return page.locator("strong").filter(has_text=suffix)


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_search_page_documents_and_photos(settings, docs, tmp_path, app_factory, browser):
    photos = make_photos(tmp_path / "photos")
    svc = SearchService(settings)  # ingest first: the embedded store admits one process at a time
    try:
        report = ingest(svc, [docs, photos[0].parent])
        assert not report.failures, report.as_dict()
    finally:
        svc.close()
    app = app_factory(settings)

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app.url)
    box = page.get_by_label("Query")
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.fill("reset password")
    box.press("Enter")
    expect(hit_names(page, ".md").first).to_have_text("reset-password.md", timeout=WAIT_MS)
    expect(page.locator("mark").first).to_be_visible()  # the query words are highlighted
    expect(page.get_by_text("Documents: semantic")).to_be_visible()
    shot(page, "1-documents")
    if os.environ.get("SEARCH_UPDATE_SCREENSHOT"):  # the README's picture, renewed on request (a test run leaves the tree clean)
        page.screenshot(path=str(PROJECT_ROOT / "docs" / "images" / "page.png"))
    page.get_by_text("One result per document").click()
    expect(page.get_by_text(re.compile(r"^\d+ documents \(semantic scores\)"))).to_be_visible(timeout=WAIT_MS)
    deadline = time.monotonic() + WAIT_MS / 1000  # the passages' elements linger until the rerun replaces them
    while True:
        names = page.locator("strong").filter(has_text=re.compile(r"\.(md|txt)$")).all_inner_texts()
        if names and len(names) == len(set(names)):
            break
        assert time.monotonic() < deadline, names
        page.wait_for_timeout(200)
    assert names[0] == "reset-password.md"
    shot(page, "1b-per-document")
    page.get_by_text("One result per document").click()  # back to passages

    page.get_by_text("Photos: text to image").click()
    box = page.get_by_label("Describe the photo")
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.fill("a red barn")
    box.press("Enter")
    expect(page.locator("[data-testid='stImage'] img")).to_have_count(len(photos), timeout=WAIT_MS)
    shot(page, "2-text-to-image")

    page.get_by_text("Photos: image to image").click()
    page.locator("input[type='file']").set_input_files(str(photos[2]))
    expect(page.get_by_text("your example")).to_be_visible(timeout=WAIT_MS)
    expect(hit_names(page, ".jpg").first).to_have_text(photos[2].name, timeout=WAIT_MS)
    shot(page, "3-image-to-image")

    page.get_by_text("Photos: text to image").click()  # the OFA toggle re-ranks and shows the probability
    page.get_by_text("Verify with OFA").click()
    box = page.get_by_label("Describe the photo")
    box.fill("a red barn")
    box.press("Enter")
    expect(page.get_by_text(re.compile(r"^entails 0\.\d{3}"))).to_have_count(len(photos), timeout=WAIT_MS)
    shot(page, "3b-verify")

    page.get_by_text("Photo: does it show").click()
    page.locator("input[type='file']").set_input_files(str(photos[0]))
    box = page.get_by_label("Hypothesis")
    box.fill("there are two dogs")
    box.press("Enter")
    expect(page.locator("[data-testid='stMetric']")).to_have_count(3, timeout=WAIT_MS)
    expect(page.locator("[data-testid='stException']")).to_have_count(0)
    shot(page, "3c-entail")

    page.get_by_text("Documents: hybrid").click()  # hits once the BGE-M3 modes land, else one clean line
    box = page.get_by_label("Query")
    expect(box).to_be_visible(timeout=WAIT_MS)
    box.fill("reset password")
    box.press("Enter")
    answer = hit_names(page, ".md").first.or_(page.locator("[data-testid='stAlert']"))
    expect(answer.first).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("[data-testid='stException']")).to_have_count(0)
    shot(page, "4-hybrid")


def test_search_page_empty_state(settings, tmp_path, app_factory, browser):
    app = app_factory(settings)  # a fresh data_dir: nothing ingested
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    page.goto(app.url)
    expect(page.get_by_text("Nothing indexed yet")).to_be_visible(timeout=WAIT_MS)
    expect(page.get_by_text("indexer ingest PATH")).to_be_visible()
    shot(page, "5-empty-documents")
    page.get_by_text("Photos: text to image").click()
    expect(page.get_by_text("No photos indexed yet")).to_be_visible(timeout=WAIT_MS)
    shot(page, "6-empty-photos")

    # Nobody listens on that port; its own data_dir, since the first app holds the embedded store.
    down = app_factory(settings.model_copy(update={"triton_url": f"127.0.0.1:{free_port()}",
                                                   "data_dir": tmp_path / "down"}))
    page.goto(down.url)
    expect(page.get_by_text("search triton up")).to_be_visible(timeout=WAIT_MS)
    shot(page, "7-triton-down")


def test_highlight_escapes_then_marks():
    spec = importlib.util.spec_from_file_location("ui_app", PROJECT_ROOT / "ui" / "app.py")
    app = sys.modules["ui_app"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(app)
    out = app.highlight("## Reset\nTo **reset** <b>passwords</b>, go", "reset password")
    assert out == "<mark>Reset</mark> To <mark>reset</mark> &lt;b&gt;<mark>passwords</mark>&lt;/b&gt;, go"


def test_search_page_relevance_and_verify(settings, docs, app_factory, browser):
    """The sidebar's "Only clear matches" (calibrated relevance), "Verify the models" and "Check relevance" buttons."""
    svc = SearchService(settings)
    try:
        ingest(svc, [docs])
    finally:
        svc.close()
    app = app_factory(settings)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(app.url)
    box = page.get_by_label("Query")
    expect(box).to_be_visible(timeout=WAIT_MS)
    page.get_by_text("Only clear matches").click()
    box.fill("chocolate cake recipe with strawberries")
    box.press("Enter")
    expect(page.get_by_text("No good match")).to_be_visible(timeout=WAIT_MS)
    shot(page, "8-no-good-match")
    box.fill("reset password")
    box.press("Enter")
    expect(hit_names(page, ".md").first).to_have_text("reset-password.md", timeout=WAIT_MS)
    expect(page.get_by_text(re.compile(r"relevance 1\.00")).first).to_be_visible()
    page.get_by_role("button", name="Verify the models").click()
    expect(page.get_by_text(re.compile(r"✓ minilm \(fp32\): expected answers"))).to_be_visible(timeout=WAIT_MS)
    page.get_by_role("button", name="Check relevance").click()  # `search relevance check` through the server
    expect(page.get_by_text(re.compile(r"Relevance: \d+% of questions from its own documents kept"))).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("[data-testid='stException']")).to_have_count(0)
    shot(page, "9-relevance-and-verify")
