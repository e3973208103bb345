"""`search serve` (the REST API) and `search ui` (the search page): the long-running faces."""

from __future__ import annotations

import os
import subprocess
import sys

import typer

from search.cli.support import guarded, say
from search.config import PROJECT_ROOT, Settings


def _child_env(settings: Settings) -> dict[str, str]:
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

    settings: Settings = ctx.obj
    say("REST API on http://{}:{} (OpenAPI docs at /docs; Ctrl+C stops it)", host or settings.api_host,
        port or settings.api_port)
    try:
        run_api(settings, host, port)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


@guarded
def ui(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="Address to bind \\[default: 127.0.0.1, env SEARCH_API_HOST]."),
    port: int = typer.Option(None, "--port", help="Port \\[default: 8501, env SEARCH_UI_PORT]."),
) -> None:
    """Open the search page (Streamlit): documents and photos, filters, thumbnails, citations."""
    settings: Settings = ctx.obj
    cmd = [sys.executable, "-m", "streamlit", "run", str(PROJECT_ROOT / "ui" / "app.py"),
           "--server.address", host or settings.api_host, "--server.port", str(port or settings.ui_port),
           "--server.headless", "true", "--client.toolbarMode", "viewer", "--browser.gatherUsageStats", "false"]
    say("search page on http://{}:{} (Ctrl+C stops it)", host or settings.api_host, port or settings.ui_port)
    try:
        raise typer.Exit(subprocess.call(cmd, env=_child_env(settings)))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
