"""The benchmark table: the latest figure of every measure in bench/results/*.jsonl, as Markdown.

    python bench/report.py [--bench NAME] [--results DIR]

Each bench appends one JSON object per run to bench/results/<bench>.jsonl (bench/common.py,
``append``): bench, date, commit, machine, load_before, load_after, command, and its figures,
possibly nested. A figure is a number at any depth; its measure is its dotted key
(``images.ratio_1_clients``). Lists (the rounds behind a median) and text are not figures. For each
measure the table shows the latest run that has it, its goal where GOALS names one, the machine,
the date and the command that reproduces it. A smoke run (``--quick``, recorded with "quick": true)
is left out. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
META = {"bench", "date", "commit", "machine", "load_before", "load_after", "command"}

# (bench, measure pattern) -> (comparison, value). Patterns are globs over the dotted measure; a * stays
# within one part (it does not match a dot).
# A measure with no goal (quality figures, counts, raw rates) shows an empty goal cell.
GOALS: dict[tuple[str, str], tuple[str, float]] = {
    # served OCR against RapidOCR in-process on the same files (issue "Words inside pictures and scans")
    ("bench_ocr", "images.ratio_1_clients"): (">=", 0.9),
    ("bench_ocr", "images.ratio_4_clients"): (">=", 1.2),
    ("bench_ocr", "pages.ratio_1_clients"): (">=", 0.9),
    ("bench_ocr", "pages.ratio_4_clients"): (">=", 1.2),
    # a scanned PDF through `indexer ingest` against OCR alone of the same pages
    ("bench_ocr", "ingest.ratio"): (">=", 0.85),
    # photo ingest against the raw visual encoder in the same run (issue "A library of a million")
    ("bench_clip", "ingest.ratio"): (">=", 0.9),
    # text-to-image search through the service layer, as sent now (issue 18): stored photos, clients
    ("bench_clip", "latency.variable_length_10000_1.p50_ms"): ("<=", 20.0),
    ("bench_clip", "latency.variable_length_10000_1.p99_ms"): ("<=", 40.0),
    ("bench_clip", "latency.variable_length_100000_8.p50_ms"): ("<=", 60.0),
    # served MiniLM at 32 sentences per request, paired passes (issue 18)
    ("bench_minilm", "paired_ratios.served_vs_st"): (">=", 1.5),
    ("bench_minilm", "paired_ratios.served_vs_ort"): (">=", 0.95),
    # the embedded store (edge) at every size, with and without a payload filter (issue "A library of a million")
    ("bench_store", "edge_*.recall"): (">=", 0.95),
    ("bench_store", "edge_*.filtered_recall"): (">=", 0.95),
    ("bench_store", "edge_*.top10_p50_ms"): ("<=", 10.0),
    ("bench_store", "edge_*.top10_p99_ms"): ("<=", 30.0),
    ("bench_store", "edge_*.filtered_p50_ms"): ("<=", 10.0),
    ("bench_store", "edge_*.filtered_p99_ms"): ("<=", 30.0),
    ("bench_store", "edge_*.optimize_s"): ("<=", 900.0),  # the index build: 15 minutes
    ("bench_store", "edge_*.reopen_s"): ("<=", 5.0),
    ("bench_store", "edge_*.*_filtered_recall"): (">=", 0.95),
    ("bench_store", "edge_*.*_filtered_p50_ms"): ("<=", 10.0),
    ("bench_store", "edge_*.*_filtered_p99_ms"): ("<=", 30.0),
    ("bench_store", "edge_*.one_change_searchable_s"): ("<=", 5.0),  # the store's part of a save to searchable
    # the status commands a user runs (a fresh process each), alone and while `search serve` holds the store
    ("bench_store", "edge_*.search_status*_s"): ("<=", 1.0),
    ("bench_store", "edge_*.store_stats*_s"): ("<=", 1.0),
    ("bench_store", "edge_*.indexer_jobs*_s"): ("<=", 1.0),
    # ingest of a large library: the last 10 % of the files as fast as the first
    ("bench_ingest_scale", "full.last_vs_first_10pct"): (">=", 0.9),
    # "no good match" at the default threshold on each corpus (issue "Answers a bot can trust")
    ("bench_relevance", "corpora.*.on_topic_keep_a_relevant_hit"): (">=", 0.95),
    ("bench_relevance", "corpora.*.off_topic.everyday.refused"): (">=", 0.95),
    # an ingest job and 32 query clients with 8 CPU burners on the cores (issue 69): slower, never lost
    ("bench_overload", "loaded.jobs_failed"): ("<=", 0),
    ("bench_overload", "loaded.files_missing"): ("<=", 0),
    ("bench_overload", "loaded.points_missing"): ("<=", 0),
    ("bench_overload", "loaded.points_duplicated"): ("<=", 0),
    ("bench_overload", "loaded.queries_failed"): ("<=", 0),
    # GPU configs against the CPU baseline's outputs: min cosine (TensorRT FP16 included)
    ("bench_gpu", "fidelity.minilm*"): (">=", 0.999),
    ("bench_gpu", "fidelity.clip_*"): (">=", 0.999),
    ("bench_gpu", "fidelity.bge_m3"): (">=", 0.999),
}
SIGNS = {">=": "≥", "<=": "≤", ">": ">", "<": "<"}


def flatten(figures: dict, prefix: str = "") -> dict[str, float]:
    """Numbers at any depth of ``figures``, by dotted key; lists, text and booleans are left out."""
    out: dict[str, float] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[name] = value
    return out


def runs(folder: Path, bench: str | None = None) -> list[dict]:
    """Every run recorded under ``folder``, oldest first; a line that is not JSON is reported and skipped."""
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                print(f"{path}:{n}: not a JSON line ({exc.msg}), skipped", file=sys.stderr)
                continue
            if not isinstance(record, dict):
                continue
            record.setdefault("bench", path.stem)
            if record.get("quick") is True:  # a smoke run: its figures are not the bench's
                continue
            if bench is None or record["bench"] == bench:
                found.append(record)
    return sorted(found, key=lambda r: str(r.get("date", "")))


def goal_of(bench: str, measure: str) -> tuple[str, float] | None:
    for (b, pattern), goal in GOALS.items():
        if b == bench and re.fullmatch(re.escape(pattern).replace(r"\*", "[^.]*"), measure):
            return goal
    return None


def goal_cell(goal: tuple[str, float] | None, value: float) -> str:
    if goal is None:
        return ""
    op, bound = goal
    met = {">=": value >= bound, "<=": value <= bound, ">": value > bound, "<": value < bound}[op]
    return f"{SIGNS[op]} {bound:g} ({'met' if met else 'not met'})"


def machine_cell(machine) -> str:
    if not isinstance(machine, dict):
        return str(machine or "")
    cores = machine.get("cores")
    usable = machine.get("usable_cores")
    text = str(machine.get("cpu", "unknown CPU"))
    if cores:
        text += f", {cores} cores" + (f" ({usable} used)" if usable and usable != cores else "")
    if machine.get("gpu"):
        text += ", GPU"
    return text


def number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def latest(records: list[dict]) -> list[dict]:
    """One row per (bench, measure): the figure of the latest run that has it."""
    rows: dict[tuple[str, str], dict] = {}
    for record in records:  # oldest first: later runs overwrite
        bench = record["bench"]
        figures = flatten({k: v for k, v in record.items() if k not in META})
        for measure, value in figures.items():
            rows[(bench, measure)] = {"bench": bench, "measure": measure, "value": value,
                                      "goal": goal_cell(goal_of(bench, measure), value),
                                      "machine": machine_cell(record.get("machine")),
                                      "date": str(record.get("date", ""))[:10],
                                      "commit": str(record.get("commit", "")),
                                      "command": str(record.get("command", ""))}
    # benches in name order, measures in the order the latest run wrote them
    order = {key: i for i, key in enumerate(rows)}
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], order[k]))]


def table(rows: list[dict]) -> str:
    lines = ["| bench | measure | latest | goal | machine | date | command |",
             "| --- | --- | ---: | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {cell(r['bench'])} | `{cell(r['measure'])}` | {number(r['value'])} | {cell(r['goal'])} "
                     f"| {cell(r['machine'])} | {cell(r['date'])} | `{cell(r['command'])}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print the benchmark table from bench/results/*.jsonl.")
    parser.add_argument("--bench", help="only this bench (the file name without .jsonl, e.g. bench_ocr)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of <bench>.jsonl files")
    parser.add_argument("--goals", action="store_true", help="only the measures that have a goal")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        print(f"no results folder {args.results}", file=sys.stderr)
        return 1
    rows = [r for r in latest(runs(args.results, args.bench)) if r["goal"] or not args.goals]
    if not rows:
        what = f"bench {args.bench}" if args.bench else "any bench"
        print(f"no recorded runs of {what} in {args.results}", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
