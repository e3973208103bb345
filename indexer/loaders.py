"""Read a document as text, or say in one line why it cannot be indexed."""

from __future__ import annotations

import codecs
from pathlib import Path


class BadDocument(Exception):
    """A file that cannot be indexed; str(exc) is a short human reason."""


TEXT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md"})

_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def load_text(path: Path, max_bytes: int = 20_000_000) -> str:
    return decode_text(read_bytes(path, max_bytes))


def read_bytes(path: Path, max_bytes: int = 20_000_000) -> bytes:
    """The file's bytes; its size is checked before anything is read."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadDocument(f"too large: {size / 1e6:.1f} MB > {max_bytes / 1e6:.1f} MB limit")
        return path.read_bytes()
    except OSError as exc:
        raise BadDocument(f"unreadable: {exc.strerror or exc}") from exc


def decode_text(data: bytes) -> str:
    if not data:
        raise BadDocument("empty file")
    if data.startswith(_UTF16_BOMS):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise BadDocument(f"not valid UTF-16 ({exc.reason} at offset {exc.start})") from exc
        if "\x00" in text[:8192]:  # e.g. UTF-32, whose BOM starts like UTF-16 LE's
            raise BadDocument("binary content, not text")
    else:
        if b"\x00" in data[:8192]:
            raise BadDocument("binary content, not text")
        # Strip the BOM by hand: utf-8-sig reports error offsets relative to the stripped bytes.
        bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
        try:
            text = data[bom:].decode("utf-8")
        except UnicodeDecodeError as exc:
            pos = bom + exc.start
            raise BadDocument(f"not valid UTF-8 (byte 0x{data[pos]:02x} at offset {pos})") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise BadDocument("empty file")
    return text
