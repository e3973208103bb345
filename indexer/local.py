"""The local executor: one kind's files through the engine on this machine, the model's requests
in flight on threads (``concurrency`` of them at most) while the next files are read and split.
How many are in flight and how large they are follow Triton's latency (indexer/pacing.py)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from indexer.engine import Ingestor
from indexer.loaders import Cancelled
from indexer.pacing import Pacer
from indexer.report import FileOutcome, IngestReport
from indexer.stages import LOOKUP_BATCH, SORT_WINDOW, FileJob, last_requests, requests


def run_local(ing: Ingestor, files: list[Path], report: IngestReport, done: Callable[[FileOutcome], None]) -> None:
    """The executor of a local run (indexer/engine.py ``Executor``). ``ing``: the engine of the files'
    kind, opened. Exceptions the model raises (ModelNotReady, TritonUnavailable) come out of here as
    they were raised."""
    kind = ing.kind
    # the deadline of one model request: the one the kind's client sends with
    pacer = Pacer(ing.concurrency, ing.batch_size, getattr(getattr(kind, "triton", None), "timeout_s", 30.0))
    pending: deque[tuple[Future, list[tuple[FileJob, int]]]] = deque()
    batch: list[tuple[FileJob, int]] = []
    sent = 0  # requests submitted
    with ThreadPoolExecutor(max_workers=ing.concurrency) as pool:

        def submit(last: bool = False) -> None:
            nonlocal batch, sent
            size = last_requests(len(batch), pacer.batch, pacer.window) if last else pacer.batch
            for members in requests(batch, lambda m: m[0].units[m[1]].item, kind, size):
                pending.append((pool.submit(pacer.run, kind.embed, [job.units[i].item for job, i in members]), members))
                sent += 1
            batch = []

        def drain(keep: int) -> None:
            while len(pending) > keep:
                fut, members = pending.popleft()
                result = fut.result()
                report.truncated_chunks += result.truncated
                for k, (job, i) in enumerate(members):
                    for outcome in ing.arrived(job, [i], [result.vectors[k]], result.errors.get(k, "")):
                        done(outcome)

        try:
            for n, path in enumerate(files):
                if n % LOOKUP_BATCH == 0:  # what the store holds for the next files, in one query
                    ing.ledger.look_up(str(p) for p in files[n:n + LOOKUP_BATCH])
                if stopped(ing):
                    report.cancelled = True
                    break
                try:
                    job = ing.start(path)
                except Cancelled:  # asked while the file was read (a long scan): it is left for the next run
                    report.cancelled = True
                    break
                if isinstance(job, FileOutcome):
                    done(replace(job, kind=kind.name))
                if not isinstance(job, FileJob):
                    continue
                for i in range(len(job.units)):
                    batch.append((job, i))
                    # A full sort window; at the run's start, each full request as it fills, so the model
                    # works while the first window is read
                    if len(batch) >= ing.batch_size * SORT_WINDOW or (len(batch) >= ing.batch_size and sent < ing.concurrency):
                        if i and stopped(ing):  # asked between a long file's batches: no whole file to wait for
                            raise Cancelled
                        submit()
                        drain(keep=ing.concurrency)
            submit(last=True)
            drain(keep=0)
        except Cancelled:
            for fut, _ in pending:
                fut.cancel()
            ing.abandon()  # what was written of the files in flight goes: the next run does them whole
            report.cancelled = True
        except BaseException:
            for fut, _ in pending:  # queued requests would only meet the same dead model
                fut.cancel()
            raise


def stopped(ing: Ingestor) -> bool:
    return ing.stop is not None and ing.stop()
