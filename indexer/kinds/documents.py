"""Documents: pages -> token-budgeted chunks -> each embedding family's vectors; the text in their
scans (and, when asked, in photos) read by a model first."""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from indexer.chunking import Chunker
from indexer.kinds.base import (
    THUMBNAIL_DRAFT,
    THUMBNAIL_SIZE,
    Embedded,
    Loaded,
    Unit,
    probe,
    probe_reader,
    stored_vectors,
    thumbnail_path,
)
from indexer.loaders import DOCUMENT_SUFFIXES, SCAN_SUFFIXES, BadDocument, Budget, Page, load_document
from indexer.loaders.base import MAX_OCR_PAGE_SECONDS
from indexer.loaders.scans import MAX_FRAME_PIXELS
from search.config import Settings
from search.errors import BadRequest, TritonUnavailable
from search.media.photos import BadImage, decode_photo, save_thumbnail
from search.models import Family, required
from search.models.base import read_as_text
from search.store import DOCUMENTS, documents_schema, in_kb, kb_thumbnails
from search.terms import codes, words
from search.triton.client import TritonClient

MAX_WORDS = 1_000  # distinct words an image's passage indexes for photo search by words
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+)$", re.M)  # the loaders write headings as markdown lines


class Documents:
    """Documents -> pages -> token-budgeted chunks -> each embedding family's vectors (the required
    family's always, an optional family's when it is served), one pass per family."""

    name, suffixes = DOCUMENTS.name, DOCUMENT_SUFFIXES
    errors = (BadDocument,)

    def __init__(self, triton: TritonClient, chunker: Chunker, max_bytes: int, families: list[Family],
                 kb: str | None = None, readers: list[Family] = (), photos: bool = False, thumbs: Path | None = None,
                 **limits: float) -> None:
        """``families``: the served families that embed documents (registry order: the required one
        first, then optional ones). ``kb``: the knowledge base written (None: the default one).
        ``readers``: served families that read the text in images: with one, scanned PDF pages are
        read, and with ``photos`` image files are documents too (their lines are the text; their
        passages keep their words for photo search, and a thumbnail in ``thumbs``).
        ``limits``: the file's Budget (max_seconds, max_elements, max_pages; max_ocr_seconds and
        max_ocr_page_seconds for reading its scans)."""
        self.triton, self.chunker, self.max_bytes, self.families = triton, chunker, max_bytes, families
        self.readers, self.thumbs = list(readers), thumbs
        self.suffixes = DOCUMENT_SUFFIXES | (SCAN_SUFFIXES if self.readers and photos else frozenset())
        self.schema = in_kb(documents_schema(f.family for f in families), kb)
        self.limits = limits
        self.models = [f.family for f in families]

    @classmethod
    def made(cls, settings: Settings, triton: TritonClient, families: list[Family], kb: str | None = None) -> Documents:
        """The kind on ``settings`` (make_kind): ``families``, the served ones that embed documents and
        those that read the text in images."""
        s = settings
        chunker = Chunker(chunk_tokenizer(s), max_tokens=chunk_tokens(s), overlap=s.chunk_overlap)
        return cls(triton, chunker, s.max_file_bytes, [f for f in families if cls.name in f.kinds], kb,
                   [f for f in families if f.reads_text], photos=s.ocr_photos, thumbs=kb_thumbnails(s.data_dir, kb),
                   max_seconds=s.max_parse_seconds, max_elements=s.max_parse_elements, max_pages=s.max_pdf_pages,
                   max_ocr_seconds=s.max_ocr_seconds, max_ocr_page_seconds=s.max_ocr_page_seconds)

    @cached_property
    def signature(self) -> str:
        # Which models (and which weights of the optional ones) made the vectors: a change re-embeds every file.
        # Lazy, so a dead model surfaces inside the pipeline, which stops just this kind.
        embedders = "+".join(self.models) + "".join(f":{probe(self.triton, f)}" for f in self.families if f.optional)
        return f"{embedders}/v{self.chunker.VERSION}/{self.chunker.max_tokens}/{self.chunker.overlap}"

    @cached_property
    def read_signature(self) -> str | None:
        # A document whose text OCR read (some of it) is stored under this one: the reader and its weights
        # join the signature, so new OCR weights read those again, and no other document is embedded anew.
        if not self.readers:
            return None
        reader = self.readers[0]
        return f"{self.signature}/read:{reader.family}:{probe_reader(self.triton, reader)}:{reader.layout_version}"

    def load(self, path: Path, data: bytes, sha256: str, stop: Callable[[], bool] | None = None) -> Loaded:
        # One budget for reading, OCR and splitting: the split of a heading-only markdown is as costly as any parse.
        budget = Budget(**self.limits, stop=stop)
        doc = load_document(path.suffix.lower(), data, budget=budget, scans=bool(self.readers))
        return Loaded(path, sha256, data if path.suffix.lower() in SCAN_SUFFIXES else b"", doc, budget)

    def read(self, loaded: Loaded) -> None:
        """The text of the scanned pages, read by the first reader: each page as it is read, so a read
        asked again (on another replica) goes on where this one stopped."""
        scans = sum(p.scan is not None or i in loaded.reads for i, p in enumerate(loaded.doc.pages))
        pages = list(loaded.doc.pages)
        try:
            for i in loaded.to_read:
                pages[i], loaded.reads[i] = self._read(pages[i], loaded.budget, scans)
        finally:
            loaded.doc = replace(loaded.doc, pages=pages)

    def units(self, loaded: Loaded) -> list[Unit]:
        doc, budget, path = loaded.doc, loaded.budget, loaded.path
        units, section, scanned = [], None, bool(loaded.reads)
        for n, page in enumerate(doc.pages):
            starts, names = [], []  # the page's headings, by offset (finditer gives them in order)
            for m in _HEADING.finditer(page.text):
                starts.append(m.start())
                names.append(m.group(1).strip())
                budget.tick()
            for c in self.chunker.chunk(page.text, check=budget.check_time):
                # The section a passage belongs to: the last heading that starts at or before it.
                k = bisect.bisect_right(starts, c.start)
                units.append(Unit(c.text, {
                    "text": c.text, "start": c.start, "end": c.end, "page": page.number, "title": doc.title,
                    "section": names[k - 1] if k else section, "models": self.models, "encoding": doc.encoding,
                    "codes": codes(c.text), **loaded.reads.get(n, {})},  # codes: exact strings a search matches
                    read=scanned))
            if names:
                section = names[-1]
        if not units and doc.pages and len(loaded.reads) == len(doc.pages):
            if path.suffix.lower() not in SCAN_SUFFIXES:
                raise BadDocument(f"no text: its {len(doc.pages)} scanned page(s) were read by OCR and hold none")
            # A photo without text: a passage without vectors (no search finds it) marks it read, so
            # the next run does not read it again.
            units.append(Unit(None, {"text": "", "start": 0, "end": 0, "page": None, "title": doc.title, "section": None,
                                     "models": self.models, "encoding": None, "blank": True}, read=True))
        if path.suffix.lower() in SCAN_SUFFIXES:
            thumb = self._thumbnail(loaded.data, loaded.sha256)
            for u in units:  # photo search finds an image by these words (search.services.photo_text)
                u.payload["words"] = sorted(set(words(u.payload["text"])))[:MAX_WORDS]
                if thumb:
                    u.payload["thumbnail"] = thumb
        return units

    def _thumbnail(self, data: bytes, sha256: str) -> str | None:
        """The image's thumbnail (the one the photos' kind writes, by content), so a passage read in it
        shows the picture; None when it cannot be made (the text still counts)."""
        if self.thumbs is None:
            return None
        path = thumbnail_path(self.thumbs, sha256)
        if path.exists():  # the photos' kind made it already (thumbnails are by content)
            return str(path)
        try:
            _, image = decode_photo(data, max_pixels=MAX_FRAME_PIXELS, draft=THUMBNAIL_DRAFT)
            return str(save_thumbnail(image, path, THUMBNAIL_SIZE))
        except (BadImage, OSError):
            return None

    @cached_property
    def _reading(self) -> TritonClient:
        """The client OCR requests go through: the page budget is their deadline (a page the model
        takes longer on is given up, not waited for)."""
        return TritonClient(self.triton.url, self.limits.get("max_ocr_page_seconds", MAX_OCR_PAGE_SECONDS),
                            hint=self.triton.hint)

    def _read(self, page: Page, budget: Budget, scans: int) -> tuple[Page, dict]:
        """A scanned page's text, as the first reader reads it, and what its passages record about
        that. ``scans``: the file's pages to read, for its OCR budget."""
        reader = self.readers[0]
        budget.check_time()
        started = time.monotonic()
        try:
            lines = reader.read_text(self._reading, [page.scan])[0]
        except InferenceServerException as exc:
            where = f"page {page.number}" if page.number else "the image"
            raise BadDocument(f"could not read the text in {where}: {(exc.message() or str(exc)).splitlines()[0][:160]}") from None
        except TritonUnavailable:
            if time.monotonic() - started >= budget.max_ocr_page_seconds:  # its deadline passed, Triton is there
                raise budget.too_long(scans, page.number or 1) from None
            raise
        budget.ocr(time.monotonic() - started, scans)
        score = sum(line.score for line in lines) / len(lines) if lines else 0.0
        return Page(page.number, read_as_text(lines)), {"ocr": {"model": reader.display, "score": round(score, 4)}}

    def embed(self, items: list[str | None]) -> Embedded:
        out: list[dict] = [{} for _ in items]
        n_truncated = 0
        texts = [i for i, item in enumerate(items) if item is not None]  # None: a blank image's marker, no vectors
        for fam in self.families:
            if not texts:
                break
            encoded = fam.encode(self.triton, [items[i] for i in texts])
            for i, got in zip(texts, encoded.vectors):
                out[i].update(stored_vectors(fam, got))
            n_truncated += int(np.sum(encoded.truncated))
        return Embedded(out, n_truncated)

    def sort_key(self, item: str | None) -> int:
        return len(item or "")

    def forget(self, sha256: str) -> None:
        pass


def chunk_tokens(settings: Settings) -> int:
    """Tokens per chunk: the chunk_tokens setting, which the family that embeds documents must read
    whole (``Family.chunk_window``). A value set that it cannot is refused in one line naming its
    window; the default is cut to a window that is smaller."""
    fam, asked = required(DOCUMENTS.name), settings.chunk_tokens
    if asked <= fam.chunk_window:
        return asked
    if "chunk_tokens" not in settings.model_fields_set:
        return fam.chunk_window
    raise BadRequest(f"chunk_tokens (--chunk-tokens, SEARCH_CHUNK_TOKENS): at most {fam.chunk_window}, the tokens of text "
                     f"{fam.display} reads in a chunk ({fam.max_tokens} with its {fam.special_tokens} special tokens), "
                     f"got {asked}")


def chunk_tokenizer(settings: Settings) -> Tokenizer:
    """The tokenizer the documents' required model uses, so chunk budgets are counted in its tokens."""
    return Tokenizer.from_file(str(required(DOCUMENTS.name).chunk_tokenizer(settings.triton_repo)))
