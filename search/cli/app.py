"""`search`: query the index, run the local Triton server, build the served models."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from search.cli import capabilities, faces, query
from search.cli.support import DataDir, QdrantUrl, TritonUrl, make_settings, reflow_help
from search.cpu_kernels import choose_openblas_kernels

# Command groups loaded when they run, not when `search "…"` or `search --help` starts: they pull
# in numpy, tritonclient and the model registry. Their one-line help is here for the listing.
LAZY_GROUPS = {
    "triton": ("search.cli.triton", "Run the local Triton server (the binary from nvidia-pytriton)."),
    "models": ("search.cli.models", "Export the served models into the Triton model repository."),
    "store": ("search.cli.store", "The vector store: size and index status, optimize, migrate between backends."),
    "kb": ("search.cli.kb", "Knowledge bases: list them, delete one."),
    "keys": ("search.cli.keys", "API keys scoped to knowledge bases and rights: add, list, revoke."),
    "relevance": ("search.cli.relevance", "Calibrated relevance: check how well a collection separates."),
}


COMMAND = re.compile(r"^[a-z][a-z0-9-]*$")  # what a command's name may be (a query's first word may look like one)


class SearchGroup(TyperGroup):
    """`search "reset password"` means `search query "reset password"`; command groups load lazily."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        group_opts = {o: p for p in self.params for o in (*p.opts, *p.secondary_opts)}
        i = 0
        while i < len(args) and args[i].split("=", 1)[0] in group_opts:
            p = group_opts[args[i].split("=", 1)[0]]
            i += 1 if ("=" in args[i] or getattr(p, "is_flag", False)) else 2
        if i == len(args) or args[i] in ("--help", "-h"):
            self._capabilities()  # a listing: a capability that cannot be listed is an error before any help
        elif args[i] not in self.commands and args[i] not in LAZY_GROUPS and self._capability(args[i]) is None:
            args = [*args[:i], "query", *args[i:]]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(g for g in LAZY_GROUPS if g not in self.commands), *self._capabilities()]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_GROUPS and name not in self.commands:  # a help listing: the stand-in is enough
            return click.Group(name, help=LAZY_GROUPS[name][1])
        return super().get_command(ctx, name) or self._capability(name)

    def _capabilities(self) -> dict:
        """The registered families' capabilities by command name, each made into its command on first use."""
        if "_caps" not in self.__dict__:
            self._caps, self._made = capabilities.registered({*self.commands, *LAZY_GROUPS}), {}
        return self._caps

    def _capability(self, name: str) -> click.Command | None:
        """The command of the capability ``name``; a query's first word that cannot name one ("reset
        password", "--images") does not load the registry."""
        if name in self.commands or name in LAZY_GROUPS or not COMMAND.match(name) or name not in self._capabilities():
            return None
        if name not in self._made:
            self._made[name] = capabilities.command(self._caps[name])
        return self._made[name]

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else ""
        if name in LAZY_GROUPS and name not in self.commands:  # it runs: load it
            group = typer.main.get_group(reflow_help(importlib.import_module(LAZY_GROUPS[name][0]).app))
            group.name = name
            self.commands[name] = group
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=SearchGroup, no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    help="Semantic search over your documents and photos, with models served by Triton and vectors in Qdrant.\n\n"
         'Documents: [bold]search "reset password"[/] (same as [bold]search query ...[/]).  '
         'Photos: [bold]search --images "a dog on the beach"[/], [bold]search --like photo.jpg[/].  '
         "Index first with [bold]indexer ingest PATH[/].",
)
for command in (query.query, query.entail, query.ocr, query.status, faces.serve, faces.ui, faces.mcp):
    app.command()(command)
reflow_help(app)


@app.callback()
def main_options(ctx: typer.Context, data_dir: Path = DataDir, triton_url: str = TritonUrl, qdrant_url: str = QdrantUrl) -> None:
    ctx.obj = make_settings(data_dir, triton_url, qdrant_url)


def main() -> None:
    choose_openblas_kernels()  # before any command loads numpy
    app()
