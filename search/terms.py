"""Words of a text as the store's word match sees them, and which of a query's words matter.

Tokens are Qdrant's default word tokenizer's (runs of letters and digits, lower-cased), so a code
such as "RE16" in "RE16-A" is the word "re16" on both sides. A query's content words leave out
English function words ("the", "is", "of") and their inflections ("others"): they would match
almost every text."""

from __future__ import annotations

import re
from functools import lru_cache

import snowballstemmer

_WORD = re.compile(r"[^\W_]+")
_STEMMER = snowballstemmer.stemmer("english")

STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only
or other our ours ourselves out over own same she should so some such than that the their theirs them themselves
then there these they this those through to too under until up very was we were what when where which while who
whom why will with would you your yours yourself yourselves
""".split())


# Snowball's irregular forms whose stem does not start like the word ("dying" -> "die"): the text is
# also searched for these heads. Every other word starts with the first len(stem) - 1 letters of its
# stem (checked over the vocabulary of the installed packages' sources, 185k words).
_IRREGULAR_HEADS = {"die": "dy", "lie": "ly", "tie": "ty"}


def words(text: str) -> list[str]:
    """Every word of ``text``, lower-cased, in order."""
    return [w.lower() for w in _WORD.findall(text)]


_TOKEN = re.compile(r"\S+")
_EDGES = "'\"()[]{}<>.,;:!?*$€£¥%#&+=|~`^"  # stripped off a code's ends: "$9.00." is 9.00
_INNER = re.compile(r"[-/:#_()\[\]]")  # a code's parts: "DocumentNo:TD01167104" holds td01167104
MAX_CODES = 256  # per passage


def codes(text: str) -> list[str]:
    """The exact strings of ``text`` a user types to find it: its tokens that hold a digit (invoice
    and document numbers, amounts, codes), lower-cased, whole ("re16-2041", "9.00") and by their parts
    between dashes, slashes and colons ("re16", "2041"); at least two characters; each once, in order."""
    seen: dict[str, None] = {}
    for token in _TOKEN.findall(text):
        token = token.strip(_EDGES).lower()
        for part in (token, *_INNER.split(token)):
            part = part.strip(_EDGES)
            if len(part) >= 2 and any(ch.isdigit() for ch in part):
                seen.setdefault(part)
    return list(seen)[:MAX_CODES]


def content_words(text: str) -> list[str]:
    """The words of a query that say what it is about, each once, in order: no function words, no
    single letters (a single digit stays: "room 5")."""
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOP_WORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(w)
    return list(seen)


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The English Snowball stem of a lower-case word ("jammed" -> "jam", "printers" -> "printer")."""
    return _STEMMER.stemWord(word)


# Stems of the function words: a word with one of them ("others" -> "other") is a function word too
_STOP_STEMS = frozenset(stem(w) for w in STOP_WORDS)


def query_stems(query: str) -> set[str]:
    """The stems of the query's content words, without those that are a function word's stem."""
    return {s for s in map(stem, content_words(query)) if s not in _STOP_STEMS}


def highlight_spans(text: str, query: str) -> list[tuple[int, int]]:
    """Character spans (start, end) of the words of ``text`` that have the stem of one of the query's
    content words ("using" for "use", "jammed" for "jam"); never function words or mere prefixes
    ("the" marks neither "the" nor "them", "others" marks nothing)."""
    stems = query_stems(query)
    if not stems:
        return []
    low = text.lower()
    if len(low) != len(text):  # a letter whose lower case is longer ("İ"): offsets by the word regex
        return [(m.start(), m.end()) for m in _WORD.finditer(text) if stem(m.group().lower()) in stems]
    # Only words that start like a stem are looked at, found with str.find: a regex over every word
    # of every hit cost more than the rest of a search's Python work.
    found = set()
    for head in _heads(stems):
        i = low.find(head)
        while i != -1:
            if i == 0 or not _word_char(low[i - 1]):
                j = i + len(head)
                while j < len(low) and _word_char(low[j]):
                    j += 1
                if stem(low[i:j]) in stems:
                    found.add((i, j))
            i = low.find(head, i + 1)
    return sorted(found)


def _heads(stems: set[str]) -> set[str]:
    """What every word with one of ``stems`` starts with: the stem less its last letter (Snowball
    changes the end: "use" <- "using", "happi" <- "happy"), at most three letters, and the heads of
    the irregular forms. Nested heads are searched once ("us" covers "use")."""
    heads = {s[: max(1, min(3, len(s) - 1))] for s in stems}
    heads |= {_IRREGULAR_HEADS[s] for s in stems if s in _IRREGULAR_HEADS}
    return {h for h in heads if not any(o != h and h.startswith(o) for o in heads)}


def _word_char(ch: str) -> bool:
    return ch.isalnum()
