"""`search`: query the index, run the local Triton server, build the served models."""

from __future__ import annotations

from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from search.cli import faces, models, query, store, triton
from search.cli.support import DataDir, QdrantUrl, TritonUrl, make_settings


class QueryByDefault(TyperGroup):
    """`search "reset password"` means `search query "reset password"`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        group_opts = {o: p for p in self.params for o in (*p.opts, *p.secondary_opts)}
        i = 0
        while i < len(args) and args[i].split("=", 1)[0] in group_opts:
            p = group_opts[args[i].split("=", 1)[0]]
            i += 1 if ("=" in args[i] or getattr(p, "is_flag", False)) else 2
        if i < len(args) and args[i] not in self.commands and args[i] not in ("--help", "-h"):
            args = [*args[:i], "query", *args[i:]]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=QueryByDefault, no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    help="Semantic search over your documents and photos, with models served by Triton and vectors in Qdrant.\n\n"
         'Documents: [bold]search "reset password"[/] (same as [bold]search query ...[/]).  '
         'Photos: [bold]search --images "a dog on the beach"[/], [bold]search --like photo.jpg[/].  '
         "Index first with [bold]indexer ingest PATH[/].",
)
app.add_typer(triton.app, name="triton")
app.add_typer(models.app, name="models")
app.add_typer(store.app, name="store")
for command in (query.query, query.entail, query.status, faces.serve, faces.ui):
    app.command()(command)


@app.callback()
def main_options(ctx: typer.Context, data_dir: Path = DataDir, triton_url: str = TritonUrl, qdrant_url: str = QdrantUrl) -> None:
    ctx.obj = make_settings(data_dir, triton_url, qdrant_url)


def main() -> None:
    app()
