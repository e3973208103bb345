"""`indexer`: put documents into the search index."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from indexer.jobs import JOBS_FILE, JobStore
from indexer.remote import RemoteIngest
from indexer.service import IngestService
from search import owner
from search.cli.support import (
    DataDir,
    QdrantUrl,
    TritonUrl,
    display_path,
    err,
    fail,
    guarded,
    make_settings,
    opened,
    out,
    printable,
    say,
    to_json,
)
from search.config import MAX_CHUNK_TOKENS
from search.paths import readable

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
                  help="Index documents and photos for `search`: embedded by models served by Triton, stored in Qdrant.")


@app.callback()
def main_options(ctx: typer.Context, data_dir: Path = DataDir, triton_url: str = TritonUrl, qdrant_url: str = QdrantUrl) -> None:
    ctx.obj = make_settings(data_dir, triton_url, qdrant_url)


# Exit status of `indexer ingest` (also in the README): a script can tell "some files failed" apart
# from "nothing worked" and from the errors every command shares (2 usage, 3 Triton, 4 model, 5 store).
EXIT_ALL_FAILED = 1
EXIT_MODEL_STOPPED = 4  # a model failed mid-run: the kind it embeds was stopped, the others indexed
EXIT_SOME_FAILED = 7


@app.command()
@guarded
def ingest(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="Files or folders (searched recursively): documents (.txt, .md, .html, "
                                        ".pdf, .docx) and photos (.jpg, .png, .webp, .gif, .bmp, .tiff; .heic with pillow-heif)."),
    prune: bool = typer.Option(False, "--prune", help="Remove files under PATHS that are gone from disk from the index."),
    chunk_tokens: int = typer.Option(None, "--chunk-tokens", min=1, max=MAX_CHUNK_TOKENS,
                                     help="Tokens per chunk \\[default: 200; MiniLM reads 256 including two special tokens]."),
    overlap: int = typer.Option(None, "--overlap", min=0, help="Tokens shared by consecutive chunks \\[default: 40]."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list each skipped file (and why) and the files "
                                 "still failing as in the last run."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Index PATHS. Unchanged files are skipped, changed files re-indexed, bad files reported.

    Documents go to the document collection, photos to the image collection, in one run.
    Hidden files and folders and files of other types are skipped (counted by reason; --verbose lists them).

    [bold]Exit status[/]:
      0  every file was indexed, updated or unchanged
      7  some files failed (listed with their reasons); the others were indexed
      1  every file failed (e.g. a PATH that does not exist), or another error
      4  a model failed mid-run: the files of its kind were not indexed (the reason says how to fix it)
      2  bad option · 3 Triton not reachable · 5 store unavailable · 130 interrupted"""
    chunking = {k: v for k, v in {"chunk_tokens": chunk_tokens, "chunk_overlap": overlap}.items() if v is not None}
    ctx.obj = ctx.obj.model_copy(update=chunking)
    progress = Progress(TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[current]}", markup=False), console=err, transient=True,
                        disable=as_json or not err.is_terminal)  # a bar only helps on a terminal
    task = progress.add_task("files", total=None, current="")
    running = owner.serving(ctx.obj)
    if running is not None:  # the server owns the store: the run is its job, followed from here
        if chunking:
            fail("--chunk-tokens and --overlap: the running server's chunking settings apply; "
                 f"stop it ({running.describe()}) to ingest with others", 2)
        with progress:
            job = _through_server(running, paths, prune, lambda done, total: progress.update(task, completed=done, total=total))
        if job["report"] is None:
            fail(f"the server's ingest job {job['id']} {job['state']}: {job.get('error') or 'no report'}", 1)
        d = job["report"]
    else:
        try:
            with opened(IngestService, ctx) as svc, progress:
                report = svc.ingest(
                    paths, prune=prune,
                    on_start=lambda n: progress.update(task, total=n),
                    on_file=lambda o: progress.update(task, advance=0 if o.status == "pruned" else 1,
                                                      current=printable(display_path(o.path))[-50:]),
                )
        except ValueError as exc:  # chunker arguments
            raise typer.BadParameter(str(exc)) from exc
        except KeyboardInterrupt:
            fail("interrupted: files written so far stay indexed (complete ones only); run the same command to finish", 130)
        d = report.as_dict()
        if verbose:
            d["skipped_files"] = [{"path": readable(p), "reason": why} for p, why in report.skipped_files]
    if as_json:
        print(to_json(d))
    else:
        _print_summary(d, verbose)
    failed = d["failed"]
    if failed and failed == sum(d[k] for k in ("indexed", "updated", "unchanged", "failed", "pruned")):
        raise typer.Exit(EXIT_ALL_FAILED)
    if d.get("stopped"):  # a model failed mid-run: its kind was stopped (reason printed above)
        raise typer.Exit(EXIT_MODEL_STOPPED)
    if d.get("cancelled"):
        raise typer.Exit(130)
    if failed:
        raise typer.Exit(EXIT_SOME_FAILED)


def _through_server(running, paths: list[Path], prune: bool, progress) -> dict:
    client = RemoteIngest(running)
    job_id = client.submit(paths, prune=prune)
    err.print(f"ingesting through the search server ({running.describe()}), job {job_id}", highlight=False)
    return client.follow(job_id, lambda job: progress(job["files_done"], job["files_total"]))


def _print_summary(d: dict, verbose: bool) -> None:
    skipped = ", ".join(f"{why}: {n}" for why, n in d["skipped_by_reason"].items())
    out.print(
        f"[bold]{d['indexed']}[/] indexed, [bold]{d['updated']}[/] updated, {d['unchanged']} unchanged, "
        f"[{'red' if d['failed'] else 'default'}]{d['failed']} failed[/]"
        + (f", {d['pruned']} pruned" if d["pruned"] else "")
        + (f", {d['skipped']} skipped ({skipped})" if d["skipped"] else "")
        + (" (" + ", ".join(f"{n} {k}" for k, n in sorted(d["by_kind"].items())) + ")" if len(d["by_kind"]) > 1 else "")
        + f" — {d['embedded_chunks']} chunks embedded in {d['seconds']:.1f} s"
        + (f" ({d['truncated_chunks']} truncated to the model's 256 tokens)" if d["truncated_chunks"] else ""),
        highlight=False,
    )
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


@app.command()
@guarded
def jobs(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """Ingest jobs run by `search serve` (REST, CLI through the server, watches), newest first. They are
    kept in the data dir: a job the server did not finish runs again when it starts."""
    running = owner.serving(ctx.obj)
    if running is not None:
        listed = RemoteIngest(running).jobs()
    else:
        store = JobStore(ctx.obj.data_dir / JOBS_FILE)
        listed = [j.as_dict() for j in store.newest_first()]
        store.close()
    if as_json:
        print(to_json(listed))
        return
    if not listed:
        out.print("no ingest jobs yet")
        return
    for j in listed:
        done = f"{j['files_done']}/{j['files_total']}" if j["files_total"] is not None else str(j["files_done"])
        say("{}  {}  {} files  {}  {}", j["id"][:12], j["state"], done, ", ".join(j["paths"])[:80],
            time.strftime("%Y-%m-%d %H:%M", time.localtime(j["created"])))


def main() -> None:
    app()
