"""The served `clip_image` and `clip_text` ensembles equal transformers' CLIP on the same weights
(the tiny random CLIP that conftest exports with the project's code): the preprocessed pixels, the
image vectors on real photographs and odd files, the text vectors; the export's reports. Batching
and bad inputs: tests/test_clip_batches.py."""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tiny_clip
from clip_helpers import odd_images, photos
from image_helpers import encode
from PIL import Image, ImageOps, ImageSequence
from skimage import data as skdata

from search.config import PROJECT_ROOT
from search.models import clip
from search.models.clip import CLIP
from search.models.export import clip as clip_export
from search.triton.client import TritonClient
from search.triton.steps import clip_image as step  # the Python step's code: pure functions, no Triton needed
from search.triton.steps import images

MAX_PIXELS = 100_000_000  # clip_image_preprocess's max_pixels


def reference_input(data: bytes) -> Image.Image:
    """What the reference processor is given. Two documented choices of the served step: EXIF
    orientation is applied (the reference ignores it), and 16-bit greyscale is scaled to 8 bits
    (the reference's convert("RGB") clips it to 255, a white picture)."""
    img = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    if img.mode.startswith("I;16"):
        img = Image.fromarray(np.round(np.asarray(img) / 257).astype(np.uint8), "L")
    return img


@pytest.fixture(scope="module")
def weights(model_repo) -> Path:
    return Path(json.loads(CLIP().manifest_path(model_repo).read_text())["weights"])


@pytest.fixture(scope="module")
def reference(weights):
    import torch
    from transformers import CLIPModel, CLIPTokenizerFast

    model = CLIPModel.from_pretrained(str(weights), attn_implementation="eager").eval()
    processor = tiny_clip.image_processor(weights)
    tokenizer = CLIPTokenizerFast.from_pretrained(str(weights))

    def features(out):
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    def pixels(img: Image.Image) -> np.ndarray:
        return processor(images=img, return_tensors="np")["pixel_values"][0]

    def images(imgs: list[Image.Image]) -> np.ndarray:
        batch = torch.from_numpy(np.stack([pixels(i) for i in imgs]))
        with torch.no_grad():
            return torch.nn.functional.normalize(features(model.get_image_features(pixel_values=batch)), dim=-1).numpy()

    def texts(txts: list[str]) -> np.ndarray:
        enc = tokenizer(txts, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
        with torch.no_grad():
            out = model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        return torch.nn.functional.normalize(features(out), dim=-1).numpy()

    return SimpleNamespace(pixels=pixels, images=images, texts=texts, tokenizer=tokenizer)


@pytest.fixture(scope="module")
def cfg(model_repo) -> dict:
    return json.loads((model_repo / "clip_image_preprocess/1/preprocess.json").read_text())


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


# -- preprocessing, without a server
def test_preprocess_json_records_clip_settings(cfg):
    assert cfg["resize"] == {"shortest_edge": 224} and cfg["crop"] == [224, 224] and cfg["image_size"] == 224
    assert cfg["resample"] == Image.Resampling.BICUBIC and cfg["rescale_factor"] == pytest.approx(1 / 255)
    assert cfg["mean"] == pytest.approx(clip_export.OPENAI_MEAN) and cfg["std"] == pytest.approx(clip_export.OPENAI_STD)
    assert cfg["do_convert_rgb"] and cfg["alpha"] == "white"


def test_legacy_preprocessor_config_reads_the_same(cfg, tmp_path):
    # openai/clip-vit-base-patch32's file: ints for size and crop, no rescale or RGB keys.
    legacy = {"crop_size": 224, "do_center_crop": True, "do_normalize": True, "do_resize": True,
              "feature_extractor_type": "CLIPFeatureExtractor", "image_mean": clip_export.OPENAI_MEAN,
              "image_std": clip_export.OPENAI_STD, "resample": 3, "size": 224}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(legacy))
    assert clip_export.hf_preprocess(tmp_path / "preprocessor_config.json", 224) == cfg


def test_pixels_equal_the_reference_processor(cfg, reference):
    # Same Pillow calls and the same float ops in the same order: equal to float32 rounding (1e-6).
    for name, data in {**photos(), **odd_images()}.items():
        got = step.preprocess(data, cfg, MAX_PIXELS)
        expected = reference.pixels(reference_input(data))
        assert got.shape == expected.shape == (3, 224, 224), name
        assert np.abs(got - expected).max() <= 1e-6, name


def test_normalising_by_table_gives_the_per_pixel_arithmetic_bit_for_bit(cfg):
    # pixels() looks each 8-bit value up instead of computing it per pixel: the same bits.
    values = np.arange(256, dtype=np.uint8)
    x = (values.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32)
    for c in range(3):
        expected = (x - np.float32(cfg["mean"][c])) / np.float32(cfg["std"][c])
        assert np.array_equal(images.normalise_table(cfg["rescale_factor"], tuple(cfg["mean"]), tuple(cfg["std"]))[c], expected)
    img = Image.fromarray(np.random.default_rng(3).integers(0, 256, (300, 400, 3), np.uint8))
    arr = np.asarray(img.resize((298, 224), Image.Resampling.BICUBIC))[:, 37:261]
    per_pixel = ((arr.astype(np.float64) * cfg["rescale_factor"]).astype(np.float32) - np.array(cfg["mean"], np.float32)) \
        / np.array(cfg["std"], np.float32)
    assert np.array_equal(step.pixels(img, cfg), per_pixel.transpose(2, 0, 1))


def test_documented_choices(cfg):
    exif_rotated = odd_images()["exif_rotated.jpg"]
    assert step.load_image(exif_rotated, MAX_PIXELS).size == (300, 451)  # chelsea is 451×300, stored rotated
    grey16 = Image.open(io.BytesIO(odd_images()["grey16.png"]))
    assert grey16.mode == "I;16" and np.asarray(grey16.convert("RGB")).mean() > 250  # what the reference sees
    assert 50 < np.asarray(step.to_rgb(grey16)).mean() < 200  # what is served
    rgba = Image.open(io.BytesIO(odd_images()["rgba.png"]))
    assert np.asarray(step.to_rgb(rgba))[0, 0].tolist() == [255, 255, 255]  # transparent corner on white
    assert np.asarray(step.to_rgb(rgba, "drop"))[0, 0].tolist() != [255, 255, 255]  # open_clip's convert("RGB")
    gif = odd_images()["animated.gif"]
    frames = [np.asarray(f.convert("RGB"), np.float32) for f in ImageSequence.Iterator(Image.open(io.BytesIO(gif)))]
    first = np.asarray(step.to_rgb(step.load_image(gif, MAX_PIXELS)), np.float32)
    assert len(frames) == 3 and np.abs(first - frames[0]).mean() < 1 < np.abs(first - frames[1]).mean()


def test_huge_resizes_only_the_cropped_region(cfg, reference):
    # Above MAX_RESIZE_PIXELS the step resizes only what the crop keeps: within one 8-bit level of
    # the whole-image resize (1/255/min(std) = 0.0150 after normalising), and rarely even that.
    level = 1 / 255 / min(cfg["std"]) + 1e-6
    for data in photos().values():
        img = reference_input(data)
        got = step.pixels(step.to_rgb(img), cfg, max_resize_pixels=0)
        diff = np.abs(got - reference.pixels(img))
        assert diff.max() <= level and (diff > 1e-6).mean() < 0.01
    strip = Image.new("RGB", (200_000, 1), (10, 200, 30))  # whole-image resize: 224 × 44.8M pixels
    assert step.pixels(strip, cfg).shape == (3, 224, 224)


def test_bad_bytes_are_clear_errors(cfg):
    jpeg = photos()["chelsea.jpg"]
    bomb = encode(Image.new("1", (20000, 20000)), "PNG")  # 400M pixels in a few kB
    assert len(bomb) < 100_000
    cases = {b"": "empty", b"\x00garbage" * 50: "not an image", jpeg[: len(jpeg) // 3]: "truncated",
             bomb: "over the limit", encode(Image.new("RGB", (3000, 2000)), "PNG"): "over the limit"}
    for data, message in cases.items():
        with pytest.raises(step.BadImage, match=message):
            step.preprocess(data, cfg, 5_000_000)
    with pytest.raises(step.BadImage, match="decompression bomb"):  # Pillow's own guard is an error too
        old = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = 1_000_000
        try:
            step.load_image(encode(Image.new("RGB", (1500, 1000)), "PNG"), 10_000_000)
        finally:
            Image.MAX_IMAGE_PIXELS = old


# -- served through Triton
def test_served_image_vectors_equal_transformers(client, reference):
    files = {**photos(), **odd_images()}
    served = clip.embed_images(client, list(files.values()))
    expected = reference.images([reference_input(d) for d in files.values()])
    assert served.shape == (len(files), 512)
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)
    cos = cosines(served, expected)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {list(files)[worst]}"
    # The comparison means something: different photos give clearly different vectors.
    first = served[:4]
    assert (first @ first.T)[~np.eye(4, dtype=bool)].max() < 0.99


def test_heic_is_served_where_pillow_heif_is_installed(client, cfg, reference):
    pillow_heif = pytest.importorskip("pillow_heif")
    pillow_heif.register_heif_opener()
    data = encode(Image.fromarray(skdata.chelsea()), "HEIF", quality=90)
    assert np.abs(step.preprocess(data, cfg, MAX_PIXELS) - reference.pixels(reference_input(data))).max() <= 1e-6
    assert cosines(clip.embed_images(client, [data]), reference.images([reference_input(data)]))[0] >= 0.9999


def texts() -> list[str]:
    return [
        "a photo of a cat", "A PHOTO OF A CAT", "two dogs playing in the snow", "a rocket on the launch pad",
        "a cup of coffee", "an astronaut", "", " ", "?", "a", "cat!!!  dog???", "it's the cat's toy, isn't it",
        "Ein Foto einer Katze im Schnee", "une tasse de café sur la table", "猫の写真", "фотография кошки",
        "صورة قطة", "🐱🐶🚀", "a cat 🐱 on a sofa 🛋️", "naïve café résumé", "route 66 in 1999, 4k hdr",
        " ".join(["cat"] * 75),  # start + 75 + end: exactly 77 tokens, nothing padded
        "snow " * 80, "a very long caption " * 30,
    ]


def test_served_text_vectors_equal_transformers(client, reference):
    txts = texts()
    served, truncated = clip.embed_texts(client, txts)
    expected = reference.texts(txts)
    assert served.shape == (len(txts), 512)
    cos = cosines(served, expected)
    worst = int(cos.argmin())
    assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {txts[worst]!r}"
    # One at a time and a few at once: each padded only to its batch's longest, not to 77.
    alone = np.concatenate([clip.embed_texts(client, [t])[0] for t in txts])
    with ThreadPoolExecutor(6) as pool:
        mixed = np.concatenate(list(pool.map(lambda i: clip.embed_texts(TritonClient(client.url), txts[i:i + 3])[0],
                                             range(0, len(txts), 3))))
    for got in (alone, mixed):
        cos = cosines(got, expected)
        assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {txts[int(cos.argmin())]!r}"
    lengths = [len(reference.tokenizer(t)["input_ids"]) for t in txts]
    assert truncated.tolist() == [n > 77 for n in lengths]
    assert truncated[-1] and truncated[-2] and not truncated[:-2].any()
    np.testing.assert_allclose(served[0], served[1], atol=1e-6)  # CLIP lowercases
    distinct = served[[0, 2, 3, 4, 5]]
    assert (distinct @ distinct.T)[~np.eye(5, dtype=bool)].max() < 0.99


def test_concurrent_text_queries_share_one_request_and_equal_transformers(settings, reference, monkeypatch):
    """Photo search's text queries (Resources.batchers["clip_text"]): the queries that wait on one in flight
    go to clip_text as one request, padded to the longest of them (77-token and truncated texts
    included), and each still gets the reference's vector."""
    from search.resources import Resources

    txts = texts()
    served, entered, release, batches = clip.embed_queries, threading.Event(), threading.Event(), []

    def held_first(client, batch):
        batches.append(len(batch))
        if len(batches) == 1:
            entered.set()
            assert release.wait(30)
        return served(client, batch)

    monkeypatch.setattr(clip, "embed_queries", held_first)
    queries = Resources(settings).batchers["clip_text"]
    with ThreadPoolExecutor(len(txts)) as pool:
        first = pool.submit(queries, txts[0])
        assert entered.wait(30)
        rest = [pool.submit(queries, t) for t in txts[1:]]
        deadline = time.monotonic() + 30
        while queries.waiting < len(rest) and time.monotonic() < deadline:
            time.sleep(0.005)
        release.set()
        got = np.stack([f.result(30).vector for f in [first, *rest]])
    assert batches == [1, len(txts) - 1]
    cos = cosines(got, reference.texts(txts))
    assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {txts[int(cos.argmin())]!r}"


def test_text_graphs_give_the_77_token_vector_at_the_text_length(model_repo, reference):
    """CLIP's text tower is causal and pools at the end token: padded only to the batch's longest
    (what clip_text_tokenize sends), a text gets the vector it gets padded to 77 (the reference),
    in the exported graph and in the fused CPU graph, 77-token and truncated texts included."""
    import onnxruntime as ort

    text = json.loads((model_repo / "clip_text_tokenize/1/text.json").read_text())
    assert text["variable_length"] is True and text["context_length"] == 77
    enc = reference.tokenizer(texts(), padding="max_length", max_length=77, truncation=True, return_tensors="np")
    ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
    lengths = mask.sum(axis=1)
    assert lengths.max() == 77 and lengths.min() == 2 and (lengths == 77).sum() == 3  # 77 exactly, and two cut there
    expected = reference.texts(texts())
    short = np.flatnonzero(lengths < 77)
    for graph in ("model.onnx", "model.cpu.onnx"):
        sess = ort.InferenceSession(str(model_repo / "clip_textual/1" / graph), providers=["CPUExecutionProvider"])
        alone = np.concatenate([sess.run(None, {"input_ids": ids[r:r + 1, :n], "attention_mask": mask[r:r + 1, :n]})[0]
                                for r, n in enumerate(lengths)])
        width = int(lengths[short].max())
        together = sess.run(None, {"input_ids": ids[short, :width], "attention_mask": mask[short, :width]})[0]
        assert cosines(alone, expected).min() >= 0.9999, graph
        assert cosines(together, expected[short]).min() >= 0.9999, graph


def test_open_clip_tokenizer_pipeline_equals_transformers(weights, reference):
    # The open_clip path rebuilds OpenAI's BPE from its vocabulary and merges (open_clip itself
    # cannot be imported here): from the tiny model's files it must tokenize as transformers does.
    vocab = json.loads((weights / "vocab.json").read_text())
    merges = [line for line in (weights / "merges.txt").read_text().splitlines()[1:] if line]
    tok = clip_export.clip_bpe_tokenizer(vocab, merges, tiny_clip.BOS, tiny_clip.EOS)
    ids, mask = clip_export.tokenize(tok, {"context_length": 77, "pad_id": vocab[tiny_clip.EOS], "pad_token": tiny_clip.EOS}, texts())
    enc = reference.tokenizer(texts(), padding="max_length", max_length=77, truncation=True)
    assert ids.tolist() == enc["input_ids"] and mask.tolist() == enc["attention_mask"]


def test_text_truncation_boundary(client, reference):
    fits = " ".join(["cat"] * 75)  # start + 75 + end = 77 tokens
    assert len(reference.tokenizer(fits)["input_ids"]) == 77
    _, truncated = clip.embed_texts(client, [fits, fits + " cat"])
    assert truncated.tolist() == [False, True]


# -- the export
def test_built_model_and_configs(model_repo):
    import onnxruntime as ort
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    assert CLIP().dim(model_repo) == 512
    assert CLIP().build(model_repo, str(Path(json.loads(CLIP().manifest_path(model_repo).read_text())["weights"]))).status == "up to date"
    # Triton's onnxruntime backend (the container's) accepts the config: after the batch dim, input
    # dims must equal the graph's where the graph fixes them, and output dims must equal exactly.
    for name in ("clip_visual", "clip_textual"):
        cfg = text_format.Parse((model_repo / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        sess = ort.InferenceSession(str(model_repo / name / "1/model.onnx"), providers=["CPUExecutionProvider"])
        graph = {t.name: [d if isinstance(d, int) else -1 for d in t.shape] for t in [*sess.get_inputs(), *sess.get_outputs()]}
        for t in cfg.input:
            assert graph[t.name][0] == -1 and all(g in (-1, c) for g, c in zip(graph[t.name][1:], t.dims, strict=True)), t.name
        for t in cfg.output:
            assert graph[t.name] == [-1, *t.dims], t.name


def test_unreachable_weights_are_reported_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = CLIP().build(tmp_path, "openai/clip-vit-base-patch32")
    assert report.status == "missing weights" and "--clip-source /path/to/model-dir" in report.detail
    report = CLIP().build(tmp_path, "open_clip:ViT-B-32/laion2b_s34b_b79k")
    assert report.status == "missing weights"
    assert "open_clip cannot be imported" in report.detail and "torchvision" in report.detail
    report = CLIP().build(tmp_path, "open_clip:ViT-B-32")
    assert report.status == "missing weights" and "MODEL/PRETRAINED" in report.detail
    report = CLIP().build(tmp_path, str(tmp_path))
    assert report.status == "missing weights" and "not a CLIP model folder" in report.detail
    assert not any(tmp_path.rglob("*.onnx"))


def test_a_model_the_configs_do_not_fit_is_refused(tmp_path, weights):
    repo = tmp_path / "repo"
    shutil.copytree(PROJECT_ROOT / "triton_repo", repo, ignore=shutil.ignore_patterns("*.onnx", "minilm*"))
    path = repo / "clip_visual" / "config.pbtxt"
    path.write_text(path.read_text().replace("dims: [ 512 ]", "dims: [ 768 ]"))
    report = CLIP().build(repo, str(weights))
    assert report.status == "missing weights" and "embedding dims [512]" in report.detail and "declares [768]" in report.detail
    assert not any(repo.rglob("*.onnx"))
