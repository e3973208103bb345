"""Where a command's queries run: through the `search serve` that owns the data dir's store when one
runs (the embedded store admits one process), else in this process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from search import owner
from search.cli.support import opened
from search.owner import Owner
from search.services.remote import RemoteService


def owner_of(settings) -> Owner | None:
    """The running `search serve` that owns this data dir's embedded store, if any."""
    return owner.serving(settings)


@contextmanager
def query_service(ctx: typer.Context) -> Iterator:
    """The query service: through the server that owns the store when one runs, else in this process."""
    found = owner_of(ctx.obj)
    if found is not None:
        yield RemoteService(found)
        return
    from search.services.query import SearchService  # noqa: PLC0415  (qdrant-client is slow to import: only a run without a server needs it)

    with opened(SearchService, ctx) as svc:
        yield svc


@contextmanager
def service_for(settings) -> Iterator:
    """``query_service`` for a long-running face that asks now and then (`search mcp`): looked up per
    call, and a store opened here is released after it, so ingest and `search serve` are not locked out."""
    found = owner.serving(settings)
    if found is not None:
        yield RemoteService(found)
        return
    from search.services.query import SearchService  # noqa: PLC0415  (qdrant-client is slow to import: only a run without a server needs it)

    svc = SearchService(settings)
    try:
        yield svc
    finally:
        svc.close()
