"""What the two command-line faces (`search`, `indexer`) share: settings from flags, one-line errors,
display helpers."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

from search.config import Settings, load_settings
from search.errors import ServiceError
from search.paths import readable
from search.triton.local import TritonError


def _console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    console.soft_wrap = not console.is_terminal  # a log file or pipe gets whole lines, not 80 columns
    return console


out = _console()
err = _console(stderr=True)

DataDir = typer.Option(None, "--data-dir", help="Where the embedded store and Triton's run state live \\[env: SEARCH_DATA_DIR].")
TritonUrl = typer.Option(None, "--triton-url",
                         help="gRPC address of a Triton server, e.g. triton:8001 \\[env: SEARCH_TRITON_URL].")
QdrantUrl = typer.Option(None, "--qdrant-url", help="URL of a Qdrant server; default is the embedded store \\[env: QDRANT_URL].")


def make_settings(data_dir: Path | None, triton_url: str | None, qdrant_url: str | None) -> Settings:
    overrides = {k: v for k, v in {"data_dir": data_dir, "triton_url": triton_url, "qdrant_url": qdrant_url}.items() if v}
    try:
        return load_settings(**overrides)
    except ValueError as exc:  # a bad environment variable, named in the message
        fail(f"invalid setting: {exc}", 2)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def guarded(fn):
    """Turn the errors users can cause into one line on stderr and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ServiceError as exc:
            fail(str(exc), exc.exit_code)
        except TritonError as exc:
            fail(str(exc), 3)
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper


def display_path(path: str) -> str:
    """Relative to the working folder when near it; bytes that are not UTF-8 shown as \\xff."""
    try:
        shown = os.path.relpath(path) if not os.path.relpath(path).startswith("../..") else path
    except ValueError:
        shown = path
    return readable(shown)




@contextmanager
def opened(service_cls, ctx: typer.Context) -> Iterator:
    """A service on the command's settings, closed (its store released) when the command is done."""
    svc = service_cls(ctx.obj)
    try:
        yield svc
    finally:
        svc.close()


def to_json(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, indent=2)
