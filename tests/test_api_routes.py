"""The REST API's ingest and search routes against the real Triton and store: documents, server-side paths, uploads, photos."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from api_helpers import fails, make_client, photo, wait
from ingest_helper import long_passage
from PIL import Image

from search.services import HIT_CHARS, SearchService


def image_bytes(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


# -- documents
def test_ingest_a_folder_then_search_documents(settings, docs):
    with make_client(settings, api_roots=[docs]) as c:
        job = wait(c, c.post("/ingest", json={"paths": [str(docs)]}))
        n = len(list(docs.iterdir()))
        assert job["state"] == "done" and job["files_done"] == job["files_total"] == n
        assert job["counts"] == {"indexed": n} and job["report"]["indexed"] == n and not job["failures"]
        assert [j["id"] for j in c.get("/ingest/jobs").json()["jobs"]] == [job["id"]]
        counts = c.get("/collections").json()
        assert counts["collections"]["documents"] >= n and counts["collections"]["images"] == 0

        r = c.post("/search/documents", json={"query": "reset password", "top_k": 3, "mode": "semantic"})
        assert r.status_code == 200, r.text
        body = r.json()
        top = body["hits"][0]
        assert top["path"] == str(docs / "reset-password.md") and 0 < top["score"] <= 1.0001
        assert {"score", "path", "page", "chunk", "text", "citation", "section"} <= top.keys()
        assert body["context"].startswith(f"[1] {top['citation']}\n") and "[3] " in body["context"]
        assert len(body["hits"]) == 3
        backend = c.app.state.backend
        assert backend.store_in_loop()  # the search awaited Triton and read the store in the event loop
        plain = backend.service().search_documents("reset password", top_k=3, mode="semantic")
        assert body["hits"] == json.loads(json.dumps([h.as_dict() for h in plain]))

        auto = c.post("/search/documents", json={"query": "reset password", "mode": "auto"}).json()
        assert auto["hits"] and len(auto["hits"]) == 5
        assert c.post("/search/documents", json={"query": "reset password", "min_score": 0.999}).json()["hits"] == []
        elsewhere = c.post("/search/documents", json={"query": "reset password", "folder": str(docs / "none")})
        assert elsewhere.status_code == 200 and elsewhere.json()["hits"] == []
        fails(c.post("/search/documents", json={"query": "x", "folder": "~0"}), 400, "folder")  # no such user: was a 500


def test_document_hits_carry_bounded_text(settings, tmp_path):
    word = "Reset your password: " + "x" * 2_000_000  # a 2 MB "word" stored whole, before chunks were bounded
    svc = SearchService(settings)
    try:
        long_passage(svc, tmp_path / "long", word)
    finally:
        svc.close()  # the app opens the store itself
    with make_client(settings) as c:
        r = c.post("/search/documents", json={"query": "reset password", "top_k": 1})
        assert r.status_code == 200 and len(r.content) < 3 * HIT_CHARS, r.text[:500]
        [hit], context = r.json()["hits"], r.json()["context"]
        assert hit["truncated"] is True and hit["length"] == len(word) and hit["text"] == word[:HIT_CHARS]
        assert context.startswith(f"[1] {hit['citation']}\nReset your password: xxx") and context.endswith("x …")
        [small] = c.post("/search/documents", json={"query": "reset password", "max_chars": 100}).json()["hits"]
        assert small["text"] == word[:100] and small["truncated"] is True
        [whole] = c.post("/search/documents", json={"query": "reset password", "full_text": True}).json()["hits"]
        assert whole["text"] == word and whole["truncated"] is False


def test_searches_are_answered_while_an_ingest_job_runs(settings, docs):
    """On a loaded machine too: a Triton call that missed its deadline failed the first job (nothing
    indexed, so every search was a 409); the job now waits for Triton instead."""
    with make_client(settings, api_roots=[docs]) as c:
        first = wait(c, c.post("/ingest", json={"paths": [str(docs)]}), timeout=600)
        assert first["state"] == "done", first
        for i, f in enumerate(sorted(docs.iterdir())):  # every file changes: the next job re-embeds all
            f.write_text(f.read_text() + f"\n\nRevision note {i}.\n")
        running = c.post("/ingest", json={"paths": [str(docs)]})
        with ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(lambda _: c.post("/search/documents", json={"query": "printer jam"}).status_code,
                                  range(16)))
        assert codes == [200] * 16
        assert wait(c, running)["counts"] == {"updated": len(list(docs.iterdir()))}


# -- server-side paths
def test_paths_outside_the_roots_are_rejected(settings, docs, tmp_path):
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret.md").write_text("the root password is hunter2")
    linked = tmp_path / "kb2"
    linked.mkdir()
    (linked / "leak.md").symlink_to(outside / "secret.md")
    (docs / "escape").symlink_to(outside)
    with make_client(settings, api_roots=[docs, linked]) as c:
        for raw in ("/etc", "/etc/passwd", f"{docs}/../private", f"{docs}/../private/secret.md",
                    f"{docs}/escape", f"{docs}/escape/secret.md", f"{linked}/leak.md", "/nonexistent/x.md"):
            fails(c.post("/ingest", json={"paths": [raw]}), 403, "paths[0]")
        fails(c.post("/ingest", json={"paths": [str(linked)]}), 403, "symlink")  # a folder with a link out
        fails(c.post("/ingest", json={"paths": [str(docs), "/etc"]}), 403, "paths[1]")
        fails(c.post("/ingest", json={"paths": ["kb/printer.md"]}), 400, "absolute")
        fails(c.post("/ingest", json={"paths": [f"{docs}/missing.md"]}), 404, "paths[0]")
        fails(c.post("/ingest", json={"paths": [f"{docs}/a\u0000b"]}), 400, "paths[0]")
        fails(c.post("/ingest", json={"paths": []}), 422, "paths")
        fails(c.post("/ingest", json={"paths": [str(docs)], "prune": "sometimes"}), 422, "prune")
        assert c.get("/ingest/jobs").json()["jobs"] == []  # nothing was started
        fails(c.get("/ingest/jobs/nope"), 404, "job_id")
    with make_client(settings) as c:  # no roots configured: uploads only
        fails(c.post("/ingest", json={"paths": [str(docs)]}), 403, "outside the folders")


# -- uploads
def test_upload_then_search_and_upload_limits(settings):
    note = b"# Parking\n\nVisitor parking permits for the blue garage are issued by reception on level 2.\n"
    with make_client(settings) as c:
        job = wait(c, c.post("/ingest/upload", files=[("files", ("parking.md", note, "text/markdown")),
                                                      ("files", ("extra.bin", b"\x00\x01", "application/octet-stream"))]))
        assert job["state"] == "done" and job["counts"] == {"indexed": 1}, job
        hit = c.post("/search/documents", json={"query": "visitor parking permit", "top_k": 1}).json()["hits"][0]
        assert hit["path"].startswith(str((settings.data_dir / "uploads").resolve())) and hit["path"].endswith("/parking.md")

        fails(c.post("/ingest/upload", files=[("files", (".env", b"X=1", "text/plain"))]), 400, "files[0]")
        fails(c.post("/ingest/upload", files=[("files", ("a.md", b"x", "text/plain")), ("files", ("a.md", b"y", "text/plain"))]),
              400, "files")
        fails(c.post("/ingest/upload", data={"nothing": "here"}), 422, "files")
    with make_client(settings, max_upload_bytes=1000, max_request_bytes=5000) as c:
        earlier = c.get("/ingest/jobs").json()["jobs"]  # kept across restarts: the job above
        fails(c.post("/ingest/upload", files=[("files", ("ok.md", b"fine", "text/plain")),
                                              ("files", ("big.md", b"x" * 2000, "text/plain"))]), 413, "files[1] (big.md)")
        fails(c.post("/ingest/upload", files=[("files", ("huge.md", b"x" * 6000, "text/plain"))]), 413, "body")
        fails(c.post("/search/documents", content=b"{" + b" " * 6000 + b"}", headers={"content-type": "application/json"}),
              413, "max_request_bytes")

        def chunked():  # no Content-Length: the limit applies while the body streams in
            yield b'{"query": "'
            yield b"x" * 6000
            yield b'"}'
        fails(c.post("/search/documents", content=chunked(), headers={"content-type": "application/json"}), 413, "body")
        assert c.get("/ingest/jobs").json()["jobs"] == earlier  # no refused upload started a job


def test_oversized_upload_leaves_no_files_behind(settings):
    with make_client(settings, max_upload_bytes=1000) as c:
        r = c.post("/ingest/upload", files=[("files", ("ok.md", b"fine", "text/plain")),
                                            ("files", ("big.md", b"x" * 2000, "text/plain"))])
        assert r.status_code == 413
    assert not list((settings.data_dir / "uploads").glob("*/*"))


# -- photos
def test_photo_search_by_text_and_by_upload(settings, tmp_path):
    album = tmp_path / "album"
    for i in range(3):
        photo(album / f"p{i}.jpg", i)
    photo(album / "p3.png", 3, "PNG")
    with make_client(settings, api_roots=[album]) as c:
        job = wait(c, c.post("/ingest", json={"paths": [str(album)]}))
        assert job["counts"] == {"indexed": 4}, job
        assert c.get("/collections").json()["collections"]["images"] == 4

        r = c.post("/search/images", json={"text": "a red car", "top_k": 2})
        assert r.status_code == 200, r.text
        hits = r.json()["hits"]
        assert len(hits) == 2 and all(h["path"].startswith(str(album)) and -1 <= h["score"] <= 1 for h in hits)
        assert len(c.post("/search/images", json={"text": "x", "folder": str(album), "sort": "newest"}).json()["hits"]) == 4

        like = c.post("/search/images/like", files={"image": ("q.png", (album / "p3.png").read_bytes(), "image/png")},
                      data={"top_k": "3"})
        assert like.status_code == 200, like.text
        assert like.json()["hits"][0]["path"] == str(album / "p3.png") and len(like.json()["hits"]) == 3
        filtered = c.post("/search/images/like", files={"image": ("q.png", image_bytes(9), "image/png")},
                          data={"after": "2020-01-01"})
        assert filtered.status_code == 200 and filtered.json()["hits"] == []  # no EXIF dates

        fails(c.post("/search/images", json={"text": "x", "after": "last tuesday"}), 400, "after")
        fails(c.post("/search/images", json={"text": "x", "near": "51.5,-0.1"}), 400, "near")
        fails(c.post("/search/images", json={"text": "x", "folder": "~nosuchuser/x"}), 400, "folder")
        fails(c.post("/search/images", json={"text": "x", "sort": "random"}), 422, "sort")
        fails(c.post("/search/images", json={"text": ""}), 422, "text")
        fails(c.post("/search/images/like", files={"image": ("q.png", b"not an image", "image/png")}), 400, "like")
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}, data={"top_k": "0"}),
              422, "top_k")
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}, data={"near": "x"}),
              400, "near")
        fails(c.post("/search/images/like", data={"top_k": "3"}), 422, "image")
    with make_client(settings, max_upload_bytes=100) as c:
        fails(c.post("/search/images/like", files={"image": ("q.png", image_bytes(1), "image/png")}), 413, "image")
