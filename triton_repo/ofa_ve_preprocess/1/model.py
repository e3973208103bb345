"""Pre-processing step of the ``ofa_ve`` ensemble: image bytes + hypothesis (+ premise) -> the OFA
encoder's inputs and the decoder prompt, as modelscope 1.40.2's OfaVisualEntailmentPreprocessor
builds them (``preprocessors/ofa/visual_entailment.py``, ``base.py``).

The work is done by pure functions (``pre_caption``, ``encode_text``, ``pad_batch``, ``image_pixels``)
that the export and the tests import without Triton. Decoding, EXIF orientation and the resize /
normalise arithmetic are clip_image_preprocess's functions (loaded from the sibling model folder,
so the two image steps cannot drift apart); OFA's ``convert("RGB")`` is its ``alpha="drop"``.
"""

import importlib.util
import json
import os
import re

import numpy as np

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # the tests and the export import the pure functions without Triton
    pb_utils = None

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_CHARS_PER_WORD = 64  # text beyond max_src_length * this is cut before tokenizing (it would be cut anyway)


def _clip_step():
    path = os.path.join(HERE, "..", "..", "clip_image_preprocess", "1", "model.py")
    spec = importlib.util.spec_from_file_location("ofa_clip_image_steps", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_clip = _clip_step()
BadImage = _clip.BadImage


class BadText(ValueError):
    """The hypothesis or premise cannot be used; the message says why."""


def pre_caption(caption: str, max_words: int) -> tuple[str, bool]:
    """modelscope's OfaBasePreprocessor.pre_caption; also whether words were cut."""
    caption = caption.lower().lstrip(",.!?*#:;~").replace("-", " ").replace("/", " ").replace("<person>", "person")
    caption = re.sub(r"\s{2,}", " ", caption)
    caption = caption.rstrip("\n").strip(" ")
    words = caption.split(" ")
    if len(words) > max_words:
        return " ".join(words[:max_words]), True
    return caption, False


def prompt_text(ve: dict, hypothesis: str, premise: str | None) -> tuple[str, bool]:
    """The encoder's text: the configured prompt around the cleaned hypothesis (and premise)."""
    n = ve["max_src_length"]
    limit = n * MAX_CHARS_PER_WORD
    cut = len(hypothesis) > limit or len(premise or "") > limit
    hyp, cut_h = pre_caption(hypothesis[:limit], n)
    if not hyp.strip():
        raise BadText("HYPOTHESIS: is empty" + (" after normalisation (lower case, leading punctuation "
                                                "stripped)" if hypothesis.strip() else ""))
    if not premise or not premise.strip():
        return ve["prompt"].format(hyp), cut or cut_h
    prem, cut_p = pre_caption(premise[:limit], n)
    return ve["prompt_premise"].format(prem, hyp), cut or cut_h or cut_p


def encode_text(tok, ve: dict, hypothesis: str, premise: str | None = None) -> tuple[list[int], bool]:
    """``<s>`` + BPE ids (at most max_src_length) + ``</s>``, and whether anything was cut."""
    text, cut = prompt_text(ve, hypothesis, premise)
    ids = tok.encode(text).ids
    n = ve["max_src_length"]
    return [ve["bos_id"], *ids[:n], ve["eos_id"]], cut or len(ids) > n


def pad_batch(sources: list[list[int]], ve: dict, prompt_type: str | None = None):
    """input_ids [B, L] and decoder_input_ids [B, T] right-padded (as modelscope's collate), and
    last_index [B, 1]: where each decoder prompt ends, the step whose logits score the answers."""
    prompt_type = prompt_type or ve["prompt_type"]
    pad = ve["pad_id"]
    ids = np.full((len(sources), max(map(len, sources))), pad, np.int64)
    for i, s in enumerate(sources):
        ids[i, :len(s)] = s
    if prompt_type == "prev_output":  # the decoder prompt is the source without </s>
        prompts = [s[:-1] for s in sources]
    else:  # "none": just <s>
        prompts = [[ve["bos_id"]] for _ in sources]
    dec = np.full((len(sources), max(map(len, prompts))), pad, np.int64)
    for i, p in enumerate(prompts):
        dec[i, :len(p)] = p
    last = np.array([[len(p) - 1] for p in prompts], np.int64)
    return ids, dec, last


def image_pixels(data: bytes, ve: dict, max_pixels: int) -> np.ndarray:
    """Encoded image -> [3, S, S] float32: transforms.Resize((S, S), BICUBIC), ToTensor, Normalize."""
    size = ve["patch_image_size"]
    cfg = {"resize": {"height": size, "width": size}, "crop": None, "crop_rounding": "floor", "resample": 3,
           "rescale_factor": 1 / 255, "mean": ve["mean"], "std": ve["std"]}
    return _clip.pixels(_clip.to_rgb(_clip.load_image(data, max_pixels), "drop"), cfg)


def _text(value) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args):
        from PIL import Image
        from tokenizers import Tokenizer

        config = json.loads(args["model_config"])
        self.max_pixels = int(config["parameters"]["max_pixels"]["string_value"])
        Image.MAX_IMAGE_PIXELS = self.max_pixels
        folder = os.path.join(args["model_repository"], args["model_version"])
        with open(os.path.join(folder, "ve.json")) as f:
            self.ve = json.load(f)
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))

    def execute(self, requests):
        responses = []
        for request in requests:  # a bad item fails its own request, never the batch or the instance
            try:
                outputs = self._one_request(request)
            except (BadImage, BadText) as exc:  # the caller's data: INVALID_ARGUMENT
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)))
                continue
            except Exception as exc:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"ofa_ve_preprocess failed ({type(exc).__name__}: {exc})")))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def _one_request(self, request):
        def column(name):
            return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)

        images, hyps, prems = column("IMAGE"), column("HYPOTHESIS"), column("PREMISE")
        n = len(images)
        where = (lambda k: f"item {k + 1} of {n}: ") if n > 1 else (lambda k: "")
        sources, truncated, pixels = [], [], []
        for k in range(n):
            try:
                ids, cut = encode_text(self.tok, self.ve, _text(hyps[k]), _text(prems[k]))
            except BadText as exc:
                raise BadText(where(k) + str(exc)) from None
            try:
                pixels.append(image_pixels(bytes(images[k]), self.ve, self.max_pixels))
            except BadImage as exc:
                raise BadImage(f"{where(k)}IMAGE: {exc}") from None
            sources.append(ids)
            truncated.append([cut])
        ids, dec, last = pad_batch(sources, self.ve)
        return [pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("patch_images", np.stack(pixels)),
                pb_utils.Tensor("decoder_input_ids", dec), pb_utils.Tensor("last_index", last),
                pb_utils.Tensor("TRUNCATED", np.array(truncated, dtype=bool))]
