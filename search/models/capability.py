"""A capability: something the product can do that every face offers without knowing it. A family
declares it once (``Family.capabilities``): its name, a one-line help, its query spec (a pydantic
model: every option's name, bounds, default and help), its answer model and the function that
answers (service, spec) -> answer. The registry lists them (``search.models.capabilities``); the CLI,
the REST API, the MCP server and the page each enumerate them when they are built, and the query
service (``search.services.capabilities``) is the only caller of ``run``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

    from search.models.base import Family

NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")  # a command, a route, a tool name and a widget key alike


@dataclass(frozen=True)
class Capability:
    name: str  # `search <name>` (- for _), POST /<name>, the MCP tool <name>, the page's section
    help: str  # one line: the command's help, the route's summary, the tool's description, the section's caption
    spec: type[BaseModel]  # the query spec: the command's flags, the request body, the tool's input, the widgets
    answer: type[BaseModel]  # what it answers: the route's response schema, the tool's output
    run: Callable[[Any, Any], Any]  # (query service, spec) -> answer, called by the query service only
    family: Family  # who serves it: a model not served is named by its display and first ensemble

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise ValueError(f"capability {self.name!r}: a name is lower-case letters, digits and _ ({NAME.pattern})")

    @property
    def command(self) -> str:
        return self.name.replace("_", "-")

    @property
    def path(self) -> str:
        return f"/{self.name}"
