"""A command's flags made from query specs (search/services/spec.py): one --kebab-name option per
field, with the field's help, bounds and default, so that a new field is a new flag with no CLI edit."""

from __future__ import annotations

import inspect
import re

import typer
from pydantic import BaseModel, ValidationError

from search.errors import BadRequest
from search.services.spec import choices, limits, problem, value_type, with_parameters

# Short and earlier names a flag keeps (the first name is always the field's)
EXTRA_NAMES = {"top_k": ("-k",), "mode": ("-m",), "types": ("--type",), "group_size": ("--per-document-passages",)}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def spec_options(*specs: type[BaseModel], exclude: tuple[str, ...] = ()):
    """Give the decorated command one option per field of ``specs`` (a field in several takes the widest
    bounds and says each default). It receives them as keyword arguments: None (False for a flag)
    when not given, so that the spec the command builds applies its own default."""
    fields: dict[str, list] = {}
    for spec in specs:
        for name, field in spec.model_fields.items():
            if name not in exclude:
                fields.setdefault(name, []).append((spec, field))

    def decorate(fn):
        return with_parameters(fn, [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=_option(name, found),
                                                      annotation=_type(found[0][1])) for name, found in fields.items()])

    return decorate


def _type(field) -> type:
    kind = value_type(field)
    return list[str] if kind is list else kind


def _option(name: str, found: list) -> typer.models.OptionInfo:
    field = found[0][1]
    bounds = [limits(f) for _, f in found]
    low = min(b["ge"] for b in bounds) if all("ge" in b for b in bounds) else None  # the widest: each spec checks its own
    high = max(b["le"] for b in bounds) if all("le" in b for b in bounds) else None
    text = (field.description or "").rstrip(".")
    text = text[:1].upper() + text[1:] + "."
    if allowed := choices(field):
        text += f" One of: {', '.join(allowed)}."
    defaults = {spec.__name__: f.default for spec, f in found if f.default is not None and f.default is not False}
    if len(set(defaults.values())) == 1 and len(defaults) == len(found):
        text += f" \\[default: {next(iter(defaults.values()))}]"
    elif defaults:
        text += " \\[default: " + ", ".join(f"{v} ({_search(s)})" for s, v in defaults.items()) + "]"
    if value_type(field) is bool:
        return typer.Option(False, flag(name), help=text)
    return typer.Option(None, flag(name), *EXTRA_NAMES.get(name, ()), min=low, max=high, help=text)


def _search(spec_name: str) -> str:
    return {"DocumentQuery": "documents", "ImageQuery": "photos", "PhotoQuery": "photos"}.get(spec_name, spec_name)


def was_given(value) -> bool:
    """Whether a flag was given: not its "not given" None, an unset switch or an empty repeatable."""
    return value is not None and value is not False and value != []


def build(spec: type[BaseModel], given: dict, **values) -> BaseModel:
    """``spec`` from the flags given (those it has) and ``values``; a value it refuses is a BadRequest
    that names the flag."""
    fields = {k: v for k, v in given.items() if k in spec.model_fields and was_given(v)}
    try:
        return spec(**fields, **values)
    except ValidationError as exc:  # named as flags, also in the message (a rule between two fields names both)
        words = re.compile(r"\b(" + "|".join(set(spec.model_fields) - set(values)) + r")\b")  # arguments keep their names
        raise BadRequest(words.sub(lambda m: flag(m[1]), problem(exc))) from None
