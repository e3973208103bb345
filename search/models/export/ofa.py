"""OFA visual entailment (``search.models.ofa``) to ONNX, plus the BPE tokenizer and the
pre-processing settings the Python steps read.

Weights: a ModelScope OFA visual-entailment checkpoint folder (e.g.
``iic/ofa_visual-entailment_snli-ve_large_en``), exported with modelscope's OFA code vendored in
``search.models.ofa_arch`` (modelscope itself needs fairseq), torch + transformers only.

Semantics: modelscope 1.40.2's, i.e. OFA's SNLI-VE evaluation rule:
- image: EXIF orientation, RGB, bicubic resize to S×S (no crop), /255, (x - mean) / std;
- text: ``pre_caption``, the prompt `` does the image describe " H "?`` (with a premise
  `` can image and text1 " P " imply text2 " H "?``), BART BPE cut at ``max_src_length``,
  ``<s>`` + ids + ``</s>``;
- decoder prompt: ``<s>`` ("none") or the source without ``</s>`` ("prev_output");
- answers " no" / " yes" / " maybe" are single tokens, so scoring is the softmax of their three
  logits after one decoder step.

The graph is the encoder plus that step, so no model-size-dependent tensor crosses a Triton step:
the configs fit OFA-tiny, -base and -large; only the image size (480) is declared."""

from __future__ import annotations

import json
from pathlib import Path

from search.models.base import BuildReport, WeightsUnavailable
from search.models.export import ofa_golden
from search.models.export.common import check_config_dims, export_checked, write_manifest
from search.models.ofa import ANSWERS, HUB_ID, LABELS, OFA, RELATION
from search.triton.steps import ofa_ve  # the served pre-processing, which the export check runs too

IMAGE_SIZE = 480  # the committed configs' patch_images dims (OFA's SNLI-VE checkpoints use 480)
PROMPT = ' does the image describe " {} "?'
PROMPT_PREMISE = ' can image and text1 " {} " imply text2 " {} "?'
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
CHECKPOINT_FILES = ("config.json", "configuration.json", "vocab.json", "merges.txt")


def build(fam: OFA, repo: Path, source: str, precision: str = "fp32", allow_unmeasured: bool = False) -> BuildReport:
    """OFA is served in fp32 only (``OFA.precisions``): ``Family.build`` refuses anything else."""
    try:
        weights = checkpoint_dir(source)
        ve = read_configuration(weights)
        tok = build_tokenizer(weights)
        ve.update(special_ids(weights))
        answer_ids = answer_token_ids(tok)
        size = ve["patch_image_size"]
        check_config_dims(repo, "ofa", {("ofa_ve_preprocess", "patch_images"): [3, size, size],
                                        ("ofa_ve_onnx", "patch_images"): [3, size, size]}, f"an OFA at {size} px")
        model = load_model(weights)
    except WeightsUnavailable as exc:
        return BuildReport(fam.family, "missing weights", str(exc))
    diff = export_onnx(model, tok, ve, answer_ids, repo / "ofa_ve_onnx/1/model.onnx")
    tok.save(str(repo / "ofa_ve_preprocess/1/tokenizer.json"))
    (repo / "ofa_ve_preprocess/1/ve.json").write_text(json.dumps(ve, indent=2))
    post = {"answers": list(ANSWERS), "answer_token_ids": answer_ids, "relation": RELATION, "labels": list(LABELS)}
    (repo / "ofa_ve_post/1/post.json").write_text(json.dumps(post, indent=2))
    size = f"d_model {model.config.d_model}, {model.config.encoder_layers}+{model.config.decoder_layers} layers, " \
           f"{model.config.resnet_type}"
    order = [list(ANSWERS).index(next(a for a, rel in RELATION.items() if rel == label)) for label in LABELS]
    recorded = ofa_golden.record(fam, repo, ve_module(model, ve["patch_image_size"], answer_ids), tok, ve, order,
                                 source, weights)  # for `search models verify`
    write_manifest(fam, repo, source, weights, max_abs_diff_vs_torch=diff, model=size, **recorded)
    return BuildReport(fam.family, "built", f"from {source} ({weights}); {size}; {ve['patch_image_size']} px, "
                       f"prompt_type {ve['prompt_type']}; ONNX vs PyTorch max |Δ| {diff:.1e}")


# -- the checkpoint
def checkpoint_dir(source: str) -> Path:
    """A local ModelScope checkpoint folder, or a ModelScope hub id fetched with the ``modelscope``
    package where it is installed and its hub answers (not on these offline machines)."""
    path = Path(source).expanduser()
    how = (f"on a connected machine run `modelscope download --model {HUB_ID} --local_dir DIR`, copy DIR here "
           "and run `search models build --ofa-source DIR`")
    if not path.is_dir():
        if path.exists() or source.startswith((".", "/", "~")):
            raise WeightsUnavailable(f"ofa: '{source}' is not a checkpoint directory: {how}")
        path = _modelscope_download(source, how)
    missing = [f for f in CHECKPOINT_FILES if not (path / f).exists()]
    if not any((path / f).exists() for f in ("pytorch_model.bin", "model.safetensors")):
        missing.append("pytorch_model.bin")
    if missing:
        raise WeightsUnavailable(f"ofa: {path} is not a ModelScope OFA checkpoint (missing {', '.join(missing)}): {how}")
    return path.resolve()


def _modelscope_download(model_id: str, how: str) -> Path:
    try:
        from modelscope.hub.snapshot_download import snapshot_download  # noqa: PLC0415
    except Exception as exc:  # not installed (the project does not depend on it), or broken
        raise WeightsUnavailable(f"ofa: weights '{model_id}' are on the ModelScope hub, and the `modelscope` package "
                                 f"is not installed here ({type(exc).__name__}): {how}") from exc
    try:
        return Path(snapshot_download(model_id))
    except Exception as exc:  # offline, unknown id: both mean "not here"
        raise WeightsUnavailable(f"ofa: weights '{model_id}' could not be fetched from ModelScope "
                                 f"({(str(exc).splitlines() or [type(exc).__name__])[0][:160]}): {how}") from exc


def read_configuration(weights: Path) -> dict:
    """The pre-processing settings the checkpoint's configuration.json gives (modelscope's defaults
    where it is silent), written as ofa_ve_preprocess/1/ve.json."""
    cfg = json.loads((weights / "configuration.json").read_text())
    task = cfg.get("task")
    if task not in ("visual-entailment", None):
        raise WeightsUnavailable(f"ofa: {weights} is a '{task}' checkpoint, not visual-entailment")
    m = cfg.get("model", {})
    if m.get("language", "en") != "en":
        raise WeightsUnavailable(f"ofa: language '{m['language']}' is not supported (English BPE only)")
    prompt_type = m.get("prompt_type", "none")
    if prompt_type not in ("none", "prev_output"):
        raise WeightsUnavailable(f"ofa: prompt_type '{prompt_type}' is not supported (none, prev_output)")
    answers = m.get("answer2label")
    if isinstance(answers, str):
        answers = json.loads((weights / answers).read_text()) if (weights / answers).exists() else None
    if answers and set(answers) != set(ANSWERS):
        raise WeightsUnavailable(f"ofa: answers {sorted(answers)} are not OFA's SNLI-VE answers {list(ANSWERS)}")
    imagenet = bool(m.get("imagenet_default_mean_and_std", False))
    prompt = m.get("prompt")  # modelscope uses one configured prompt for both forms
    return {"patch_image_size": int(m.get("patch_image_size", IMAGE_SIZE)),
            "mean": IMAGENET_MEAN if imagenet else [0.5, 0.5, 0.5], "std": IMAGENET_STD if imagenet else [0.5, 0.5, 0.5],
            "max_src_length": int(m.get("max_src_length", 256)), "prompt_type": prompt_type,
            "prompt": prompt or PROMPT, "prompt_premise": prompt or PROMPT_PREMISE}


def build_tokenizer(weights: Path):
    """modelscope's OFATokenizer (transformers' BartTokenizer on the checkpoint's vocab.json and
    merges.txt, plus 8192 ``<code_i>`` and 1000 ``<bin_i>`` tokens) as a ``tokenizers`` pipeline."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer  # noqa: PLC0415

    tok = ByteLevelBPETokenizer(str(weights / "vocab.json"), str(weights / "merges.txt"), add_prefix_space=False)
    # BART's special tokens stay whole when written in a text, "<mask>" eats the space before it.
    tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, normalized=False)])
    tok.add_tokens([f"<code_{i}>" for i in range(8192)] + [f"<bin_{i}>" for i in range(1000)])
    return tok


def special_ids(weights: Path) -> dict:
    vocab = json.loads((weights / "vocab.json").read_text(encoding="utf-8"))
    try:
        return {"bos_id": vocab["<s>"], "pad_id": vocab["<pad>"], "eos_id": vocab["</s>"]}
    except KeyError as exc:
        raise WeightsUnavailable(f"ofa: vocab.json lacks BART's special token {exc}") from exc


def answer_token_ids(tok) -> list[int]:
    """The ids of " no", " yes", " maybe": one token each, or one-step scoring would be wrong."""
    ids = [tok.encode(" " + a).ids for a in ANSWERS]
    if any(len(i) != 1 for i in ids):
        raise WeightsUnavailable(f"ofa: the answers must be single BPE tokens, got {dict(zip(ANSWERS, ids))}")
    return [i[0] for i in ids]


def load_model(weights: Path):
    cfg = json.loads((weights / "config.json").read_text())
    if cfg.get("model_type") != "ofa":
        raise WeightsUnavailable(f"ofa: {weights}/config.json has model_type {cfg.get('model_type')!r}, not 'ofa'")
    if cfg.get("use_ofasys"):
        raise WeightsUnavailable("ofa: OFASys (ViT) checkpoints are not supported; the ResNet OFA checkpoints are")
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    from search.models.ofa_arch.modeling_ofa import OFAModel  # noqa: PLC0415

    hf_logging.disable_progress_bar()
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # unused-weight notices about heads VE does not use
    try:
        return OFAModel.from_pretrained(str(weights)).eval()
    finally:
        hf_logging.set_verbosity(level)



# -- export
def ve_module(model, size: int, answer_ids: list[int]):
    """The served graph as a PyTorch module: input_ids [B, L], patch_images [B, 3, S, S],
    decoder_input_ids [B, T], last_index [B, 1] -> answer_logits [B, 3] (no, yes, maybe)."""
    import torch  # noqa: PLC0415

    from search.models.ofa_arch.utils.utils import expand_mask  # noqa: PLC0415

    class VisualEntailment(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.decoder = model.encoder, model.decoder
            with torch.no_grad():  # image tokens for the fixed input size (the ResNet's stride is 16)
                h, w = model.encoder.embed_images(torch.zeros(1, 3, size, size)).shape[-2:]
            self.num_patches = int(h * w)
            self.register_buffer("answer_ids", torch.tensor(answer_ids, dtype=torch.long), persistent=False)

        def forward(self, input_ids, patch_images, decoder_input_ids, last_index):
            # modelscope passes patch_masks [B] (all True); `image_padding_mask[~patch_masks] = True`
            # then exports to a Where broadcasting [B] against [B, P] (wrong for B != 1). An all-True
            # [B, P] mask indexes the same and exports correctly.
            patch_masks = torch.ones(patch_images.shape[0], self.num_patches, dtype=torch.bool)
            enc = self.encoder(input_ids=input_ids, patch_images=patch_images, patch_masks=patch_masks)
            hidden = enc.last_hidden_state
            mask = expand_mask(enc.padding_mask, hidden.dtype, decoder_input_ids.shape[-1])
            logits = self.decoder(decoder_input_ids, encoder_hidden_states=hidden, encoder_attention_mask=mask,
                                  src_pos_embed=enc.position_embedding)[0]
            idx = last_index.reshape(-1, 1, 1).expand(-1, 1, logits.shape[-1])
            return logits.gather(1, idx).squeeze(1).index_select(1, self.answer_ids)

    return VisualEntailment().eval()


def export_onnx(model, tok, ve: dict, answer_ids: list[int], dest: Path) -> float:
    """ofa_ve_onnx: input_ids [B, L], patch_images [B, 3, S, S], decoder_input_ids [B, T],
    last_index [B, 1] -> answer_logits [B, 3] (no, yes, maybe); returns max |ONNX - PyTorch|."""
    import torch  # noqa: PLC0415

    size = ve["patch_image_size"]
    # A padded batch with decoder prompts longer than one token: modelscope branches in Python on
    # "any padding" and "more than one decoder token"; the traced branches are exact for the others
    # too (tests/test_ofa_serving.py checks unpadded and one-token prompts).
    texts = [("two dogs run on the beach", None), ("a man rides a horse", "people are playing football on grass")]
    enc = [ofa_ve.encode_text(tok, ve, h, p) for h, p in texts]
    ids, dec, last = ofa_ve.pad_batch([e[0] for e in enc], ve, prompt_type="prev_output")
    pixels = torch.randn((len(texts), 3, size, size), generator=torch.Generator().manual_seed(0))
    feeds = {"input_ids": torch.from_numpy(ids), "patch_images": pixels,
             "decoder_input_ids": torch.from_numpy(dec), "last_index": torch.from_numpy(last)}
    axes = {"input_ids": {0: "batch", 1: "source"}, "patch_images": {0: "batch"},
            "decoder_input_ids": {0: "batch", 1: "prompt"}, "last_index": {0: "batch"}, "answer_logits": {0: "batch"}}
    return export_checked(ve_module(model, size, answer_ids), feeds, ["answer_logits"], axes, dest, "ofa", fix=fix_graph)


def fix_graph(tmp: Path, dest: Path) -> None:
    """onnxruntime's CPU provider has no bool ``Where`` (modelscope's ``image_padding_mask[...] = True``
    exports to one): rewrite each as Cast(int32) -> Where -> Cast(bool). Models over 2 GB (OFA-large
    with its untied output projection copy) are saved with their weights in ``<dest>.data``."""
    import onnx  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415

    m = onnx.load(str(tmp), load_external_data=False)  # types first: over 2 GB the weights live in files
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in [*inferred.graph.value_info, *inferred.graph.output]}
    scattered = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
    if scattered:
        onnx.load_external_data_for_model(m, str(tmp.parent))
    nodes = []
    for k, n in enumerate(m.graph.node):
        if n.op_type == "Where" and types.get(n.output[0]) == TensorProto.BOOL:
            a, b, out = f"{n.input[1]}_i32_{k}", f"{n.input[2]}_i32_{k}", n.output[0]
            nodes += [helper.make_node("Cast", [n.input[1]], [a], to=TensorProto.INT32),
                      helper.make_node("Cast", [n.input[2]], [b], to=TensorProto.INT32),
                      helper.make_node("Where", [n.input[0], a, b], [out + "_i32"]),
                      helper.make_node("Cast", [out + "_i32"], [out], to=TensorProto.BOOL)]
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    if scattered or m.ByteSize() > 1_800_000_000:
        onnx.save(m, str(tmp), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=dest.name + ".data", size_threshold=1024)
        for name in scattered:
            (tmp.parent / name).unlink(missing_ok=True)
    else:
        onnx.save(m, str(tmp))
