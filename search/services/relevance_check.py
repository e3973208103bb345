"""`search relevance check`: how well one collection tells a match from what unrelated questions find
(docs/relevance.md).

Three samples of questions, asked as a user would (the service's own search): the opening words of
the collection's own documents (their title, else their first sentence), which their document
answers; everyday sentences never used in the fit (relevance_probes.HELD_OUT), unrelated to most
collections; and search-box questions on subjects few collections hold (relevance_probes.asked
held out: "kangaroo meaning"), those whose best hit names their subject left out (on topic here). At the
threshold: the share of the first whose best hit passes (their own document or a near copy, which
answers as well) and the share of the others. Any failing says one threshold cannot serve this
collection; the report names the threshold that would refuse the unrelated ones, and what it keeps.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import replace

import numpy as np

from search.services import relevance_probes
from search.services.documents import DocumentSearch
from search.services.options import DEFAULT_MIN_RELEVANCE
from search.services.relevance import DOCUMENT_SPACES, MIN_POINTS, check_min_relevance, fitted, names
from search.store import DOCUMENTS

OWN_SAMPLE = 100  # documents whose opening words are asked
SCANNED = 4096  # points looked at to find them (the store's order: no full scan of a large collection)
OPENING_WORDS = 12  # a question's length, not a passage's
KEEP = 0.95  # the share of answerable questions a threshold should keep
# Opening words cut at OPENING_WORDS are vaguer than a user's question ("What to expect in terms of
# service and how it relates to"): below this share of them kept, answerable questions are refused.
OWN_KEPT = 0.9
EVERYDAY_PASS = 0.10  # more unrelated sentences than this find a match (3 in 100 at the default): off-topic ones pass
REFUSE = 1 - EVERYDAY_PASS  # the share the suggested stricter threshold refuses: the check no longer warns there
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def opening(payload: dict) -> str:
    """A document's title, else the first sentence of its first passage, cut to OPENING_WORDS words."""
    text = (payload.get("title") or "").strip()
    if not text:
        first = (payload.get("text") or "").strip()
        text = _SENTENCE.split(first, maxsplit=1)[0] if first else ""
    return " ".join(text.split()[:OPENING_WORDS])


class RelevanceCheck(DocumentSearch):
    def relevance_check(self, kb: str | None = None, min_relevance: float = DEFAULT_MIN_RELEVANCE,
                        sample: int = OWN_SAMPLE) -> dict:
        """The report of `search relevance check`: the fitted background, how many of the collection's own
        opening questions find a match at ``min_relevance``, how many everyday sentences and questions on
        other subjects do, the thresholds that would keep KEEP of the first and refuse REFUSE of the
        others, and the warnings these call for."""
        check_min_relevance(min_relevance)
        collection = self._collection(kb, DOCUMENTS.name)
        points = self.store.count(collection) if self.store.exists(collection) else 0
        report = {"kb": kb, "points": points, "min_relevance": min_relevance, "warnings": []}
        if points < MIN_POINTS:
            report["warnings"].append(f"{points} passages: relevance needs at least {MIN_POINTS} to be calibrated")
            return report
        own = self._own_questions(collection, sample)
        # A question's best hit: its own document or a passage at least as close (a copy or a near copy,
        # which answers it as well: a web crawl holds many).
        kept = [self._best(q, kb)[0] for q in own]
        everyday = [self._best(q, kb)[0] for q in relevance_probes.HELD_OUT]
        other = []
        for q, subject in relevance_probes.asked(held_out=True):
            v, text = self._best(q, kb)
            if not names(text, subject):  # a hit naming it: on topic here
                other.append((q, v))
        report["background"] = self._fits(collection, min_relevance)
        report["own"] = {"questions": len(kept), "kept": _share(np.asarray(kept) >= min_relevance),
                         "threshold_keeping": round(float(np.quantile(kept, 1 - KEEP)), 4) if kept else None,
                         "examples_refused": [q for q, v in zip(own, kept) if v < min_relevance][:5]}
        report["everyday"] = {"questions": len(everyday), "answered": _share(np.asarray(everyday) >= min_relevance)}
        report["other_subjects"] = {"questions": len(other),
                                    "answered": _share(np.asarray([v for _, v in other]) >= min_relevance),
                                    "examples_answered": [q for q, v in other if v >= min_relevance][:5]}
        report["refusing"] = _refusing([everyday, [v for _, v in other]], kept)
        report["warnings"] += _warnings(report)
        report["suggested"] = _suggested(report)
        return report

    def _own_questions(self, collection: str, sample: int) -> list[str]:
        """The opening words of up to ``sample`` documents, a fixed draw among the first SCANNED points."""
        points, _ = self.store.scroll(collection, limit=SCANNED, with_payload=["title", "text", "sha256", "start"])
        first = {}
        for p in points:
            pl = p.payload or {}
            if pl.get("start") == 0 and pl.get("sha256") and (q := opening(pl)):
                first.setdefault(pl["sha256"], q)
        chosen = sorted(first.items())
        chosen = random.Random(0).sample(chosen, min(sample, len(chosen)))
        return [q for _, q in chosen]

    def _best(self, question: str, kb: str | None) -> tuple[float, str]:
        """The relevance and the text of the question's best hit (0 and "" when none)."""
        hits = self.search_documents(question, top_k=1, kb=kb)
        return (hits[0].relevance or 0.0, hits[0].text or "") if hits else (0.0, "")

    def _fits(self, collection: str, threshold: float) -> dict:
        """Each searched vector's fitted laws of unrelated best scores: centre and spread of the everyday
        sentences' and of the search-box questions' (``asked``, where fitted), and the raw score
        ``threshold`` asks for (the stricter law's)."""
        out = {}
        for name, space in DOCUMENT_SPACES.items():
            key = self._background_key(replace(space, collection=collection))
            if (law := fitted(key)) is None:
                continue
            laws = [law] + ([asked] if (asked := fitted(key, "asked")) else [])
            # G's inverse
            raw = max(mu - beta * math.log(-math.log(threshold)) for mu, beta in laws) if 0 < threshold < 1 else None
            out[name] = {"mu": round(law[0], 4), "beta": round(law[1], 4), "raw_score_at_threshold": raw and round(raw, 4),
                         "asked": {"mu": round(asked[0], 4), "beta": round(asked[1], 4)} if asked else None}
        return out


def _share(flags) -> float:
    return round(float(np.mean(flags)), 3) if len(flags) else 0.0


def _refusing(unrelated: list[list[float]], own: list[float]) -> dict | None:
    """The lowest threshold (in steps of 1e-5) that no more than EVERYDAY_PASS of each kind of
    unrelated question reaches, and the share of the collection's own questions it keeps."""
    levels = []
    for values in unrelated:
        ranked = sorted(values, reverse=True)
        allowed = int(EVERYDAY_PASS * len(ranked) + 1e-9)  # this many may pass
        if allowed < len(ranked):
            levels.append(ranked[allowed])
    if not levels:
        return None
    t = min(1.0, math.floor(max(levels) * 1e5 + 1) / 1e5)  # just above the first one that must not pass
    return {"min_relevance": t, "own_kept": _share(np.asarray(own) >= t)}


def _serves(report: dict) -> bool:
    """Whether the threshold refusing the unrelated questions is stricter and keeps the own ones."""
    refusing = report["refusing"]
    return bool(refusing) and refusing["min_relevance"] > report["min_relevance"] and refusing["own_kept"] >= OWN_KEPT


def _suggested(report: dict) -> float | None:
    """The threshold the warnings name, None when they name none (or none is needed)."""
    refused_own = report["own"]["kept"] < OWN_KEPT
    answered = EVERYDAY_PASS < max(report["everyday"]["answered"], report["other_subjects"]["answered"])
    if answered and _serves(report):
        return report["refusing"]["min_relevance"]
    return report["own"]["threshold_keeping"] if refused_own and not answered else None


def _advice(report: dict) -> str:
    """What to set when unrelated questions pass: the threshold refusing them if it keeps the
    collection's own questions, else that no threshold does both."""
    refusing, t = report["refusing"], report["min_relevance"]
    if _serves(report):
        return (f"; min_relevance {refusing['min_relevance']} refuses at least {REFUSE:.0%} of them and keeps "
                f"{refusing['own_kept']:.0%} of its own questions")
    if refusing and refusing["min_relevance"] > t:
        return (f"; no threshold refuses them and keeps its own questions (min_relevance {refusing['min_relevance']} "
                f"keeps {refusing['own_kept']:.0%}): rank only, or check answers with a reader")
    return ""


def _warnings(report: dict) -> list[str]:
    out, t = [], report["min_relevance"]
    own, everyday, other = report["own"], report["everyday"], report["other_subjects"]
    if own["questions"] and own["kept"] < OWN_KEPT:
        out.append(f"at min_relevance {t} only {own['kept']:.0%} of questions taken from this collection's own "
                   f"documents find a match: answerable questions will be refused"
                   + (f"; min_relevance {own['threshold_keeping']} keeps {KEEP:.0%} of them" if own["threshold_keeping"] else ""))
    if everyday["answered"] > EVERYDAY_PASS:
        out.append(f"{everyday['answered']:.0%} of everyday sentences find a match at min_relevance {t}: this collection "
                   "covers everyday topics, or scores unrelated questions unevenly; off-topic questions will get answers"
                   + _advice(report))
    if other["answered"] > EVERYDAY_PASS:
        out.append(f"{other['answered']:.0%} of search-box questions on subjects it does not hold (\"kangaroo meaning\") "
                   f"find a match at min_relevance {t}: its passages match how questions are phrased, not only what "
                   "they ask; off-topic questions will get answers" + _advice(report))
    return out
