"""`search [query] TEXT`, `search entail`, `search status`: what a user asks the index."""

from __future__ import annotations

from pathlib import Path

import typer

from search.cli.connect import query_service
from search.cli.support import display_path, err, guarded, out, say, to_json
from search.cli.verify_report import print_report
from search.errors import BadRequest
from search.paths import readable
from search.services.options import (
    DEFAULT_MIN_RELEVANCE,
    HIT_CHARS,
    MAX_DEPTH,
    MAX_GROUP_SIZE,
    MAX_PAGE,
    ImageFilters,
    check_query_options,
)

# Exit status of a query (also in the README): 8 is its own, apart from indexer ingest's 7 ("some files failed").
NOTHING_MATCHED = 1  # no hit at all (above --min-score, with the entailment asked)
NO_GOOD_MATCH = 8  # hits were found, but none is clearly above the collection's background (--min-relevance)


@guarded
def query(
    ctx: typer.Context,
    text: str = typer.Argument(None, help="What you are looking for, in your own words."),
    images: bool = typer.Option(False, "--images",
                                help="Search photos by TEXT instead of documents: what they show, and the words "
                                "written in them (photos read with `indexer ingest --ocr-photos`)."),
    like: Path = typer.Option(None, "--like", help="Find photos that look like this one (image-to-image)."),
    top_k: int = typer.Option(None, "--top-k", "-k", min=1, max=MAX_PAGE,
                              help="How many hits to show \\[default: 5 passages (documents with --per-document), 12 photos; "
                                   "at most 100 photos]."),
    offset: int = typer.Option(0, "--offset", min=0, max=MAX_DEPTH - 1,
                               help="Documents: skip this many hits (documents with --per-document): the next page."),
    per_document: bool = typer.Option(False, "--per-document", help="Documents: one result per document, in the order of "
                                      "its best passage, saying how many more of its passages matched."),
    per_document_passages: int = typer.Option(None, "--per-document-passages", min=1, max=MAX_GROUP_SIZE,
                                              help="With --per-document: passages shown per document \\[default: 1]."),
    min_score: float = typer.Option(None, "--min-score", help="Hide hits scoring below this (cosine, -1..1, except --mode sparse: "
                                   "unbounded lexical weights)."),
    folder: Path = typer.Option(None, "--folder", help="Only files under this folder."),
    file_type: list[str] = typer.Option(None, "--type",
                                        help="Only files of this type, e.g. --type pdf --type docx (repeatable)."),
    after: str = typer.Option(None, "--after", help="Photos taken on or after this date (2021-07-14 or 2021-07-14T09:30, UTC)."),
    before: str = typer.Option(None, "--before", help="Photos taken before this date."),
    camera: str = typer.Option(None, "--camera", help="Photos from this camera (words of make and model, e.g. 'canon 5d')."),
    near: str = typer.Option(None, "--near", help="Photos taken within KM of a place: LAT,LON,KM (e.g. 51.5,-0.12,10)."),
    sort: str = typer.Option("score", "--sort", help="Photo order after the cut-off: score, newest or oldest."),
    mode: str = typer.Option(None, "--mode", "-m", help="Document search mode: [bold]auto[/] (the best one the served models "
                             "and the documents' vectors allow), or a mode a model offers, e.g. [bold]semantic[/] or "
                             "[bold]hybrid[/] (`search models list` shows each one) \\[default: auto; env: SEARCH_SEARCH_MODE]."),
    verify: bool = typer.Option(False, "--verify", help="With --images: re-rank the top-k photos by the entailment model's probability "
                                "that each one entails TEXT (visual entailment), and show it."),
    min_entailment: float = typer.Option(None, "--min-entailment", min=0.0, max=1.0,
                                         help="With --verify: hide photos whose entailment probability is below this."),
    min_relevance: float = typer.Option(None, "--min-relevance", min=0.0, max=1.0,
                                        help="Hide hits whose calibrated relevance is below this: the share of "
                                             "unrelated questions that find less in this collection "
                                             f"({DEFAULT_MIN_RELEVANCE}: {DEFAULT_MIN_RELEVANCE:.0%} of them; docs/relevance.md). "
                                             f"When none is left: \"no good match\", exit status {NO_GOOD_MATCH}."),
    full_text: bool = typer.Option(False, "--full-text", help="Documents: each passage's whole text; without it a hit's text "
                                   f"stops near {HIT_CHARS:,} characters (JSON: truncated and length say so)."),
    kb: str = typer.Option(None, "--kb", help="The knowledge base to search \\[default: default]."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Find the passages that best match TEXT, or photos with --images / --like.

    `search "TEXT"` is short for `search query "TEXT"`. Each hit shows its score and where it comes
    from (file, page or section and chunk; a photo's path and details); --json prints them for scripts.

    [bold]Exit status[/]:
      0  hits shown
      1  nothing matched (above --min-score, with the entailment asked), or another error
      8  no good match: hits were found, but none passes --min-relevance
      2  bad option · 3 Triton not reachable · 4 model not served · 5 store unavailable · 6 nothing indexed yet · 130 interrupted"""
    photos = bool(images or like)
    if per_document_passages is not None and not per_document:
        raise BadRequest("--per-document-passages needs --per-document")
    if per_document and min_relevance is not None:
        raise BadRequest("--min-relevance: not available with --per-document (groups carry no calibrated relevance yet)")
    check_query_options(photos=photos, text=bool(text), like=like is not None, mode=mode, verify=verify,
                        min_entailment=min_entailment, full_text=full_text,
                        document_only={"--offset": offset, "--per-document": per_document},
                        photo_only={"--after": after, "--before": before, "--camera": camera, "--near": near,
                                    "--sort": sort != "score"})
    with query_service(ctx) as svc:
        if photos:
            filters = ImageFilters.parse(after=after, before=before, camera=camera, near=near, folder=folder,
                                         suffixes=file_type)
            hits = svc.search_images(text, like=like, top_k=top_k or 12, min_score=min_score, filters=filters, sort=sort,
                                     verify=verify, min_entailment=min_entailment, kb=kb, min_relevance=min_relevance)
        elif per_document:
            groups = svc.search_document_groups(text, top_k=top_k or 5, offset=offset, group_size=per_document_passages or 1,
                                                min_score=min_score, folder=str(folder) if folder else None, mode=mode,
                                                suffixes=file_type or (), full_text=full_text, kb=kb)
            return _print_groups(text, groups, offset, min_score, full_text, as_json)
        else:
            hits = svc.search_documents(text, top_k=top_k or 5, offset=offset, min_score=min_score,
                                        folder=str(folder) if folder else None, mode=mode, suffixes=file_type or (),
                                        full_text=full_text, kb=kb, min_relevance=min_relevance)
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
        if images or like:
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
def entail(
    ctx: typer.Context,
    photo: Path = typer.Argument(..., help="The photo (JPEG, PNG, WebP, ...)."),
    hypothesis: str = typer.Argument(..., help="A statement about the photo, e.g. \"there are two dogs\"."),
    premise: str = typer.Option(None, "--premise", help="A text premise given with the photo (the entailment model's second text)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """Does PHOTO support HYPOTHESIS? Visual entailment, with the three probabilities.

    The answer is entailment, neutral or contradiction."""
    with query_service(ctx) as svc:
        verdict = svc.entail(photo, hypothesis, premise)
    if as_json:
        print(to_json({"photo": str(photo), "hypothesis": hypothesis, "premise": premise, **verdict.as_dict()}))
        return
    colour = {"entailment": "green", "contradiction": "red"}.get(verdict.label, "yellow")
    probs = " · ".join(f"{k} {v:.3f}" for k, v in verdict.probs.items())
    out.print(f"[bold {colour}]{verdict.label}[/]  {probs}", highlight=False)
    if verdict.truncated:
        err.print("note: the text was longer than the model takes and was truncated (max_src_length)")


@guarded
def ocr(
    ctx: typer.Context,
    image: Path = typer.Argument(..., help="The photo or scan: an image (JPEG, PNG, WebP, TIFF, ...; every frame of a "
                                 "multi-page TIFF) or a PDF (every page)."),
    min_score: float = typer.Option(0.0, "--min-score", min=0.0, max=1.0, help="Hide lines read with less confidence."),
    pdf: Path = typer.Option(None, "--pdf", help="Also write a searchable PDF here: the pages with the text read laid "
                             "over them, invisible, so a PDF viewer finds and selects the words (as OCRmyPDF does)."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON (each line's text, confidence, box "
                                 "and page)."),
) -> None:
    """Read the text in IMAGE (OCR): its lines in reading order, page by page, each with the model's confidence."""
    with query_service(ctx) as svc:
        read = svc.read_text(image, pdf=pdf)
    lines = [line for line in read.lines if line["score"] >= min_score]
    if as_json:
        print(to_json({"image": str(image), "model": read.model, "pages": read.pages,
                       "text": "\n".join(line["text"] for line in lines), "lines": lines,
                       **({"pdf": str(pdf)} if pdf else {})}))
        return
    if pdf:
        err.print(f"searchable PDF written: {pdf} ({read.pages} page{'s' if read.pages > 1 else ''})", highlight=False)
    if not lines:
        err.print(f"no text found in {image}")
        raise typer.Exit(NOTHING_MATCHED)
    page = None
    for line in lines:
        if read.pages > 1 and line.get("page") != page:
            page = line.get("page")
            say("[bold]— page {} —[/]", page)
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
