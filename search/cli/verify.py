"""`search models verify` and the table `search status --verify` prints: does each served model
give the answers it should (golden outputs from its build, and the publisher's known answers)?"""

from __future__ import annotations

import typer
from rich.markup import escape

from search.cli.support import guarded, opened, out, to_json
from search.models import FAMILIES
from search.services import SearchService

FAMILY_NAMES = ", ".join(f.family for f in FAMILIES)
COLOURS = {"pass": "green", "FAIL": "red", "fail": "red", "skipped": "yellow", "not built": "dim", "not served": "yellow"}


def print_report(report: dict) -> None:
    """Per family a heading, then one line per check: result, what, measured, bound (and why)."""
    if report.get("error"):
        out.print(f"[red]verification failed[/]: {escape(report['error'])}", highlight=False, soft_wrap=True)
        return
    for fam in report["families"]:
        if not fam["checks"]:
            out.print(f"[bold]{fam['family']}[/]: {_status(fam['status'])}", highlight=False)
            continue
        about = ", ".join(x for x in (fam.get("precision"), fam.get("checkpoint") or f"built from {fam.get('source')}") if x)
        out.print(f"[bold]{fam['family']}[/] ({escape(about)}): {_status(fam['status'])}", highlight=False, soft_wrap=True)
        for c in fam["checks"]:
            line = f"  {_status(c['status'], 7)} {escape(c['check'])}"
            if c["measured"]:
                line += f": {escape(c['measured'])}"
            if c["bound"]:
                line += f" [dim](bound {escape(c['bound'])})[/]"
            if c["detail"]:
                line += f" — {escape(c['detail'])}"
            out.print(line, highlight=False, soft_wrap=True)
    verified = [f["family"] for f in report["families"] if f["status"] in ("pass", "fail")]
    if report["passed"]:
        out.print(f"[green]verified[/]: the expected answers from {', '.join(verified)}", highlight=False)
    else:
        failed = [f["family"] for f in report["families"] if f["status"] not in ("pass", "not built")
                  or any(c["status"] == "FAIL" for c in f["checks"])]
        out.print(f"[red]verification failed[/]: {', '.join(failed)}", highlight=False)


def _status(status: str, width: int = 0) -> str:
    return f"[{COLOURS.get(status, 'white')}]{escape(status.ljust(width))}[/]"


@guarded
def models_verify(
    ctx: typer.Context,
    families: list[str] = typer.Argument(None, help=f"Families to verify ({FAMILY_NAMES}) \\[default: every built one]."),
    published: bool = typer.Option(None, "--published/--no-published",
                                   help="Run the publishers' known-answer checks even when the build's checkpoint is not "
                                        "recognised, or skip them \\[default: where the checkpoint is the published one]."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Check that the served models give the expected answers: the build's golden outputs (PyTorch on
    fixed inputs) and, for published checkpoints, the publishers' own examples. Exit status 1 on any miss."""
    with opened(SearchService, ctx) as svc:
        report = svc.verify_models(families or None, published_checks=published)
    if as_json:
        print(to_json(report))
    else:
        print_report(report)
    if not report["passed"]:
        raise typer.Exit(1)
