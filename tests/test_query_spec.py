"""Every face offers a search's options as its query spec (search/services/spec.py) says: the same
names, bounds and defaults in the CLI's flags, the REST API's OpenAPI schema, the MCP tools' input
schemas and the page's widgets. Each face is the real one (the Typer app, the FastAPI app, the MCP
server, the Streamlit page run by AppTest); no server or model is needed to read them. So does a
family's own capability (search.models.capabilities), whatever its spec holds."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext
from types import SimpleNamespace
from typing import Annotated, Literal

import anyio
import pytest
import typer
from fastapi.testclient import TestClient
from mcp import Client
from pydantic import BaseModel, Field
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

import search.models
from search.api.app import create_app
from search.cli.app import app as cli_app
from search.config import Settings
from search.keys import key_file
from search.mcp.server import build
from search.models import Capability, Family
from search.services.spec import DocumentQuery, EntailQuery, ImageQuery, KbName, OcrQuery, PhotoQuery, limits

# What a face has besides the spec's options, and why
CLI_OWN = {"as_json", "images", "like", "per_document", "pdf"}  # output, which search, the photo; the older --per-document
MCP_OWN = {"image_base64", "thumbnails", "photo"}  # the photo itself, or an indexed one by path or id
# Required options that a face takes otherwise: the CLI's positional TEXT and HYPOTHESIS; MCP's
# search_images takes a text or an example photo
ARGUMENTS = {"query", "text", "hypothesis"}

REST = {"/search/documents": DocumentQuery, "/search/images": ImageQuery, "/search/images/like": PhotoQuery,
        "/entail": EntailQuery, "/ocr": OcrQuery}
MCP = {"search_documents": DocumentQuery, "search_images": ImageQuery, "entail": EntailQuery, "read_text": OcrQuery}
CLI = {"query": (DocumentQuery, ImageQuery), "entail": (EntailQuery,), "ocr": (OcrQuery,)}
FACTS = ("minimum", "maximum", "minLength", "maxLength", "maxItems", "pattern", "enum", "const")


def facts(prop: dict, required: bool) -> dict:
    """A JSON schema property's bounds and choices (a nullable one's non-null branch) and default
    (OpenAPI leaves a null default out)."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    out = {k: v for b in branches for k, v in b.items() if k in FACTS}
    return {**out, "default": "required" if required else prop.get("default")}


def all_facts(schema: dict, components: dict | None = None) -> dict[str, dict]:
    """Each property's facts, a $ref and allOf followed (a form: the spec, and the uploaded file)."""
    if "$ref" in schema:
        return all_facts(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    found = {name: facts(p, name in schema.get("required", ())) for name, p in schema.get("properties", {}).items()}
    for part in schema.get("allOf", []):
        found.update(all_facts(part, components))
    return found


def spec_facts(spec) -> dict[str, dict]:
    return all_facts(spec.model_json_schema())


def test_rest_bodies_are_the_specs(tmp_path):
    api = create_app(Settings(data_dir=tmp_path)).openapi()
    components = api["components"]["schemas"]
    for path, spec in REST.items():
        content = api["paths"][path]["post"]["requestBody"]["content"]
        schema = next(iter(content.values()))["schema"]
        props = {name: f for name, f in all_facts(schema, components).items() if name != "image"}
        assert props == spec_facts(spec), path


def test_mcp_tools_take_the_specs():
    tools = {t.name: t for t in asyncio.run(build(lambda: nullcontext(None)).list_tools())}
    for name, spec in MCP.items():
        props = {k: f for k, f in all_facts(tools[name].input_schema).items() if k not in MCP_OWN}
        expected = spec_facts(spec)
        if name == "search_images":  # a text, or an example photo (image_base64)
            expected["text"]["default"] = None
        assert props == expected, name


def cli_command(name: str):
    return typer.main.get_command(cli_app).commands[name]


def test_cli_flags_are_the_specs():
    for name, specs in CLI.items():
        options = {p.name: p for p in cli_command(name).params if p.param_type_name == "option" and p.name != "help"}
        fields = {f: [s for s in specs if f in s.model_fields] for s in specs for f in s.model_fields}
        assert set(options) - CLI_OWN == set(fields) - ARGUMENTS, name
        for field, owners in fields.items():
            if field in ARGUMENTS:
                continue
            option = options[field]
            assert option.opts[0] == "--" + field.replace("_", "-"), (name, field)
            bounds = [limits(s.model_fields[field]) for s in owners]
            if all("ge" in b for b in bounds):  # several searches: the widest, each checked by its spec
                assert option.min == min(b["ge"] for b in bounds), (name, field)
                assert option.max == max(b["le"] for b in bounds), (name, field)
            else:
                assert option.min is None and option.max is None, (name, field)
            # not given: None (or off), so that the spec's default applies; the help says it
            assert option.default in (None, False), (name, field)
            for spec in owners:
                default = spec.model_fields[field].default
                if default is not None and default is not False:
                    assert f"[default: {default}" in option.help or f"{default} (" in option.help, (name, field, option.help)
            text = owners[0].model_fields[field].description
            assert option.help.startswith(text[:1].upper() + text[1:]), (name, field)  # the spec's help text


def _sidebar(spec_name: str) -> None:
    """The page's sidebar for a search, with a store of two knowledge bases and nothing served."""
    from search.services import spec
    from ui.app import sidebar

    status = {"store": {"kbs": {"default": {}, "hr": {}}, "collections": {}, "location": "here"},
              "triton": {"url": "127.0.0.1:1", "live": False, "models": {}}}
    sidebar(status, getattr(spec, spec_name))


@pytest.mark.parametrize("spec", [DocumentQuery, PhotoQuery])
def test_the_page_widgets_are_the_specs(spec):
    page = AppTest.from_function(_sidebar, args=(spec.__name__,), default_timeout=120).run()
    assert not page.exception, page.exception
    top_k = page.sidebar.number_input[0]
    bounds = limits(spec.model_fields["top_k"])
    assert (top_k.label, top_k.min, top_k.max, top_k.value) == ("Results", bounds["ge"], bounds["le"],
                                                                 spec.model_fields["top_k"].default)
    assert page.sidebar.text_input[0].help == spec.model_fields["folder"].description
    assert page.sidebar.multiselect[0].help == spec.model_fields["types"].description
    assert page.sidebar.selectbox[0].help == spec.model_fields["kb"].description


def test_a_rule_between_options_reads_in_each_face_s_names(tmp_path):
    """The spec's rules (group_size needs group_by) come back in the CLI's flag names."""
    from search.cli.spec_options import build as cli_build
    from search.errors import BadRequest

    with pytest.raises(BadRequest, match="--group-size: applies only with --group-by"):
        cli_build(DocumentQuery, {"group_size": 2}, query="x")
    with pytest.raises(BadRequest, match="--top-k: Input should be less than or equal to 100"):
        cli_build(ImageQuery, {"top_k": 500}, text="x")
    with pytest.raises(BadRequest, match="^hypothesis: String should have at least 1 character"):  # an argument, not a flag
        cli_build(EntailQuery, {}, hypothesis="")


# -- a family's own capability: every face is made from its spec, with no face edit


class Lookup(BaseModel):
    """A capability's spec with a field of each kind a face makes a flag or widget of."""

    text: str = Field(min_length=1, max_length=300, description="what to look up")
    kb: KbName | None = Field(None, description="the knowledge base to look in")
    limit: Annotated[int, Field(ge=1, le=50)] = Field(10, description="answers at most")
    cutoff: Annotated[float, Field(ge=0, le=1)] | None = Field(None, description="hide answers below this")
    exact: bool = Field(False, description="whole words only")
    order: Literal["score", "name"] = Field("score", description="the order of the answers")
    tags: list[Annotated[str, Field(max_length=20)]] | None = Field(None, max_length=8, description="only answers with these tags")


class Looked(BaseModel):
    kb: str | None
    text: str


class Lookups(Family):
    family, display = "lookups", "Lookups"
    ensembles = steps = ("lookups",)

    def capabilities(self) -> tuple[Capability, ...]:  # answered without a model: the faces are what is tested
        return (Capability("look_up", "Look a text up.", Lookup, Looked, lambda svc, spec: Looked(kb=spec.kb, text=spec.text), self),)


@pytest.fixture
def lookups(monkeypatch):
    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, Lookups()))


def test_a_capability_s_faces_are_its_spec(lookups, tmp_path):
    api = create_app(Settings(data_dir=tmp_path)).openapi()
    schema = api["paths"]["/look_up"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert all_facts(schema, api["components"]["schemas"]) == spec_facts(Lookup)
    tools = {t.name: t for t in asyncio.run(build(lambda: nullcontext(None)).list_tools())}
    assert all_facts(tools["look_up"].input_schema) == spec_facts(Lookup)
    group = typer.main.get_command(cli_app)
    command = group.get_command(typer.Context(group), "look-up")
    options = {p.name: p for p in command.params if p.param_type_name == "option" and p.name != "help"}
    assert set(options) == set(Lookup.model_fields)
    for name, field in Lookup.model_fields.items():
        bounds, option = limits(field), options[name]
        assert option.opts[0] == "--" + name.replace("_", "-") and option.default in (None, False), name
        assert (option.min, option.max) == (bounds.get("ge"), bounds.get("le")), name
        assert option.help.startswith(field.description[:1].upper() + field.description[1:]), name
    assert "[default: 10]" in options["limit"].help and options["tags"].multiple


def _capability_page() -> None:
    from ui.app import capability_sections

    capability_sections(None)  # no service is asked until Run is pressed


def test_a_capability_s_page_section_is_its_spec(lookups):
    page = AppTest.from_function(_capability_page, default_timeout=120).run()
    assert not page.exception, page.exception
    widget = {w.key.rsplit(":", 1)[1]: w for kind in ("text_input", "number_input", "checkbox", "selectbox", "text_area")
              for w in getattr(page, kind) if w.key}
    assert set(widget) == set(Lookup.model_fields)
    for name, field in Lookup.model_fields.items():
        assert widget[name].help.startswith(field.description), name
    assert (widget["limit"].min, widget["limit"].max, widget["limit"].value) == (1, 50, 10)
    assert (widget["cutoff"].min, widget["cutoff"].max, widget["cutoff"].value) == (0.0, 1.0, None)
    assert widget["order"].options == ["score", "name"] and widget["order"].value == "score"
    assert widget["exact"].value is False


def test_a_capability_is_held_to_the_key_s_knowledge_bases(lookups, tmp_path):
    """As the searches: a key scoped to "hr" may ask about "hr" only, by REST and by MCP; no key, no answer."""
    settings = Settings(data_dir=tmp_path, api_key="admin")
    hr = key_file(settings).add("hr-reader", ["hr"], "read")
    api = TestClient(create_app(settings))
    assert api.post("/look_up", json={"text": "x", "kb": "hr"}).status_code == 401
    answer = api.post("/look_up", json={"text": "x", "kb": "hr"}, headers={"X-API-Key": hr})
    assert answer.status_code == 200 and answer.json() == {"kb": "hr", "text": "x"}
    refused = api.post("/look_up", json={"text": "x"}, headers={"X-API-Key": hr})
    assert refused.status_code == 403 and "default" in refused.json()["detail"]
    who = key_file(settings).match(hr)

    async def main():
        async with Client(build(lambda: nullcontext(SimpleNamespace(ask=ask)), caller=lambda _request: who)) as client:
            assert (await client.call_tool("look_up", {"text": "x", "kb": "hr"})).structured_content == {"kb": "hr", "text": "x"}
            denied = await client.call_tool("look_up", {"text": "x", "kb": "eng"})
            assert denied.is_error and "eng" in denied.content[0].text and "\n" not in denied.content[0].text

    def ask(cap, spec):
        return cap.run(None, spec)
    anyio.run(main)


def test_a_capability_may_not_take_a_name_a_face_uses(monkeypatch, tmp_path):
    """A capability called "entail" would hide (or be hidden by) the product's own: each face refuses to start."""
    class Clash(Family):
        family, display = "clash", "Clash"
        ensembles = steps = ("clash",)

        def capabilities(self) -> tuple[Capability, ...]:
            return (Capability("entail", "Clash.", Lookup, Looked, lambda svc, spec: None, self),)

    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, Clash()))
    with pytest.raises(ValueError, match="'entail': an MCP tool of that name exists"):
        create_app(Settings(data_dir=tmp_path))
    listing = CliRunner().invoke(cli_app, ["--help"])
    assert listing.exit_code == 1 and listing.stderr == "error: capabilities named like commands of `search`: entail\n"
    monkeypatch.setattr(search.models, "FAMILIES", (*search.models.FAMILIES, Lookups(), Lookups()))
    with pytest.raises(LookupError, match="offered by several families: look_up"):
        search.models.capabilities()
