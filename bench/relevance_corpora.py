"""The corpora of bench/bench_relevance.py: each a dict of files (name -> text), on-topic queries
(query, the files that answer it, the files to delete for its "answer deleted" twin or None),
off-topic query sets (name -> queries) and, for an encyclopedia, each on-topic query's subject."""

from __future__ import annotations

import collections
import csv
import json
import random
import re
from pathlib import Path

from bench import relevance_wordnet
from bench.relevance_data import OFF_TOPIC, PYTHON_QUERIES, SAMPLE_QUERIES
from bench.relevance_encyclopedia import ARTICLES
from search.config import PROJECT_ROOT

DATA = PROJECT_ROOT.parent / "shared" / "data"
CAPTIONS = 300  # STS-B caption sentences used as an off-topic set (a fixed random draw)
WORDNET_QUESTIONS = 100  # the larger encyclopedia's questions asked (a fixed draw; each also with its article deleted)


def jsonl(path: Path) -> list[dict]:  # split on "\n" only: the passages hold other line separators
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def msmarco(data: Path = DATA) -> dict:
    root = data / "beir-msmarco-mini"
    corpus = {d["_id"]: d["text"] for d in jsonl(root / "corpus.jsonl")}
    queries = {q["_id"]: q["text"] for q in jsonl(root / "queries.jsonl")}
    qrels: dict[str, dict[str, int]] = collections.defaultdict(dict)
    for line in (root / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, pid, grade = line.split("\t")
        qrels[qid][pid] = int(grade)
    on = [(queries[q], {f"{p}.txt" for p, g in r.items() if g >= 2}, [f"{p}.txt" for p in r])
          for q, r in qrels.items() if any(g >= 2 for g in r.values())]
    return {"kind": "web passages", "files": {f"{pid}.txt": text for pid, text in corpus.items()}, "on": on,
            "off": {"everyday": list(OFF_TOPIC)}, "queries": list(queries.values())}


def sample_docs() -> dict:
    folder = PROJECT_ROOT / "samples" / "docs"
    return {"kind": "help desk", "files": {f.name: f.read_text(encoding="utf-8") for f in sorted(folder.iterdir())},
            "on": [(q, {name}, None) for q, name in SAMPLE_QUERIES], "off": {"everyday": list(OFF_TOPIC)}}


def _stsb_rows(data: Path) -> list[list[str]]:
    with open(data / "stsb" / "dev.tsv", encoding="utf-8") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]


def captions(data: Path = DATA) -> list[str]:
    """STS-B's caption sentences (video descriptions: "A man is slicing a fish."), a fixed draw."""
    found = sorted({r[6] for r in _stsb_rows(data) if r[1] == "main-captions"})
    return random.Random(0).sample(found, min(CAPTIONS, len(found)))


def stsb(ms_queries: list[str], data: Path = DATA) -> dict:
    rows = _stsb_rows(data)
    seconds = sorted({r[7] for r in rows})
    name = {s: f"s{i:04}.txt" for i, s in enumerate(seconds)}
    on = [(r[6], {name[r[7]]}, None) for r in rows if float(r[5]) >= 4.0 and r[6] not in name]
    return {"kind": "captions, news, forums", "files": {name[s]: s for s in seconds}, "on": on,
            "off": {"everyday": list(OFF_TOPIC), "msmarco queries": ms_queries}}


def encyclopedia(data: Path = DATA) -> dict:
    """50 articles on subjects from every walk of life; off-topic: each question with its article deleted."""
    files = {f"{re.sub(r'[^A-Za-z]+', '-', title)}.txt": f"{title}\n\n{text}" for title, text, _ in ARTICLES}
    on = [(q, {name}, [name]) for name, (_, _, q) in zip(files, ARTICLES)]
    return {"kind": "encyclopedia", "files": files, "on": on, "off": {"everyday": list(OFF_TOPIC), "captions": captions(data)}}


def wordnet_encyclopedia(ms_queries: list[str], data: Path = DATA, root: Path = relevance_wordnet.WORDNET) -> dict:
    """739 short articles from WordNet's nouns (people, places, foods, animals, plants, sports, things:
    bench/relevance_wordnet.py); on-topic: 100 of their questions, each also with its article deleted."""
    found = relevance_wordnet.articles(root)
    files = {f"{i:04}-{re.sub(r'[^A-Za-z]+', '-', title)}.txt": text for i, (title, text, _) in enumerate(found)}
    asked = random.Random(0).sample(list(zip(files, found)), min(WORDNET_QUESTIONS, len(found)))
    on = [(q, {name}, [name]) for name, (_, _, q) in asked]
    return {"kind": "encyclopedia (WordNet: people, places, foods, animals, things)", "files": files, "on": on,
            "subjects": [title for _, (title, _, _) in asked],
            "off": {"everyday": list(OFF_TOPIC), "captions": captions(data), "msmarco queries": ms_queries}}


def python_reference(ms_queries: list[str], data: Path = DATA) -> dict:
    """The Python language reference's 79 topics (shipped with Python): one subject throughout."""
    from pydoc_data.topics import topics

    files = {f"{key}.txt": text for key, text in sorted(topics.items())}
    on = [(q, {f"{k}.txt" for k in keys}, None) for q, keys in PYTHON_QUERIES]
    return {"kind": "single topic (a programming language's reference)", "files": files, "on": on,
            "off": {"everyday": list(OFF_TOPIC), "captions": captions(data), "msmarco queries": ms_queries}}


def all_corpora(data: Path = DATA, wordnet: Path = relevance_wordnet.WORDNET) -> dict[str, dict]:
    """Every corpus; the WordNet encyclopedia only where WordNet is installed (apt-get install wordnet-base)."""
    marco = msmarco(data)
    out = {"msmarco": marco, "sample-docs": sample_docs(), "stsb": stsb(marco["queries"], data),
           "encyclopedia": encyclopedia(data), "python-reference": python_reference(marco["queries"], data)}
    if (wordnet / "data.noun").is_file():
        out["wordnet-encyclopedia"] = wordnet_encyclopedia(marco["queries"], data, wordnet)
    return out
