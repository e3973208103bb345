"""`search <capability>`: one command per capability of the registered families (search.models.capabilities),
its flags made from the capability's query spec (search/cli/spec_options.py), its answer printed as
JSON. The commands are made when `search` lists or runs them, from the registry as it is then."""

from __future__ import annotations

import click
import typer

from search.cli.connect import query_service
from search.cli.spec_options import build, spec_options
from search.cli.support import fail, guarded, to_json


def registered(taken: set[str]) -> dict:
    """The capabilities by command name; one named like a command ``search`` has is an error."""
    from search.models import capabilities  # noqa: PLC0415  (numpy, tritonclient: `search "…"` goes without the registry)

    found = {cap.command: cap for cap in capabilities()}
    if clash := sorted(set(found) & taken):
        fail(f"capabilities named like commands of `search`: {', '.join(clash)}")
    return found


def command(cap) -> click.Command:
    """The capability as a command: `search <name> --<option> ...`."""

    @guarded
    @spec_options(cap.spec)
    def run(ctx: typer.Context, **options) -> None:
        spec = build(cap.spec, options)
        with query_service(ctx) as svc:
            answer = svc.ask(cap, spec)
        print(to_json(answer.model_dump(mode="json")))

    one = typer.Typer(add_completion=False, rich_markup_mode="rich")
    one.command(cap.command, help=f"{cap.help}\n\nThe answer is printed as JSON, as POST {cap.path} of the REST API and "
                                  f"the MCP tool {cap.name} give it.")(run)
    return typer.main.get_command(one)
