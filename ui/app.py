"""The search page: `search ui` (or `streamlit run ui/app.py`).

Every query goes through search.services.SearchService, like the CLI and the REST API; this file
only turns widgets into service calls and hits into HTML. Settings come from the environment
(SEARCH_DATA_DIR, SEARCH_TRITON_URL, SEARCH_TRITON_REPO, QDRANT_URL, ... see search/config.py).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import streamlit as st
from pydantic import ValidationError

from indexer.loaders import DOCUMENT_SUFFIXES
from search import owner
from search.config import Settings
from search.errors import ServiceError
from search.media.photos import IMAGE_SUFFIXES
from search.models import capabilities, for_kind, for_mode
from search.services import DEFAULT_MIN_RELEVANCE, SearchService, admin
from search.services.remote import RemoteService
from search.services.spec import DocumentQuery, ImageQuery, PhotoQuery, choices, limits, problem, value_type
from search.store import DOCUMENTS
from search.terms import highlight_spans


@dataclass(frozen=True)
class Mode:
    label: str
    kind: str  # "documents" | "text2image" | "image2image" | "entail"
    doc_mode: str | None = None  # SearchService.search_documents(mode=...)


ENTAIL = for_mode("entail")  # the family that verifies photo hits
PHOTO_MODES = (
    Mode("Photos: text to image", "text2image"),
    Mode("Photos: image to image", "image2image"),
    Mode("Photo: does it show…? (entailment)", "entail"),
)
DOC_TYPES = tuple(sorted(DOCUMENT_SUFFIXES))  # what the indexer reads, so the lists stay in step
PHOTO_TYPES = tuple(sorted(IMAGE_SUFFIXES))
GRID_COLUMNS = 4
_MARKUP = re.compile(r"^#{1,6}[ \t]+", re.M)


def page_modes() -> tuple[Mode, ...]:
    """The page's searches, in order (the first is the default): the best mode of each family that
    embeds documents (the model registry: the required family's first), then the photos'."""
    documents = tuple(Mode(f"Documents: {f.best_mode}", "documents", f.best_mode)
                      for f in for_kind(DOCUMENTS.name) if f.best_mode)
    return documents + PHOTO_MODES


def service() -> RemoteService | None:
    """The search server that owns the data dir (`search ui` starts one when none runs): the page never
    opens the store itself, so the server, the page and `indexer ingest` run side by side."""
    settings = Settings()
    if settings.qdrant_url:  # a Qdrant server: no owner, every process opens the store
        return _direct(settings)
    running = owner.serving(settings)
    return RemoteService(running) if running else None


@st.cache_resource
def _direct(settings: Settings) -> SearchService:
    return SearchService(settings)


def main() -> None:
    st.set_page_config(page_title="Search", page_icon=":mag:", layout="wide")
    st.title("Search")
    svc = service()
    if svc is None:
        st.error("The search server is not running for this data dir: start it with `search serve` "
                 "(or open the page with `search ui`, which starts it)")
        return
    try:
        status = svc.status()
    except ServiceError as exc:
        st.error(str(exc))
        return
    capability_sections(svc)
    mode = st.radio("Mode", page_modes(), format_func=lambda m: m.label, horizontal=True)
    opts = sidebar(status, DocumentQuery if mode.kind == "documents" else PhotoQuery)
    verify_panel(svc)
    relevance_panel(svc, opts["kb"])
    if opts["kb"] is not None:  # the counts that decide what the page can search: the chosen KB's
        status["store"]["collections"] = status["store"]["kbs"][opts["kb"]]
    blocker = admin.blocker(status, mode.kind, mode.doc_mode)
    if blocker:
        (st.error if blocker.startswith("Triton") or blocker == status["store"].get("error") else st.info)(blocker)
        return
    try:
        if mode.kind == "documents":
            documents_page(svc, mode, opts)
        elif mode.kind == "entail":
            entail_page(svc)
        else:
            photos_page(svc, mode, opts, verifier_ready=admin.blocker(status, "entail") is None)
    except ServiceError as exc:  # one line that says what to do, never a traceback
        st.error(str(exc))
    except ValidationError as exc:  # a value the query spec refuses (a query over its length)
        st.error(problem(exc))


def sidebar(status: dict, spec: type[DocumentQuery | PhotoQuery]) -> dict:
    """The options the searches share, each widget's bounds, default and help from the query spec
    (search/services/spec.py) of the search shown."""
    kbs = list(status["store"].get("kbs") or {})
    fields = spec.model_fields
    with st.sidebar:
        # A knowledge base to search, once there is more than the default one.
        kb = st.selectbox("Knowledge base", kbs, key="kb", help=fields["kb"].description) if len(kbs) > 1 else None
        st.header("Filters")
        folder = st.text_input("Folder", placeholder="/path/to/folder", help=fields["folder"].description)
        types = st.multiselect("File type", DOC_TYPES + PHOTO_TYPES, help=fields["types"].description)
        dates = st.date_input("Taken between (photos)", value=(), format="YYYY-MM-DD", help=PhotoQuery.model_fields["after"].description)
        camera = st.text_input("Camera (photos)", placeholder="e.g. canon eos", help=PhotoQuery.model_fields["camera"].description)
        clear_only = st.toggle("Only clear matches", help=f"hide hits whose calibrated relevance is below "
                               f"{DEFAULT_MIN_RELEVANCE}: no better than unrelated questions find here (docs/relevance.md)")
        min_score = st.slider("Score cut-off (raw)", 0.0, 1.0, 0.0, 0.01,
                              help="hide hits whose raw score is below this (0 = show all); its scale differs per model")
        top_k = st.number_input("Results", int(limits(fields["top_k"])["ge"]), int(limits(fields["top_k"])["le"]),
                                fields["top_k"].default, help=fields["top_k"].description)
        st.divider()
        st.header("Status")
        t, s = status["triton"], status["store"]
        st.caption(f"Triton {t['url']}: {'live' if t['live'] else 'down'}")
        st.caption("Models: " + ", ".join(f"{n} {'✓' if m['ready'] else '✗'}" for n, m in t["models"].items()))
        st.caption(f"Store {s['location']}" + ("" if s.get("available", True) else f": {s['error']}"))
        st.caption(", ".join(f"{n}: {c}" for n, c in s["collections"].items()))
    after, before = _date_range(dates)
    return {"kb": kb, "folder": folder.strip() or None, "types": list(types) or None, "min_score": min_score or None,
            "min_relevance": DEFAULT_MIN_RELEVANCE if clear_only else None, "top_k": int(top_k),
            "after": after, "before": before, "camera": camera.strip() or None}


def verify_panel(svc: SearchService | RemoteService) -> None:
    """Under the status: do the served models give the expected answers? (`search models verify`)"""
    with st.sidebar:
        if st.button("Verify the models", help="the golden outputs recorded by each build, and the publishers' own "
                                               "examples where the checkpoint is theirs (docs/verify.md)"):
            st.session_state["verify_report"] = svc.verify_report()
        report = st.session_state.get("verify_report")
        if report is None:
            return
        if report.get("error"):
            st.caption(f"✗ {report['error']}")
            return
        for fam in report["families"]:
            if fam["status"] == "not built":
                continue
            misses = [c for c in fam["checks"] if c["status"] == "FAIL"]
            done = "expected answers" if fam["status"] == "pass" else fam["status"]
            st.caption(f"{'✓' if fam['status'] == 'pass' else '✗'} {fam['family']}"
                       + (f" ({fam['precision']})" if fam.get("precision") else "") + ": "
                       + ("; ".join(f"{c['check']} {c['measured']} {c['detail']}".strip() for c in misses) or done))


def relevance_panel(svc: SearchService | RemoteService, kb: str | None) -> None:
    """Under the status: can one relevance threshold serve this knowledge base? (`search relevance check`)"""
    with st.sidebar:
        if st.button("Check relevance", help="questions from the documents' own titles, everyday sentences and questions "
                                             "on other subjects: does the threshold keep the first and refuse the others? "
                                             "(docs/relevance.md)"):
            try:
                st.session_state["relevance_check"] = svc.relevance_check(kb=kb)
            except ServiceError as exc:
                st.session_state["relevance_check"] = {"warnings": [str(exc)]}
        report = st.session_state.get("relevance_check")
        if report is None:
            return
        if report.get("own"):
            st.caption(f"Relevance: {report['own']['kept']:.0%} of questions from its own documents kept, "
                       f"{report['everyday']['answered']:.0%} of everyday ones and "
                       f"{report['other_subjects']['answered']:.0%} on other subjects answered at {report['min_relevance']}")
        for line in report["warnings"] or ["✓ one threshold serves this knowledge base"]:
            st.caption(line if line.startswith("✓") else f"⚠ {line}")


def _date_range(dates) -> tuple[str | None, str | None]:
    """The picked days as the photo spec's dates (UTC): [first day, the day after the last)."""
    if len(dates) == 2:
        return dates[0].isoformat(), (dates[1] + timedelta(days=1)).isoformat()
    if len(dates) == 1:  # the second click is still to come
        return dates[0].isoformat(), None
    return None, None


def documents_page(svc: SearchService | RemoteService, mode: Mode, opts: dict) -> None:
    query = st.text_input("Query", placeholder="e.g. reset password", key="doc_query")
    per_document = st.checkbox("One result per document", key="per_document",
                               help=DocumentQuery.model_fields["group_by"].description)
    if not query.strip():
        return
    fields = {k: v for k, v in opts.items() if k in DocumentQuery.model_fields}
    if per_document:  # groups carry no calibrated relevance yet: "Only clear matches" does not apply to them
        spec = DocumentQuery(query=query, **{**fields, "min_relevance": None}, group_by="document", mode=mode.doc_mode)
        groups = svc.search_document_groups(query, **spec.options())
        hits, more = [g.hits[0] for g in groups], [g.more for g in groups]
    else:
        hits = svc.search_documents(query, **DocumentQuery(query=query, **fields, mode=mode.doc_mode).options())
        if relevance_notice(hits):
            return
        more = [0] * len(hits)
    if not hits:
        st.info("No passage matches: lower the relevance threshold or loosen the filters.")
        return
    st.caption(f"{len(hits)} {'documents' if per_document else 'passages'} ({mode.doc_mode} scores)")
    for i, (hit, n_more) in enumerate(zip(hits, more, strict=True)):
        with st.container(border=True):
            head, button = st.columns([5, 1])
            head.markdown(f"**{Path(hit.display_path).name}** · score {hit.score:.3f}"
                          + (f" · relevance {hit.relevance:.2f}" if hit.relevance is not None else "")
                          + (f" · +{n_more} more passages" if n_more else ""))
            head.caption(hit.citation)
            source = Path(hit.path)
            if source.is_file():  # a browser cannot open file:// links from a page, so serve the file
                button.download_button("Open source", partial(source.read_bytes), file_name=Path(hit.display_path).name,
                                       key=f"src{i}")
            body = f'<div style="line-height:1.5">{highlight(hit.text, query)}</div>'
            if hit.thumbnail and Path(hit.thumbnail).is_file():  # a passage read in a photo: show the photo
                picture, words = st.columns([1, 4])
                picture.image(hit.thumbnail, width="stretch")
                words.html(body)
            else:
                st.html(body)


def relevance_notice(hits) -> bool:
    """Say "no good match" (True: nothing to show) or why relevance is missing."""
    if hits.no_match:
        st.warning(f"No good match: nothing is clearly above the collection's background (best relevance "
                   f"{hits.best:.2f} < {hits.min_relevance}). Turn off “Only clear matches” to see the closest hits.")
        return True
    if hits.note and hits.min_relevance is not None:
        st.caption(f"“Only clear matches” is not applied: {hits.note}.")
    return False


def highlight(text: str, query: str) -> str:
    """The passage as HTML with the query's content words marked (whole words or stems: the spans the
    CLI's --json, the REST API and MCP give as "highlights")."""
    text = " ".join(_MARKUP.sub("", text).replace("**", "").split())  # heading hashes and bold marks are noise
    out, at = [], 0
    for a, b in highlight_spans(text, query):
        out += [html.escape(text[at:a]), "<mark>", html.escape(text[a:b]), "</mark>"]
        at = b
    return "".join(out) + html.escape(text[at:])


def entail_page(svc: SearchService | RemoteService) -> None:
    upload = st.file_uploader("Photo", type=[t.lstrip(".") for t in PHOTO_TYPES], key="entail_photo")
    hypothesis = st.text_input("Hypothesis", placeholder="e.g. there are two dogs", key="entail_hypothesis")
    premise = st.text_input("Premise (optional)", placeholder="a text given with the photo", key="entail_premise")
    if upload is None or not hypothesis.strip():
        return
    st.image(upload.getvalue(), width=240)
    verdict = svc.entail(upload.getvalue(), hypothesis, premise or None)
    st.subheader(verdict.label)
    for col, (label, p) in zip(st.columns(3), verdict.probs.items(), strict=True):
        col.metric(label, f"{p:.3f}")
    if verdict.truncated:
        st.caption("The text was longer than the model takes and was truncated.")


def photos_page(svc: SearchService | RemoteService, mode: Mode, opts: dict, verifier_ready: bool = False) -> None:
    kwargs = PhotoQuery(**{k: v for k, v in opts.items() if k in PhotoQuery.model_fields}).options()
    if mode.kind == "text2image":
        text = st.text_input("Describe the photo", placeholder="e.g. a beach at sunset", key="photo_query")
        verify = st.toggle(f"Verify with {ENTAIL.display}", disabled=not verifier_ready, key="verify",
                           help=ImageQuery.model_fields["verify"].description
                           if verifier_ready else f"needs the {ENTAIL.display} model: `search models build "
                           f"{ENTAIL.cli_option} DIR` (see {ENTAIL.doc_page})")
        bounds = limits(ImageQuery.model_fields["min_entailment"])
        min_entailment = st.slider("Entailment threshold", float(bounds["ge"]), float(bounds["le"]), 0.0, 0.01, key="min_entailment",
                                   help=ImageQuery.model_fields["min_entailment"].description) if verify else 0.0
        if not text.strip():
            return
        hits = svc.search_images(text, **kwargs, verify=verify and verifier_ready,
                                 min_entailment=(min_entailment or None) if verify and verifier_ready else None)
    else:
        upload = st.file_uploader("Example photo", type=[t.lstrip(".") for t in PHOTO_TYPES])
        if upload is None:
            return
        st.image(upload.getvalue(), caption="your example", width=160)
        hits = svc.search_images(like=upload.getvalue(), **kwargs)
    if relevance_notice(hits):
        return
    if not hits:
        st.info("No photo matches: lower the relevance threshold or loosen the filters.")
        return
    st.caption(f"{len(hits)} photos")
    for row in range(0, len(hits), GRID_COLUMNS):
        for col, hit in zip(st.columns(GRID_COLUMNS), hits[row: row + GRID_COLUMNS], strict=False):
            with col.container(border=True):
                picture = hit.thumbnail if hit.thumbnail and Path(hit.thumbnail).is_file() else hit.path
                st.image(picture, width="stretch")
                st.markdown(f"**{Path(hit.display_path).name}** · {hit.score:.3f}"
                            + (f" · relevance {hit.relevance:.2f}" if hit.relevance is not None else ""))
                if hit.entailment is not None:
                    st.caption(f"entails {hit.entailment:.3f} ({hit.entailment_label})")
                meta = [hit.taken, hit.camera, f"{hit.width}×{hit.height}" if hit.width else None,
                        f"{hit.latitude:.4f}, {hit.longitude:.4f}" if hit.latitude is not None else None]
                st.caption(" · ".join(m for m in meta if m) or "no EXIF")
                if hit.text:
                    st.caption(("found by its words · " if hit.found_by == ("words",) else "") + "text: "
                               + " ".join(hit.text.split())[:160])
                st.caption(hit.display_path)


# -- the families' own capabilities (search.models.capabilities): a section each, made from the registry


def capability_sections(svc: SearchService | RemoteService) -> None:
    """A closed section per capability of the registered families, its widgets made from its query spec
    (each field's label, bounds, default and help), its answer shown as JSON."""
    for cap in capabilities():
        with st.expander(f"{cap.command.capitalize()}: {cap.help}"):
            values = {name: _spec_widget(f"cap:{cap.name}:{name}", name, field) for name, field in cap.spec.model_fields.items()}
            if not st.button("Run", key=f"cap:{cap.name}:run"):
                continue
            try:
                answer = svc.ask(cap, cap.spec(**{k: v for k, v in values.items() if v is not None}))
            except ServiceError as exc:
                st.error(str(exc))
            except ValidationError as exc:
                st.error(problem(exc))
            else:
                st.json(answer.model_dump(mode="json"))


def _spec_widget(key: str, name: str, field):
    """A widget for a spec's field, by the type of its value; None when left empty (the spec's default applies)."""
    label, kind, bounds = name.replace("_", " ").capitalize(), value_type(field), limits(field)
    default = None if field.is_required() else field.default
    if allowed := choices(field):
        options = allowed if default is not None or field.is_required() else (None, *allowed)
        return st.selectbox(label, options, index=options.index(default) if default in options else 0, key=key,
                            format_func=lambda v: "—" if v is None else str(v), help=field.description)
    if kind is bool:
        return st.checkbox(label, value=bool(default), key=key, help=field.description)
    if kind in (int, float):
        low, high, value = (None if v is None else kind(v) for v in (bounds.get("ge"), bounds.get("le"), default))
        return st.number_input(label, low, high, value, 1 if kind is int else None, key=key, help=field.description)
    if kind is list:
        lines = st.text_area(label, key=key, help=f"{field.description or ''} (one per line)".strip())
        return [line for line in lines.splitlines() if line.strip()] or None
    return st.text_input(label, "" if default is None else str(default), key=key, help=field.description) or None


if __name__ == "__main__":  # streamlit runs the file as __main__; tests import highlight()
    main()
