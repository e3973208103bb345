"""Index through the indexer's service on a query service's store (one store per process)."""

from pathlib import Path

from indexer.service import IngestService
from search.store import DOCUMENTS, match


def ingest(svc, paths, **kwargs):
    return IngestService(svc.settings, svc.resources).ingest(paths, **kwargs)


def long_passage(svc, folder: Path, text: str) -> Path:
    """One indexed file about resetting a password whose stored passage is ``text``: what a store written
    before chunks were bounded in characters holds for, e.g., a 2 MB single-word file."""
    folder.mkdir(parents=True)
    doc = folder / "long.md"
    doc.write_text("# Reset\n\nHow to reset your password.\n")
    ingest(svc, [folder])
    svc.store.set_payload(DOCUMENTS.name, {"text": text}, match("path", str(doc)))
    return doc
