"""Every face offers a search's options as its query spec (search/services/spec.py) says: the same
names, bounds and defaults in the CLI's flags, the REST API's OpenAPI schema, the MCP tools' input
schemas and the page's widgets. Each face is the real one (the Typer app, the FastAPI app, the MCP
server, the Streamlit page run by AppTest); no server or model is needed to read them."""

from __future__ import annotations

import asyncio
from contextlib import nullcontext

import pytest
import typer
from streamlit.testing.v1 import AppTest

from search.api.app import create_app
from search.cli.app import app as cli_app
from search.config import Settings
from search.mcp.server import build
from search.services.spec import DocumentQuery, EntailQuery, ImageQuery, OcrQuery, PhotoQuery, limits

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
