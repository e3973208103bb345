"""`search serve` (the REST API) and `search ui` (the search page): the long-running faces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import typer

from search import owner
from search.cli.connect import service_for
from search.cli.support import fail, guarded, say, settings_of
from search.datadir import private
from search.locations import PROJECT_ROOT

STARTUP_S = 120  # loading the store and reaching Triton


def _child_env(settings) -> dict[str, str]:
    """The parent's settings for a child process that reads them from the environment."""
    env = dict(os.environ)
    for name, value in (("SEARCH_DATA_DIR", settings.data_dir), ("SEARCH_TRITON_URL", settings.triton_url),
                        ("SEARCH_QDRANT_URL", settings.qdrant_url)):
        if value:
            env[name] = str(value)
    return env


@guarded
def serve(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Address to bind \\[default: 127.0.0.1, env SEARCH_API_HOST]."),
    port: int = typer.Option(None, "--port", help="Port \\[default: 8080, env SEARCH_API_PORT]."),
) -> None:
    """Start the REST API for bots (FastAPI + uvicorn): search, ingest jobs, health; docs at /docs."""
    from search.api import serve as run_api  # noqa: PLC0415  (FastAPI and uvicorn load only for this command)

    settings = settings_of(ctx)
    try:
        run_api(settings, host, port, announce=lambda url: say("REST API on {} (OpenAPI docs at /docs; Ctrl+C stops it)", url))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@guarded
def mcp(ctx: typer.Context) -> None:
    """Serve the search tools over MCP (stdio) for a desktop assistant or an agent framework.

    Tools: document and photo search, entailment, passages and documents by id. Through the running
    `search serve` when one owns the data dir, else on the store directly (opened per call).
    `search serve` also serves MCP over HTTP at /mcp."""
    from search.mcp import build  # noqa: PLC0415  (the MCP SDK loads only for this command)

    settings = settings_of(ctx)
    build(lambda: service_for(settings)).run("stdio")


@guarded
def ui(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Address to bind \\[default: 127.0.0.1, env SEARCH_API_HOST]."),
    port: int = typer.Option(None, "--port", help="Port \\[default: 8501, env SEARCH_UI_PORT]."),
) -> None:
    """Open the search page (Streamlit): documents and photos, filters, thumbnails, citations.

    The page works through the search server that owns the data dir: a running `search serve`, or one
    started here for as long as the page runs."""
    settings = settings_of(ctx)
    env = _child_env(settings)
    server = None
    if not settings.qdrant_url and (running := owner.serving(settings)) is not None:
        say("using the search server {}", running.describe())
    elif not settings.qdrant_url:
        server = _start_server(settings, env)
    cmd = [sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "ui" / "app.py"),
           "--server.address", host or settings.api_host, "--server.port", str(port or settings.ui_port),
           "--server.headless", "true", "--client.toolbarMode", "viewer", "--browser.gatherUsageStats", "false"]
    say("search page on http://{}:{} (Ctrl+C stops it)", host or settings.api_host, port or settings.ui_port)
    page = subprocess.Popen(cmd, env=env)
    signal.signal(signal.SIGTERM, lambda *_: page.terminate())  # stopped: stop the page and our server too
    try:
        raise typer.Exit(page.wait())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    finally:
        page.terminate()
        page.wait(timeout=30)
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)


def _start_server(settings, env: dict[str, str]) -> subprocess.Popen:
    """`search serve` as a child, until it owns the data dir (its record names it)."""
    private(settings.data_dir)  # serve.log too
    server = subprocess.Popen([sys.executable, "-m", "search", "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=(settings.data_dir / "serve.log").open("a"))
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if (running := owner.serving(settings)) is not None and running.pid == server.pid:
            say("started the search server {} (log: {})", running.describe(), settings.data_dir / "serve.log")
            return server
        if server.poll() is not None:
            fail(f"the search server did not start (exit {server.returncode}): see {settings.data_dir / 'serve.log'}", 5)
        time.sleep(0.2)
    server.terminate()
    fail(f"the search server did not start within {STARTUP_S} s: see {settings.data_dir / 'serve.log'}", 5)
