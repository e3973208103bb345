"""Calibrated relevance and "no good match": the arithmetic (its meaning, on a known null), then the
real thing on the sample knowledge base with MiniLM's real weights (every face: service, CLI, REST),
BGE-M3's three modes and CLIP photos with the tiny random models, the small-collection case and the
background sample's refresh. Nothing is mocked."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from ingest_helper import ingest
from PIL import Image
from processes import SearchServer

from indexer.cli_run import EXIT_ALL_FAILED, EXIT_MODEL_STOPPED, EXIT_SOME_FAILED
from search.api import create_app
from search.cli.query import NO_GOOD_MATCH, NOTHING_MATCHED
from search.config import PROJECT_ROOT
from search.errors import ServiceError
from search.models import family
from search.services import DEFAULT_MIN_RELEVANCE, SearchService
from search.services import relevance as rel
from search.store import DOCUMENTS

OFF_TOPIC = "chocolate cake recipe with strawberries"  # the sample knowledge base is an IT help desk's


# -- the arithmetic
def test_relevance_means_the_chance_that_an_unrelated_query_finds_less():
    """Fitted on probes' best scores, the relevance of a new unrelated query's best hit is spread
    evenly over 0..1 when those follow the law of maxima, so a threshold t lets through 1 - t of
    them; Gaussian scores (queries at levels of their own) have a lighter tail: fewer get through."""
    rng = np.random.default_rng(0)

    def tops(mu: float, beta: float, bests) -> np.ndarray:
        return np.array([rel.relevance([b], mu, beta)[0] for b in bests])

    law = tops(*rel.gumbel_fit(rng.gumbel(0.3, 0.04, 400)), rng.gumbel(0.3, 0.04, 4000))
    assert abs(law.mean() - 0.5) < 0.06 and abs((law > 0.9).mean() - 0.1) < 0.03

    def best_of(n_queries: int, m: int) -> np.ndarray:
        return rng.normal(0.1, 0.03, n_queries) + np.array([rng.normal(0, 0.05, m).max() for _ in range(n_queries)])

    mu, beta = rel.gumbel_fit(best_of(400, 2000))
    gaussian = tops(mu, beta, best_of(2000, 2000))
    assert abs(gaussian.mean() - 0.5) < 0.06 and 0.02 < (gaussian > 0.9).mean() <= 0.1
    # far above: ~1; at the unrelated level: low; over more points the same score means less
    assert rel.relevance([0.9], mu, beta)[0] > 0.999 and rel.relevance([mu - beta], mu, beta)[0] < 0.1
    more, _ = rel.law([(2000, mu, beta)], 10_000_000)  # past the fitted points: the Gumbel shift
    assert more == pytest.approx(mu + beta * np.log(5000))
    assert rel.relevance([0.4], mu, beta)[0] > rel.relevance([0.4], more, beta)[0]
    values = rel.relevance(np.linspace(-1, 1, 50), mu, beta)
    assert (np.diff(values) >= 0).all() and values.min() >= 0 and values.max() <= 1


def test_a_filtered_search_uses_the_law_of_fewer_points():
    """The probes' k-th best scores in M points are fitted as the best of M / k: a search over M'
    points takes the level of the fit of the fewest points that still cover M' (no extrapolation
    below the last rank), so the default threshold keeps its meaning down to small M'."""
    rng = np.random.default_rng(1)
    m = 4000

    def scores(queries: int, n: int) -> np.ndarray:  # unrelated queries, each at a level of its own
        return rng.normal(0.1, 0.03, (queries, 1)) + rng.normal(0, 0.05, (queries, n))

    tops = -np.sort(-scores(300, m), axis=1)[:, :128]  # 300 probes' best 128 scores
    fits = rel.fit_ranks(tops, m)
    assert [round(f[0]) for f in fits] == [4000, 2000, 1000, 500, 250, 125, 62, 31]
    assert [f[1] for f in fits] == sorted((f[1] for f in fits), reverse=True)  # fewer points: a lower level
    assert rel.law(fits, m) == fits[0][1:] and rel.law(fits, 1000)[0] == fits[2][1]
    assert rel.law(fits, 700)[0] == fits[2][1]  # between 1000 and 500 points: the stricter level (1000)
    assert rel.law(fits, 3)[0] == fits[-1][1]  # past the last rank: its level, not an extrapolation
    assert all(rel.law(fits, n)[1] >= fits[0][2] for n in (3, 700, 1000))  # never a narrower spread than the best's
    for n in (4000, 1000, 250, 31):
        mu, beta = rel.law(fits, n)
        best = scores(1000, n).max(axis=1)  # fresh unrelated queries' best over n points
        share = np.mean([rel.relevance([b], mu, beta)[0] > DEFAULT_MIN_RELEVANCE for b in best])
        assert share <= 0.06, (n, share)  # about 3 in 100, as 0.97 means (these synthetic maxima vary more at small n)


def test_a_hit_is_rated_below_the_best_by_its_distance_from_it():
    """The best hit gets G(best); another within SLACK spreads of it keeps its own G (a judged passage
    at rank 2-8 just under the best is not dropped); one further below is lowered by the distance past
    that: never above its own G, never reordered, and a later page is rated against the ranking's
    best, not its own first hit."""
    mu, beta = 0.2, 0.05
    page = rel.relevance([0.7, 0.65, 0.6, 0.35], mu, beta)
    assert page[0] == pytest.approx(rel.relevance([0.7], mu, beta)[0]) and (np.diff(page) <= 0).all()
    assert page[1] == rel.relevance([0.65], mu, beta)[0]  # 0.05 below the best: within 2 spreads (0.1)
    assert page[2] == rel.relevance([0.6], mu, beta)[0]  # exactly at the slack
    assert page[3] == pytest.approx(rel.relevance([0.35 - (0.7 - 0.35 - 0.1)], mu, beta)[0])
    assert page[3] < 0.01 < rel.relevance([0.35], mu, beta)[0]  # far below the best: not vouched for
    later = rel.relevance([0.65, 0.6, 0.35], mu, beta, best=0.7)
    assert later.tolist() == pytest.approx(page[1:].tolist())


def test_relevance_keeps_its_resolution_near_one():
    """On a single-topic collection the law is narrow and on-topic hits stand far above it: their
    relevance differs in the last decimals, and it is not rounded away (ranking on-topic against
    other questions by it is as good as by the raw score)."""
    mu, beta = 0.12, 0.02
    scores = np.linspace(0.45, 0.75, 40)  # 16 to 31 spreads above the centre
    values = np.array([rel.relevance([s], mu, beta)[0] for s in scores])
    assert (np.diff(values) > 0).all() and values.max() < 1.0


def test_sparse_fits_and_degenerate_ones():
    mostly_zero = np.r_[np.zeros(50), np.full(10, 0.3)]  # lexical scores: most probes share no token
    mu, beta = rel.gumbel_fit(mostly_zero)
    assert beta == pytest.approx(0.05) and mu == pytest.approx(-0.05 * rel.Q50)  # mean absolute deviation
    assert rel.gumbel_fit(np.zeros(10)) == (0.0, 0.0)
    assert rel.relevance([0.0, 0.3], 0.0, 0.0).tolist() == [0.0, 1.0]
    with pytest.raises(Exception, match="min_relevance"):
        rel.check_min_relevance(1.5)


def test_which_probes_fit_which_space():
    """Search-box questions probe passages' dense and ColBERT vectors, not sparse ones (they would
    match by "what is a") nor photos; one whose best hit names its subject is on topic, left out."""
    for space in rel.DOCUMENT_SPACES.values():
        assert space.probe_kinds == (("text",) if space.sparse else ("text", "asked")), space
    assert rel.image_space("text").probe_kinds == ("text",) and rel.image_space("image").probe_kinds == ("image",)
    assert rel.names("Hedgehogs roll into a ball.", "hedgehog") and rel.names("A barn owl hunts at dusk.", "barn owl")
    assert not rel.names("The try statement specifies exception handlers.", "hedgehog") and not rel.names("", "kite")


def test_a_rebuilt_model_is_seen_within_a_second(tmp_path, monkeypatch):
    """Scales belong to one build of the model. The build's id is what its manifest says; every search
    asks for it, so the manifest is looked at once a second, not on every call."""
    fam = family("minilm")
    for path in fam.artifacts(tmp_path):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")

    def build(at: str, mtime_ns: int) -> None:
        fam.manifest_path(tmp_path).write_text(json.dumps({"source": "all-MiniLM-L6-v2", "built_at": at}))
        os.utime(fam.manifest_path(tmp_path), ns=(mtime_ns, mtime_ns))

    clock = [1000.0]
    monkeypatch.setattr(rel.time, "monotonic", lambda: clock[0])
    build("monday", 10**18)
    assert rel._model_id(fam, tmp_path) == "all-MiniLM-L6-v2@monday"
    build("tuesday", 2 * 10**18)
    clock[0] += 0.5
    assert rel._model_id(fam, tmp_path) == "all-MiniLM-L6-v2@monday"  # looked at less than a second ago
    clock[0] += 0.6
    assert rel._model_id(fam, tmp_path) == "all-MiniLM-L6-v2@tuesday"
    fam.manifest_path(tmp_path).unlink()
    clock[0] += 1.1
    assert rel._model_id(fam, tmp_path) == ""  # no build: no scales can be trusted

# -- the sample knowledge base, MiniLM's real weights (kb_index, kb: tests/conftest.py)
def test_a_clear_match_and_no_good_match(kb):
    hits = kb.search_documents("reset password", top_k=3)
    assert hits[0].path.endswith("reset-password.md") and hits[0].relevance >= DEFAULT_MIN_RELEVANCE
    assert all(0 <= h.relevance <= 1 for h in hits) and not hits.no_match and hits.note is None
    assert [h.relevance for h in hits] == sorted((h.relevance for h in hits), reverse=True)
    off = kb.search_documents(OFF_TOPIC, top_k=3)
    assert off and off[0].relevance < 0.5  # the closest passage is no more than unrelated queries find
    none = kb.search_documents(OFF_TOPIC, top_k=3, min_relevance=DEFAULT_MIN_RELEVANCE)
    assert list(none) == [] and none.no_match and none.best == off[0].relevance
    kept = kb.search_documents("how do I connect to the VPN from home", top_k=5, min_relevance=DEFAULT_MIN_RELEVANCE)
    assert kept and all(h.relevance >= DEFAULT_MIN_RELEVANCE for h in kept) and not kept.no_match
    # a filter that leaves nothing is "nothing matched", not "no good match"
    empty = kb.search_documents("reset password", folder="/nowhere", min_relevance=0.9)
    assert list(empty) == [] and not empty.no_match


def test_a_jammed_printer_keeps_only_printer_passages(kb):
    """Lost-laptop passages stand above what unrelated queries find in a help desk's documents too,
    but far below the printer's: the default threshold keeps only the printer's."""
    hits = kb.search_documents("the printer is jammed", top_k=10)
    kept = kb.search_documents("the printer is jammed", top_k=10, min_relevance=DEFAULT_MIN_RELEVANCE)
    assert kept and {Path(h.path).name for h in kept} == {"printer.md"}, [(Path(h.path).name, h.relevance) for h in hits]
    assert {Path(h.path).name for h in hits} > {"printer.md"}  # the others were there to be dropped
    for query in (OFF_TOPIC, "how do I repot an orchid", "the best hiking trails in the alps"):
        none = kb.search_documents(query, top_k=5, min_relevance=DEFAULT_MIN_RELEVANCE)
        assert list(none) == [] and none.no_match, query


def test_the_fit_is_kept_and_made_again_when_the_collection_grows(kb, tmp_path):
    # What the REST API asks before running a search's store half in its event loop: whether a sample is due
    encoded = asyncio.run(encode(kb, "reset password"))
    assert kb.needs_sampling(encoded) and not kb.needs_sampling(encoded, grouped=True)
    kb.search_documents("reset password")
    assert not kb.needs_sampling(encoded)
    saved = kb.settings.data_dir / "relevance" / "documents.minilm.json"
    first = json.loads(saved.read_text())
    assert first["count"] == kb.store.count(DOCUMENTS.name) and first["ids"] == []  # dense: probes search it all
    points, mu, beta = first["fits"]["text"][0]  # the best of all the points; then ranks 2, 4, ...
    assert points == first["count"] and beta > 0 and -1 < mu < 1
    assert "asked" in first["fits"]  # the search-box questions' law ([] when fewer than MIN_ASKED were left)
    more = tmp_path / "more"
    more.mkdir()
    for i in range(30):  # +30 chunks on ~46: more than 10 %
        (more / f"note-{i}.txt").write_text(f"Meeting note {i}: the quarterly budget review moved to room {i}.")
    ingest(kb, [more])
    assert kb.needs_sampling(encoded)
    kb.search_documents("reset password")
    assert json.loads(saved.read_text())["count"] == kb.store.count(DOCUMENTS.name) > first["count"]
    assert not kb.needs_sampling(encoded)


async def encode(svc: SearchService, query: str):
    try:
        return await svc.encode_query(query)
    finally:
        await svc.triton.aclose()


def test_command_line_and_rest(kb):
    kb.close()  # the CLI and the API open the store themselves
    settings = kb.settings
    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1", "SEARCH_SEARCH_MODE": "semantic"}

    def search(*args):
        return subprocess.run([sys.executable, "-m", "search", *args], env=env, capture_output=True, text=True, timeout=300)
    found = search("reset password", "-k", "2", "--min-relevance", "0.9")
    assert found.returncode == 0 and "reset-password.md" in found.stdout and "rel 1.00" in found.stdout, found.stderr
    nothing = search(OFF_TOPIC, "--min-relevance", "0.9")
    assert nothing.returncode == NO_GOOD_MATCH == 8 and nothing.stdout == "" and "no good match" in nothing.stderr
    as_json = search(OFF_TOPIC, "--min-relevance", "0.9", "--json")
    body = json.loads(as_json.stdout)
    assert as_json.returncode == 8 and body["no_match"] is True and body["hits"] == [] and body["best_relevance"] < 0.9
    plain = json.loads(search(OFF_TOPIC, "--json", "-k", "1").stdout)
    assert plain["no_match"] is False and plain["hits"][0]["relevance"] < 0.5
    assert search("x", "--min-relevance", "2").returncode == 2
    with TestClient(create_app(settings)) as c:
        r = c.post("/search/documents", json={"query": OFF_TOPIC, "min_relevance": 0.9})
        assert r.status_code == 200 and r.json()["no_match"] is True and r.json()["hits"] == []
        r = c.post("/search/documents", json={"query": "reset password", "top_k": 2})
        assert r.json()["no_match"] is False and r.json()["hits"][0]["relevance"] >= 0.9
        assert c.post("/search/documents", json={"query": "x", "min_relevance": 1.5}).status_code == 422
    # the same through the `search serve` that owns the store: the CLI's queries go over its REST API
    server = SearchServer(settings, settings.data_dir.parent / "serve.log")
    try:
        remote = search(OFF_TOPIC, "--min-relevance", "0.9", "--json")
        body = json.loads(remote.stdout)
        assert remote.returncode == 8 and body["no_match"] is True and body["hits"] == [] and body["best_relevance"] < 0.9
        found = search("reset password", "-k", "2", "--min-relevance", "0.9")
        assert found.returncode == 0 and "reset-password.md" in found.stdout and "rel 1.00" in found.stdout, found.stderr
        told = search(OFF_TOPIC, "--min-relevance", "0.9")
        assert told.returncode == 8 and "no good match" in told.stderr and "best relevance 0." in told.stderr
        status = search("status", "--verify", "--json")  # the verification through the server: GET /models/verify
        assert status.returncode == 0 and json.loads(status.stdout)["verify"]["passed"] is True, status.stdout[-800:]
    finally:
        server.stop()


def test_no_good_match_has_an_exit_status_of_its_own():
    """It was 7, which `indexer ingest` uses for "some files failed": a script could not tell them apart."""
    taken = {0, 1, 2, 130, EXIT_ALL_FAILED, EXIT_MODEL_STOPPED, EXIT_SOME_FAILED, NOTHING_MATCHED}
    taken |= {cls.exit_code for cls in _subclasses(ServiceError)}
    assert NO_GOOD_MATCH not in taken, sorted(taken)
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert f"| {NO_GOOD_MATCH} | `search`: no good match" in readme
    shown = subprocess.run([sys.executable, "-m", "search", "query", "--help"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0 and f"{NO_GOOD_MATCH}  no good match" in shown.stdout, shown.stdout


def _subclasses(cls: type) -> list[type]:
    return [cls] + [s for sub in cls.__subclasses__() for s in _subclasses(sub)]


# -- BGE-M3's modes (tiny random model: the mechanism, not the quality)
def test_every_document_mode_is_calibrated(kb):
    for mode in ("semantic", "dense", "sparse", "hybrid"):
        hits = kb.search_documents("wifi network", top_k=5, mode=mode)  # shares tokens (tiny model)
        assert hits and all(h.relevance is not None and 0 <= h.relevance <= 1 for h in hits), mode
        order = sorted(hits, key=lambda h: h.score, reverse=True)
        assert [h.relevance for h in order] == sorted((h.relevance for h in hits), reverse=True), mode
        above = kb.search_documents("wifi network", top_k=5, mode=mode,
                                    min_relevance=min(1.0, max(h.relevance for h in hits) + 1e-6))
        assert (list(above) == [] and above.no_match) or all(h.relevance >= hits[0].relevance for h in above), mode


# -- photos (tiny random CLIP) and a collection too small to calibrate
def jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    blocks = np.random.default_rng(seed).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    Image.fromarray(blocks).resize((96, 64), Image.NEAREST).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_photos_are_calibrated_and_small_collections_say_why_not(settings, tmp_path):
    album = tmp_path / "album"
    album.mkdir()
    for i in range(12):
        (album / f"p{i:02}.jpg").write_bytes(jpeg(i))
    svc = SearchService(settings)
    try:
        ingest(svc, [album])
        few = svc.search_images("a dog", top_k=3, min_relevance=0.9)
        assert len(few) == 3 and few.note and "at least 30" in few.note and not few.no_match
        assert all(h.relevance is None for h in few)  # not applied: the background would be the hits themselves
        for i in range(12, 40):
            (album / f"p{i:02}.jpg").write_bytes(jpeg(i))
        ingest(svc, [album])
        like = svc.search_images(like=album / "p05.jpg", top_k=5)
        assert like[0].path.endswith("p05.jpg") and like.note is None
        assert all(0 <= h.relevance <= 1 for h in like) and like[0].relevance == max(h.relevance for h in like)
        text = svc.search_images("a dog", top_k=5)
        assert all(h.relevance is not None for h in text)
        newest = svc.search_images("a dog", top_k=5, sort="newest", min_relevance=0.0)
        assert len(newest) == 5 and not newest.no_match  # the sort keeps what the calibration said
    finally:
        svc.close()


def test_a_filtered_search_counts_its_filter_again_when_the_collection_changes(kb, kb_index, tmp_path, monkeypatch):
    """The m of a filtered search is its filter's count, kept while the collection's size holds
    (counting a filter scans the collection): a change of size, or the time limit, counts again."""
    docs = kb_index[1]
    space = rel.DOCUMENT_SPACES["minilm"]
    folder = rel.match("path", str(docs / "reset-password.md"))
    exact = kb.store.count(DOCUMENTS.name, folder)
    size = kb.store.count(DOCUMENTS.name, exact=False)
    assert exact >= 1 and kb._filtered_count(space, folder, size) == exact
    kb.store.set_payload(DOCUMENTS.name, {"path": "/moved.md"}, folder)  # same size: the kept count stands
    assert kb._filtered_count(space, folder, size) == exact
    monkeypatch.setattr(rel, "FILTER_COUNT_TTL_S", 0.0)  # ... until it is too old
    assert kb._filtered_count(space, folder, size) == 0 == kb.store.count(DOCUMENTS.name, folder)
    monkeypatch.undo()
    more = tmp_path / "more"
    more.mkdir()
    (more / "reset-password.md").write_text("Resetting a password: open the portal and choose Forgot password.")
    ingest(kb, [more])
    moved = rel.match("path", str(more / "reset-password.md"))
    grown = kb.store.count(DOCUMENTS.name, exact=False)
    assert grown > size and kb._filtered_count(space, moved, grown) == kb.store.count(DOCUMENTS.name, moved) >= 1
    hits = kb.search_documents("reset password", folder=str(more))
    assert hits and all(h.path.startswith(str(more)) and 0 <= h.relevance <= 1 for h in hits)
