"""Plain text and markdown: reading bytes, detecting and decoding the encoding."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

import charset_normalizer

from indexer.loaders.base import (
    _FENCED_CODE,
    BadDocument,
    Budget,
    LoadedDocument,
    Page,
    _first_h1,
    _first_line,
)
from search.media.files import Refused, read_regular

TEXT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md"})

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_UTF32_BOMS = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)


def load_text(path: Path, max_bytes: int = 20_000_000) -> str:
    return decode_text(read_bytes(path, max_bytes))


def read_bytes(path: Path, max_bytes: int = 20_000_000) -> bytes:
    """The file's bytes: opened without blocking (a FIFO swapped in after the stat cannot hold the
    run), a regular file only, its size checked before anything is read."""
    try:
        return read_regular(path, max_bytes)
    except Refused as exc:
        raise BadDocument(str(exc)) from None


def decode_text(data: bytes) -> str:
    return _decode(data)[0]


def _decode(data: bytes, *, detect: bool = True) -> tuple[str, str]:
    """Text and the name of its encoding: a BOM, else UTF-8, else what charset-normalizer finds
    (``detect``); binary content is refused."""
    if not data:
        raise BadDocument("empty file")
    if data.startswith(_UTF32_BOMS):  # before UTF-16: the UTF-32 LE BOM begins with UTF-16 LE's
        text, encoding = _strict(data, "utf-32"), "utf-32"
    elif data.startswith(_UTF16_BOMS):
        text, encoding = _strict(data, "utf-16"), "utf-16"
    elif detect and b"\x00" in data[:8192]:  # valid UTF-8, but means UTF-16/32 without a BOM, or binary
        text, encoding = _detected(data)
    else:
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        try:
            # Strip the BOM by hand: utf-8-sig reports error offsets relative to the stripped bytes.
            text, encoding = data[bom:].decode("utf-8"), "utf-8"
        except UnicodeDecodeError as exc:
            pos = bom + exc.start
            if bom or not detect:
                raise BadDocument(f"not valid UTF-8 (byte 0x{data[pos]:02x} at offset {pos})") from exc
            text, encoding = _detected(data, f"byte 0x{data[pos]:02x} at offset {pos}")
    if "\x00" in text[:8192]:
        raise BadDocument("binary content, not text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise BadDocument("empty file")
    return text, encoding


def _strict(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise BadDocument(f"not valid {encoding.upper()} ({exc.reason} at offset {exc.start})") from exc


def _detected(data: bytes, not_utf8: str = "") -> tuple[str, str]:
    # No fallback: with none, no match means binary (charset_normalizer.is_binary's rule); a
    # lower mess threshold than the default 0.2 keeps noise from passing as some code page.
    matches = charset_normalizer.from_bytes(data, threshold=0.1, enable_fallback=False)
    best = matches.best()
    if best is None:
        if not not_utf8 or _CONTROL_BYTES.search(data[:8192]):
            raise BadDocument("binary content, not text")
        raise BadDocument(f"unknown encoding: not UTF-8 ({not_utf8}) nor any other recognised")
    encoding = best.encoding
    # Short Western text fits several code pages equally well and the detector then picks one by
    # name (cp1250 reads "naïve" as "naďve"): prefer windows-1252 when it is as good, as browsers do.
    for m in matches:
        if "cp1252" in m.could_be_from_charset and m.chaos <= best.chaos and m.coherence >= best.coherence:
            encoding = "cp1252"
            break
    try:
        return data.decode(encoding), codecs.lookup(encoding).name
    except (UnicodeDecodeError, LookupError) as exc:
        raise BadDocument(f"unknown encoding: not UTF-8 nor {encoding}") from exc


_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")


def _load_plain(data: bytes, budget: Budget) -> LoadedDocument:
    text, encoding = _decode(data)
    return LoadedDocument(_first_line(text), [Page(None, text)], encoding)


def _load_markdown(data: bytes, budget: Budget) -> LoadedDocument:
    text, encoding = _decode(data)
    # A '# comment' inside a fenced code block is not a heading.
    return LoadedDocument(_first_h1(_FENCED_CODE.sub("", text)), [Page(None, text)], encoding)
