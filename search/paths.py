"""File names that are not valid UTF-8, kept losslessly.

Python gives such a name as a surrogate-escaped str (``os.fsdecode``), which ``open()`` accepts but
the store (Rust), JSON and terminals reject. Three forms:

- the OS form: what the pipeline and search hits use, openable as is;
- the stored form (``stored``): each undecodable byte as NUL + two hex digits. NUL cannot occur in
  a POSIX path, so it is unambiguous, and valid UTF-8 paths are stored unchanged;
- the display form (``readable``): undecodable bytes as ``\\xff``, with the exact bytes in base64
  (``path_bytes``) for programs that must open the file."""

from __future__ import annotations

import base64
import os
import re

_ESCAPED = re.compile("[\udc80-\udcff]")
_STORED = re.compile("\x00([0-9a-f]{2})")


def stored(path: str) -> str:
    """The OS form -> valid text that ``from_stored`` turns back into the same path."""
    return _ESCAPED.sub(lambda m: f"\x00{ord(m.group()) - 0xDC00:02x}", path)


def from_stored(text: str) -> str:
    """The stored form -> the OS form (a path ``open()`` accepts)."""
    return _STORED.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), text) if "\x00" in text else text


def readable(path: str) -> str:
    """A path for people (and JSON): undecodable bytes shown as ``\\xff``; valid names unchanged."""
    if path.isascii() and "\x00" not in path:  # most names: nothing to decode (~4 per search hit)
        return path
    path = from_stored(path)
    try:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate no file system produces (e.g. from JSON)
        return path.encode("utf-8", "backslashreplace").decode("utf-8")


def path_bytes(path: str) -> str | None:
    """The exact bytes of a name that is not valid UTF-8, base64-encoded; None for a valid name."""
    path = from_stored(path)
    if not _ESCAPED.search(path):
        return None
    return base64.b64encode(os.fsencode(path)).decode("ascii")
