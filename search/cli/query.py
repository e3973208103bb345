"""`search [query] TEXT`, `search entail`, `search status`: what a user asks the index."""

from __future__ import annotations

from pathlib import Path

import typer

from search.cli.connect import query_service
from search.cli.spec_options import build, flag, spec_options, was_given
from search.cli.support import display_path, err, guarded, out, say, to_json
from search.cli.verify_report import print_report
from search.paths import readable
from search.services.options import check_query_options
from search.services.spec import DocumentQuery, EntailQuery, ImageQuery, OcrQuery, PhotoQuery

# Exit status of a query (also in the README): 8 is its own, apart from indexer ingest's 7 ("some files failed").
NOTHING_MATCHED = 1  # no hit at all (above --min-score, with the entailment asked)
NO_GOOD_MATCH = 8  # hits were found, but none is clearly above the collection's background (--min-relevance)


@guarded
@spec_options(DocumentQuery, ImageQuery, exclude=("query", "text"))
def query(
    ctx: typer.Context,
    text: str = typer.Argument(None, help="What you are looking for, in your own words."),
    images: bool = typer.Option(False, "--images",
                                help="Search photos by TEXT instead of documents: what they show, and the words "
                                "written in them (photos read with `indexer ingest --ocr-photos`)."),
    like: Path = typer.Option(None, "--like", help="Find photos that look like this one (image-to-image)."),
    per_document: bool = typer.Option(False, "--per-document", hidden=True, help="Same as --group-by document."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    **options,
) -> None:
    """Find the passages that best match TEXT, or photos with --images / --like.

    `search "TEXT"` is short for `search query "TEXT"`. Each hit shows its score and where it comes
    from (file, page or section and chunk; a photo's path and details); --json prints them for scripts.
    The options are the REST API's and the MCP tools' (docs/api.md), by the same names.

    [bold]Exit status[/]:
      0  hits shown
      1  nothing matched (above --min-score, with the entailment asked), or another error
      8  no good match: hits were found, but none passes --min-relevance
      2  bad option · 3 Triton not reachable · 4 model not served · 5 store unavailable · 6 nothing indexed yet · 130 interrupted"""
    photos = bool(images or like)
    if per_document:
        options["group_by"] = "document"
    check_query_options(photos=photos, text=bool(text), like=like is not None, mode=options["mode"],
                        verify=options["verify"], min_entailment=options["min_entailment"],
                        full_text=options["full_text"], document_only=_only(options, DocumentQuery, ImageQuery),
                        photo_only=_only(options, ImageQuery, DocumentQuery))
    if options["folder"]:
        options["folder"] = str(Path(options["folder"]))
    with query_service(ctx) as svc:
        if photos:
            spec = build(ImageQuery if text else PhotoQuery, options, **({"text": text} if text else {}))
            hits = svc.search_images(text, like=like, **spec.options())
        else:
            spec = build(DocumentQuery, options, query=text)
            if spec.group_by:
                groups = svc.search_document_groups(text, **spec.options())
                return _print_groups(text, groups, spec.offset, spec.min_score, spec.full_text, as_json)
            hits = svc.search_documents(text, **spec.options())
    _print_hits(text, like, hits, spec, as_json)


def _only(options: dict, spec, other) -> dict:
    """The flags given that only ``spec``'s search has, by flag name."""
    return {flag(name): value for name, value in options.items()
            if name in spec.model_fields and name not in other.model_fields and was_given(value)}


def _print_hits(text: str | None, like: Path | None, hits, spec, as_json: bool) -> None:
    min_relevance, min_score = spec.min_relevance, spec.min_score
    min_entailment, offset = getattr(spec, "min_entailment", None), getattr(spec, "offset", 0)
    full_text, verify = getattr(spec, "full_text", False), getattr(spec, "verify", False)
    if as_json:
        print(to_json({"query": text, "like": readable(str(like)) if like else None, **hits.relevance_fields(),
                       "hits": [h.as_dict() for h in hits]}))
        if hits.no_match:
            raise typer.Exit(NO_GOOD_MATCH)
        return
    if hits.note and min_relevance is not None:
        say("note: {}; --min-relevance was not applied", hits.note, console=err)
    if hits.no_match:
        say("no good match: nothing stands out from what unrelated questions find here (best relevance {:.2f}, "
            "below --min-relevance {})", hits.best or 0.0, min_relevance, console=err)
        raise typer.Exit(NO_GOOD_MATCH)
    if not hits:
        err.print("nothing matched" + (f" above --min-score {min_score}" if min_score is not None else "")
                  + (f" with entailment ≥ {min_entailment}" if min_entailment is not None else ""))
        raise typer.Exit(NOTHING_MATCHED)
    for rank, h in enumerate(hits, offset + 1):
        relevance = " [dim]rel {relevance:.2f}[/]" if h.relevance is not None else ""
        head = "[bold]{rank}.[/] [green]{score:.3f}[/]" + relevance + "  [cyan]{path}[/]"
        if not isinstance(spec, DocumentQuery):
            facts = [h.taken, h.camera, f"{h.width}×{h.height}" if h.width else None,
                     f"{h.latitude:.5f},{h.longitude:.5f}" if h.latitude is not None else None]
            if verify:
                head += ("  [magenta]entails {entails:.3f}[/] [dim]({label})[/]" if h.entailment is not None
                         else "  [yellow]not verified (file unreadable)[/]")
            if h.found_by == ("words",):
                facts.insert(0, "found by its words")
            say(head + "  [dim]{facts}[/]", rank=rank, score=h.score, relevance=h.relevance, path=display_path(h.path),
                entails=h.entailment,
                label=h.entailment_label, facts=" · ".join(f for f in facts if f))
            if h.text:
                say("   [dim]text:[/] {}", " ".join(h.text.split())[:200])
        else:
            where = [f"p. {h.page}" if h.page else None, f"§ {h.section}" if h.section else None, f"chunk {h.chunk}", h.mode]
            say(head + " [dim]({where})[/]", rank=rank, score=h.score, relevance=h.relevance, path=display_path(h.path),
                where=", ".join(w for w in where if w))
            say("   {}", h.text.strip().replace("\n", "\n   ") if full_text else h.snippet())


def _print_groups(text: str, groups: list, offset: int, min_score: float | None, full_text: bool, as_json: bool) -> None:
    if as_json:
        print(to_json({"query": text, "offset": offset, "group_by": "document", "groups": [g.as_dict() for g in groups]}))
        return
    if not groups:
        err.print("nothing matched" + (f" above --min-score {min_score}" if min_score is not None else ""))
        raise typer.Exit(1)
    for rank, g in enumerate(groups, offset + 1):
        say("[bold]{}.[/] [green]{:.3f}[/]  [cyan]{}[/]" + ("  [dim]+{} more passages[/]" if g.more else ""),
            rank, g.score, display_path(g.path), *([g.more] if g.more else []))
        for h in g.hits:
            where = [f"p. {h.page}" if h.page else None, f"§ {h.section}" if h.section else None, f"chunk {h.chunk}"]
            say("   [green]{:.3f}[/] [dim]({})[/]", h.score, ", ".join(w for w in where if w))
            say("   {}", h.text.strip().replace("\n", "\n   ") if full_text else h.snippet())


@guarded
@spec_options(EntailQuery, exclude=("hypothesis",))
def entail(
    ctx: typer.Context,
    photo: Path = typer.Argument(..., help="The photo (JPEG, PNG, WebP, ...)."),
    hypothesis: str = typer.Argument(..., help="A statement about the photo, e.g. \"there are two dogs\"."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    **options,
) -> None:
    """Does PHOTO support HYPOTHESIS? Visual entailment, with the three probabilities.

    The answer is entailment, neutral or contradiction."""
    spec = build(EntailQuery, options, hypothesis=hypothesis)
    with query_service(ctx) as svc:
        verdict = svc.entail(photo, spec.hypothesis, spec.premise)
    if as_json:
        print(to_json({"photo": str(photo), "hypothesis": hypothesis, "premise": spec.premise, **verdict.as_dict()}))
        return
    colour = {"entailment": "green", "contradiction": "red"}.get(verdict.label, "yellow")
    probs = " · ".join(f"{k} {v:.3f}" for k, v in verdict.probs.items())
    out.print(f"[bold {colour}]{verdict.label}[/]  {probs}", highlight=False)
    if verdict.truncated:
        err.print("note: the text was longer than the model takes and was truncated (max_src_length)")


@guarded
@spec_options(OcrQuery)
def ocr(
    ctx: typer.Context,
    image: Path = typer.Argument(..., help="The photo or scan: an image (JPEG, PNG, WebP, TIFF, ...; every frame of a "
                                 "multi-page TIFF) or a PDF (every page)."),
    pdf: Path = typer.Option(None, "--pdf", help="Also write a searchable PDF here: the pages with the text read laid "
                             "over them, invisible, so a PDF viewer finds and selects the words (as OCRmyPDF does)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON (each line's text, confidence, box "
                                 "and page)."),
    **options,
) -> None:
    """Read the text in IMAGE (OCR): its lines in reading order, page by page, each with the model's confidence."""
    spec = build(OcrQuery, options)
    with query_service(ctx) as svc:
        read = svc.read_text(image, pdf=pdf)
    read = read.confident(spec.min_score)
    lines = read.lines
    if as_json:
        print(to_json({"image": str(image), **read.as_dict(), **({"pdf": str(pdf)} if pdf else {})}))
        return
    if pdf:
        err.print(f"searchable PDF written: {pdf} ({read.pages} page{'s' if read.pages > 1 else ''})", highlight=False)
    if not lines:
        err.print(f"no text found in {image}")
        raise typer.Exit(NOTHING_MATCHED)
    page = block = None
    for line in lines:
        if read.pages > 1 and line.get("page") != page:
            say("[bold]— page {} —[/]", line.get("page"))
        elif block is not None and line.get("block") != block:
            say("")  # a blank line between paragraphs (blocks)
        page, block = line.get("page"), line.get("block")
        say("[green]{:.3f}[/]  {}", line["score"], line["text"])


@guarded
def status(ctx: typer.Context, as_json: bool = typer.Option(False, "--json"),
           verify: bool = typer.Option(False, "--verify", help="Also check that the served models give the expected "
                                       "answers (`search models verify`); exit status 1 on a miss.")) -> None:
    """Show whether Triton and the store are reachable, which models are served, and counts."""
    with query_service(ctx) as svc:
        st = svc.status()
        report = svc.verify_report() if verify else None
    if as_json:
        print(to_json({**st, "verify": report} if verify else st))
        if report is not None and not report["passed"]:
            raise typer.Exit(1)
        return
    t = st["triton"]
    if t["live"]:
        say("Triton  {}: [green]live[/]", t["url"])
    else:
        say("Triton  {}: [red]not reachable[/] ({})", t["url"], t.get("hint", ""))
    for name, m in t["models"].items():
        say("  {}: built={} ready={}" + ("" if m.get("healthy", True) else " [red]unhealthy[/]: {}"), name,
            "yes" if m["built"] else "no", "yes" if m["ready"] else "no", *([] if m.get("healthy", True) else [m["reason"]]))
    s = st["store"]
    if s.get("in_use"):
        say("Store   {} at {}: [yellow]in use by another process{}[/]", s["backend"], s["location"],
            f" (pid {s['holder_pid']})" if s.get("holder_pid") else "")
    elif not s.get("available", True):
        say("Store   {} at {}: [red]not available[/]: {}", s["backend"], s["location"], s["error"])
    else:
        say("Store   {} at {}", s["backend"], s["location"])
    for name, n in s["collections"].items():
        say("  {}: {} points", name, n)
    if "note" in st["store"]:
        say("  [yellow]note[/]: {}", st["store"]["note"])
    if report is not None:
        print_report(report)
        if not report["passed"]:
            raise typer.Exit(1)
