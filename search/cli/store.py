"""`search store …`: the vector store's size and index status, optimize, migrate between backends."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from search.cli.connect import owner_of, query_service
from search.cli.support import err, fail, guarded, opened, out, say, to_json

app = typer.Typer(no_args_is_help=True, help="The vector store: size and index status, optimize, migrate between backends.")

STORE_SPEC = "edge[:PATH] (Qdrant's engine embedded), local[:PATH] (qdrant-client local mode) or a Qdrant server URL"


@app.command("stats")
@guarded
def store_stats(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """Points, segments, index status, payload indexes and disk size of each collection."""
    with query_service(ctx) as svc:
        st = svc.store_stats()
    if as_json:
        print(to_json(st))
        return
    say("Store {} at {}" + (" — {} on disk" if st["disk_bytes"] else ""), st["backend"], st["location"], _size(st["disk_bytes"]))
    table = Table("collection", "points", "segments", "in HNSW", "status", "payload indexes", "disk")
    for name, c in st["collections"].items():
        table.add_row(name, f"{c['points']:,}", str(c["segments"] if c["segments"] is not None else "-"),
                      f"{c['indexed_vectors']:,}" if c["indexed_vectors"] is not None else "-", c["status"],
                      str(len(c["payload_indexes"])), _size(c["disk_bytes"]))  # names: --json
    out.print(table if st["collections"] else "  no collections yet: run `indexer ingest PATH`")
    if "note" in st:
        say("[yellow]note[/]: {}", st["note"])


@app.command("optimize")
@guarded
def store_optimize(ctx: typer.Context) -> None:
    """Merge segments and build the HNSW indexes now (ingest does this when it ends)."""
    with query_service(ctx) as svc:
        svc.optimize_store()
    out.print("optimized")


@app.command("migrate")
@guarded
def store_migrate(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", help=f"Where to copy the index: {STORE_SPEC}."),
    source: str = typer.Option(None, "--from", help=f"Where to copy from \\[default: the configured store]: {STORE_SPEC}."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Copy every collection (ids, payload, all vectors) to another store.

    The embedded engine to a Qdrant server (--to http://host:6333), or an older local-mode store into
    the engine (--from local --to edge). Re-running resumes; counts are verified at the end."""
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=as_json or not err.is_terminal)
    tasks: dict[str, int] = {}

    def step(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done)

    if (running := owner_of(ctx.obj)) is not None:
        fail(f"the search server ({running.describe()}) has this store open: stop it, then migrate", 5)
    from search.services import SearchService  # noqa: PLC0415  (qdrant-client is slow to import: stats through a server do not need it)

    with opened(SearchService, ctx) as svc, progress:
        done = svc.migrate_store(to, source, progress=step)
    if as_json:
        print(to_json([asdict(m) for m in done]))
        return
    for m in done:
        say("{}: {:,} points copied, {:,} in the target (verified)", m.collection, m.copied, m.target)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
