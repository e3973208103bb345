"""`search models build|list`: export the served models into the Triton model repository."""

from __future__ import annotations

import inspect

import typer
from rich.table import Table

from search import models as registry
from search.cli.support import err, guarded, out, say
from search.cli.verify import models_verify
from search.config import Settings
from search.models import FAMILIES, PRECISIONS

app = typer.Typer(no_args_is_help=True, help="Export the served models into the Triton model repository.")


def _by_int8(status: str | None) -> str:
    return ", ".join(f.display for f in FAMILIES if f.precision_status("int8") == status) or "none"


PRECISION_HELP = (
    f"{' | '.join(PRECISIONS)} for every family that offers it, or per family "
    f"({FAMILIES[0].family}=int8,{FAMILIES[1].family}=fp32). Default fp32. int8 is dynamic quantization of the CPU "
    f"graph: measured for {_by_int8('measured')} (docs/benchmarks.md), unmeasured for {_by_int8('unmeasured')} "
    f"(needs --allow-unmeasured-int8); fp32 only: {_by_int8(None)}.")


def parse_precision(value: str) -> tuple[str, dict[str, str]]:
    """'int8' -> ('int8', {}); 'a=int8,b=fp32' -> ('fp32', {'a': 'int8', 'b': 'fp32'}) for families a and b."""
    default, per = "fp32", {}
    names = {f.family for f in FAMILIES}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, _, prec = part.rpartition("=")
        if prec not in PRECISIONS or (name and name not in names):
            raise typer.BadParameter(f"{part!r}: expected one of {', '.join(PRECISIONS)}, optionally as FAMILY=PRECISION "
                                     f"(families: {', '.join(sorted(names))})", param_hint="--precision")
        if name:
            per[name] = prec
        else:
            default = prec
    return default, per


def models_build(ctx: typer.Context, force: bool = False, precision: str = "fp32", allow_unmeasured_int8: bool = False,
                 **given: str | None) -> None:
    """Export every model family whose weights can be reached into triton_repo/."""
    settings: Settings = ctx.obj
    default, per_family = parse_precision(precision)
    missing, explicit_failed = 0, 0
    for fam in FAMILIES:
        named = given.get(fam.source_setting)
        wanted = per_family.get(fam.family, default)
        status, note = fam.precision_status(wanted), ""
        if fam.family not in per_family and wanted != "fp32" and \
                (status is None or (status == "unmeasured" and not allow_unmeasured_int8)):
            # One precision for all families: those that do not offer it (or only unmeasured) stay fp32.
            note, wanted = f" ({wanted} {_why_not(status)}: fp32)", "fp32"
        with err.status(f"exporting {fam.family}…"):
            report = fam.build(settings.triton_repo, named or fam.source(settings), force=force, precision=wanted,
                               allow_unmeasured=allow_unmeasured_int8)
        colour = {"built": "green", "up to date": "green"}.get(report.status, "yellow")
        say("[bold]{}[/]: [" + colour + "]{}[/]{} — {}", fam.family, report.status, note, report.detail)
        missing += report.status == "missing weights"
        explicit_failed += (report.status == "missing weights" and named is not None) or report.status == "refused"
    if missing:
        out.print("Models without weights are skipped; everything else works without them.")
    if explicit_failed:
        raise typer.Exit(1)  # a source or a precision the user named could not be used


def _why_not(status: str | None) -> str:
    return "is not offered" if status is None else "is unmeasured, see --allow-unmeasured-int8"


# One --<family>-source option per registered family: adding a family adds its option.
models_build.__signature__ = inspect.Signature([
    inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
    *(inspect.Parameter(fam.source_setting, inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                        default=typer.Option(None, fam.cli_option, show_default=False,
                                             help=f"{fam.source_help} \\[env: SEARCH_{fam.source_setting.upper()}]."))
      for fam in FAMILIES),
    inspect.Parameter("force", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--force", help="Export again even when the files are up to date.")),
    inspect.Parameter("precision", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                      default=typer.Option("fp32", "--precision", help=PRECISION_HELP)),
    inspect.Parameter("allow_unmeasured_int8", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                      default=typer.Option(False, "--allow-unmeasured-int8",
                                           help=f"Build int8 where its quality was never measured ({_by_int8('unmeasured')}; "
                                                "other weights than those measured).")),
])
app.command("build")(guarded(models_build))


app.command("verify")(models_verify)


@app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Show each model family and whether its files are built, the search modes and the families' own commands."""
    table = Table("family", "model", "Triton ensembles", "built", "precision", "steps")
    for fam in registry.FAMILIES:  # the registry as it is now
        repo = ctx.obj.triton_repo
        table.add_row(fam.family, fam.display, ", ".join(fam.ensembles), "yes" if fam.is_built(repo) else "no",
                      _precision(fam, repo), ", ".join(fam.steps))
    out.print(table)
    out.print("Document search modes (search --mode): auto, the best one served, or")
    for fam in registry.FAMILIES:
        for mode in fam.modes:
            if mode in fam.mode_help:
                say("  [bold]{}[/]: {}", mode, fam.mode_help[mode])
    if found := registry.capabilities():
        out.print("Commands the families add (also POST /NAME of the REST API, an MCP tool and a section of the page):")
        for cap in found:
            say("  [bold]search {}[/] ({}): {}", cap.command, cap.family.display, cap.help)


def _precision(fam, repo) -> str:
    """What the build manifest says: fp32, or int8 (measured | unmeasured); '-' when not built."""
    manifest = fam.manifest(repo)
    if manifest is None:
        return "-"
    precision = manifest.get("precision", "fp32")
    status = manifest.get("precision_status")
    return f"{precision} ({status})" if precision != "fp32" and status else precision
