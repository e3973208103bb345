"""OFA entailment through the service, the CLI and the REST API, and `--verify` re-ranking CLIP hits end to end (Triton and Qdrant)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from image_helpers import encode
from ingest_helper import ingest
from ofa_helpers import noise, serve
from PIL import Image

from search.errors import BadRequest
from search.models import ofa


# -- the service and the faces
def test_service_entail(service, client, tmp_path):
    data = encode(noise(120, 90), "JPEG")
    path = tmp_path / "p.jpg"
    path.write_bytes(data)
    v = service.entail(path, "there are two dogs")
    assert v.label in ofa.LABELS and abs(sum(v.probs.values()) - 1) < 1e-5 and not v.truncated
    assert service.entail(data, "there are two dogs") == v
    served = serve(client, [(data, "there are two dogs", None)])["PROBS"][0]
    assert np.abs(np.array(list(v.probs.values())) - served).max() <= 1e-6
    assert service.entail(data, "dog " * 200).truncated
    assert service.entail(data, "two dogs", premise="a photo of animals") != service.entail(data, "two dogs")
    for kwargs, words in (({"image": data, "hypothesis": "  "}, "hypothesis: must not be empty"),
                          ({"image": data, "hypothesis": "..."}, "hypothesis: is empty after normalisation"),
                          ({"image": b"junk", "hypothesis": "two dogs"}, "image: not an image"),
                          ({"image": tmp_path / "missing.jpg", "hypothesis": "two dogs"}, "no such file"),
                          ({"image": tmp_path, "hypothesis": "two dogs"}, "is a directory")):
        with pytest.raises(BadRequest, match=words):
            service.entail(**kwargs)


def album(root: Path) -> Path:
    for k in range(6):
        rng = np.random.default_rng(k)
        img = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize((160 + 20 * k, 120), Image.NEAREST)
        img.save(root / f"p{k}.jpg", "JPEG", quality=92)
    return root


def test_verify_reranks_clip_hits_through_triton_and_qdrant(service, tmp_path):
    photos = album(tmp_path)
    ingest(service, [photos])
    query = "two dogs playing"
    plain = service.search_images(query, top_k=6)
    verified = service.search_images(query, top_k=6, verify=True)
    assert {h.path for h in verified} == {h.path for h in plain} and all(h.entailment_label for h in verified)
    probs = [h.entailment for h in verified]
    assert probs == sorted(probs, reverse=True)
    for h in verified:  # each is what `search entail` says for that photo
        assert abs(service.entail(Path(h.path), query).probs["entailment"] - h.entailment) <= 1e-6
    cut = sorted(probs)[len(probs) // 2]
    kept = service.search_images(query, top_k=6, verify=True, min_entailment=cut)
    assert kept == [h for h in verified if h.entailment >= cut] and len(kept) < len(verified)
    # a photo that can no longer be read stays, last and unverified; bad arguments are 4xx-style errors
    gone, broken = verified[0].path, verified[1].path
    os.remove(gone)
    Path(broken).write_bytes(b"no longer a JPEG")
    again = service.search_images(query, top_k=6, verify=True)
    assert {h.path for h in again[-2:]} == {gone, broken} and all(h.entailment is None for h in again[-2:])
    assert all(h.entailment is not None for h in again[:-2])
    assert len(service.search_images(query, top_k=6, verify=True, min_entailment=0.0)) == 4
    for kwargs, words in (({"like": photos / "p1.jpg", "verify": True}, "verify: needs a text query"),
                          ({"text": query, "min_entailment": 0.5}, "applies only with verify"),
                          ({"text": query, "verify": True, "min_entailment": 2.0}, "0..1")):
        with pytest.raises(BadRequest, match=words):
            service.search_images(**kwargs)


def test_cli_entail_and_verify(settings, tmp_path):
    env = {**os.environ, "SEARCH_DATA_DIR": str(settings.data_dir), "SEARCH_TRITON_REPO": str(settings.triton_repo),
           "SEARCH_TRITON_URL": settings.triton_url, "HF_HUB_OFFLINE": "1"}

    def run(*args, module="search"):
        return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)

    (tmp_path / "photos").mkdir()
    photos = album(tmp_path / "photos")
    shown = run("entail", str(photos / "p0.jpg"), "there are two dogs")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^(entailment|neutral|contradiction)\s+entailment 0\.\d{3} · neutral 0\.\d{3} · contradiction 0\.\d{3}",
                     shown.stdout), shown.stdout
    long = run("entail", str(photos / "p0.jpg"), "dog " * 100, "--json")
    assert long.returncode == 0 and json.loads(long.stdout)["truncated"] is True
    bad = run("entail", str(photos / "p0.jpg"), "")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "hypothesis: String should have at least 1" in bad.stderr
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"junk")
    bad = run("entail", str(junk), "two dogs")
    assert bad.returncode == 2 and "image:" in bad.stderr and "Traceback" not in bad.stderr
    assert run("ingest", str(photos), module="indexer").returncode == 0
    found = run("--images", "two dogs playing", "--verify", "--top-k", "3")
    assert found.returncode == 0, found.stderr
    assert len(re.findall(r"entails 0\.\d{3} \((entailment|neutral|contradiction)\)", found.stdout)) == 3, found.stdout


def test_rest_api_entail_and_verify(settings, tmp_path):
    from fastapi.testclient import TestClient

    from search.api import create_app

    photos = album(tmp_path)
    data = (photos / "p0.jpg").read_bytes()
    with TestClient(create_app(settings)) as c:
        r = c.post("/entail", files={"image": ("p0.jpg", data, "image/jpeg")}, data={"hypothesis": "there are two dogs"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["label"] in ofa.LABELS and set(body["probs"]) == set(ofa.LABELS) and body["truncated"] is False
        with_premise = c.post("/entail", files={"image": ("p0.jpg", data, "image/jpeg")},
                              data={"hypothesis": "two dogs", "premise": "animals outside"}).json()
        assert with_premise["premise"] == "animals outside"
        for files, form, status, field in (
                ({"image": ("x.jpg", b"junk", "image/jpeg")}, {"hypothesis": "two dogs"}, 400, "image"),
                ({"image": ("p0.jpg", data, "image/jpeg")}, {"hypothesis": ""}, 422, "hypothesis"),
                ({"image": ("p0.jpg", data, "image/jpeg")}, {"hypothesis": "..."}, 400, "hypothesis"),
                ({}, {"hypothesis": "two dogs"}, 422, "image")):
            bad = c.post("/entail", files=files, data=form)
            assert bad.status_code == status and field in bad.text, bad.text
        c.app.state.backend.indexer().ingest([photos])
        hits = c.post("/search/images", json={"text": "two dogs", "top_k": 4, "verify": True}).json()["hits"]
        assert len(hits) == 4 and [h["entailment"] for h in hits] == sorted((h["entailment"] for h in hits), reverse=True)
        assert c.post("/search/images", json={"text": "two dogs", "verify": True, "min_entailment": 3}).status_code == 422
