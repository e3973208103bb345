"""`search relevance check`: how well this collection tells a match from what unrelated questions find."""

from __future__ import annotations

import typer

from search.cli.connect import query_service
from search.cli.support import guarded, say, to_json

app = typer.Typer(no_args_is_help=True, help="Calibrated relevance: check how well a collection separates.")
WARNED = 10  # exit status when the check warns: one threshold cannot serve this collection


@app.command("check")
@guarded
def check(
    ctx: typer.Context,
    kb: str = typer.Option(None, "--kb", help="The knowledge base (default: the default one)."),
    min_relevance: float = typer.Option(None, "--min-relevance", min=0.0, max=1.0,
                                        help="The threshold to check (default: the default of --min-relevance)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """How well this collection's documents tell a match from what unrelated questions find.

    Asks the opening words (title or first sentence) of up to 100 of its documents, which their own
    document answers, and everyday sentences and search-box questions on other subjects ("what is a
    hedgehog"), which it should not; says the fitted background, the share of each that passes the
    threshold, and a warning when one threshold cannot serve this collection, with the threshold
    that would (docs/relevance.md says what to do). Exit status 10 when it warns."""
    with query_service(ctx) as svc:
        options = {} if min_relevance is None else {"min_relevance": min_relevance}
        report = svc.relevance_check(kb=kb, **options)
    if as_json:
        print(to_json(report))
    else:
        show(report)
    if report["warnings"]:
        raise typer.Exit(WARNED)


def show(report: dict) -> None:
    say("{} passages in knowledge base {}", f"{report['points']:,}", report["kb"] or "default")
    for name, law in (report.get("background") or {}).items():
        asked = law.get("asked") or {}
        say("background ({}): unrelated sentences' best hits score about {} (spread {}), search-box questions' {}; "
            "relevance {} needs a raw score of {}", name, law["mu"], law["beta"], asked.get("mu", "-"),
            report["min_relevance"], law["raw_score_at_threshold"] or "-")
    if own := report.get("own"):
        say("own documents: {} of {} questions taken from them find a match at {}",
            f"{own['kept']:.0%}", own["questions"], report["min_relevance"])
    if everyday := report.get("everyday"):
        say("everyday sentences: {} of {} find a match", f"{everyday['answered']:.0%}", everyday["questions"])
    if other := report.get("other_subjects"):
        say("questions on subjects it does not hold: {} of {} find a match", f"{other['answered']:.0%}", other["questions"])
    for line in report["warnings"]:
        say("[bold yellow]warning:[/] {}", line)
    if not report["warnings"]:
        say("[green]ok:[/] one threshold serves this collection")
