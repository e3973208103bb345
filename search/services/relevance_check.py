"""`search relevance check`: how well one collection tells a match from what unrelated questions find
(docs/relevance.md).

Two samples of questions, asked as a user would (the service's own search): the opening words of the
collection's own documents (their title, else their first sentence), which their document answers,
and everyday sentences never used in the fit (relevance_probes.HELD_OUT), unrelated to most
collections. At the threshold: the share of the first whose best hit passes (their own document or a
near copy, which answers as well) and the share of the second. Either failing says one threshold
cannot serve this collection, and what to do.
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
from search.services.relevance import DOCUMENT_SPACES, MIN_POINTS, check_min_relevance, fitted
from search.store import DOCUMENTS

OWN_SAMPLE = 100  # documents whose opening words are asked
SCANNED = 4096  # points looked at to find them (the store's order: no full scan of a large collection)
OPENING_WORDS = 12  # a question's length, not a passage's
KEEP = 0.95  # the share of answerable questions a threshold should keep
# Opening words cut at OPENING_WORDS are vaguer than a user's question ("What to expect in terms of
# service and how it relates to"): below this share of them kept, answerable questions are refused.
OWN_KEPT = 0.9
EVERYDAY_PASS = 0.10  # more unrelated sentences than this find a match (3 in 100 at the default): off-topic ones pass
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
        opening questions find a match at ``min_relevance``, how many everyday sentences do,
        the threshold that would keep KEEP of the first, and the warnings these call for."""
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
        kept = [self._best_relevance(q, kb) for q in own]
        everyday = [self._best_relevance(q, kb) for q in relevance_probes.HELD_OUT]
        report["background"] = self._fits(collection, min_relevance)
        report["own"] = {"questions": len(kept), "kept": _share(np.asarray(kept) >= min_relevance),
                         "threshold_keeping": round(float(np.quantile(kept, 1 - KEEP)), 4) if kept else None,
                         "examples_refused": [q for q, v in zip(own, kept) if v < min_relevance][:5]}
        report["everyday"] = {"questions": len(everyday), "answered": _share(np.asarray(everyday) >= min_relevance)}
        report["warnings"] += _warnings(report)
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

    def _best_relevance(self, question: str, kb: str | None) -> float:
        hits = self.search_documents(question, top_k=1, kb=kb)
        return max((h.relevance or 0.0 for h in hits), default=0.0)

    def _fits(self, collection: str, threshold: float) -> dict:
        """Each searched vector's fitted law of unrelated best scores: centre, spread, and the raw score
        ``threshold`` asks for."""
        out = {}
        for name, space in DOCUMENT_SPACES.items():
            if (law := fitted(self._background_key(replace(space, collection=collection)))) is not None:
                mu, beta = law
                raw = mu - beta * math.log(-math.log(threshold)) if 0 < threshold < 1 else None  # G's inverse
                out[name] = {"mu": round(mu, 4), "beta": round(beta, 4), "raw_score_at_threshold": raw and round(raw, 4)}
        return out


def _share(flags) -> float:
    return round(float(np.mean(flags)), 3) if len(flags) else 0.0


def _warnings(report: dict) -> list[str]:
    out, t = [], report["min_relevance"]
    own, everyday = report["own"], report["everyday"]
    if own["questions"] and own["kept"] < OWN_KEPT:
        out.append(f"at min_relevance {t} only {own['kept']:.0%} of questions taken from this collection's own "
                   f"documents find a match: answerable questions will be refused"
                   + (f"; min_relevance {own['threshold_keeping']} keeps {KEEP:.0%} of them" if own["threshold_keeping"] else ""))
    if everyday["answered"] > EVERYDAY_PASS:
        room = own["threshold_keeping"] is not None and own["threshold_keeping"] > t
        out.append(f"{everyday['answered']:.0%} of everyday sentences find a match at min_relevance {t}: this collection "
                   "covers everyday topics, or scores unrelated questions unevenly; off-topic questions will get answers"
                   + (f"; min_relevance {own['threshold_keeping']} still keeps {KEEP:.0%} of its own questions" if room else ""))
    return out
