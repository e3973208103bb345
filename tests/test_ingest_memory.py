"""Ingest memory does not grow with the number of files: the ledger looks up what the store holds
as files come (their paths a batch a query) and keeps a window of it, never every file's record,
text, vectors or outcome. The Python heap is traced (tracemalloc); the embedded store's own memory
is native and is the store's, not the run's. bench/bench_ingest_scale.py measures the same at 100k
files."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from ingest_helper import ingest

import search.store
from indexer import ledger as ledger_module
from indexer import report as report_module
from indexer.failures import FailureMemory
from indexer.report import FAILED, INDEXED, UNCHANGED, FileOutcome, IngestReport
from indexer.stages import LOOKUP_BATCH

# Measured: 20-30 bytes a file, the saw-tooth of the ledger's window. A ledger record of every file
# would add ~500, a kept 384-d float32 vector 1,536.
BOUND_BYTES_PER_FILE = 150
WARM, FILES, WINDOW = 100, 1000, 300
# The run's own allocations: those its code makes (the ledger, engine, report, writer) and the
# store's records it reads. Not the gRPC client's, the thread pool's or the logging's, whose
# transient buffers follow how busy the machine is (a loaded one measured 248 bytes a file of them).
OWN = [tracemalloc.Filter(True, str(Path(m.__file__).parent / "*")) for m in (ledger_module, search.store)]
EVERY = 20  # files between two measures


def library(tmp_path):
    lib = tmp_path / "lib"
    for i in range(FILES):
        folder = lib / f"{i // 100:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note-{i:04d}.txt").write_text(
            f"Note {i}: the printer on floor {i % 9} needs toner before the meeting on day {i % 28 + 1}. "
            f"Ask the help desk about badge {i * 7919 % 10007} and the VPN profile.\n")
    return lib


def test_the_heap_does_not_grow_with_the_files(service, tmp_path, monkeypatch):
    monkeypatch.setattr(report_module, "KEEP_OUTCOMES", 50)  # as past the first 10,000 files of a large run
    monkeypatch.setattr(ledger_module, "KEEP", 200)  # the ledger's window, as past its first 4,096 files
    lib = library(tmp_path)
    # files done -> the run's own traced bytes, measured in the two windows (made before the trace starts)
    heap = {n: 0 for n in range(EVERY, FILES + 1, EVERY) if WARM < n <= WARM + WINDOW or n > FILES - WINDOW}
    done = [0]

    def on_file(_outcome) -> None:
        done[0] += 1
        if done[0] in heap:
            heap[done[0]] = sum(t.size for t in tracemalloc.take_snapshot().filter_traces(OWN).traces)

    tracemalloc.start()
    try:
        report = ingest(service, [lib], on_file=on_file)
    finally:
        tracemalloc.stop()
    assert report.counts[INDEXED] == FILES and not report.failures
    # The floor of a window of files: the points buffered for the next write (with every family's
    # vectors) come and go, a saw-tooth of a few hundred files; what is kept per file raises the floor.
    early = min(b for n, b in heap.items() if WARM < n <= WARM + WINDOW)
    late = min(b for n, b in heap.items() if n > FILES - WINDOW)
    per_file = (late - early) / (FILES - WINDOW - WARM)
    assert per_file < BOUND_BYTES_PER_FILE, f"{per_file:.0f} bytes kept per file {list(heap.values())[::3]}"


def test_a_rerun_reads_the_store_a_batch_of_paths_a_query(service, tmp_path, monkeypatch):
    """Unchanged files are checked against the store's records of their paths, read for the next
    LOOKUP_BATCH files at once: a thousand files cost a handful of queries, not one each."""
    monkeypatch.setattr(ledger_module, "KEEP", 200)
    lib = library(tmp_path)
    assert ingest(service, [lib]).counts[INDEXED] == FILES
    store, reads = service.resources.store, []
    files = store.files

    def counted(*args, **kwargs):
        reads.append(args)
        return files(*args, **kwargs)

    monkeypatch.setattr(store, "files", counted)
    again = ingest(service, [lib])
    assert again.counts[UNCHANGED] == FILES and not again.failures
    assert len(reads) <= -(-FILES // LOOKUP_BATCH), f"{len(reads)} reads of the store's records for {FILES} files"


def test_a_large_run_keeps_its_totals_and_every_failure_not_every_outcome(monkeypatch, tmp_path):
    monkeypatch.setattr(report_module, "KEEP_OUTCOMES", 3)
    report = IngestReport()
    for i in range(10):
        report.add(FileOutcome(f"/lib/{i}.txt", FAILED if i % 4 == 3 else INDEXED, "broken" if i % 4 == 3 else "",
                               chunks=1, embedded=1, kind="documents"))
    assert len(report.outcomes) == 5 and report.not_kept == 5  # 3 first + the failures at 3 and 7
    assert [o.path for o in report.failures] == ["/lib/3.txt", "/lib/7.txt"]
    got = report.as_dict()
    assert (got["indexed"], got["failed"], got["embedded_chunks"], got["by_kind"]) == (8, 2, 10, {"documents": 8})


def test_a_file_that_works_again_is_forgotten_though_the_report_did_not_keep_it(monkeypatch, tmp_path):
    monkeypatch.setattr(report_module, "KEEP_OUTCOMES", 1)
    broken = tmp_path / "b.txt"
    broken.write_text("x")
    memory = tmp_path / "failures.json"
    first = IngestReport()
    first.add(FileOutcome(str(broken), FAILED, "broken"))
    FailureMemory(memory).update(first)
    assert str(broken) in memory.read_text()

    again, seen = IngestReport(), FailureMemory(memory)
    for o in (FileOutcome(str(tmp_path / "a.txt"), INDEXED), FileOutcome(str(broken), INDEXED)):
        seen.watch(o)
        again.add(o)
    assert again.not_kept == 1  # b.txt's outcome was counted, not kept
    seen.update(again)
    assert str(broken) not in memory.read_text()
