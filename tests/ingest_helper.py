"""Index through the indexer's service on a query service's store (one store per process)."""

from indexer.service import IngestService


def ingest(svc, paths, **kwargs):
    return IngestService(svc.settings, svc.resources).ingest(paths, **kwargs)
