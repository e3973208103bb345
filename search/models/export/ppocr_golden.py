"""OCR's golden outputs: RapidOCR's own pipeline, in-process on ONNX Runtime with the same model
files and thresholds, run on the golden images with text and recorded at build time for `search
models verify` (the shared part is ``search.models.export.golden``)."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from search.models import golden
from search.models.base import Family
from search.models.export.golden import write
from search.models.ppocr import TextLine, lines_arrays


def reference(models: dict[str, Path], dictionary: Path | None, config_yaml: Path):
    """RapidOCR configured with these models: ``reference(...)(image_bytes)`` -> (result, elapsed)."""
    from rapidocr_onnxruntime import RapidOCR  # noqa: PLC0415  (the weights package: only a build needs it)

    extra = {"rec_keys_path": str(dictionary)} if dictionary else {}
    return RapidOCR(config_path=str(config_yaml), det_model_path=str(models["det"]), cls_model_path=str(models["cls"]),
                    rec_model_path=str(models["rec"]), **extra)


def read(engine, data: bytes) -> list[TextLine]:
    result, _ = engine(data)
    return [TextLine(text, float(score), [[float(x), float(y)] for x, y in box]) for box, text, score in (result or [])]


def record(fam: Family, repo: Path, models: dict[str, Path], dictionary: Path | None, config_yaml: Path,
           source: str) -> dict:
    engine = reference(models, dictionary, config_yaml)
    arrays = lines_arrays([read(engine, scan.data) for scan in golden.inputs().scans])
    return write(fam, repo, arrays, f"RapidOCR {version('rapidocr-onnxruntime')} in-process (onnxruntime "
                 f"{version('onnxruntime')}), the same model files", source=source, weights=models["rec"],
                 versions={"rapidocr_onnxruntime": version("rapidocr-onnxruntime")})
