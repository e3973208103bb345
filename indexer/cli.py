"""`indexer`: put documents into the search index."""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from indexer.cli_run import exit_status, print_summary, through_server, waiting
from indexer.jobs import JOBS_FILE, JobStore
from indexer.remote import RemoteIngest
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
    reflow_help,
    say,
    to_json,
)
from search.cpu_kernels import choose_openblas_kernels
from search.paths import readable, stored

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
                  help="Index documents and photos for `search`: embedded by models served by Triton, stored in Qdrant.")


@app.callback()
def main_options(ctx: typer.Context, data_dir: Path = DataDir, triton_url: str = TritonUrl, qdrant_url: str = QdrantUrl) -> None:
    ctx.obj = make_settings(data_dir, triton_url, qdrant_url)


# Exit status of `indexer ingest` (also in the README): a script can tell "some files failed" apart
# from "nothing worked" and from the errors every command shares (2 usage, 3 Triton, 4 model, 5 store).


@app.command()
@guarded
def ingest(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="Files or folders (searched recursively): documents (.txt, .md, .html, "
                                        ".pdf, .docx) and photos (.jpg, .png, .webp, .gif, .bmp, .tiff; .heic with pillow-heif)."),
    prune: bool = typer.Option(False, "--prune", help="Remove files under PATHS that are gone from disk from the index."),
    chunk_tokens: int = typer.Option(None, "--chunk-tokens", min=1,
                                     help="Tokens per chunk, at most what the documents' model reads of one (its window "
                                          "less its special tokens) \\[default: 200, or that when smaller]."),
    overlap: int = typer.Option(None, "--overlap", min=0, help="Tokens shared by consecutive chunks \\[default: 40]."),
    ocr_photos: bool = typer.Option(None, "--ocr-photos/--no-ocr-photos",
                                    help="Also read the text in photos and image files (OCR), so a search finds them by "
                                         "their words; scanned PDF pages are always read \\[default: off; env: "
                                         "SEARCH_OCR_PHOTOS; docs/ocr.md]."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also list each skipped file (and why) and the files "
                                 "still failing as in the last run."),
    kb: str = typer.Option(None, "--kb", help="The knowledge base to index into (created on first use) \\[default: default]."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ray: str = typer.Option(None, "--ray", metavar="[ADDRESS]",
                            help="Run the ingest as a Ray Data pipeline: on the cluster at ADDRESS (\"auto\": the one "
                                 "`ray start` runs here), else SEARCH_RAY_ADDRESS, else a local Ray. Put it after PATHS, "
                                 "or write --ray=ADDRESS. Files must be at the same path on every node (docs/scale.md)."),
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
    ctx.obj = ctx.obj.model_copy(update=chunking | ({} if ocr_photos is None else {"ocr_photos": ocr_photos}))
    progress = Progress(TextColumn("[bold]indexing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.fields[current]}", markup=False), console=err, transient=True,
                        disable=as_json or not err.is_terminal)  # a bar only helps on a terminal
    task = progress.add_task("files", total=None, current="")
    running = owner.serving(ctx.obj)
    if running is not None:  # the server owns the store: the run is its job, followed from here
        if chunking:
            fail("--chunk-tokens and --overlap: the running server's chunking settings apply; "
                 f"stop it ({running.describe()}) to ingest with others", 2)
        if ray is not None:
            fail(f"--ray: the search server ({running.describe()}) owns the store; stop it to ingest on a Ray cluster", 2)
        # --ocr-photos or SEARCH_OCR_PHOTOS here travel with the job; neither: the server's own setting
        asked = ctx.obj.ocr_photos if "ocr_photos" in ctx.obj.model_fields_set else None
        d = through_server(running, paths, prune, progress, task, kb, ocr_photos=asked)
    else:
        from indexer.service import IngestService  # noqa: PLC0415  (qdrant-client and the loaders are slow to import: only a run without a server needs them)

        try:
            with opened(IngestService, ctx) as svc, progress:
                report = svc.ingest(
                    paths, prune=prune, kb=kb, ray=ray,
                    on_start=lambda n: progress.update(task, total=n),
                    on_file=lambda o: progress.update(task, advance=0 if o.status == "pruned" else 1,
                                                      current=printable(display_path(o.path))[-50:]),
                    on_wait=waiting(progress, task),
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
        print_summary(d, verbose)
    exit_status(d)


@app.command()
@guarded
def jobs(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """Ingest jobs run by `search serve`, newest first.

    Jobs come from REST, this CLI through the server, and watches. They are kept in the data dir: a
    job the server did not finish runs again when it starts."""
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
        paths = ", ".join(readable(p) for p in j["paths"])
        paths = paths if len(paths) <= 80 else "…" + paths[-79:]  # the end: the names, not a long common prefix
        state = j["state"] + (" (waiting for Triton)" if j.get("waiting") else "")
        say("{}  {}  {} files  {}  {}", j["id"][:12], state, done, paths,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(j["created"])))


@app.command()
@guarded
def watch(
    ctx: typer.Context,
    paths: list[Path] = typer.Argument(..., help="Folders to keep indexed (searched recursively); with --stop, "
                                        "watched folders or watch ids."),
    quiet_ms: int = typer.Option(500, "--quiet-ms", min=50, max=60_000,
                                 help="How long the folders must be quiet before a batch of changes is indexed "
                                      "(a batch also starts once its oldest change has waited 3 s)."),
    stop: bool = typer.Option(False, "--stop", help="Stop the server's watches of PATHS (or with these ids)."),
) -> None:
    """Keep the index of folders current: changes are indexed as they happen.

    Created, changed, renamed and deleted files follow the rules of `indexer ingest --prune` (a
    rename keeps its vectors, a delete removes its points and thumbnails). A rescan first catches up
    with what changed while nothing was watching.

    [bold]Without a server[/], the watch runs here, in the foreground: one line per batch of changes,
    Ctrl-C stops it. It holds the store while it runs, so searches from another terminal need a
    server: start `search serve` first.

    [bold]With `search serve` running[/] on this data dir, the watch is registered in that server and the
    command returns at once: the server owns the store, runs the watch and starts it again (with
    its catch-up rescan) whenever it restarts, so the index stays current without a terminal left
    open, which is what a watch is for. `indexer watches` lists the watches; `indexer watch --stop
    PATH` ends one."""
    if stop:
        _stop_watches(ctx.obj, paths)
        return
    folders = [p.expanduser().absolute() for p in paths]
    for given, folder in zip(paths, folders):
        if not folder.is_dir():
            fail(f"{display_path(str(given))}: " + ("not a folder (watch the folder that holds it)" if folder.exists()
                                                    else "no such folder"), 2)
    running = owner.serving(ctx.obj)
    if running is not None:
        w = RemoteIngest(running).watch(folders, quiet_ms=quiet_ms)
        shown = ", ".join(display_path(p) for p in w["paths"])
        say("{} {} in the search server ({}), watch {}", "watching" if w.get("new") else "already watching", shown,
            running.describe(), w["id"][:12])
        say("it runs while the server runs and again when it restarts; stop it with `indexer watch --stop {}` "
            "(`indexer watches` lists them, `indexer jobs` shows its batches)", " ".join(shlex.quote(readable(p)) for p in w["paths"]))
        return
    _watch_here(ctx.obj, folders, quiet_ms)


def _watch_here(settings, folders: list[Path], quiet_ms: int) -> None:
    from indexer.service import IngestService  # noqa: PLC0415  (as in `ingest`: only a watch without a server needs these)
    from indexer.watch import Watcher  # noqa: PLC0415

    svc = IngestService(settings)
    svc.resources.store  # noqa: B018  (open it now: a store another process holds is this command's one-line error)
    started = time.monotonic()

    def ingest(paths: list[Path]):
        return svc.ingest(paths, prune=True, gone_ok=True, stop=watcher.stopping, optimize=False)

    def on_batch(paths: list[Path], report) -> None:
        _print_batch(report.as_dict(), paths, caught_up=watcher.batches == 1)

    def on_error(paths: list[Path], exc: Exception, retry_s: float) -> None:
        say("{}  [yellow]not indexed yet[/] ({} path{}): {} — retrying in {:.0f} s", time.strftime("%H:%M:%S"),
            len(paths), "" if len(paths) == 1 else "s", (str(exc).strip().splitlines() or [type(exc).__name__])[0], retry_s)

    watcher = Watcher(folders, ingest, quiet_s=quiet_ms / 1000, on_batch=on_batch, on_error=on_error,
                      on_idle=svc.optimize, ignore=[settings.data_dir])
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop is a Ctrl-C: a clean one
    # SIGINT too, explicitly: Python leaves it ignored when the parent started us with it ignored (a
    # background job of a script, some test runners), and then a Ctrl-C or `kill -INT` would not stop us
    previous_int = signal.signal(signal.SIGINT, _interrupt)
    try:
        say("watching {} (Ctrl-C stops); catching up first…", ", ".join(display_path(str(f)) for f in folders), console=err)
        watcher.start()
        while watcher.alive():
            time.sleep(0.2)
        fail("the watch stopped unexpectedly (see the log above)", 1)
    except KeyboardInterrupt:
        say("stopping…", console=err)
    finally:
        watcher.stop()
        svc.close()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
    say("stopped after {:.0f} s, {} batch{}", time.monotonic() - started, watcher.batches,
        "" if watcher.batches == 1 else "es", console=err)


def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def _print_batch(d: dict, paths: list[Path], caught_up: bool) -> None:
    """One line per batch: when, what, the counts and how long it took; then its failures."""
    what = "caught up" if caught_up else display_path(str(paths[0])) + (f" (+{len(paths) - 1})" if len(paths) > 1 else "")
    failed = "[red]{} failed[/]" if d["failed"] else "{} failed"
    unchanged = f", {d['unchanged']} unchanged" if caught_up else ""
    cancelled = " (cancelled)" if d["cancelled"] else ""
    say("{}  {}: {} indexed, {} updated, {} pruned, " + failed + unchanged + " — {:.1f} s" + cancelled,
        time.strftime("%H:%M:%S"), what, d["indexed"], d["updated"], d["pruned"], d["failed"], d["seconds"])
    for f in d["failures"]:
        if not f.get("still_failing"):
            say("  [red]failed[/] {}: {}", display_path(f["path"]), f["reason"])
    for kind, info in d["unavailable"].items():
        say("  [yellow]not indexed[/] {} {}: {}", info["files"], kind, info["reason"])


def _stop_watches(settings, names: list[Path]) -> None:
    running = owner.serving(settings)
    client = RemoteIngest(running) if running is not None else None
    if client is not None:
        listed = client.watches()
    else:
        store = JobStore(settings.data_dir / JOBS_FILE)
        listed = [w.as_dict() for w in store.watches()]
    wanted = {stored(str(n.expanduser().absolute())) for n in names}  # as the server records them
    ids = {str(n) for n in names if len(str(n)) >= 4}
    chosen = [w for w in listed if wanted & set(w["paths"]) or any(w["id"].startswith(i) for i in ids)]
    for w in chosen:
        if client is not None:
            client.unwatch(w["id"])
        else:
            store.delete_watch(w["id"])
        say("stopped watch {} ({})", w["id"][:12], ", ".join(display_path(p) for p in w["paths"]))
    if client is None:
        store.close()
    if not chosen:
        fail("no watch of " + ", ".join(display_path(str(n)) for n in names) + " (`indexer watches` lists them; "
             "a watch running in a terminal stops with Ctrl-C)", 1)


@app.command()
@guarded
def watches(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """The folder watches `search serve` runs, oldest first.

    They come from `indexer watch` with a server and POST /watches, and are kept in the data dir: the
    server starts them again, with a catch-up rescan, when it starts."""
    running = owner.serving(ctx.obj)
    if running is not None:
        listed = RemoteIngest(running).watches()
    else:
        store = JobStore(ctx.obj.data_dir / JOBS_FILE)
        listed = [{**w.as_dict(), "state": "not running (no server)", "batches": 0, "last_batch": None, "last_job": None,
                   "error": None} for w in store.watches()]
        store.close()
    if as_json:
        print(to_json(listed))
        return
    if not listed:
        out.print("no watches (`indexer watch PATH` adds one)")
        return
    for w in listed:
        last = time.strftime("%H:%M:%S", time.localtime(w["last_batch"])) if w["last_batch"] else "-"
        say("{}  {}  {}  {} batches, last {}" + ("  {}" if w["error"] else "{}"), w["id"][:12], w["state"],
            ", ".join(display_path(p) for p in w["paths"]), w["batches"], last, w["error"] or "")


reflow_help(app)


def optional_value(args: list[str], option: str) -> list[str]:
    """``option`` given alone (last, or before another option) as ``option=``, an empty value: Typer
    no longer has Click's options with an optional value, and ``--ray`` alone is documented."""
    return [f"{a}=" if a == option and (i + 1 == len(args) or args[i + 1].startswith("-")) else a
            for i, a in enumerate(args)]


def main() -> None:
    choose_openblas_kernels()  # before any command loads numpy
    app(args=optional_value(sys.argv[1:], "--ray"))
