"""`search keys …`: API keys scoped to knowledge bases and rights (the keys file in the data dir).

The file is edited here directly, also while `search serve` runs: the server reads it again when it
changes, so a new key works and a revoked one stops at once."""

from __future__ import annotations

import time

import typer

from search.cli.support import err, guarded, out, say, settings_of, to_json
from search.datadir import private
from search.keys import RIGHTS, KeyFile, key_file


def _keys(ctx: typer.Context) -> KeyFile:
    settings = settings_of(ctx)
    private(settings.data_dir)  # the keys file's folder, when it is the first thing written there
    return key_file(settings)


app = typer.Typer(no_args_is_help=True, help="API keys scoped to knowledge bases and rights: add, list, revoke.")


@app.command("add")
@guarded
def add_key(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="A name for the key (who or what uses it)."),
    kb: list[str] = typer.Option(..., "--kb", help="A knowledge base the key may use (repeatable; '*' for all)."),
    right: str = typer.Option("read", "--right", help=f"One of {', '.join(RIGHTS)}: read = search; write = search and "
                              "ingest; admin = those, and deleting its knowledge bases."),
) -> None:
    """Make an API key and print its secret, once: it is stored only as a salted hash."""
    secret = _keys(ctx).add(name, kb, right)
    err.print(f"API key {name!r} ({right} on {', '.join(kb)}); send it in the X-API-Key header. "
              "It is shown only now:", highlight=False)
    print(secret)


@app.command("list")
@guarded
def list_keys(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON.")) -> None:
    """The keys: name, knowledge bases, right and when each was made (never the secrets)."""
    keys = [k.listed() for k in _keys(ctx).load()]
    if as_json:
        print(to_json(keys))
        return
    if not keys:
        out.print("no API keys: add one with `search keys add NAME --kb KB --right read`")
    for k in keys:
        say("{}  {} on {}  (made {})", k["name"], k["right"], ", ".join(k["kbs"]),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(k["created"])))


@app.command("revoke")
@guarded
def revoke_key(ctx: typer.Context, name: str = typer.Argument(..., help="The key's name.")) -> None:
    """Remove a key: requests with it are refused from now on. The keys file stays, even empty: a
    server with it keeps refusing requests without a key (SEARCH_OPEN_ACCESS=true opens it)."""
    keys = _keys(ctx)
    keys.revoke(name)
    out.print(f"revoked API key {name}", highlight=False)
    if not keys.load():
        err.print(f"no API keys left in {keys.path}: a server with this file still refuses requests without a key "
                  "(only SEARCH_API_KEY works); SEARCH_OPEN_ACCESS=true opens it", highlight=False)
