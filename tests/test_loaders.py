"""load_text: text in any encoding charset-normalizer recognises; every unusable file becomes a
BadDocument with a one-line reason."""

from __future__ import annotations

import codecs
import os
import random
from pathlib import Path

import pytest

from indexer.loaders import TEXT_SUFFIXES, BadDocument, decode_text, load_text


def write(tmp_path: Path, data: bytes, name: str = "doc.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def reason(path: Path, **kw) -> str:
    with pytest.raises(BadDocument) as exc:
        load_text(path, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_text_suffixes():
    assert TEXT_SUFFIXES == {".txt", ".md"}


def test_plain_utf8(tmp_path):
    assert load_text(write(tmp_path, "héllo wörld — 你好 🚀\n".encode())) == "héllo wörld — 你好 🚀\n"


def test_utf8_bom_is_stripped(tmp_path):
    assert load_text(write(tmp_path, codecs.BOM_UTF8 + b"hello")) == "hello"


def test_newlines_are_normalised(tmp_path):
    assert load_text(write(tmp_path, b"a\r\nb\rc\n\r\nd")) == "a\nb\nc\n\nd"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_with_bom(tmp_path, codec):
    bom = codecs.BOM_UTF16_LE if codec.endswith("le") else codecs.BOM_UTF16_BE
    path = write(tmp_path, bom + "Grüße\r\nfrom UTF-16 ✓".encode(codec))
    assert load_text(path) == "Grüße\nfrom UTF-16 ✓"


def test_binary_file_named_txt(tmp_path):
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))
    assert reason(write(tmp_path, png)) == "binary content, not text"


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_bom(tmp_path, codec):
    # Before charset-normalizer: "binary content, not text" (NUL bytes).
    text = "Grüße from UTF-16 without a byte order mark ✓\nSecond line: naïve café.\n"
    assert load_text(write(tmp_path, text.encode(codec))) == text


def test_utf32_is_not_mistaken_for_utf16(tmp_path):
    # The UTF-32 LE BOM begins with the UTF-16 LE one.
    assert load_text(write(tmp_path, "hello".encode("utf-32"))) == "hello"


def test_invalid_utf8_after_a_bom(tmp_path):
    # A UTF-8 BOM says what the file is: bad bytes after it are an error, not a hint to guess.
    assert reason(write(tmp_path, codecs.BOM_UTF8 + b"caf\xc3 ok \x9f")) == "not valid UTF-8 (byte 0xc3 at offset 6)"


def test_invalid_utf8_offset_counts_the_bom(tmp_path):
    data = codecs.BOM_UTF8 + b"abc\xff"
    assert reason(write(tmp_path, data)) == "not valid UTF-8 (byte 0xff at offset 6)"


@pytest.mark.parametrize("text, codec", [
    ("Le café – naïve ‘quotes’ “and” more… 5 €\n", "cp1252"),
    ("café – naïve ‘quotes’", "cp1252"),
    ("Grüße aus Köln, schöne Straße. Naïve façade, ½ price.\n", "latin-1"),
    ("naïve", "latin-1"),
])
def test_single_byte_western_text(tmp_path, text, codec):
    # Before charset-normalizer: "not valid UTF-8 (byte 0x.. at offset ..)".
    assert load_text(write(tmp_path, text.encode(codec))) == text


def test_other_encodings_are_detected():
    text = "Привет, мир! Это проверка индексации документов в кодировке Windows.\n" * 3
    assert decode_text(text.encode("cp1251")) == text
    text = "これは日本語のテストです。文字コードはシフトJISです。\n" * 3
    assert decode_text(text.encode("shift_jis")) == text


@pytest.mark.parametrize("data", [
    bytes(range(256)) * 40,
    random.Random(0).randbytes(10_000),
    b"\x7fELF\x02\x01\x01\x00" + random.Random(1).randbytes(4000),
], ids=["all-bytes", "random", "elf"])
def test_binary_is_still_rejected(tmp_path, data):
    assert reason(write(tmp_path, data)) == "binary content, not text"


def test_no_encoding_fits(tmp_path):
    rng = random.Random(0)
    noise = bytes(rng.choice([*range(0x20, 0x7f), *range(0x80, 0x100)]) for _ in range(2000))
    assert reason(write(tmp_path, noise)).startswith("unknown encoding: not UTF-8 (byte 0x")


def test_truncated_utf16(tmp_path):
    assert reason(write(tmp_path, codecs.BOM_UTF16_LE + b"a\x00b")).startswith("not valid UTF-16")


@pytest.mark.parametrize("data", [b"", b" \n\t\r\n  ", codecs.BOM_UTF8, codecs.BOM_UTF8 + b"\n\n",
                                  codecs.BOM_UTF16_LE + " \n".encode("utf-16-le")])
def test_empty_or_whitespace_only(tmp_path, data):
    assert reason(write(tmp_path, data)) == "empty file"


def test_directory_is_unreadable(tmp_path):
    folder = tmp_path / "folder.txt"
    folder.mkdir()
    assert reason(folder) == "unreadable: Is a directory"


def test_missing_file_is_unreadable(tmp_path):
    assert reason(tmp_path / "gone.md") == "unreadable: No such file or directory"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads files despite chmod 000")
def test_permission_denied(tmp_path):
    path = write(tmp_path, b"secret")
    path.chmod(0)
    try:
        assert reason(path) == "unreadable: Permission denied"
    finally:
        path.chmod(0o644)


def test_too_large_is_checked_before_reading(tmp_path):
    path = tmp_path / "huge.txt"
    with path.open("wb") as f:
        f.truncate(25_300_000)  # sparse: all NULs, so a read would report "binary" instead
    assert reason(path) == "too large: 25.3 MB > 20.0 MB limit"


def test_custom_size_limit(tmp_path):
    path = write(tmp_path, b"x" * 1_300_000)
    assert reason(path, max_bytes=1_000_000) == "too large: 1.3 MB > 1.0 MB limit"
    assert load_text(path, max_bytes=1_300_000) == "x" * 1_300_000
