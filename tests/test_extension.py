"""A capability is the unit of extension: a family defined in this file and registered with one line
is found by the product's own code, with no other edit. Here: a second text reader, served by the
session's Triton like the first, chosen by a setting (SEARCH_TEXT_READER) and used by `search ocr`'s
service and by ingest, while the first reader stays as it was."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from ingest_helper import ingest

import search.models
from search.config import PROJECT_ROOT
from search.errors import ModelNotReady
from search.models import PPOCR, text_reader
from search.services import SearchService
from search.store import DOCUMENTS

pytestmark = pytest.mark.served("ppocr")
SCAN = PROJECT_ROOT / "samples" / "scans" / "printer-queue-scan.pdf"


class ShoutingReader(PPOCR):
    """Another model that reads text: the served PP-OCR's lines in capitals (a reader for another
    script or with other weights differs from the first as much)."""

    family, display = "shouting_ocr", "Shouting OCR"

    def read_text(self, client, images: list[bytes]) -> list[list]:
        return [[dataclasses.replace(line, text=line.text.upper()) for line in lines]
                for lines in super().read_text(client, images)]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, ShoutingReader()))  # the one line


def _passages(svc: SearchService) -> str:
    points, _ = svc.store.scroll(DOCUMENTS.name, limit=1000, with_payload=True)
    return " ".join(p.payload["text"] for p in sorted(points, key=lambda p: p.payload["chunk"]))


def test_a_second_text_reader_is_chosen_by_a_setting_for_ocr_and_ingest(registered, settings, tmp_path):
    with pytest.raises(ModelNotReady, match="several models read text .*SEARCH_TEXT_READER"):
        text_reader()
    folder = tmp_path / "kb"
    folder.mkdir()
    shutil.copy(SCAN, folder)
    got = {}
    for reader in (PPOCR.family, ShoutingReader.family):  # one after the other: they share the data dir
        svc = SearchService(settings.model_copy(update={"text_reader": reader}))
        try:
            got[reader] = svc.read_text(SCAN), [o.status for o in ingest(svc, [folder]).outcomes], _passages(svc)
        finally:
            svc.close()
    (plain, plain_status, plain_text), (loud, loud_status, loud_text) = got[PPOCR.family], got[ShoutingReader.family]
    assert loud.model == "Shouting OCR" and plain.model == "PP-OCR"
    assert [line["text"] for line in loud.lines] == [line["text"].upper() for line in plain.lines]
    assert any(line["text"] != line["text"].upper() for line in plain.lines)  # the first reader is untouched
    assert plain_status == ["indexed"] and "spooler" in plain_text
    # The reader is part of a scan's signature: the one chosen next reads it again, in capitals.
    assert loud_status == ["updated"] and "SPOOLER" in loud_text and "spooler" not in loud_text


def test_a_reader_that_is_not_registered_is_named_in_one_line(registered):
    with pytest.raises(ModelNotReady, match="SEARCH_TEXT_READER 'tesseract': no such reader .*shouting_ocr"):
        text_reader("tesseract")
