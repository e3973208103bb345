"""`search models verify`: does each served model give the answers it should (golden outputs from its
build, and the publisher's known answers)? The table is search/cli/verify_report.py."""

from __future__ import annotations

import typer

from search.cli.support import guarded, opened, to_json
from search.cli.verify_report import print_report
from search.models import FAMILIES
from search.services import SearchService

FAMILY_NAMES = ", ".join(f.family for f in FAMILIES)


@guarded
def models_verify(
    ctx: typer.Context,
    families: list[str] = typer.Argument(None, help=f"Families to verify ({FAMILY_NAMES}) \\[default: every built one]."),
    published: bool = typer.Option(None, "--published/--no-published",
                                   help="Run the publishers' known-answer checks even when the build's checkpoint is not "
                                        "recognised, or skip them \\[default: where the checkpoint is the published one]."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Check that the served models give the expected answers. Exit status 1 on any miss.

    The build's golden outputs (PyTorch on fixed inputs) and, for published checkpoints, the
    publishers' own examples."""
    with opened(SearchService, ctx) as svc:
        report = svc.verify_models(families or None, published_checks=published)
    if as_json:
        print(to_json(report))
    else:
        print_report(report)
    if not report["passed"]:
        raise typer.Exit(1)
