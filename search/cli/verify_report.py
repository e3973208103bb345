"""The table `search models verify` and `search status --verify` print (no model or store imports:
`search status` loads this on the CLI's fast path)."""

from __future__ import annotations

from rich.markup import escape

from search.cli.support import out

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
