"""The Ray executor's worker side: the stages of indexer/stages.py as Ray Data ``map_batches``
functions (read+split as tasks, read text and embed in an actor pool that fails over between Triton
replicas), writing on the workers when they write to a Qdrant server (indexer/ray_write.py). Files
travel between the stages as ``_Rec`` records (indexer/ray_plan.py); what the model raised travels on
them, to be raised again on the driver (indexer/distributed.py)."""

from __future__ import annotations

import pickle
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from indexer.kinds import Kind
from indexer.patience import Patience
from indexer.ray_plan import Plan, V, _kinds, _pack, _Rec
from indexer.ray_write import write_new, writing, written
from indexer.report import FileOutcome
from indexer.stages import FileJob, bounded_runs, embed_units, load, read_file, read_text, units_of
from search.errors import ModelNotReady, TritonUnavailable
from search.store import Store, open_store

FILES_PER_READ_BATCH = 8  # files a read+split task takes at once
FILES_PER_EMBED_BATCH = 32  # files whose units one embed call gets (sorted by size, sent in requests of embed_batch_size)
# An embed call embeds and returns its files in slices of at most this many units (a file with more
# is a slice of its own): each slice is one object in Ray's store, so a batch of long documents does
# not make one huge object. A multivector family's rows (ColBERT, 1024 floats a token) at the default 200-token chunks are ~0.8 MB a unit.
UNITS_PER_EMBED_SLICE = 128
EMBED_ACTOR_CPUS = 0  # an embed actor waits on Triton; with a share of a CPU it can starve the read stage of a small cluster


def read_and_split(batch: dict, plan: Plan) -> dict:
    """The CPU stage (a Ray task per batch of files): read, hash, and decode/chunk/thumbnail new content."""
    kinds = _kinds(plan, plan.urls[0])
    confine = plan.confine
    recs = []
    for raw in batch["rec"]:
        rec: _Rec = pickle.loads(raw)
        kind = kinds[rec.kind]
        t0 = time.perf_counter()
        got = read_file(rec.path, kind, confine, plan.known[rec.kind].get)
        rec.times["read"] = time.perf_counter() - t0
        if isinstance(got, FileOutcome):
            rec.outcome = got
        elif got.sha256 in plan.current[rec.kind]:
            rec.read = replace(got, data=b"")  # known content: the driver reuses its vectors
        else:
            t1 = time.perf_counter()
            loaded = load(got, kind)
            if isinstance(loaded, FileOutcome):
                rec.outcome = loaded
            elif loaded.to_read:  # its text is read in the model actors (``Embedder``), then split there
                rec.read, rec.loaded = replace(got, data=b""), loaded
            else:
                units = units_of(loaded, kind)
                if isinstance(units, FileOutcome):
                    rec.outcome = units
                else:
                    rec.read, rec.units = replace(got, data=b""), units
            rec.times["split"] = time.perf_counter() - t1
        recs.append(rec)
    return _pack(recs)


class Embedder:
    """The model stages: an actor (Ray Data's actor pool) holding Triton clients, that reads the text
    in new documents' scans (OCR) and splits them, then embeds. It starts on a random replica, so the
    pool spreads over them, and moves to the next one when a request (to read or to embed) fails
    because its replica is gone or its model is not there. With ``plan.write`` it writes the new
    content it embedded (``write_new``) to ``store``, or to the store it opens from the settings."""

    def __init__(self, plan: Plan, store: Store | None = None) -> None:
        self.plan, self.store = plan, store
        self.at = random.randrange(len(plan.urls))

    def __call__(self, batch: dict) -> Iterator[dict]:
        recs: list[_Rec] = [pickle.loads(raw) for raw in batch["rec"]]
        for rec in recs:
            if rec.loaded is not None:
                self._read_text(rec)
        for part in bounded_runs(recs, lambda r: len(r.units or ()), UNITS_PER_EMBED_SLICE):
            long = len(part[0].units or ()) > UNITS_PER_EMBED_SLICE  # a slice of its own
            if long and not self.plan.write:
                yield from (_pack([piece]) for piece in self._embed_in_parts(part[0]))
                continue
            if long:
                self._embed_and_write_long(part[0])
            else:
                self._embed_slice(part)
                if self.plan.write:
                    write_new(self._store(), self.plan, self._kinds(), part)
            yield _pack(part)

    def _store(self) -> Store:
        if self.store is None:
            self.store = open_store(self.plan.settings)
        return self.store

    def _kinds(self) -> dict[str, Kind]:
        return _kinds(self.plan, self.plan.urls[self.at])

    def _embed_and_write_long(self, rec: _Rec) -> None:
        """A file with more units than a slice, the workers writing: embedded a slice at a time, each
        slice to the engine as a local run's (its other units written as they reach the writer's
        budget, unit 0 last). A part the model rejects, a model that stops or no replica left: what
        was written of the file is deleted."""
        ing, planned = writing(self._store(), self.plan, self._kinds()[rec.kind])  # the same on every replica
        job = FileJob.of(rec.read, rec.units)
        embed_s = write_s = 0.0
        for piece in self._embed_in_parts(rec):
            start, end = piece.part[0], piece.part[0] + len(piece.units)
            t1 = time.perf_counter()
            embed_s += piece.times.get("embed", 0.0)
            rec.truncated += piece.truncated
            rec.error, rec.failure = piece.error, piece.failure
            if rec.failure:
                ing.writer.discard(job)
                break
            ing.arrived(job, range(start, end), piece.vectors, piece.error, last=bool(piece.error))
            write_s += time.perf_counter() - t1
        t1 = time.perf_counter()
        ing.writer.flush()
        if job.path in planned.written:
            written(rec, planned)
        rec.times["embed"], rec.times["write"] = embed_s, write_s + time.perf_counter() - t1

    def _embed_in_parts(self, rec: _Rec) -> Iterator[_Rec]:
        """A file with more units than a slice, embedded a slice at a time: a record per slice with
        its units and their vectors, so neither the actor nor Ray's store holds the file's vectors at
        once. With the embedded store the driver gets them and writes each part as it comes
        (``_apply``); a writing worker writes them itself (``_embed_and_write_long``). A part
        the model rejects, or a model that stops, is the last."""
        n = len(rec.units)
        for start in range(0, n, UNITS_PER_EMBED_SLICE):
            piece = _Rec(rec.path, rec.kind, read=rec.read, units=rec.units[start:start + UNITS_PER_EMBED_SLICE],
                         times=dict(rec.times) if start == 0 else {}, part=(start, n))  # read and split: counted once
            self._embed_slice([piece])
            yield piece
            if piece.error or piece.failure:
                return

    def _embed_slice(self, recs: list[_Rec]) -> None:
        for name in self.plan.kinds:
            todo = [r for r in recs if r.kind == name and r.units]
            if not todo:
                continue
            items = [u.item for r in todo for u in r.units]
            t0 = time.perf_counter()
            embedded = self._embed_or_mark(name, items, todo)
            if embedded is None:
                continue
            seconds = time.perf_counter() - t0
            todo[0].truncated = embedded.truncated
            k = 0
            for r in todo:
                n = len(r.units)
                r.vectors = embedded.vectors[k:k + n]
                r.error = next((embedded.errors[i] for i in range(k, k + n) if i in embedded.errors), "")
                r.times["embed"] = seconds * n / len(items)
                k += n

    def _read_text(self, rec: _Rec) -> None:
        """The read stage: the text in ``rec``'s scans, read on a replica that answers (as embedding:
        ``_call``), then split into its units; or what the model raised, on ``rec``."""
        loaded, rec.loaded = rec.loaded, None
        t0 = time.perf_counter()
        try:
            got = self._call(lambda kinds: read_text(loaded, kinds[rec.kind]))
        except (ModelNotReady, TritonUnavailable) as exc:
            rec.failure = exc
            return
        t1 = time.perf_counter()
        rec.times["ocr"] = t1 - t0
        units = got if isinstance(got, FileOutcome) else units_of(got, self._kinds()[rec.kind])
        if isinstance(units, FileOutcome):
            rec.outcome, rec.read = units, None
        else:
            rec.units = units
        rec.times["split"] = rec.times.get("split", 0.0) + time.perf_counter() - t1

    def _embed_or_mark(self, name: str, items: list, recs: list[_Rec]):
        """``items`` embedded; or None, what the model raised on ``recs`` (the driver raises it)."""
        try:
            return self._call(lambda kinds: embed_units(kinds[name], items, self.plan.batch_size))
        except (ModelNotReady, TritonUnavailable) as exc:
            for r in recs:
                r.failure = exc
        return None

    def _call(self, fn: Callable[[dict[str, Kind]], V]) -> V:
        """``fn`` of a replica's kinds, on a replica that answers: while none does, the actor waits (as
        a local run does: indexer/patience.py), up to SEARCH_INGEST_TRITON_WAIT_S."""
        patience = Patience(self._any_live, limit_s=self.plan.settings.ingest_triton_wait_s)
        return patience.call(self._on_replica, fn)

    def _any_live(self) -> bool:
        return any(next(iter(_kinds(self.plan, url).values())).triton.is_live() for url in self.plan.urls)

    def _on_replica(self, fn: Callable[[dict[str, Kind]], V]) -> V:
        """``fn`` on the actor's replica, else on the next ones in turn (the actor stays on the one
        that answered); what the last raises comes out."""
        urls = self.plan.urls
        for tried in range(len(urls)):
            try:
                return fn(_kinds(self.plan, urls[self.at]))
            except (TritonUnavailable, ModelNotReady):
                if tried == len(urls) - 1:
                    raise
                self.at = (self.at + 1) % len(urls)
        raise AssertionError("unreachable")
