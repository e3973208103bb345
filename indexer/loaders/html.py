"""HTML: the declared or detected charset, visible text only, headings/lists/tables kept as structure."""

from __future__ import annotations

import codecs
import re

from bs4 import BeautifulSoup, NavigableString, Tag
from bs4.element import PreformattedString

from indexer.loaders.base import (
    BadDocument,
    Budget,
    LoadedDocument,
    Page,
    _first_h1,
    _normalise,
    _one_line,
)
from indexer.loaders.text import _UTF16_BOMS, _decode

# The WHATWG encoding standard: these labels mean windows-1252, and a meta tag readable as ASCII
# cannot really be UTF-16.
_CHARSET_ALIASES = {"iso-8859-1": "windows-1252", "latin1": "windows-1252", "latin-1": "windows-1252",
                    "us-ascii": "windows-1252", "ascii": "windows-1252",
                    "utf-16": "utf-8", "utf-16le": "utf-8", "utf-16be": "utf-8"}
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([^\s"'/>;]+)""", re.I)
_HIDDEN_TAGS = ("script", "style", "noscript", "template", "head", "title", "svg", "iframe", "object")
_DISPLAY_NONE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCK_TAGS = frozenset("""address article aside blockquote body caption dd details dialog div dl dt fieldset
    figcaption figure footer form header hgroup hr html legend li main nav ol p section summary table tbody
    tfoot thead ul""".split())


def _load_html(data: bytes, budget: Budget) -> LoadedDocument:
    markup, encoding = _decode_html(data)
    # Every start tag has a '<' not followed by '/': counted at C speed before the slow part
    # (BeautifulSoup builds ~30k elements a second).
    budget.count(markup.count("<") - markup.count("</"), "HTML elements")
    soup = _BudgetedSoup(markup, budget)
    title = _one_line(soup.title.get_text()) if soup.title else None
    for tag in soup.find_all(lambda t: budget.tick() or _is_hidden(t)):
        if not tag.decomposed:  # already gone with a hidden ancestor
            tag.decompose()
    text = _normalise(_HtmlText(budget).render(soup))
    if not text:
        raise BadDocument("no visible text")
    return LoadedDocument(title or _first_h1(text), [Page(None, text)], encoding)


class _BudgetedSoup(BeautifulSoup):
    """BeautifulSoup with html.parser, checking the deadline as the parser hands it tags and text."""

    def __init__(self, markup: str, budget: Budget) -> None:
        self.budget = budget
        super().__init__(markup, "html.parser")

    def handle_starttag(self, *args, **kwargs):
        self.budget.tick()
        return super().handle_starttag(*args, **kwargs)

    def handle_data(self, *args, **kwargs):
        self.budget.tick()
        return super().handle_data(*args, **kwargs)


def _decode_html(data: bytes) -> tuple[str, str]:
    """BOM, else the <meta> charset in the first 1024 bytes, else UTF-8, else detected."""
    m = None if data.startswith((codecs.BOM_UTF8, *_UTF16_BOMS)) else _META_CHARSET.search(data[:1024])
    if m is None:
        return _decode(data)
    label = m.group(1).decode("ascii", "replace").lower()
    charset = _CHARSET_ALIASES.get(label, label)
    try:
        if codecs.lookup(charset).name == "utf-8":
            return _decode(data, detect=False)  # declared: invalid bytes are an error, not a hint
        text = data.decode(charset)
    except UnicodeDecodeError as exc:
        raise BadDocument(f"not valid {charset} (byte 0x{data[exc.start]:02x} at offset {exc.start})") from exc
    except (LookupError, UnicodeError):  # no such codec, or not a text one (base64, "undefined")
        raise BadDocument(f"unknown charset '{label[:40]}'") from None
    return text.replace("\r\n", "\n").replace("\r", "\n"), codecs.lookup(charset).name


def _is_hidden(tag: Tag) -> bool:
    return (tag.name in _HIDDEN_TAGS or tag.has_attr("hidden")
            or str(tag.get("aria-hidden", "")).lower() == "true"
            or bool(_DISPLAY_NONE.search(str(tag.get("style", "")))))


class _HtmlText:
    """Visible text of a parsed page: headings as '#' lines, blocks as paragraphs, list items and
    table rows as lines of one paragraph per list or table. Walks with a stack, not recursion,
    so deep nesting cannot overflow."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.parts: list[tuple[int | None, str]] = []  # (list or table the line belongs to, text)
        self.inline: list[str] = []
        self.lists: list[int] = []  # the lists of the open list items, outermost first
        self.prefix = ""  # "- " waiting for a list item's first text

    def render(self, soup: BeautifulSoup) -> str:
        stack: list = [soup]
        while stack:
            self.budget.tick()
            node = stack.pop()
            if isinstance(node, NavigableString):
                if not isinstance(node, PreformattedString):  # comments, doctype, CDATA
                    self.inline.append(str(node).replace("\n", " "))  # only <br> breaks a line
            elif not isinstance(node, Tag):  # a block's closing action
                node()
            elif node.name in _HEADINGS:
                self.flush()
                heading = " ".join(node.get_text(" ").split())
                self.add(None, heading and "#" * _HEADINGS[node.name] + " " + heading)
            elif node.name == "pre":
                self.flush()
                self.add(None, node.get_text())
            elif node.name == "tr":
                self.flush()
                cells = (" ".join(c.get_text(" ").split()) for c in node.find_all(["td", "th"], recursive=False))
                self.add(id(node.find_parent("table") or node.parent), " | ".join(c for c in cells if c))
            elif node.name == "br":
                self.inline.append("\n")
            else:
                if node.name == "li":
                    self.flush()
                    self.lists.append(id(node.parent))
                    self.prefix = "- "
                    stack.append(self.end_item)
                elif node.name in _BLOCK_TAGS:
                    self.flush()
                    stack.append(self.flush)
                stack.extend(reversed(node.contents))
        self.flush()
        out: list[str] = []
        for i, (group, text) in enumerate(self.parts):
            if i:
                out.append("\n" if group is not None and group == self.parts[i - 1][0] else "\n\n")
            out.append(text)
        return "".join(out)

    def flush(self) -> None:
        lines = (" ".join(line.split()) for line in "".join(self.inline).split("\n"))
        text = "\n".join(line for line in lines if line)
        self.inline = []
        if text:
            self.add(self.lists[0] if self.lists else None, self.prefix + text)
            self.prefix = ""

    def add(self, group: int | None, text: str) -> None:
        if text.strip():
            self.parts.append((group, text))

    def end_item(self) -> None:
        self.flush()
        self.lists.pop()
        self.prefix = ""
