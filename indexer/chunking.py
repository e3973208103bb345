"""Token-aware chunking with overlap, counted in the served model's own tokens.

Windows of at most ``max_tokens`` prefer to end at a paragraph or heading boundary, else at a
sentence end, in their second half; the next starts ``overlap`` tokens before the cut. Chunk text
is an exact slice of the document (tokenizer offsets). A window also spans
at most ``max_chars`` characters: one token can be any length, and text the tokenizer drops still
lies between tokens."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass

from tokenizers import Tokenizer

SENTENCE_ENDS = frozenset(".!?")
# CJK full stops end a sentence with no following space.
CJK_SENTENCE_ENDS = frozenset("。！？")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
# Prose runs 4-6 characters a token (a WordPiece tokenizer's), so a cap of 10 a token only cuts
# windows of giant words or of long runs the tokenizer skips.
CHARS_PER_TOKEN = 10
# How many tokens the chunker's loops go between calls of its ``check`` (reading the clock costs a microsecond).
CHECK_EVERY = 1024


@dataclass(frozen=True)
class Chunk:
    index: int
    text: str
    start: int  # character offsets into the document
    end: int
    n_tokens: int  # without special tokens


class Chunker:
    # Part of every point id and of the stored "chunker" field: bump it when chunk boundaries
    # change, so a re-ingest replaces chunks made by an older version.
    VERSION = 4

    def __init__(self, tokenizer: Tokenizer, max_tokens: int = 200, overlap: int = 40,
                 max_chars: int | None = None) -> None:
        if max_tokens < 8:
            raise ValueError(f"chunk size must be at least 8 tokens, got {max_tokens}")
        if not 0 <= overlap < max_tokens // 2:
            raise ValueError(f"overlap must be between 0 and {max_tokens // 2 - 1} for {max_tokens}-token chunks, got {overlap}")
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"max_chars must be positive, got {max_chars}")
        self.max_tokens, self.overlap = max_tokens, overlap
        self.max_chars = max_chars or max_tokens * CHARS_PER_TOKEN
        # A private copy: the caller's tokenizer keeps its own truncation and padding.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def chunk(self, text: str, check: Callable[[], None] | None = None) -> list[Chunk]:
        """``check``: called at least every CHECK_EVERY tokens; what it raises stops
        the split, e.g. a file's parse budget running out."""
        check = check or _nothing
        if not text.strip():
            return []
        check()  # before and after the tokenizer's pass, one call that cannot be interrupted
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        kept = [(o, w) for o, w in zip(enc.offsets, enc.word_ids) if o[1] > o[0]]
        offsets = [o for o, _ in kept]
        word_ids = [w for _, w in kept]
        n = len(offsets)
        if n == 0:
            return []
        check()
        paragraphs, sentences = self._boundaries(text, offsets, check)
        ends = [b for _, b in offsets]
        chunks: list[Chunk] = []
        s = 0
        while s < n:
            check()  # a window is up to max_tokens tokens
            a = offsets[s][0]
            full = min(s + self.max_tokens, n)
            end = bisect.bisect_right(ends, a + self.max_chars, s, full)  # tokens that fit max_chars
            if end == s:  # this one token is longer than max_chars
                self._split_token(text, a, ends[s], chunks)
                s += 1
                continue
            capped = end < full
            if end < n:
                lo = s + (end - s) // 2
                end = _last_in(paragraphs, lo, end) or _last_in(sentences, lo, end) or end
            b = ends[end - 1]
            chunks.append(Chunk(len(chunks), text[a:b], a, b, end - s))
            if end >= n:
                break
            # A window cut short by max_chars overlaps at most half its tokens and advances at
            # least half, so overlap cannot make the chunks of a long run many times its size.
            overlap = min(self.overlap, (end - s) // 2) if capped else self.overlap
            floor = s + max(1, (end - s) // 2) if capped else s + 1
            nxt = max(end - overlap, floor)
            # Start the overlap at a paragraph or sentence start inside it, else at a word start.
            starts = _first_in(paragraphs, nxt, end) or _first_in(sentences, nxt, end)
            if starts is not None and starts < end:
                nxt = starts
            else:
                # Pre-tokenizer words, not adjacent offsets: CJK characters touch but are separate words.
                while nxt > floor and word_ids[nxt] is not None and word_ids[nxt] == word_ids[nxt - 1]:
                    nxt -= 1
            if ends[end] - offsets[nxt][0] > self.max_chars:
                nxt = end  # the next token does not fit after the overlap: it would only be repeated
            s = nxt
        return chunks

    def _split_token(self, text: str, a: int, b: int, chunks: list[Chunk]) -> None:
        """A token longer than max_chars (no word boundary inside) as even pieces of at most max_chars."""
        pieces = -(-(b - a) // self.max_chars)
        bounds = [a + (b - a) * k // pieces for k in range(pieces + 1)]
        for x, y in zip(bounds, bounds[1:]):
            piece = text[x:y]
            stripped = piece.strip()
            if not stripped:
                continue
            x += len(piece) - len(piece.lstrip())
            y = x + len(stripped)
            n_tokens = len(self.tokenizer.encode(stripped, add_special_tokens=False).ids)
            chunks.append(Chunk(len(chunks), stripped, x, y, max(1, n_tokens)))

    @staticmethod
    def _boundaries(text: str, offsets: list[tuple[int, int]], check: Callable[[], None]) -> tuple[list[int], list[int]]:
        """Token indices that start a paragraph/heading, and that start a sentence."""
        paragraphs, sentences = [], []
        for i in range(1, len(offsets)):
            if not i % CHECK_EVERY:
                check()
            gap = text[offsets[i - 1][1]:offsets[i][0]]
            prev = text[offsets[i - 1][1] - 1]
            if _BLANK_LINE.search(gap) or ("\n" in gap and text[offsets[i][0]] == "#"):
                paragraphs.append(i)
            elif (gap and prev in SENTENCE_ENDS) or prev in CJK_SENTENCE_ENDS:
                sentences.append(i)
        return paragraphs, sentences


def _nothing() -> None:
    pass


def _first_in(sorted_idx: list[int], lo: int, hi: int) -> int | None:
    """The smallest index in [lo, hi), if any."""
    k = bisect.bisect_left(sorted_idx, lo)
    return sorted_idx[k] if k < len(sorted_idx) and sorted_idx[k] < hi else None


def _last_in(sorted_idx: list[int], lo: int, hi: int) -> int | None:
    """The largest index in (lo, hi], if any."""
    k = bisect.bisect_right(sorted_idx, hi) - 1
    return sorted_idx[k] if k >= 0 and sorted_idx[k] > lo else None
