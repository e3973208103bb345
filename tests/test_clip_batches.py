"""The served CLIP under load and misuse: text batches padded to their longest, bad texts and images failing alone, encode()."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from clip_helpers import odd_images, photos
from image_helpers import encode
from PIL import Image

from search.models import clip
from search.models.clip import CLIP
from search.triton.client import TritonClient


def test_text_batches_are_padded_to_their_longest_text(client):
    from search.triton.client import text_tensor

    def width(batch: list[str]) -> int:
        out = client.infer("clip_text_tokenize", {"TEXT": text_tensor(batch)}, ["input_ids", "attention_mask"])
        assert out["input_ids"].shape == out["attention_mask"].shape
        assert out["attention_mask"].sum(axis=1).max() == out["input_ids"].shape[1]  # no column of padding only
        return out["input_ids"].shape[1]

    assert width(["a cat"]) == 4  # start, a, cat, end
    assert width(["a cat", "two dogs playing in the snow"]) < 20
    assert width(["a cat", "snow " * 80]) == 77  # cut at the context length


def test_bad_text_is_a_clear_error(client):
    bad = np.array([[b"\xff\xfe not utf-8"]], dtype=np.object_)
    with pytest.raises(Exception, match="INVALID_ARGUMENT.*UTF-8"):
        client.infer("clip_text", {"TEXT": bad}, ["EMBEDDING"])
    assert clip.embed_texts(client, ["still serving"])[0].shape == (1, 512)


def test_family_encode_takes_texts_or_images(client, model_repo):
    jpeg = next(iter(photos().values()))
    by_text, by_image = CLIP().encode(client, ["a cat", "two dogs"]), CLIP().encode(client, [jpeg])
    np.testing.assert_array_equal(np.stack([v["clip"] for v in by_text.vectors]), clip.embed_texts(client, ["a cat", "two dogs"])[0])
    np.testing.assert_array_equal(by_image.vectors[0]["clip"], clip.embed_images(client, [jpeg])[0])
    assert by_image.truncated.tolist() == [False] and CLIP().dim(model_repo) == 512
    with pytest.raises(TypeError):
        CLIP().encode(client, ["a cat", jpeg])


ROUNDS = 5


def test_concurrent_mixed_sizes_equal_one_at_a_time(client, triton):
    files = list({**photos(), **odd_images()}.values())
    alone = np.concatenate([clip.embed_images(client, [f]) for f in files])
    before = _batch_sizes(triton, "clip_visual")
    for _ in range(ROUNDS):  # whether requests meet in the tower's queue is timing: a loaded machine may serialise a round
        with ThreadPoolExecutor(8) as pool:
            together = np.concatenate(list(pool.map(lambda f: clip.embed_images(TritonClient(client.url), [f]), files)))
        np.testing.assert_allclose(together, alone, atol=1e-5)
        grown = {b for b, n in _batch_sizes(triton, "clip_visual").items() if n > before.get(b, 0)}
        if max(grown) > 1:
            break
    assert max(grown) > 1, f"the image tower never ran more than one request at once in {ROUNDS} rounds"
    batched = clip.embed_images(client, files)  # one request, many sizes
    np.testing.assert_allclose(batched, alone, atol=1e-5)


def _batch_sizes(triton, model: str) -> dict[int, int]:
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}")
    stats = c.get_inference_statistics(model, as_json=True)["model_stats"][0]
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", [])}


def test_bad_images_fail_alone_and_the_model_keeps_serving(client):
    good = photos()
    jpeg = good["chelsea.jpg"]
    bad = {"random": np.random.default_rng(0).bytes(5000), "empty": b"", "truncated": jpeg[: len(jpeg) // 3],
           "bomb": encode(Image.new("1", (20000, 20000)), "PNG")}
    expected = {"random": "not an image", "empty": "empty", "truncated": "truncated", "bomb": "over the limit"}
    alone = {k: clip.embed_images(client, [v])[0] for k, v in good.items()}
    jobs = [(k, v) for pair in zip(bad.items(), good.items()) for k, v in pair]

    def one(job):
        name, data = job
        try:
            return name, clip.embed_images(TritonClient(client.url), [data])[0]
        except Exception as exc:  # noqa: BLE001 - the message is what is tested
            return name, str(exc)

    with ThreadPoolExecutor(8) as pool:  # bad and good requests share dynamic batches
        results = dict(pool.map(one, jobs))
    for name, message in expected.items():
        assert isinstance(results[name], str) and message in results[name], (name, results[name])
        assert "INVALID_ARGUMENT" in results[name] and "IMAGE" in results[name]
    for name in good:
        np.testing.assert_allclose(results[name], alone[name], atol=1e-5)
    with pytest.raises(Exception, match="image 2 of 3: .*not an image"):  # names the image in a batch
        clip.embed_images(client, [jpeg, bad["random"], jpeg])
    np.testing.assert_allclose(clip.embed_images(client, [jpeg])[0], alone["chelsea.jpg"], atol=1e-5)
