"""`search models build|list`: export the served models into the Triton model repository."""

from __future__ import annotations

import inspect

import typer
from rich.table import Table

from search.cli.support import err, guarded, out
from search.cli.verify import models_verify
from search.config import Settings
from search.models import FAMILIES

app = typer.Typer(no_args_is_help=True, help="Export the served models into the Triton model repository.")

def models_build(ctx: typer.Context, force: bool = False, **given: str | None) -> None:
    """Export every model family whose weights can be reached into triton_repo/."""
    settings: Settings = ctx.obj
    missing, explicit_missing = 0, 0
    for fam in FAMILIES:
        named = given.get(fam.source_setting)
        with err.status(f"exporting {fam.family}…"):
            report = fam.build(settings.triton_repo, named or fam.source(settings), force=force)
        colour = {"built": "green", "up to date": "green"}.get(report.status, "yellow")
        out.print(f"[bold]{fam.family}[/]: [{colour}]{report.status}[/] — {report.detail}", highlight=False, soft_wrap=True)
        missing += report.status == "missing weights"
        explicit_missing += report.status == "missing weights" and named is not None
    if missing:
        out.print("Models without weights are skipped; everything else works without them.")
    if explicit_missing:
        raise typer.Exit(1)  # a source the user named could not be used


# One --<family>-source option per registered family: adding a family adds its option.
models_build.__signature__ = inspect.Signature([
    inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
    *(inspect.Parameter(fam.source_setting, inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                        default=typer.Option(None, fam.cli_option, show_default=False,
                                             help=f"{fam.source_help} \\[env: SEARCH_{fam.source_setting.upper()}]."))
      for fam in FAMILIES),
    inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--force", help="Export again even when the files are up to date.")),
])
app.command("build")(guarded(models_build))


app.command("verify")(models_verify)


@app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Show each model family and whether its files are built."""
    table = Table("family", "model", "Triton ensembles", "built", "steps")
    for fam in FAMILIES:
        table.add_row(fam.family, fam.display, ", ".join(fam.ensembles), "yes" if fam.is_built(ctx.obj.triton_repo) else "no",
                      ", ".join(fam.steps))
    out.print(table)
