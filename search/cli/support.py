"""What the two command-line faces (`search`, `indexer`) share: settings from flags, one-line errors,
display helpers."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

from search import locations

if TYPE_CHECKING:
    from search.config import Settings
from search.errors import ServiceError
from search.paths import readable

# What a terminal acts on instead of showing: C0 controls but newline and tab (ESC starts colour, cursor
# and title sequences), DEL, C1 (\x9b is a CSI on some terminals), the bidi embeddings, overrides and
# isolates (they reorder what follows, so a name can pose as another), lone surrogates (unencodable).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _escaped(m: re.Match) -> str:
    c = ord(m.group())
    if 0xDC80 <= c <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape): show the byte
        c -= 0xDC00
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape (\\x1b, \\u202e)."""
    return _UNSAFE.sub(_escaped, text)


class SafeConsole(Console):
    """A console that prints no control character: every string it renders (what a face prints other
    than through say(): its own messages, table cells) goes through printable() first."""

    def render_str(self, text: str, **kwargs) -> Text:
        return super().render_str(printable(text), **kwargs)


_HOLE = re.compile("\ue000([0-9]+)\ue001")  # private-use marks: where say() puts each value


def _console(stderr: bool = False) -> SafeConsole:
    console = SafeConsole(stderr=stderr)
    console.soft_wrap = not console.is_terminal  # a log file or pipe gets whole lines, not 80 columns
    return console


out = _console()
err = _console(stderr=True)

DataDir = typer.Option(None, "--data-dir", help="Where the embedded store and Triton's run state live \\[env: SEARCH_DATA_DIR].")
TritonUrl = typer.Option(None, "--triton-url",
                         help="gRPC address of a Triton server, e.g. triton:8001 \\[env: SEARCH_TRITON_URL].")
QdrantUrl = typer.Option(None, "--qdrant-url", help="URL of a Qdrant server; default is the embedded store \\[env: QDRANT_URL].")


class CliSettings:
    """A command's settings, built on first use: the fast path through a running server (search/owner.py)
    needs only where the data dir is, and pydantic-settings is slow to import. Attributes read
    through to the real ``Settings``; ``resolve()`` returns them (a bad value fails the command in one
    line naming the variable)."""

    def __init__(self, data_dir: Path | None, triton_url: str | None, qdrant_url: str | None) -> None:
        self._overrides = {k: v for k, v in {"data_dir": data_dir, "triton_url": triton_url,
                                             "qdrant_url": qdrant_url}.items() if v}
        self._settings = None
        self.data_dir = locations.data_dir(data_dir)
        self.qdrant_url = locations.qdrant_url(qdrant_url)

    def resolve(self) -> Settings:
        if self._settings is None:
            from search.config import load_settings  # noqa: PLC0415  (pydantic-settings: only a command that needs it pays)

            try:
                self._settings = load_settings(**self._overrides)
            except ValueError as exc:  # a bad environment variable, named in the message
                fail(f"invalid setting: {exc}", 2)
        return self._settings

    def __getattr__(self, name: str):
        return getattr(self.resolve(), name)


def make_settings(data_dir: Path | None, triton_url: str | None, qdrant_url: str | None) -> CliSettings:
    return CliSettings(data_dir, triton_url, qdrant_url)




def say(template: str, /, *values: object, console: Console = out, **named: object) -> None:
    """Print ``template`` (rich markup with str.format fields) with ``values`` in it as plain text: their
    brackets, backslashes and :emoji: codes are not markup, their control characters are escapes. The
    one way a face prints text it did not write (indexed text, paths, EXIF, messages that echo input).
    Numbers keep their format specs."""
    held: list[str] = []

    def hold(value: object) -> object:
        if isinstance(value, int | float):
            return value
        held.append(printable(str(value)))
        return f"\ue000{len(held) - 1}\ue001"

    # Parse the template's markup with a mark in place of each value, then put the values in as text.
    marked = Text.from_markup(template.format(*map(hold, values), **{k: hold(v) for k, v in named.items()}))
    line, pos = Text(), 0
    for m in _HOLE.finditer(marked.plain):
        line.append_text(marked[pos:m.start()])
        line.append(held[int(m[1])], style=marked.get_style_at_offset(console, m.start()))
        pos = m.end()
    line.append_text(marked[pos:])
    console.print(line, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> None:
    say("[bold red]error:[/] {}", message, console=err)
    raise typer.Exit(code)


def guarded(fn):
    """Turn the errors users can cause into one line on stderr and a non-zero exit."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ServiceError as exc:
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", 130)

    return wrapper


def reflow_help(app: typer.Typer) -> typer.Typer:
    """Let the terminal wrap the commands' help: rich keeps a docstring's line breaks, which break
    mid-sentence at any other width. Paragraphs with indented lines (the exit-status tables) stay."""
    for info in app.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        info.help = "\n\n".join(p if any(line.startswith(" ") for line in p.splitlines()) else " ".join(p.split("\n"))
                                 for p in text.split("\n\n"))
    return app


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
    svc = service_cls(settings_of(ctx))
    try:
        yield svc
    finally:
        svc.close()


def to_json(obj) -> str:
    # json.dumps escapes C0 controls but writes DEL, C1, bidi controls and lone surrogates as they are;
    # those only occur inside strings, where \\uXXXX stands for the same character.
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, ensure_ascii=False, indent=2))


def settings_of(ctx: typer.Context) -> Settings:
    """The command's real Settings (built now if they were not yet)."""
    obj = ctx.obj
    return obj.resolve() if isinstance(obj, CliSettings) else obj
