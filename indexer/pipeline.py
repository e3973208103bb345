"""Ingest: discover files -> load -> chunk -> embed (Triton, batched across files) -> upsert.

Incremental rules, all keyed on content (sha256):
- a path whose size and mtime match what the store has is unchanged (not even hashed);
- known content at a new path reuses the stored vectors and only gains the path;
- changed content at a known path is embedded anew, then the path leaves the old content
  (which is deleted once no path refers to it);
- with ``prune``, paths under the ingested roots that are gone from disk are removed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from qdrant_client import models

from indexer.chunking import Chunk, Chunker
from indexer.loaders import TEXT_SUFFIXES, BadDocument, decode_text, read_bytes
from search.models import minilm
from search.store import DOCUMENTS, Store, StoredFile, folders_of, point_id
from search.triton.client import TritonClient

INDEXED, UNCHANGED, UPDATED, FAILED, PRUNED = "indexed", "unchanged", "updated", "failed", "pruned"
SORT_WINDOW = 4  # batches whose chunks are sorted by length together
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv"}


@dataclass(frozen=True)
class FileOutcome:
    path: str
    status: str
    reason: str = ""
    chunks: int = 0
    embedded: int = 0  # chunks sent through the model (0 when vectors were reused)


@dataclass
class IngestReport:
    outcomes: list[FileOutcome] = field(default_factory=list)
    skipped: int = 0  # files in the folders that are not documents
    seconds: float = 0.0
    truncated_chunks: int = 0

    @property
    def counts(self) -> Counter:
        return Counter(o.status for o in self.outcomes)

    @property
    def failures(self) -> list[FileOutcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def embedded_chunks(self) -> int:
        return sum(o.embedded for o in self.outcomes)

    def as_dict(self) -> dict:
        c = self.counts
        return {
            **{k: c.get(k, 0) for k in (INDEXED, UNCHANGED, UPDATED, FAILED, PRUNED)},
            "skipped": self.skipped, "embedded_chunks": self.embedded_chunks,
            "truncated_chunks": self.truncated_chunks, "seconds": round(self.seconds, 3),
            "failures": [{"path": o.path, "reason": o.reason} for o in self.failures],
        }


def discover(roots: Iterable[Path], suffixes: frozenset[str] = TEXT_SUFFIXES) -> tuple[list[Path], list[FileOutcome], int]:
    """Files to ingest, outcomes for roots that cannot be read, and the count of other files skipped."""
    files, bad, skipped = [], [], 0
    for root in roots:
        if root.is_file():
            if root.suffix.lower() in suffixes:
                files.append(root)
            else:
                bad.append(FileOutcome(str(root), FAILED, f"unsupported file type '{root.suffix or root.name}'"))
        elif root.is_dir():
            for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: bad.append(FileOutcome(e.filename, FAILED, f"unreadable: {e.strerror}"))):
                dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
                for name in sorted(filenames):
                    p = Path(dirpath) / name
                    if p.suffix.lower() in suffixes and not name.startswith("."):
                        files.append(p)
                    else:
                        skipped += 1
        else:
            bad.append(FileOutcome(str(root), FAILED, "no such file or folder"))
    return files, bad, skipped


@dataclass
class _Job:
    path: str
    sha256: str
    size: int
    mtime: float
    chunks: list[Chunk]
    status: str
    vectors: list = field(default_factory=list)
    remaining: int = 0
    # Other paths with the same new content seen in this run: (path, status).
    copies: list[tuple[str, str]] = field(default_factory=list)


class Ingestor:
    def __init__(self, store: Store, triton: TritonClient, chunker: Chunker, *, batch_size: int = 16,
                 concurrency: int = 2, max_file_bytes: int = 20_000_000) -> None:
        self.store, self.triton, self.chunker = store, triton, chunker
        self.batch_size, self.concurrency, self.max_file_bytes = batch_size, concurrency, max_file_bytes
        self.signature = f"minilm/v{chunker.VERSION}/{chunker.max_tokens}/{chunker.overlap}"
        self.write_batch = 256
        self._rest: list[models.PointStruct] = []
        self._heads: list[models.PointStruct] = []

    def run(self, roots: list[Path], *, prune: bool = False,
            on_start: Callable[[int], None] | None = None,
            on_file: Callable[[FileOutcome], None] | None = None) -> IngestReport:
        started = time.perf_counter()
        report = IngestReport()
        roots = [Path(r).expanduser().absolute() for r in roots]
        files, bad, report.skipped = discover(roots)
        if on_start:
            on_start(len(files) + len(bad))

        def done(outcome: FileOutcome) -> None:
            report.outcomes.append(outcome)
            if on_file:
                on_file(outcome)

        for outcome in bad:
            done(outcome)
        self.store.ensure(DOCUMENTS)
        if files:
            self.triton.ensure_ready("minilm")
        by_sha: dict[str, StoredFile] = {}
        by_path: dict[str, str] = {}
        for f in self.store.files(DOCUMENTS.name):
            by_sha[f.sha256] = f
            for p in f.paths:
                by_path[p] = f.sha256

        self._inflight: dict[str, _Job] = {}
        pending: deque[tuple[Future, list[tuple[_Job, int]]]] = deque()
        batch: list[tuple[_Job, int]] = []
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:

            def submit() -> None:
                # Sorted by length, so each request pads little: on CPU padding costs more than batching saves.
                nonlocal batch
                batch.sort(key=lambda m: len(m[0].chunks[m[1]].text))
                for k in range(0, len(batch), self.batch_size):
                    members = batch[k:k + self.batch_size]
                    texts = [job.chunks[i].text for job, i in members]
                    pending.append((pool.submit(minilm.embed, self.triton, texts), members))
                batch = []

            def drain(keep: int) -> None:
                while len(pending) > keep:
                    fut, members = pending.popleft()
                    vectors, truncated = fut.result()
                    report.truncated_chunks += int(truncated.sum())
                    for (job, i), vec in zip(members, vectors):
                        job.vectors[i] = vec
                        job.remaining -= 1
                        if job.remaining == 0:
                            for outcome in self._write(job, by_sha, by_path):
                                done(outcome)

            for path in files:
                job_or_outcome = self._prepare(path, by_sha, by_path)
                if job_or_outcome is None:
                    continue
                if isinstance(job_or_outcome, FileOutcome):
                    done(job_or_outcome)
                    continue
                job = job_or_outcome
                self._inflight[job.sha256] = job
                job.vectors = [None] * len(job.chunks)
                job.remaining = len(job.chunks)
                for i in range(len(job.chunks)):
                    batch.append((job, i))
                    if len(batch) >= self.batch_size * SORT_WINDOW:
                        submit()
                        drain(keep=self.concurrency)
            submit()
            drain(keep=0)
        self._flush()

        if prune:
            for outcome in self._prune(roots, {str(p) for p in files}, by_sha, by_path):
                done(outcome)
        report.seconds = time.perf_counter() - started
        return report

    def _prepare(self, path: Path, by_sha: dict[str, StoredFile], by_path: dict[str, str]) -> _Job | FileOutcome | None:
        key = str(path)
        try:
            st = path.stat()
        except OSError as exc:
            return FileOutcome(key, FAILED, f"unreadable: {exc.strerror}")
        if not stat.S_ISREG(st.st_mode):
            return FileOutcome(key, FAILED, "not a regular file")
        known = by_sha.get(by_path.get(key, ""))
        if known and known.size == st.st_size and known.mtime == st.st_mtime and known.chunker == self.signature:
            return FileOutcome(key, UNCHANGED, chunks=known.chunks)
        try:
            data = read_bytes(path, self.max_file_bytes)
            text = decode_text(data)
        except BadDocument as exc:
            return FileOutcome(key, FAILED, str(exc))
        sha = hashlib.sha256(data).hexdigest()
        status = UPDATED if key in by_path else INDEXED
        if sha in self._inflight:  # a copy of content that is being embedded right now
            self._inflight[sha].copies.append((key, status))
            return None
        same = by_sha.get(sha)
        if same and same.chunker == self.signature:
            # Known content (a copy, a rename, or a touched file): reuse its vectors.
            if key not in same.paths:
                # A copy keeps the other paths; a move drops the one that is gone.
                self._repoint(sha, [*_existing(same.paths), key], by_sha, by_path, size=st.st_size, mtime=st.st_mtime)
            else:
                self._flush()
                self.store.set_paths(DOCUMENTS.name, sha, list(same.paths), mtime=st.st_mtime)
                by_sha[sha] = replace(same, mtime=st.st_mtime)
                status = UNCHANGED
            self._leave_old(key, sha, by_sha, by_path)
            return FileOutcome(key, status, chunks=same.chunks)
        chunks = self.chunker.chunk(text)
        if not chunks:
            return FileOutcome(key, FAILED, "no text to index")
        return _Job(key, sha, st.st_size, st.st_mtime, chunks, status)

    def _write(self, job: _Job, by_sha: dict[str, StoredFile], by_path: dict[str, str]) -> list[FileOutcome]:
        previous = by_sha.get(job.sha256)  # the same content, chunked with other settings
        paths = list(dict.fromkeys([job.path, *(p for p, _ in job.copies), *_existing(previous.paths if previous else ())]))
        suffix = Path(job.path).suffix.lower()
        n = len(job.chunks)
        points = [
            models.PointStruct(
                id=point_id(job.sha256, self.signature, c.index),
                vector={"minilm": vec.tolist()},
                payload={"path": job.path, "paths": paths, "folders": sorted({f for p in paths for f in folders_of(p)}), "suffix": suffix,
                         "chunk": c.index, "n_chunks": n, "text": c.text, "start": c.start, "end": c.end,
                         "sha256": job.sha256, "size": job.size, "mtime": job.mtime, "chunker": self.signature},
            )
            for c, vec in zip(job.chunks, job.vectors)
        ]
        self._rest += points[1:]
        self._heads += points[:1]
        if previous is not None:
            self._flush()
            self.store.delete_content(DOCUMENTS.name, job.sha256, keep_chunker=self.signature)
        elif len(self._rest) + len(self._heads) >= self.write_batch:
            self._flush()
        by_sha[job.sha256] = StoredFile(job.sha256, tuple(paths), job.size, job.mtime, self.signature, n)
        del self._inflight[job.sha256]
        for p in paths:
            self._leave_old(p, job.sha256, by_sha, by_path)
        return [FileOutcome(job.path, job.status, chunks=n, embedded=n),
                *(FileOutcome(p, status, chunks=n) for p, status in job.copies)]

    def _flush(self) -> None:
        """Write buffered points: all later chunks first, then the chunk-0 points that mark
        their files complete. Every other store write flushes first, so it sees these points."""
        rest, heads, self._rest, self._heads = self._rest, self._heads, [], []
        self.store.upsert(DOCUMENTS.name, rest)
        self.store.upsert(DOCUMENTS.name, heads)

    def _repoint(self, sha: str, paths: list[str], by_sha, by_path, **extra) -> None:
        self._flush()
        self.store.set_paths(DOCUMENTS.name, sha, paths, **extra)
        for p in set(by_sha[sha].paths) - set(paths):
            by_path.pop(p, None)
        by_sha[sha] = replace(by_sha[sha], paths=tuple(paths), **extra)
        for p in paths:
            by_path[p] = sha

    def _leave_old(self, path: str, new_sha: str, by_sha, by_path) -> None:
        """``path`` now holds ``new_sha``: drop it from the content it held before."""
        old = by_path.get(path)
        by_path[path] = new_sha
        if old and old != new_sha and old in by_sha:
            self._drop_path(old, path, by_sha)

    def _drop_path(self, sha: str, path: str, by_sha) -> None:
        remaining = [p for p in by_sha[sha].paths if p != path]
        self._flush()
        if remaining:
            self.store.set_paths(DOCUMENTS.name, sha, remaining)
            by_sha[sha] = replace(by_sha[sha], paths=tuple(remaining))
        else:
            self.store.delete_content(DOCUMENTS.name, sha)
            del by_sha[sha]

    def _prune(self, roots: list[Path], seen: set[str], by_sha, by_path) -> list[FileOutcome]:
        outcomes = []
        for path, sha in sorted(by_path.items()):
            if path in seen or not any(_is_under(path, r) for r in roots) or Path(path).exists():
                continue
            if sha in by_sha:
                self._drop_path(sha, path, by_sha)
            outcomes.append(FileOutcome(path, PRUNED, "gone from disk"))
        for o in outcomes:
            by_path.pop(o.path, None)
        return outcomes


def _existing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if os.path.exists(p)]


def _is_under(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(str(root).rstrip("/") + "/")

