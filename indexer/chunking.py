"""Token-aware chunking with overlap, counted in the served model's own tokens.

Windows of at most ``max_tokens`` prefer to end at a paragraph or heading boundary, else at a
sentence end, in their second half; the next window starts ``overlap`` tokens before the cut.
Chunk text is always an exact slice of the document (offsets from the tokenizer), so any
language works and nothing is re-joined.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from tokenizers import Tokenizer

SENTENCE_ENDS = frozenset(".!?")
# CJK full stops end a sentence with no following space.
CJK_SENTENCE_ENDS = frozenset("。！？")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")


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
    VERSION = 3

    def __init__(self, tokenizer: Tokenizer, max_tokens: int = 200, overlap: int = 40) -> None:
        if max_tokens < 8:
            raise ValueError(f"chunk size must be at least 8 tokens, got {max_tokens}")
        if not 0 <= overlap < max_tokens // 2:
            raise ValueError(f"overlap must be between 0 and {max_tokens // 2 - 1} for {max_tokens}-token chunks, got {overlap}")
        self.max_tokens, self.overlap = max_tokens, overlap
        # A private copy: the caller's tokenizer keeps its own truncation and padding.
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()

    def chunk(self, text: str) -> list[Chunk]:
        if not text.strip():
            return []
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        kept = [(o, w) for o, w in zip(enc.offsets, enc.word_ids) if o[1] > o[0]]
        offsets = [o for o, _ in kept]
        word_ids = [w for _, w in kept]
        n = len(offsets)
        if n == 0:
            return []
        paragraphs, sentences = self._boundaries(text, offsets)
        chunks: list[Chunk] = []
        s = 0
        while True:
            end = min(s + self.max_tokens, n)
            if end < n:
                lo = s + self.max_tokens // 2
                end = _last_in(paragraphs, lo, end) or _last_in(sentences, lo, end) or end
            a, b = offsets[s][0], offsets[end - 1][1]
            chunks.append(Chunk(len(chunks), text[a:b], a, b, end - s))
            if end >= n:
                return chunks
            nxt = max(end - self.overlap, s + 1)
            # Start the overlap at a paragraph or sentence start inside it, else at a word start.
            starts = _first_in(paragraphs, nxt, end) or _first_in(sentences, nxt, end)
            if starts is not None and starts < end:
                nxt = starts
            else:
                # Pre-tokenizer words, not adjacent offsets: CJK characters touch but are separate words.
                while nxt > s + 1 and word_ids[nxt] is not None and word_ids[nxt] == word_ids[nxt - 1]:
                    nxt -= 1
            s = nxt

    @staticmethod
    def _boundaries(text: str, offsets: list[tuple[int, int]]) -> tuple[list[int], list[int]]:
        """Token indices that start a paragraph/heading, and that start a sentence."""
        paragraphs, sentences = [], []
        for i in range(1, len(offsets)):
            gap = text[offsets[i - 1][1]:offsets[i][0]]
            prev = text[offsets[i - 1][1] - 1]
            if _BLANK_LINE.search(gap) or ("\n" in gap and text[offsets[i][0]] == "#"):
                paragraphs.append(i)
            elif (gap and prev in SENTENCE_ENDS) or prev in CJK_SENTENCE_ENDS:
                sentences.append(i)
        return paragraphs, sentences


def _first_in(sorted_idx: list[int], lo: int, hi: int) -> int | None:
    """The smallest index in [lo, hi), if any."""
    k = bisect.bisect_left(sorted_idx, lo)
    return sorted_idx[k] if k < len(sorted_idx) and sorted_idx[k] < hi else None


def _last_in(sorted_idx: list[int], lo: int, hi: int) -> int | None:
    """The largest index in (lo, hi], if any."""
    k = bisect.bisect_right(sorted_idx, hi) - 1
    return sorted_idx[k] if k >= 0 and sorted_idx[k] > lo else None
