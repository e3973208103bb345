"""The docs hold together: every relative link in README.md and docs/*.md leads to a file that
exists (and, with an anchor, to a heading of it), the README reads in five minutes, no page runs
long, and code comments say why rather than cite benchmark run ids. No servers, no models."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 150
PAGE_MAX_LINES = 420  # "no page over ~400 lines"; docs/ocr.md and docs/architecture.md included

# [text](target) or [text](target "title"); images too. Code spans and fenced blocks are left out.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where a bracket is code, not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(page: Path) -> list[str]:
    return LINK.findall(prose(page.read_text(encoding="utf-8")))


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links() -> list[tuple[Path, str]]:
    return [(page, target) for page in PAGES for target in links(page)
            if not target.startswith(EXTERNAL) and not target.startswith("#")]


def test_the_link_finder_sees_links_and_skips_code():
    sample = ROOT / "README.md"
    assert links(sample), "README.md links to the docs"
    assert LINK.findall(prose("see [a](docs/a.md#x) and `[b](no.md)`\n```\n[c](no.md)\n```\n")) == ["docs/a.md#x"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_that_exists(page):
    dead = []
    for target in links(page):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            dead.append(target)
    assert not dead, f"{page.relative_to(ROOT)}: dead links {dead}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_anchor_leads_to_a_heading(page):
    wrong = []
    for target in links(page):
        if target.startswith(EXTERNAL) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        dest = (page.parent / path) if path else page
        if dest.suffix == ".md" and dest.is_file() and anchor not in anchors(dest):
            wrong.append(target)
    assert not wrong, f"{page.relative_to(ROOT)}: links to headings that do not exist {wrong}"


def test_the_readme_reads_in_five_minutes():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_docs_page_runs_long(page):
    lines = len(page.read_text(encoding="utf-8").splitlines())
    assert lines <= PAGE_MAX_LINES, f"{page.relative_to(ROOT)} has {lines} lines (at most {PAGE_MAX_LINES}): split it by task"


def test_the_readme_links_to_the_task_pages():
    """A new user finds photos, MCP and the GPU deployment from the README in one click."""
    targets = {t.split("#", 1)[0] for t in links(ROOT / "README.md")}
    assert {"docs/photos.md", "docs/bots.md", "docs/deploy.md", "docs/documents.md", "docs/models.md",
            "docs/operations.md", "docs/benchmarks.md"} <= targets


def test_code_comments_cite_no_benchmark_run_ids():
    found = subprocess.run(["grep", "-rnIE", "--exclude-dir=__pycache__", r"\brun [A-Z][0-9]+\b",
                            "search", "indexer", "ui"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert found.returncode == 1, f"run ids in code comments (say why instead):\n{found.stdout}"
