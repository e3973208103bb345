"""The Python steps' shared code (search/triton/steps): the request splitting and checks without a
server, the package's import boundaries, and on the real server every text ensemble answering
bad UTF-8 with INVALID_ARGUMENT while the requests around it are served."""

from __future__ import annotations

import ast
import io
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from tritonclient.utils import InferenceServerException

from search.config import PROJECT_ROOT
from search.triton.steps import bge_m3, tokens
from search.triton.steps.requests import (
    BadInput,
    MixedUp,
    attempt,
    one_each,
    run_grouped,
    split,
    texts,
)

STEPS = PROJECT_ROOT / "search" / "triton" / "steps"
BAD = b"caf\xe9 \xff"  # Latin-1, not UTF-8


# -- the shared helpers, no server
def test_texts_decode_strictly_and_name_the_bad_one():
    assert texts(np.array([[b"caf\xc3\xa9"], ["plain"]], dtype=np.object_), "TEXT") == ["café", "plain"]
    with pytest.raises(BadInput, match=r"^TEXT: not valid UTF-8 \(byte 0xe9 at offset 3\)$"):
        texts(np.array([[BAD]], dtype=np.object_), "TEXT")
    with pytest.raises(BadInput, match=r"^HYPOTHESIS: text 2 of 3: not valid UTF-8"):
        texts(np.array([[b"ok"], [BAD], [b"ok"]], dtype=np.object_), "HYPOTHESIS")


def test_one_value_per_row():
    assert one_each(np.array([[3], [4]]), 2, "MAX_LENGTH", "TEXT").tolist() == [3, 4]
    with pytest.raises(BadInput, match=r"MAX_LENGTH needs one value per TEXT \(1 for 2\)"):
        one_each(np.array([[3]]), 2, "MAX_LENGTH", "TEXT")


def test_split_gives_each_request_its_rows():
    out = {"a": np.arange(6).reshape(6, 1), "b": np.arange(12).reshape(6, 2)}
    parts = split(out, [1, 0, 3, 2])
    assert [p["a"].reshape(-1).tolist() for p in parts] == [[0], [], [1, 2, 3], [4, 5]]
    assert parts[3]["b"].tolist() == [[8, 9], [10, 11]]
    assert split(out, []) == []
    with pytest.raises(ValueError, match="rows"):
        split(out, [2, 3])


def tiny_tokenizer() -> Tokenizer:
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[UNK]": 3, **{w: i + 4 for i, w in enumerate("a b c d e".split())}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    return tok


def test_tokens_truncate_per_limit_pad_to_the_longest_and_leave_the_tokenizer_neutral():
    tok = tiny_tokenizer()
    out = tokens.pad(tokens.encode_each(tok, ["a b c d e", "a", "a b c d e"], [4, 10, 10]), pad_id=9)
    assert out["input_ids"].tolist() == [[1, 4, 5, 2, 9, 9, 9], [1, 4, 2, 9, 9, 9, 9], [1, 4, 5, 6, 7, 8, 2]]
    assert out["attention_mask"].sum(axis=1).tolist() == out["NUM_TOKENS"].reshape(-1).tolist() == [4, 3, 7]
    assert out["TRUNCATED"].reshape(-1).tolist() == [True, False, False]
    assert out["input_ids"].dtype == np.int64 and out["NUM_TOKENS"].dtype == np.int32
    assert tok.truncation is None and tok.padding is None  # tokenizer.json is saved from it
    fixed = tokens.pad(tokens.encode(tok, ["a"], 5), width=5)
    assert fixed["input_ids"].tolist() == [[1, 4, 2, 0, 0]] and fixed["token_type_ids"].shape == (1, 5)
    assert tokens.pad([])["input_ids"].shape == (0, 0)


def test_requests_of_similar_length_share_a_width_and_others_do_not():
    # Sorted: 3 4 6 | 9 10 11 | 40 48 | 200 (within 25 % or 4 tokens of each group's first).
    assert tokens.widths([10, 3, 200, 40, 9, 4, 48, 6, 11]) == [11, 6, 200, 48, 11, 6, 48, 6, 11]
    assert tokens.widths([]) == [] and tokens.widths([7, 0]) == [7, 0] and tokens.widths([5, 5, 5]) == [5, 5, 5]
    tok = tiny_tokenizer()
    encodings = tokens.encode(tok, ["a", "a b", "a b c d e", "a b c d e a b c d e a b c d e a b c d e"], 64)
    out = tokens.pad_requests(encodings, [2, 0, 1, 1], pad_id=9)
    assert [o["input_ids"].shape for o in out] == [(2, 7), (0, 0), (1, 7), (1, 22)]  # 4 joins 7; 22 alone
    assert out[0]["input_ids"].tolist() == [[1, 4, 2, 9, 9, 9, 9], [1, 4, 5, 2, 9, 9, 9]]
    assert out[3]["attention_mask"].sum() == 22


def test_run_grouped_gives_each_request_its_own_outputs():
    refused = BadInput("TEXT: not valid UTF-8")
    calls = []

    def run(per_request):
        calls.append(per_request)
        return [{"N": np.full((len(rows), len(rows) + 1), 7)} for rows in per_request]

    outcomes = run_grouped([["a", "b"], refused, ["c"]], run)
    assert calls == [[["a", "b"], ["c"]]]  # one call for the dynamic batch
    assert outcomes[0]["N"].shape == (2, 3) and outcomes[2]["N"].shape == (1, 2) and outcomes[1] is refused
    failed = run_grouped([["a"], ["b"]], lambda per_request: 1 / 0)
    assert isinstance(failed[0], ZeroDivisionError) and failed[0] is failed[1]
    assert run_grouped([refused], lambda per_request: pytest.fail("nothing to run")) == [refused]
    assert isinstance(attempt(int, "x"), ValueError) and attempt(int, "7") == 7


# -- the package's boundaries
def imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), feature_version=(3, 10))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module)
    return names


def _encoder_outputs(mask: np.ndarray, dim: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the BGE-M3 graph gives for ``mask``: zero token weights and ColBERT rows at padding."""
    n, width = mask.shape
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.1, 1, (n, width)).astype(np.float32) * mask
    colbert = rng.normal(size=(n, width - 1, dim)).astype(np.float32) * mask[:, 1:, None]
    return rng.normal(size=(n, dim)).astype(np.float32), weights, colbert


def test_bge_m3_post_refuses_encoder_outputs_of_another_request():
    """Triton 2.51 hands a stalled step's late answers to the next requests (docs/reliability.md):
    outputs whose shape or padding cannot be this request's fail it, never come back as its vectors."""
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]])
    ids = np.where(mask == 1, 5, 1)
    dense, weights, colbert = _encoder_outputs(mask)
    assert set(bge_m3.post(ids, mask, weights, colbert, dense, np.array([0, 1, 2, 3]), 4, True)) >= {"DENSE"}
    other = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])  # same shape, another text in row 1
    wider = np.ones((2, 7), np.int64)
    for m in (other, wider, mask[:1]):
        with pytest.raises(MixedUp, match="outputs of another request"):
            bge_m3.check_one_request(np.where(m == 1, 5, 1), m, weights, colbert, dense, 4)
    shorter = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0]])  # a real token where this request pads
    with pytest.raises(MixedUp, match="padding"):
        bge_m3.check_one_request(np.where(shorter == 1, 5, 1), shorter, weights * shorter, colbert, dense, 4)


def test_steps_import_only_the_shared_package_and_their_libraries():
    """Pure modules: numpy, tokenizers, Pillow; triton_python_backend_utils only in backend.py (the
    export code imports the rest without Triton); nothing of search outside the package (the
    Triton image holds only it)."""
    allowed = {"numpy", "tokenizers", "PIL", "pillow_heif", "cv2", "pyclipper", "shapely"}  # the last three: OCR, as RapidOCR
    for module in STEPS.glob("*.py"):
        for name in imports(module):
            top = name.split(".")[0]
            if top == "search":
                assert name.startswith("search.triton.steps"), (module.name, name)
            elif name == "triton_python_backend_utils":
                assert module.name == "backend.py", module.name
            else:
                assert top in allowed or top in sys.stdlib_module_names, (module.name, name)
    for parent in (PROJECT_ROOT / "search" / "__init__.py", PROJECT_ROOT / "search" / "triton" / "__init__.py"):
        assert not parent.read_text().strip(), f"{parent} is imported by every step: keep it empty"


def test_no_step_is_loaded_by_file_path():
    for model_py in (PROJECT_ROOT / "triton_repo").glob("*/1/model.py"):
        names = imports(model_py)
        assert "importlib" not in names and "importlib.util" not in names, model_py
        assert any(n.startswith("search.triton.steps") for n in names), f"{model_py}: use search.triton.steps"
    step_files = re.compile(r"spec_from_file_location\([^)]*(triton_repo|/1/|model\.py)")
    for folder in ("search", "tests", "bench", "tools"):
        for source in (PROJECT_ROOT / folder).rglob("*.py"):
            assert not step_files.search(source.read_text(errors="replace")), source


# -- on the real server
@pytest.fixture(scope="module")
def grpc(triton):
    return grpcclient.InferenceServerClient(f"127.0.0.1:{triton.grpc_port}")


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (200, 80, 10)).save(buf, "PNG")
    return buf.getvalue()


def column(*values) -> np.ndarray:
    return np.array(values, dtype=np.object_).reshape(-1, 1)


# ensemble, inputs of a request built from one text, the input that carries it, an output
ENSEMBLES = {
    "minilm": (lambda t: {"TEXT": column(t)}, "TEXT", "EMBEDDING"),
    "clip_text": (lambda t: {"TEXT": column(t)}, "TEXT", "EMBEDDING"),
    "bge_m3": (lambda t: {"TEXT": column(t)}, "TEXT", "DENSE"),
    "ofa_ve": (lambda t: {"IMAGE": column(png()), "HYPOTHESIS": column(t), "PREMISE": column(b"")}, "HYPOTHESIS", "PROBS"),
    "ofa_ve premise": (lambda t: {"IMAGE": column(png()), "HYPOTHESIS": column(b"two dogs"), "PREMISE": column(t)},
                       "PREMISE", "PROBS"),
}


def infer(grpc, model: str, inputs: dict[str, np.ndarray], output: str):
    tensors = []
    for name, array in inputs.items():
        t = grpcclient.InferInput(name, list(array.shape), "BYTES")
        t.set_data_from_numpy(array)
        tensors.append(t)
    try:
        return grpc.infer(model, tensors, outputs=[grpcclient.InferRequestedOutput(output)]).as_numpy(output)
    except InferenceServerException as exc:
        return exc


@pytest.mark.parametrize("case", list(ENSEMBLES))
def test_bad_utf8_is_invalid_argument_and_the_batch_around_it_is_served(grpc, case):
    model = case.split()[0]
    build, name, output = ENSEMBLES[case]
    alone = infer(grpc, model, build(b"a short text"), output)
    assert isinstance(alone, np.ndarray), alone
    # concurrent requests, so the dynamic batcher hands the bad one over with good ones
    requests = [build(BAD if k % 4 == 1 else b"a short text") for k in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda inputs: infer(grpc, model, inputs, output), requests))
    for k, res in enumerate(results):
        if k % 4 == 1:
            assert isinstance(res, InferenceServerException), res
            assert res.status() == "StatusCode.INVALID_ARGUMENT", (res.status(), res.message())
            assert name in res.message() and "UTF-8" in res.message(), res.message()
        else:
            assert isinstance(res, np.ndarray), res
            np.testing.assert_allclose(res, alone, atol=1e-5)
    after = infer(grpc, model, build(b"a short text"), output)
    assert isinstance(after, np.ndarray) and np.allclose(after, alone, atol=1e-5)
