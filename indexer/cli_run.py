"""How `indexer ingest` follows a run and reports it on the terminal: a job of the running server
followed by polling, the pauses while Triton does not answer, the summary and the exit status."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import typer
from rich.progress import Progress

from indexer.remote import RemoteIngest
from search.cli.support import display_path, err, fail, out, printable, say

EXIT_ALL_FAILED = 1
EXIT_MODEL_STOPPED = 4  # a model failed mid-run: the kind it embeds was stopped, the others indexed
EXIT_SOME_FAILED = 7


def exit_status(d: dict) -> None:
    """Exit with the status the report calls for (ingest's docstring lists them); return when all went well."""
    failed = d["failed"]
    if failed and failed == sum(d[k] for k in ("indexed", "updated", "unchanged", "failed", "pruned")):
        raise typer.Exit(EXIT_ALL_FAILED)
    if d.get("stopped"):  # a model failed mid-run: its kind was stopped (reason printed above)
        raise typer.Exit(EXIT_MODEL_STOPPED)
    if d.get("cancelled"):
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(EXIT_SOME_FAILED)


def through_server(running, paths: list[Path], prune: bool, progress: Progress, task, kb: str | None = None,
                   ocr_photos: bool | None = None) -> dict:
    """The run as a job of the server that owns the store, followed here; its report."""
    client = RemoteIngest(running)
    job_id = client.submit(paths, prune=prune, kb=kb, ocr_photos=ocr_photos)
    err.print(f"ingesting through the search server ({running.describe()}), job {job_id}", highlight=False)
    on_wait = waiting(progress, task)

    def followed(job: dict) -> None:
        progress.update(task, completed=job["files_done"], total=job["files_total"])
        on_wait(job.get("waiting"))

    with progress:
        job = client.follow(job_id, followed)
    if job["report"] is None:
        fail(f"the server's ingest job {job['id']} {job['state']}: {job.get('error') or 'no report'}", 1)
    return job["report"]


def waiting(progress: Progress, task) -> Callable[[str | None], None]:
    """What a run that pauses for Triton shows: its progress line says so, and a line (also where
    there is no bar) when it starts and ends waiting."""
    last: list[str | None] = [None]

    def on_wait(why: str | None) -> None:
        if why == last[0]:
            return
        last[0] = why
        progress.update(task, current=printable(why or "")[:80])
        say("{}  {}", time.strftime("%H:%M:%S"), why or "Triton answers again: going on", console=err)

    return on_wait


def _truncated(n: int) -> str:
    """Chunks cut to the window of the model that embeds documents, named with it."""
    from search.models import required  # noqa: PLC0415  (the registry loads numpy: only a run that cut chunks pays)
    from search.store.schema import DOCUMENTS_NAME  # noqa: PLC0415  (qdrant-client, for the same reason)

    fam = required(DOCUMENTS_NAME)
    return f" ({n} truncated to the {fam.max_tokens} tokens {fam.display} reads)"


def print_summary(d: dict, verbose: bool) -> None:
    skipped = ", ".join(f"{why}: {n}" for why, n in d["skipped_by_reason"].items())
    out.print(
        f"[bold]{d['indexed']}[/] indexed, [bold]{d['updated']}[/] updated, {d['unchanged']} unchanged, "
        f"[{'red' if d['failed'] else 'default'}]{d['failed']} failed[/]"
        + (f", {d['pruned']} pruned" if d["pruned"] else "")
        + (f", {d['skipped']} skipped ({skipped})" if d["skipped"] else "")
        + (" (" + ", ".join(f"{n} {k}" for k, n in sorted(d["by_kind"].items())) + ")" if len(d["by_kind"]) > 1 else "")
        + f" — {d['embedded_chunks']} chunks embedded in {d['seconds']:.1f} s"
        + (_truncated(d["truncated_chunks"]) if d["truncated_chunks"] else ""),
        highlight=False,
    )
    if d.get("stages"):
        units = {"embed": "units"}
        say("  stages, per worker: {}", ", ".join(
            f"{k} {v['per_second']:,.0f} {units.get(k, 'files')}/s ({v['seconds']:.1f} s)" for k, v in d["stages"].items()
            if v["per_second"] is not None))
    if d.get("cancelled"):
        say("  [yellow]cancelled[/]: the files written so far stay indexed; run the same command to finish")
    for kind, info in d["unavailable"].items():
        say("  [yellow]not indexed[/] {} {}: {}", info["files"], kind, info["reason"])
    for f in d["failures"]:
        if not f.get("still_failing"):
            say("  [red]failed[/] {}: {}", display_path(f["path"]), f["reason"])
    if d["still_failing"]:
        n = d["still_failing"]
        say("  [red]{} file{} still failing[/] (unchanged since last run" + ("" if verbose else "; --verbose lists them") + ")",
            n, "s" if n > 1 else "")
        if verbose:
            for f in d["failures"]:
                if f.get("still_failing"):
                    say("  [red]still failing[/] {}: {}", display_path(f["path"]), f["reason"])
    if verbose:
        for f in d.get("skipped_files", []):
            say("  [dim]skipped[/] {} ({})", display_path(f["path"]), f["reason"])
