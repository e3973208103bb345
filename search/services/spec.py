"""One query spec per search (documents, photos, entailment, OCR): a pydantic model that is the only
place where an option's name, bounds, default and help text are written. The faces are made from
it: the REST bodies are these models (OpenAPI is theirs), the CLI's flags (search/cli/spec_options.py)
and the MCP tools' parameters (``parameters`` below) come from their fields, the page reads its
widgets' bounds, defaults and help from them and RemoteService sends their fields. tests/test_query_spec.py holds
every face to them.

No model registry at import (the CLI starts without it): the document modes are read on first use."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from typing import Annotated, Literal, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo

from search.config import DEFAULT_KB, KB_NAME
from search.services import options
from search.services.options import (
    GROUP_BY,
    HIT_CHARS,
    HIT_CHARS_LIMIT,
    MAX_DEPTH,
    MAX_GROUP_SIZE,
    MAX_PAGE,
    MAX_TOP_K,
    SORTS,
    ImageFilters,
)


def utf8_text(value: str) -> str:
    try:
        value.encode("utf-8")  # JSON may carry lone surrogates, which the tokenizers cannot take
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 text") from exc
    return value


class _Modes:
    """The document search modes as a field's choices in the JSON schema, read on first use."""

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return {**handler(core_schema), "enum": list(options.MODES)}


def _mode(value: str) -> str:
    if value not in (modes := options.MODES):  # the registry's, asked once
        raise ValueError(f"must be one of {', '.join(modes)}")
    return value


Text = Annotated[str, AfterValidator(utf8_text)]
Mode = Annotated[str, AfterValidator(_mode), _Modes()]
KbName = Annotated[str, Field(pattern=KB_NAME.pattern, max_length=40, examples=["hr"],
                              description=f"a knowledge base (default: {DEFAULT_KB!r}, today's index)")]
Score = Annotated[float, Field(allow_inf_nan=False)]
FileTypes = Annotated[list[Annotated[Text, Field(min_length=1, max_length=16)]], Field(max_length=32)]
Probability = Annotated[float, Field(ge=0, le=1)]
KB = f"the knowledge base to search (default: {DEFAULT_KB!r})"

MIN_SCORE = "hide hits scoring below this (cosine, -1..1, except a lexical mode's: unbounded weights)"
MIN_RELEVANCE = ("hide hits whose calibrated relevance (the share of unrelated questions that find less in this "
                 f"collection, 0..1; {options.DEFAULT_MIN_RELEVANCE}: {options.DEFAULT_MIN_RELEVANCE:.0%} of them) is "
                 "below this; when none is left the answer says no_match: true")


class DocumentQuery(BaseModel):
    """A document search: passages (or documents, with group_by) in pages."""

    query: Text = Field(min_length=1, max_length=2000, examples=["reset password"],
                        description="what you are looking for, in your own words")
    kb: KbName | None = Field(None, description=KB)
    top_k: Annotated[int, Field(ge=1, le=MAX_PAGE)] = Field(5, description="hits per page (documents, with group_by)")
    offset: Annotated[int, Field(ge=0, le=MAX_DEPTH - 1)] = Field(
        0, description=f"hits (documents, with group_by) to skip: the next page starts at the answer's next_offset; "
                       f"offset + top_k is at most {MAX_DEPTH}")
    group_by: Literal[GROUP_BY] | None = Field(
        None, description="document: one entry per document, in the order of its best passage, with its best "
                          "passages (group_size) and how many more of its passages matched")
    group_size: Annotated[int, Field(ge=1, le=MAX_GROUP_SIZE)] | None = Field(
        None, description="with group_by: passages per document (default 1)")
    mode: Mode | None = Field(None, description="the search mode: auto (the best one the served models and the "
                                                "documents' vectors allow) or a mode a model offers (`search models "
                                                "list` says what each does); default: the server's search_mode (auto)")
    min_score: Score | None = Field(None, description=MIN_SCORE)
    min_relevance: Probability | None = Field(None, description=MIN_RELEVANCE)
    folder: Text | None = Field(None, max_length=4096, description="only files under this folder")
    types: FileTypes | None = Field(None, description="only files of these types, e.g. [\"pdf\", \"docx\"]")
    max_chars: Annotated[int, Field(ge=1, le=HIT_CHARS_LIMIT)] | None = Field(
        None, description=f"characters of text per hit, cut at a word boundary when there is one (the hit then says "
                          f"truncated and its whole length); default {HIT_CHARS}")
    full_text: bool = Field(False, description="each hit's whole text, however long (leave max_chars out)")

    @model_validator(mode="after")
    def _one_bound(self) -> DocumentQuery:
        if self.full_text and self.max_chars is not None:
            raise ValueError("max_chars and full_text: give one or the other")
        if self.offset + self.top_k > MAX_DEPTH:
            raise ValueError(f"offset + top_k: must be at most {MAX_DEPTH}")
        if self.group_size is not None and self.group_by is None:
            raise ValueError("group_size: applies only with group_by")
        if self.min_relevance is not None and self.group_by is not None:
            raise ValueError("min_relevance: not available with group_by (groups carry no calibrated relevance yet)")
        return self

    def options(self) -> dict:
        """The service's keyword arguments (search_documents, or search_document_groups with group_by)."""
        grouped = {"group_size": self.group_size or 1} if self.group_by else {"min_relevance": self.min_relevance}
        return dict(top_k=self.top_k, offset=self.offset, min_score=self.min_score, folder=self.folder, mode=self.mode,
                    types=tuple(self.types or ()), max_chars=self.max_chars, full_text=self.full_text, kb=self.kb,
                    **grouped)


class PhotoFilters(BaseModel):
    """What a photo search keeps: when, which camera, where, which folder and file types."""

    after: Text | None = Field(None, max_length=64, examples=["2021-07-14"],
                               description="photos taken on or after this date (2021-07-14 or 2021-07-14T09:30, UTC)")
    before: Text | None = Field(None, max_length=64, description="photos taken before this date")
    camera: Text | None = Field(None, max_length=200,
                                description="photos from this camera (words of make and model, e.g. 'canon 5d')")
    near: Text | None = Field(None, max_length=100, examples=["51.5,-0.12,10"],
                              description="photos taken within KM of a place: LAT,LON,KM")
    folder: Text | None = Field(None, max_length=4096, description="only files under this folder")
    types: FileTypes | None = Field(None, description="only files of these types, e.g. [\"jpg\", \"png\"]")

    def to_filters(self) -> ImageFilters:
        return ImageFilters.parse(after=self.after, before=self.before, camera=self.camera, near=self.near,
                                  folder=self.folder, types=self.types or ())


class PhotoQuery(PhotoFilters):
    """A photo search by an example photo (the photo itself travels apart: a path, an upload, base64)."""

    kb: KbName | None = Field(None, description=KB)
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = Field(12, description="how many photos")
    min_score: Score | None = Field(None, description="hide photos scoring below this (cosine, -1..1)")
    min_relevance: Probability | None = Field(None, description=MIN_RELEVANCE)
    sort: Literal[SORTS] = Field("score", description="the order after the cut-offs: score, newest or oldest")

    def options(self) -> dict:
        """The service's keyword arguments (search_images, with ``like`` or the text apart)."""
        return dict(top_k=self.top_k, min_score=self.min_score, filters=self.to_filters(), sort=self.sort, kb=self.kb,
                    min_relevance=self.min_relevance)


class ImageQuery(PhotoQuery):
    """A photo search by text: what the photos show, and the words written in them."""

    text: Text = Field(min_length=1, max_length=2000, examples=["a dog on the beach"],
                       description="what the photos show, or words written in them")
    verify: bool = Field(False, description="re-rank the top_k hits by the entailment model's probability that each "
                                            "photo entails the text")
    min_entailment: Probability | None = Field(
        None, description="with verify: drop photos whose entailment probability is below this")

    def options(self) -> dict:
        return {**super().options(), "verify": self.verify, "min_entailment": self.min_entailment}


class EntailQuery(BaseModel):
    """Visual entailment: does a photo (sent apart) support a hypothesis?"""

    hypothesis: Text = Field(min_length=1, max_length=20_000, examples=["there are two dogs"],
                             description="a statement about the photo")
    premise: Text | None = Field(None, max_length=20_000,
                                 description="a text premise given with the photo (the entailment model's second text)")


class OcrQuery(BaseModel):
    """Reading the text in a photo or scan (sent apart)."""

    min_score: Probability = Field(0.0, description="hide lines read with less confidence (0..1)")


SPECS = (DocumentQuery, ImageQuery, PhotoQuery, EntailQuery, OcrQuery)


def limits(field: FieldInfo) -> dict[str, float]:
    """A field's numeric bounds (ge, le), wherever its type states them (also inside ``X | None``)."""
    found: dict[str, float] = {}

    def visit(metadata) -> None:
        for m in metadata:
            if isinstance(m, FieldInfo):
                visit(m.metadata)
            for key in ("ge", "le"):
                if isinstance(getattr(m, key, None), int | float) and type(m).__name__ == key.capitalize():
                    found[key] = getattr(m, key)

    def walk(annotation) -> None:
        if get_origin(annotation) is Annotated:
            visit(annotation.__metadata__)
            walk(get_args(annotation)[0])
        elif get_origin(annotation) in (Union, types.UnionType):
            for arg in get_args(annotation):
                walk(arg)

    visit(field.metadata)
    walk(field.annotation)
    return found


def value_type(field: FieldInfo) -> type:
    """The plain type of a field's value (int, float, str, bool, list): what a flag or a widget takes."""
    annotation = field.annotation
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) in (Union, types.UnionType):
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        elif get_origin(annotation) is Literal:
            return type(get_args(annotation)[0])
        else:
            return get_origin(annotation) or annotation


def choices(field: FieldInfo) -> tuple | None:
    """A field's allowed values when its type lists them (a Literal), else None."""
    annotation = field.annotation
    for arg in (annotation, *get_args(annotation)):
        if get_origin(arg) is Literal:
            return get_args(arg)
    return None


def parameters(spec: type[BaseModel], *, exclude: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> list:
    """The spec's fields as keyword parameters (inspect.Parameter) of a function whose signature a face
    reads (the MCP SDK makes a tool's input schema of it): each with its type, bounds, help and
    default. ``optional``: required fields that may be left out there (None)."""
    out = []
    for name, field in spec.model_fields.items():
        if name in exclude:
            continue
        annotation = Annotated[(field.annotation, *field.metadata, Field(description=field.description))]
        default = None if name in optional else (inspect.Parameter.empty if field.is_required() else field.default)
        out.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                     annotation=annotation | None if name in optional else annotation))
    return out


def with_parameters(fn, added: list):
    """``fn`` (whose ``**kwargs`` take them) with ``added`` parameters in its signature, its other
    annotations evaluated, for a face that reads signatures (Typer, the MCP SDK)."""
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in inspect.signature(fn).parameters.values()
           if p.kind is not p.VAR_KEYWORD]

    @functools.wraps(fn)
    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    params = own + added
    call.__signature__ = inspect.Signature(params, return_annotation=hints.get("return", inspect.Signature.empty))
    call.__annotations__ = {**{p.name: p.annotation for p in params}, **({"return": hints["return"]} if "return" in hints else {})}
    return call


def problem(exc: ValidationError, name=str) -> str:
    """A spec's refusal in one line: the first field at fault (as ``name`` spells it for the face) and why."""
    first = exc.errors()[0]
    return (f"{name(first['loc'][0])}: " if first["loc"] else "") + first["msg"].removeprefix("Value error, ")

