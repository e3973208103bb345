"""`search kb …`: the knowledge bases (named sets of documents and photos) and deleting one."""

from __future__ import annotations

import typer

from search.cli.connect import query_service
from search.cli.support import guarded, out, say, to_json

app = typer.Typer(no_args_is_help=True, help="Knowledge bases: list them, delete one.")


@app.command("list")
@guarded
def list_kbs(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """The knowledge bases, with their documents' passages and photos."""
    with query_service(ctx) as svc:
        kbs = svc.collections()["kbs"]
    if as_json:
        print(to_json(kbs))
        return
    for name, counts in kbs.items():
        say("{}  {:,} passages, {:,} photos", name, counts["documents"], counts["images"])


@app.command("delete")
@guarded
def delete_kb(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The knowledge base."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
) -> None:
    """Delete knowledge base NAME: its documents' and photos' points, and its thumbnails.

    The files indexed stay where they are. Deleting `default` empties it."""
    if not yes:
        typer.confirm(f"delete knowledge base {name!r} and everything indexed in it?", abort=True)
    with query_service(ctx) as svc:
        done = svc.delete_kb(name)
    out.print(f"deleted knowledge base {name}: {done['deleted']['documents']:,} passages, "
              f"{done['deleted']['images']:,} photos", highlight=False)
