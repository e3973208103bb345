"""A larger encyclopedia for bench/bench_relevance.py: short articles made from WordNet 3.0's nouns
(Princeton's lexical database, the Debian package wordnet-base: /usr/share/wordnet), on the
subjects a general encyclopedia covers: famous people, places, foods, animals, plants, sports and
games, everyday things. An article is one synset: its name, its other names, what kind of thing it
is (its hypernym), its definition and its example sentences, e.g.

    Lisbon
    Lisbon, also Portuguese capital, is a national capital: capital and largest city and economic and
    cultural center of Portugal; a major port in western Portugal on the Tagus River ...

Dictionary-length articles (one to three sentences), not an encyclopedia's pages: what it
reproduces is a collection that covers everyday subjects, so unrelated everyday questions find
something on their subject. The question for each: "Who was X?", "Where is X?", "What is X?"."""

from __future__ import annotations

import random
import re
from pathlib import Path

WORDNET = Path("/usr/share/wordnet")
# WordNet lexicographer files: which subjects, how many articles of each, instances (named people and
# places) or common words (those tagged at least once in WordNet's sense-tagged corpus: everyday ones).
KINDS = (  # (lexicographer file number, instances, articles, question)
    (18, True, 150, "Who was {}?"),  # noun.person: Einstein, Joan of Arc
    (15, True, 150, "Where is {}?"),  # noun.location: cities, countries, rivers, mountains
    (13, False, 120, "What is {}?"),  # noun.food
    (5, False, 100, "What is {}?"),  # noun.animal
    (20, False, 60, "What is {}?"),  # noun.plant
    (4, False, 60, "What is {}?"),  # noun.act: sports, games, crafts
    (6, False, 100, "What is {}?"),  # noun.artifact: tools, instruments, buildings
)
MIN_GLOSS = 40  # characters: a definition long enough to be an article's body
_NAME = re.compile(r"^[A-Za-z][A-Za-z' .-]*$")


def _tagged(root: Path) -> set[str]:
    """Sense keys (lemma%1:file:lex_id) tagged at least once in WordNet's sense-tagged corpus."""
    out = set()
    for line in (root / "cntlist.rev").read_text(encoding="utf-8").splitlines():
        key, _, count = line.split(" ")
        if int(count) > 0:
            out.add(key.rsplit("::", 1)[0])
    return out


def _synsets(root: Path) -> tuple[list[dict], dict[str, str]]:
    """Every noun synset: {offset, file, words, lex_ids, instance, hypernym, gloss}; and each offset's first word."""
    found, names = [], {}
    for line in (root / "data.noun").read_text(encoding="utf-8").splitlines():
        if line.startswith(" "):  # the licence header
            continue
        head, _, gloss = line.partition(" | ")
        f = head.split()
        n = int(f[3], 16)
        words = [w.replace("_", " ") for w in f[4:4 + 2 * n:2]]
        lex_ids = [int(i, 16) for i in f[5:5 + 2 * n:2]]
        p = 4 + 2 * n
        pointers = [f[p + 1 + 4 * i:p + 5 + 4 * i] for i in range(int(f[p]))]
        up = [ptr[1] for ptr in pointers if ptr[0] in ("@", "@i")]
        found.append({"offset": f[0], "file": int(f[1]), "words": words, "lex_ids": lex_ids, "gloss": gloss.strip(),
                      "instance": any(ptr[0] == "@i" for ptr in pointers), "hypernym": up[0] if up else None})
        names[f[0]] = words[0]
    return found, names


def _article(s: dict, names: dict[str, str]) -> str:
    definition, *examples = (part.strip() for part in s["gloss"].split(";"))
    title, others = _capital(s["words"][0]), s["words"][1:]
    kind = names.get(s["hypernym"] or "", "")
    lead = title + (f", also {', '.join(others)}," if others else "")
    lead += f" is {'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}: " if kind else ": "
    body = lead + definition.rstrip(".") + "."
    said = [e.strip('"') for e in examples if e.startswith('"')]
    more = [e for e in examples if not e.startswith('"')]
    if more:
        body += " " + " ".join(m[:1].upper() + m[1:].rstrip(".") + "." for m in more)
    if said:
        body += " As in: " + "; ".join(said) + "."
    return f"{title}\n\n{body}\n"


def _capital(name: str) -> str:
    return name[:1].upper() + name[1:]


def articles(root: Path = WORDNET) -> list[tuple[str, str, str]]:
    """(title, text, question) per article: KINDS' counts, a fixed random draw of each kind's
    synsets whose name is plain and whose definition is at least MIN_GLOSS long; one per title."""
    tagged = _tagged(root)
    synsets, names = _synsets(root)
    rng, out, titles = random.Random(0), [], set()
    for file, instances, count, question in KINDS:
        pool = [s for s in synsets if s["file"] == file and s["instance"] == instances and len(s["gloss"]) >= MIN_GLOSS
                and _NAME.match(s["words"][0]) and not s["words"][0].lower().startswith(("genus ", "family ", "order "))
                and (instances or f"{s['words'][0].lower().replace(' ', '_')}%1:{file:02}:{s['lex_ids'][0]:02}" in tagged)]
        taken = 0
        for s in rng.sample(pool, len(pool)):
            if taken == count:
                break
            if s["words"][0].lower() not in titles:  # "Paris" the city, not also the Trojan prince
                titles.add(s["words"][0].lower())
                out.append((_capital(s["words"][0]), _article(s, names), question.format(s["words"][0])))
                taken += 1
    return out
