"""The content rules of one kind's collection, keyed on content (sha256 of the file); both executors
apply them on the driver (indexer/engine.py).

- a path whose size and mtime match the store is unchanged (not even read);
- known content at a new path reuses its vectors: a copy adds the path, a move replaces the gone one;
- changed content at a known path is embedded anew, then the path leaves the old content (deleted
  once no path refers to it);
- with ``prune``, paths under the roots that are gone from disk are removed;
- a path on more than one stored content (left by a stopped run) is never unchanged: it is read
  again and left on the content it holds only.

The ledger looks up what the store holds as files come (their paths in batches, a new content by
its hash: both are payload indexes) and keeps no more than a window of it: ingest memory does not
grow with the library. The Ray driver loads the whole view at the start instead (``whole``): its
workers plan with that view and write on their own, so the store is not the run's view there."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from qdrant_client import models

from indexer.kinds import Kind
from indexer.report import INDEXED, PRUNED, UNCHANGED, UPDATED, FileOutcome
from indexer.stages import LOOKUP_BATCH, FileJob, Read, content_paths, current, existing, signature_of, suffix
from search.paths import from_stored, stored
from search.store import Store, StoredFile, match

# Points of an unfinished file on a shared store (a Qdrant server) are another process's work in
# progress until none has been written for this long.
STALE_PARTIAL_S = 3600.0
KEEP = 4096  # what the view keeps (contents and paths looked up) before it is trimmed


class Ledger:
    """What one kind's collection holds, and the rules that change it. ``flush`` writes what the
    run has buffered (the engine's writer): every store write here flushes first, so it sees those points.

    ``by_sha``/``by_path`` are the part of the store's view this run looked at (``whole``: all of it),
    kept in step with every write the rules make; ``look_up`` trims them back to what is in flight."""

    def __init__(self, store: Store, kind: Kind, *, whole: bool = False, flush: Callable[[], None] = lambda: None) -> None:
        self.store, self.kind, self.whole, self.flush = store, kind, whole, flush
        self.by_sha: dict[str, StoredFile] = {}
        self.by_path: dict[str, str] = {}
        # Paths listed on more than one stored content (an interrupted run) -> those contents; by_path
        # holds one of them. Such a path is never unchanged (``known``).
        self.stale: dict[str, set[str]] = {}
        self.inflight: dict[str, FileJob] = {}  # new content being embedded now
        self.written: dict[str, str] = {}  # content written in this run -> the path it was written for
        self._looked: set[str] = set()  # paths whose every stored content is in the view
        self._absent: set[str] = set()  # contents looked up and not stored

    def open(self) -> None:
        """Open the kind's collection (``whole``: and load what it holds), and finish what a stopped
        run left."""
        self.store.ensure(self.kind.schema)  # a photo kind's first inference: its dimension
        if self.whole:
            self._take(self.store.files(self.kind.schema.name), None)
        self.sweep()

    def look_up(self, paths: Iterable[str]) -> None:
        """Read what the store holds for ``paths`` (the next files of a run), a batch a query, after
        trimming the view to what is in flight once it holds more than KEEP entries."""
        if self.whole:
            return
        if len(self.by_sha) + len(self._looked) > KEEP:
            self.flush()  # the store then holds all the view held: what is dropped can be read again
            self.by_sha = {s: f for s, f in self.by_sha.items() if s in self.inflight}
            self.by_path, self.stale, self.written = {}, {}, {}
            self._looked, self._absent = set(), set()
        self._load_paths(paths)

    def _load_paths(self, paths: Iterable[str]) -> None:
        todo = [p for p in dict.fromkeys(paths) if p not in self._looked]
        for k in range(0, len(todo), LOOKUP_BATCH):
            part = todo[k:k + LOOKUP_BATCH]
            self._take(self._listing([stored(p) for p in part], "paths"), set(part))
            self._looked.update(part)

    def _listing(self, names: list[str], *keys: str) -> Iterator[StoredFile]:
        """The stored records whose ``keys`` (payload indexes) hold any of ``names`` (stored form)."""
        any_of = models.MatchAny(any=names)
        flt = models.Filter(should=[models.FieldCondition(key=key, match=any_of) for key in keys])
        return self.store.files(self.kind.schema.name, flt)

    def _path(self, path: str) -> str | None:
        """The content ``path`` is listed on (one of them for a stale path)."""
        if not self.whole and path not in self._looked:
            self._load_paths([path])
        return self.by_path.get(path)

    def _content(self, sha: str) -> StoredFile | None:
        """What the store holds of content ``sha``."""
        f = self.by_sha.get(sha)
        if f is None and not self.whole and sha not in self._absent:
            self._take(self.store.files(self.kind.schema.name, match("sha256", sha)), ())
            if (f := self.by_sha.get(sha)) is None:
                self._absent.add(sha)
        return f

    def _take(self, found: Iterable[StoredFile], paths: set[str] | tuple | None) -> None:
        """Records read from the store join the view; ``paths``: the paths they were looked up by (None:
        every path, the whole view). A content chunked twice (a re-chunk stopped before the old chunks
        went) whose current chunking is complete loses the old one now."""
        got: dict[str, StoredFile] = {}
        doubled = set()
        for f in found:
            f = replace(f, paths=tuple(from_stored(p) for p in f.paths))  # paths are OS strings here
            seen = got.get(f.sha256)
            if seen is not None and seen.chunker != f.chunker:
                doubled.add(f.sha256)
                if current(self.kind, seen.chunker):
                    continue
            got[f.sha256] = f
        for sha in doubled:
            if current(self.kind, got[sha].chunker):
                self.flush()
                self.store.delete_content(self.kind.schema.name, sha, keep_chunker=got[sha].chunker)
        for sha, f in got.items():
            f = self.by_sha.setdefault(sha, f)  # the view is kept in step with the run's writes
            self._absent.discard(sha)
            for p in f.paths:
                if paths is not None and p not in paths:
                    continue
                held = self.by_path.setdefault(p, sha)
                if held != sha:  # listed on another content too: an interrupted run
                    self.stale.setdefault(p, {held}).add(sha)

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
        sha = self._path(path)
        if sha is None or path in self.stale:
            return None
        return self._content(sha)

    def current(self) -> frozenset[str]:
        """The content stored with the kind's current settings (the whole view)."""
        assert self.whole, "current() is the whole view's"
        return frozenset(s for s, f in self.by_sha.items() if current(self.kind, f.chunker))

    def status_of(self, path: str) -> str:
        return UPDATED if self._path(path) is not None else INDEXED

    def admit(self, got: Read) -> Read | FileOutcome | None:
        """The rules for content that was read: a copy of content being embedded now joins it
        (None); known content reuses its vectors (a copy adds its path, a move replaces the one
        gone); new content comes back as ``got``, to be split and embedded."""
        key, sha, kind = got.path, got.sha256, self.kind
        status = self.status_of(key)
        if sha in self.inflight:  # a copy of content that is being embedded right now
            self.inflight[sha].copies.append((key, status))
            return None
        same = self._content(sha)
        if same and current(kind, same.chunker):
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
                self.flush()
                self._set_paths(sha, list(same.paths), mtime=got.mtime)
                self.by_sha[sha] = replace(same, mtime=got.mtime)
                status = UNCHANGED
            return FileOutcome(key, status, chunks=same.chunks, kind=kind.name)
        return got

    def paths_for(self, job: FileJob) -> list[str]:
        """The paths ``job``'s content is written with (``content_paths``)."""
        return content_paths(job, self._content(job.sha256))

    def stored(self, job: FileJob, paths: list[str], n: int, written: tuple[str, ...] | None = None) -> list[FileOutcome]:
        """New content was written (by this run's writer, or with ``written`` paths by a worker that
        planned with the store's view at the run's start): the rules' bookkeeping."""
        kind = self.kind
        previous = self._content(job.sha256)  # the same content, made with other settings or another model
        if written is not None and list(written) != paths:  # a path of the content it replaces moved since
            self.flush()
            self._set_paths(job.sha256, paths)
        if previous is not None:
            self.flush()
            self.store.delete_content(kind.schema.name, job.sha256, keep_chunker=signature_of(kind, job))
        self.by_sha[job.sha256] = StoredFile(job.sha256, tuple(paths), job.size, job.mtime, signature_of(kind, job), n)
        self._absent.discard(job.sha256)
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
            self.flush()
            self._set_paths(sha, list(f.paths), size=f.size, mtime=f.mtime, suffix=suffix(self.written[sha]))

    def forget(self, job: FileJob, *, rejected: bool = False) -> None:
        """New content that will not be written (``rejected``: its model refused it, whatever else is
        stored of it)."""
        self.inflight.pop(job.sha256, None)
        if rejected or self._content(job.sha256) is None:
            self.kind.forget(job.sha256)  # e.g. the thumbnail of a photo that is not indexed

    def _set_paths(self, sha: str, paths: list[str], **extra) -> None:
        self.store.set_paths(self.kind.schema.name, sha, [stored(p) for p in paths], **extra)

    def _repoint(self, sha: str, paths: list[str], **extra) -> None:
        self.flush()
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
        held = [self._path(path), *sorted(self.stale.pop(path, ()))]
        return [s for s in dict.fromkeys(held) if s and self._content(s) is not None]

    def _drop_path(self, sha: str, path: str) -> None:
        remaining = [p for p in self.by_sha[sha].paths if p != path]
        self.flush()
        if remaining:
            self._set_paths(sha, remaining)
            self.by_sha[sha] = replace(self.by_sha[sha], paths=tuple(remaining))
        elif sha in self.inflight:  # being embedded anew (other settings), maybe partly written: keep that
            self.store.delete_content(self.kind.schema.name, sha, keep_chunker=signature_of(self.kind, self.inflight[sha]))
            del self.by_sha[sha]
        else:
            self.store.delete_content(self.kind.schema.name, sha)
            self.kind.forget(sha)
            del self.by_sha[sha]

    def prune(self, roots: list[Path], seen: set[str]) -> list[FileOutcome]:
        """Paths under ``roots`` gone from disk (not among ``seen``, the files this run listed) leave
        their content. The store is read under the roots as it comes; only the gone paths are kept."""
        self.flush()
        under = {str(r) for r in roots}  # a set, not a scan of the roots: a watch's batch may name thousands of files
        gone: set[str] = set()
        names = sorted(stored(r) for r in under)
        for k in range(0, len(names), LOOKUP_BATCH):
            for f in self._listing(names[k:k + LOOKUP_BATCH], "folders", "paths"):
                for path in map(from_stored, f.paths):
                    if path not in seen and path not in gone and _under_any(path, under) and not Path(path).exists():
                        gone.add(path)
        outcomes = []
        for path in sorted(gone):
            for held in self._holders(path):  # a path moved since may still be listed elsewhere
                self._drop_path(held, path)
            self.by_path.pop(path, None)
            outcomes.append(FileOutcome(path, PRUNED, "gone from disk", kind=self.kind.name))
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
