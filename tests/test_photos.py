"""Photos end to end: ingest -> CLIP through the real Triton (tiny random CLIP built by the
project's export code in conftest) -> embedded Qdrant -> search by text, by example, with filters."""

from __future__ import annotations

import io
import shutil
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from image_helpers import photo
from ingest_helper import ingest
from PIL import Image

from search.errors import BadRequest, EmptyCollection, ModelNotReady
from search.models import MiniLM
from search.services import ImageFilters, SearchService, parse_date, parse_near
from search.triton.local import LocalTriton

RNG = np.random.default_rng(3)


@pytest.fixture
def album(tmp_path) -> Path:
    root = tmp_path / "photos"
    photo(root / "beach.jpg", 1, taken="2021:07:14 09:30:00", make="Canon", model="Canon EOS 5D", gps=(50.8225, -0.1372))
    photo(root / "city.jpg", 2, taken="2022:03:01 18:00:00", make="Apple", model="iPhone 12", gps=(51.5074, -0.1278))
    photo(root / "trip" / "alps.jpg", 3, taken="2023:01:20 12:00:00", make="FUJIFILM", model="X-T3", gps=(45.8326, 6.8652))
    photo(root / "trip" / "lake.jpg", 4, taken="2023:01:21 08:00:00", make="FUJIFILM", model="X-T3")
    photo(root / "scan.jpg", 5)  # no EXIF at all
    Image.fromarray(RNG.integers(0, 256, (64, 64, 4), dtype=np.uint8), "RGBA").save(root / "logo.png")
    Image.fromarray(RNG.integers(0, 256, (40, 40), dtype=np.uint8), "L").save(root / "gray.webp")
    return root


def names(hits) -> list[str]:
    return [Path(h.path).name for h in hits]


def test_ingest_photos_and_query_by_example(service, album):
    report = ingest(service, [album])
    assert report.counts["indexed"] == 7 and not report.failures, report.as_dict()
    assert service.store.count("images") == 7
    for p in album.rglob("*.*"):
        hits = service.search_images(like=p, top_k=3)
        assert names(hits)[0] == p.name and hits[0].score == pytest.approx(1.0, abs=1e-4)
    beach = service.search_images(like=album / "beach.jpg", top_k=1)[0]
    assert beach.camera == "Canon Canon EOS 5D" and (beach.width, beach.height) == (320, 240)
    assert beach.taken == "2021-07-14 09:30" and beach.latitude == pytest.approx(50.8225, abs=1e-4)
    assert beach.longitude == pytest.approx(-0.1372, abs=1e-4)
    assert Path(beach.thumbnail).exists() and Image.open(beach.thumbnail).size[0] <= 320


def test_text_to_image_plumbing(service, album):
    ingest(service, [album])
    hits = service.search_images("a dog on the beach", top_k=5)
    assert len(hits) == 5 and all(-1.0001 <= h.score <= 1.0001 for h in hits)
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_concurrent_text_searches_find_what_each_finds_alone(service, album):
    # Concurrent text queries share clip_text requests (padded to the longest of them): no hit changes.
    ingest(service, [album])
    queries = ["a dog on the beach", "snow", "a red car parked outside at night", "two cats", "a", "city lights", "🐱", "lake"]
    alone = {q: service.search_images(q, top_k=5) for q in queries}
    for _ in range(3):
        with ThreadPoolExecutor(len(queries)) as pool:
            together = dict(zip(queries, pool.map(lambda q: service.search_images(q, top_k=5), queries)))
        for q in queries:
            assert [h.path for h in together[q]] == [h.path for h in alone[q]], q
            assert [h.score for h in together[q]] == pytest.approx([h.score for h in alone[q]], abs=1e-5), q
    coalesced = service.resources.batchers["clip_text"]
    assert coalesced.items == len(queries) * 4 and coalesced.waiting == 0


def test_filters(service, album):
    ingest(service, [album])
    q = album / "beach.jpg"

    def search(**kw):
        return set(names(service.search_images(like=q, top_k=20, filters=ImageFilters(**kw))))

    assert search(after=parse_date("2023-01-01", "after")) == {"alps.jpg", "lake.jpg"}
    assert search(before=parse_date("2022-01-01", "before")) == {"beach.jpg"}
    assert search(after=parse_date("2022-01-01", "after"), before=parse_date("2023-01-21", "before")) == {"city.jpg", "alps.jpg"}
    assert search(camera="fujifilm") == {"alps.jpg", "lake.jpg"}
    assert search(camera="canon 5d") == {"beach.jpg"}
    assert search(camera="nikon") == set()
    assert search(near=parse_near("51.5,-0.12,100")) == {"beach.jpg", "city.jpg"}  # Brighton is ~75 km from London
    assert search(near=parse_near("51.5,-0.12,5")) == {"city.jpg"}
    assert search(folder=str(album / "trip")) == {"alps.jpg", "lake.jpg"}
    newest = service.search_images(like=q, top_k=20, sort="newest")
    assert names(newest)[:4] == ["lake.jpg", "alps.jpg", "city.jpg", "beach.jpg"]
    oldest = service.search_images(like=q, top_k=20, sort="oldest")
    assert names(oldest)[:4] == ["beach.jpg", "city.jpg", "alps.jpg", "lake.jpg"]
    assert {h.taken_at for h in newest[4:]} == {None}  # undated photos come last
    strict = service.search_images(like=q, top_k=20, min_score=0.99999)
    assert names(strict) == ["beach.jpg"]


def test_rename_and_duplicates(service, album):
    ingest(service, [album])
    (album / "beach.jpg").rename(album / "brighton.jpg")
    shutil.copy(album / "city.jpg", album / "trip" / "city-copy.jpg")
    report = ingest(service, [album])
    assert report.embedded_chunks == 0 and service.store.count("images") == 7
    moved = service.search_images(like=album / "brighton.jpg", top_k=1)[0]
    assert moved.paths == [str(album / "brighton.jpg")]
    dup = service.search_images(like=album / "city.jpg", top_k=1)[0]
    assert sorted(Path(p).name for p in dup.paths) == ["city-copy.jpg", "city.jpg"]
    assert set(names(service.search_images(like=album / "city.jpg", top_k=20, filters=ImageFilters(folder=str(album / "trip"))))) >= {"city.jpg"}
    lake = service.search_images(like=album / "trip" / "lake.jpg", top_k=1)[0]
    (album / "trip" / "lake.jpg").unlink()
    pruned = ingest(service, [album], prune=True)
    assert pruned.counts["pruned"] == 1 and service.store.count("images") == 6
    assert not Path(lake.thumbnail).exists()  # deleted content leaves no thumbnail behind


def test_bad_images_are_reported_and_the_rest_indexed(service, album):
    bad = album / "bad"
    bad.mkdir()
    (bad / "empty.jpg").write_bytes(b"")
    (bad / "notes.jpg").write_text("this is not a picture")
    good = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (200, 200, 3), dtype=np.uint8)).save(good, "JPEG")
    (bad / "truncated.jpg").write_bytes(good.getvalue()[: len(good.getvalue()) // 2])
    (bad / "random.png").write_bytes(RNG.integers(0, 256, 5000, dtype=np.uint8).tobytes())
    Image.new("1", (20000, 20000)).save(bad / "bomb.png")  # 400 MP, a few KB on disk
    Image.new("CMYK", (64, 48), (10, 200, 30, 0)).save(album / "cmyk.jpg")
    Image.fromarray((RNG.random((30, 50)) * 65535).astype(np.uint16)).save(album / "deep.png")
    frames = [Image.new("RGB", (32, 32), (i * 80, 255 - i * 80, 40)) for i in range(3)]
    frames[0].save(album / "anim.gif", save_all=True, append_images=frames[1:])
    report = ingest(service, [album])
    reasons = {Path(f.path).name: f.reason for f in report.failures}
    assert set(reasons) == {"empty.jpg", "notes.jpg", "truncated.jpg", "random.png", "bomb.png"}, reasons
    assert "pixels" in reasons["bomb.png"]
    assert report.counts["indexed"] == 10  # 7 in the album + CMYK, 16-bit PNG, animated GIF


def test_mixed_folder_in_one_command(service, album, docs):
    shutil.copytree(docs, album / "kb")
    report = ingest(service, [album])
    assert report.as_dict()["by_kind"] == {"images": 7, "documents": 17}
    assert service.search_documents("reset password", top_k=1)[0].path.endswith("reset-password.md")
    assert names(service.search_images(like=album / "city.jpg", top_k=1)) == ["city.jpg"]


def test_photo_search_errors(service, album, tmp_path):
    with pytest.raises(EmptyCollection, match="indexer ingest"):
        service.search_images("anything")
    ingest(service, [album])
    with pytest.raises(BadRequest, match="either"):
        service.search_images("x", like=album / "city.jpg")
    with pytest.raises(BadRequest, match="like"):
        (tmp_path / "fake.jpg").write_text("nope")
        service.search_images(like=tmp_path / "fake.jpg")
    with pytest.raises(BadRequest, match="near"):
        parse_near("91,0,5")
    with pytest.raises(BadRequest, match="after"):
        parse_date("last tuesday", "after")
    with pytest.raises(BadRequest, match="sort"):
        service.search_images("x", sort="random")


def test_without_clip_documents_still_work(settings, model_repo, tmp_path, album, docs):
    """A Triton that serves only MiniLM: photos are reported as not indexed, documents are."""
    srv = LocalTriton(model_repo, tmp_path / "run", models=list(MiniLM().triton_models)).start()
    try:
        shutil.copytree(docs, album / "kb")
        svc = SearchService(settings.model_copy(update={"triton_url": f"127.0.0.1:{srv.grpc_port}",
                                                        "data_dir": tmp_path / "other"}))
        try:
            report = ingest(svc, [album])
            assert report.counts["indexed"] == 17 and not report.failures
            n, why = report.unavailable["images"]
            assert n == 7 and "CLIP" in why and "search models build" in why
            assert svc.search_documents("reset password", top_k=1)[0].path.endswith("reset-password.md")
            with pytest.raises((ModelNotReady, EmptyCollection)):
                svc.search_images("a dog")
        finally:
            svc.close()
    finally:
        srv.stop()


def test_photo_search_without_clip_served_says_how_to_serve_it(service, settings, model_repo, tmp_path, album):
    """Photos indexed, then a Triton without CLIP: no readiness is asked before the query; its own
    request finds CLIP missing, and the error says how to serve it, for a text and for an example photo."""
    ingest(service, [album])
    service.close()
    srv = LocalTriton(model_repo, tmp_path / "run", models=list(MiniLM().triton_models)).start()
    try:
        svc = SearchService(settings.model_copy(update={"triton_url": f"127.0.0.1:{srv.grpc_port}"}))
        try:
            for query in ({"text": "a dog"}, {"like": album / "beach.jpg"}):
                with pytest.raises(ModelNotReady, match="CLIP model is not served.*search models build"):
                    svc.search_images(**query)
        finally:
            svc.close()
    finally:
        srv.stop()


def test_parse_date_is_utc_unless_told():
    assert parse_date("2021-07-14", "after") == datetime(2021, 7, 14, tzinfo=UTC).timestamp()
    assert parse_date("2021-07-14T09:30+02:00", "after") == datetime(2021, 7, 14, 7, 30, tzinfo=UTC).timestamp()
