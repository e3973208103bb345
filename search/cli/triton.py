"""`search triton up|down|status`: the local Triton server (the binary from nvidia-pytriton)."""

from __future__ import annotations

import typer

from search.cli.support import err, fail, guarded, out, say
from search.config import Settings
from search.datadir import private
from search.models import built_triton_models
from search.triton.local import LocalTriton

app = typer.Typer(no_args_is_help=True, help="Run the local Triton server (the binary from nvidia-pytriton).")

def _local(settings: Settings, models: list[str] | None = None, **ports):
    return LocalTriton(settings.triton_repo, settings.triton_run_dir, host=settings.triton_host,
                       http_port=ports.get("http_port") or settings.triton_http_port,
                       grpc_port=ports.get("grpc_port") or settings.triton_grpc_port,
                       metrics_port=ports.get("metrics_port") or settings.triton_metrics_port, models=models)


@app.command("up")
@guarded
def triton_up(
    ctx: typer.Context,
    http_port: int = typer.Option(None, help="HTTP port \\[default: 8000, env SEARCH_TRITON_HTTP_PORT]."),
    grpc_port: int = typer.Option(None, help="gRPC port \\[default: 8001, env SEARCH_TRITON_GRPC_PORT]."),
    metrics_port: int = typer.Option(None, help="Metrics port \\[default: 8002, env SEARCH_TRITON_METRICS_PORT]."),
) -> None:
    """Start the local Triton server in the background on 127.0.0.1 and wait until it is ready.

    A supervisor starts it again if it exits by itself later (Triton 2.51 aborts when the machine
    pauses mid-request, e.g. a suspended laptop); `search triton status` says how often.
    """
    settings: Settings = ctx.obj
    running = LocalTriton.attach(settings.triton_run_dir)
    if running and running.is_running():
        say("Triton is already running (pid {}, gRPC {}:{})", running.state.pid, running.host, running.grpc_port)
        return
    if running:
        running.stop()  # stale state from a server that died: clean its leftovers
    models = built_triton_models(settings.triton_repo)
    if not models:
        fail("no model is built yet: run `search models build` first", 4)
    private(settings.data_dir)  # the run dir, its log and Triton's own files are the user's only
    server = _local(settings, models, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port)
    with err.status("starting Triton…"):
        server.start(timeout=settings.triton_start_timeout_s)
    say("Triton ready: gRPC {}:{}, HTTP {}, metrics {} (pid {}); models: {}", server.host, server.grpc_port,
        server.http_port, server.metrics_port, server.state.pid, ", ".join(models))


@app.command("down")
@guarded
def triton_down(ctx: typer.Context) -> None:
    """Stop the local Triton server and clean up its processes and shared memory."""
    server = LocalTriton.attach(ctx.obj.triton_run_dir)
    if server is None:
        out.print("Triton is not running")
        return
    server.stop()
    out.print("Triton stopped")


@app.command("status")
@guarded
def triton_status(ctx: typer.Context) -> None:
    """Say whether the local server runs and which models it has loaded."""
    run_dir = ctx.obj.triton_run_dir
    server = LocalTriton.attach(run_dir)
    if server is None or not server.is_running():
        out.print(f"Triton is not running for the data dir {ctx.obj.data_dir} (start it: search triton up)", soft_wrap=True)
        for other in LocalTriton.running():  # started with another --data-dir / SEARCH_DATA_DIR
            url = f"{other.host}:{other.grpc_port}"
            if other.run_dir.name == run_dir.name:  # <data dir>/triton
                data_dir = other.run_dir.parent
                where, see = f"with the data dir {data_dir}", f"search --data-dir {data_dir} triton status, or "
            else:
                where, see = f"from {other.run_dir}", ""
            out.print(f"  running {where}: pid {other.state.pid}, gRPC {url} ({see}SEARCH_TRITON_URL={url})",
                      highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    ready = server.is_ready()
    say("Triton pid {}: {}; gRPC {}:{}, HTTP {}, metrics {}; log {}", server.state.pid, "ready" if ready else "not ready",
        server.host, server.grpc_port, server.http_port, server.metrics_port, server.state.log)
    if restarted := server.restarts():
        say("  started again {} time(s) after Triton exited by itself; the last: {}", len(restarted), restarted[-1])
    if ready:
        health = server.health()  # READY stays true when a model's process died: probe each ensemble
        for m in server.model_status():  # the reason is Triton's own message, which may quote a model's error
            h = health.get(m["name"])
            sick = h is not None and not h.healthy
            say("  {} v{}: {} {}" + (" [red]unhealthy[/]: {}" if sick else ""), m["name"], m.get("version", "?"),
                m.get("state", "?"), m.get("reason", ""), *([h.reason] if sick else []))
        if not all(h.healthy for h in health.values()):
            raise typer.Exit(1)
