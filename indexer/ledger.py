"""The content rules of one kind's collection, keyed on content (sha256 of the file); both executors
apply them on the driver (indexer/engine.py).

- a path whose size and mtime match the store is unchanged (not even read);
- known content at a new path reuses its vectors: a copy adds the path, a move replaces the gone one;
- changed content at a known path is embedded anew, then the path leaves the old content (deleted
  once no path refers to it);
- with ``prune``, paths under the roots that are gone from disk are removed;
- a path on more than one stored content (left by a stopped run) is never unchanged: it is read
  again and left on the content it holds only."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from indexer.kinds import Kind
from indexer.report import INDEXED, PRUNED, UNCHANGED, UPDATED, FileOutcome
from indexer.stages import Job, Read, content_paths, existing, suffix
from search.paths import from_stored, stored
from search.store import Store, StoredFile

# Points of an unfinished file on a shared store (a Qdrant server) are another process's work in
# progress until none has been written for this long.
STALE_PARTIAL_S = 3600.0


class Ledger:
    """What one kind's collection holds, and the rules that change it. ``_flush`` writes what the
    run has buffered: every store write here flushes first, so it sees those points."""

    def __init__(self, store: Store, kind: Kind) -> None:
        self.store, self.kind = store, kind
        self.by_sha: dict[str, StoredFile] = {}
        self.by_path: dict[str, str] = {}
        # Paths listed on more than one stored content (an interrupted run) -> those contents; by_path
        # holds one of them. Such a path is never unchanged (``known``).
        self.stale: dict[str, set[str]] = {}
        self.inflight: dict[str, Job] = {}  # new content being embedded now
        self.written: dict[str, str] = {}  # content written in this run -> the path it was written for

    def _flush(self) -> None:
        """Write what the run buffered (the engine's writer)."""

    def open(self) -> None:
        """Open the kind's collection and load what it holds (content -> paths): the view every run
        plans with."""
        self.store.ensure(self.kind.schema)  # a photo kind's first inference: its dimension
        doubled = set()
        for f in self.store.files(self.kind.schema.name):
            f = replace(f, paths=tuple(from_stored(p) for p in f.paths))  # paths are OS strings here
            seen = self.by_sha.get(f.sha256)
            if seen is not None and seen.chunker != f.chunker:
                doubled.add(f.sha256)  # chunked twice: a re-chunk stopped before the old chunks went
                if seen.chunker == self.kind.signature:
                    continue
            self.by_sha[f.sha256] = f
            for p in f.paths:
                held = self.by_path.setdefault(p, f.sha256)
                if held != f.sha256:  # listed on another content too: an interrupted run
                    self.stale.setdefault(p, {held}).add(f.sha256)
        for sha in doubled:  # the current settings' chunks are complete (their chunk 0 is written): finish the run's delete
            if self.by_sha[sha].chunker == self.kind.signature:
                self.store.delete_content(self.kind.schema.name, sha, keep_chunker=self.kind.signature)
        self.sweep()

    def sweep(self) -> None:
        """Points still marked partial from a run stopped by a crash or kill -9: complete files are
        completed, the others' points deleted. On a shared store, only once nobody has written them for
        STALE_PARTIAL_S: another process may be writing that content now."""
        name = self.kind.schema.name
        for (sha, chunker), last in self.store.partial_contents(name).items():
            if self.store.shared and time.time() - last <= STALE_PARTIAL_S:
                continue
            if (paths := self.store.complete_paths(name, sha, chunker)) is not None:
                self.store.mark_complete(name, sha, chunker, paths)
            else:
                self.store.delete_chunking(name, sha, chunker)

    def known(self, path: str) -> StoredFile | None:
        """What the store holds for ``path`` (the unchanged check of ``read_file``); nothing for a path
        listed on several contents, so that it is read again and the rules repair it."""
        if path in self.stale:
            return None
        return self.by_sha.get(self.by_path.get(path, ""))

    def current(self) -> frozenset[str]:
        """The content stored with the kind's current settings."""
        return frozenset(s for s, f in self.by_sha.items() if f.chunker == self.kind.signature)

    def status_of(self, path: str) -> str:
        return UPDATED if path in self.by_path else INDEXED

    def admit(self, got: Read) -> Read | FileOutcome | None:
        """The rules for content that was read: a copy of content being embedded now joins it
        (None); known content reuses its vectors (a copy adds its path, a move replaces the one
        gone); new content comes back as ``got``, to be split and embedded."""
        key, sha, kind = got.path, got.sha256, self.kind
        status = self.status_of(key)
        if sha in self.inflight:  # a copy of content that is being embedded right now
            self.inflight[sha].copies.append((key, status))
            return None
        same = self.by_sha.get(sha)
        if same and same.chunker == kind.signature:
            # Known content (a copy, a move, or a touched file): reuse its vectors. The path leaves the
            # content it held first: _repoint lists it on this one, after which _leave_old would find
            # nothing to take it off (and a run stopped in between leaves it on none, not on two).
            self._leave_old(key, sha)
            if key not in same.paths:
                # A copy keeps the other paths; a move drops the one that is gone. Content written in this
                # run keeps the size and mtime it was written with, as a copy met while in flight does.
                extra = {} if sha in self.written else {"size": got.size, "mtime": got.mtime}
                self._repoint(sha, [*existing(same.paths), key], **extra)
            else:
                self._flush()
                self._set_paths(sha, list(same.paths), mtime=got.mtime)
                self.by_sha[sha] = replace(same, mtime=got.mtime)
                status = UNCHANGED
            return FileOutcome(key, status, chunks=same.chunks, kind=kind.name)
        return got

    def paths_for(self, job: Job) -> list[str]:
        """The paths ``job``'s content is written with (``content_paths``)."""
        return content_paths(job, self.by_sha.get(job.sha256))

    def stored(self, job: Job, paths: list[str], n: int, written: tuple[str, ...] | None = None) -> list[FileOutcome]:
        """New content was written (by this run's writer, or with ``written`` paths by a worker that
        planned with the store's view at the run's start): the rules' bookkeeping."""
        kind = self.kind
        previous = self.by_sha.get(job.sha256)  # the same content, made with other settings or another model
        if written is not None and list(written) != paths:  # a path of the content it replaces moved since
            self._flush()
            self._set_paths(job.sha256, paths)
        if previous is not None:
            self._flush()
            self.store.delete_content(kind.schema.name, job.sha256, keep_chunker=kind.signature)
        self.by_sha[job.sha256] = StoredFile(job.sha256, tuple(paths), job.size, job.mtime, kind.signature, n)
        self.inflight.pop(job.sha256, None)
        self.written[job.sha256] = job.path
        for p in paths:
            self._leave_old(p, job.sha256)
        return [FileOutcome(job.path, job.status, chunks=n, embedded=n, kind=kind.name),
                *(FileOutcome(p, status, chunks=n, kind=kind.name) for p, status in job.copies)]

    def restore(self, sha: str) -> None:
        """Content written in this run was written again, for a copy of it, by a writer that could not
        know it was a copy: put back what the store held for it."""
        if sha in self.written:
            f = self.by_sha[sha]
            self._flush()
            self._set_paths(sha, list(f.paths), size=f.size, mtime=f.mtime, suffix=suffix(self.written[sha]))

    def forget(self, job: Job, *, rejected: bool = False) -> None:
        """New content that will not be written (``rejected``: its model refused it, whatever else is
        stored of it)."""
        self.inflight.pop(job.sha256, None)
        if rejected or job.sha256 not in self.by_sha:
            self.kind.forget(job.sha256)  # e.g. the thumbnail of a photo that is not indexed

    def _set_paths(self, sha: str, paths: list[str], **extra) -> None:
        self.store.set_paths(self.kind.schema.name, sha, [stored(p) for p in paths], **extra)

    def _repoint(self, sha: str, paths: list[str], **extra) -> None:
        self._flush()
        self._set_paths(sha, paths, **extra)
        for p in set(self.by_sha[sha].paths) - set(paths):
            self.by_path.pop(p, None)
        self.by_sha[sha] = replace(self.by_sha[sha], paths=tuple(paths), **extra)
        for p in paths:
            self.by_path[p] = sha

    def _leave_old(self, path: str, new_sha: str) -> None:
        """``path`` now holds ``new_sha``: drop it from the content(s) it was listed on before."""
        held = self._holders(path)
        self.by_path[path] = new_sha
        for old in held:
            if old != new_sha:
                self._drop_path(old, path)

    def _holders(self, path: str) -> list[str]:
        """The stored contents ``path`` is listed on: one, or several after an interrupted run (then
        forgotten as stale: the caller takes the path off them)."""
        held = [self.by_path.get(path), *sorted(self.stale.pop(path, ()))]
        return [s for s in dict.fromkeys(held) if s and s in self.by_sha]

    def _drop_path(self, sha: str, path: str) -> None:
        remaining = [p for p in self.by_sha[sha].paths if p != path]
        self._flush()
        if remaining:
            self._set_paths(sha, remaining)
            self.by_sha[sha] = replace(self.by_sha[sha], paths=tuple(remaining))
        elif sha in self.inflight:  # being embedded anew (other settings), maybe partly written: keep that
            self.store.delete_content(self.kind.schema.name, sha, keep_chunker=self.kind.signature)
            del self.by_sha[sha]
        else:
            self.store.delete_content(self.kind.schema.name, sha)
            self.kind.forget(sha)
            del self.by_sha[sha]

    def prune(self, roots: list[Path], seen: set[str]) -> list[FileOutcome]:
        """Paths under ``roots`` gone from disk (not among ``seen``, the files this run listed) leave
        their content."""
        outcomes = []
        under = {str(r) for r in roots}  # a set, not a scan of the roots: a watch's batch may name thousands of files
        for path in sorted({*self.by_path, *self.stale}):  # stale: a path moved since may still be listed elsewhere
            if path in seen or not _under_any(path, under) or Path(path).exists():
                continue
            for held in self._holders(path):
                self._drop_path(held, path)
            outcomes.append(FileOutcome(path, PRUNED, "gone from disk", kind=self.kind.name))
        for o in outcomes:
            self.by_path.pop(o.path, None)
        return outcomes


def _under_any(path: str, roots: set[str]) -> bool:
    """``path`` is one of ``roots`` (absolute, as str(Path) writes them) or lies below one."""
    p = path
    while True:
        if p in roots:
            return True
        cut = p.rfind("/")
        if cut <= 0:
            return cut == 0 and "/" in roots
        p = p[:cut]
