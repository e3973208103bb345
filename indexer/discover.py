"""Which files an ingest reads: the files under its roots, what is skipped and why, and roots
that cannot be read."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from indexer.confine import OUTSIDE, Confinement, unreadable
from indexer.report import FAILED, FileOutcome

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv"}


def discover(roots: Iterable[Path], suffixes: frozenset[str], confine: Confinement | None = None
             ) -> tuple[list[Path], list[FileOutcome], list[tuple[str, str]]]:
    """Files to ingest, outcomes for roots that cannot be read, and what was skipped: (path, why).
    With ``confine``, a root or folder that leads out of its roots is reported, not listed.
    Each path is in one of the three once, where it was first met: a file can be named on its own
    and lie in a named folder, a folder can be named twice or lie in another."""
    found = _Found()
    for root in roots:
        if confine and confine.outside(root):
            if found.first(root, resolve=False):  # its folder is not even looked at
                found.bad.append(FileOutcome(str(root), FAILED, OUTSIDE))
            continue
        if not found.first(root):
            continue
        try:
            mode = root.stat().st_mode
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                why = "broken symbolic link" if root.is_symlink() else "no such file or folder"
            else:
                why = unreadable(exc)
            found.bad.append(FileOutcome(str(root), FAILED, why))
        else:
            if stat.S_ISDIR(mode):
                _walk(root, suffixes, found, confine)
            elif not stat.S_ISREG(mode):  # a FIFO, socket or device: reading it could block forever
                found.bad.append(FileOutcome(str(root), FAILED, "not a regular file"))
            elif root.suffix.lower() in suffixes:
                found.files.append(root)
            else:
                found.bad.append(FileOutcome(str(root), FAILED, f"unsupported file type '{root.suffix or root.name}'"))
    return found.files, found.bad, found.skipped


class _Found:
    """What discover lists, and the paths met so far."""

    def __init__(self) -> None:
        self.files: list[Path] = []
        self.bad: list[FileOutcome] = []
        self.skipped: list[tuple[str, str]] = []
        self._met: set[str] = set()
        self._failed: set[str] = set()  # folders a walk could not read: a root is met before it is walked
        self._real: dict[str, str] = {}  # folder as named -> its real path

    def first(self, path: Path | str, resolve: bool = True) -> bool:
        """Whether ``path`` is met for the first time. The same name in the same folder is the
        same path however the folder is reached (`..`, a link to it). A file's own name is not
        resolved: a link to a file is another name for it, listed as the files of a folder are."""
        return _first(self._met, self._key(path) if resolve else str(path))

    def fail(self, path: str, why: str, resolve: bool = True) -> None:
        """A folder met in a walk that cannot be listed, reported once."""
        if _first(self._failed, self._key(path) if resolve else path):
            self.bad.append(FileOutcome(path, FAILED, why))

    def _key(self, path: Path | str) -> str:
        folder, name = os.path.split(str(path))
        if folder not in self._real:
            self._real[folder] = os.path.realpath(folder)
        return os.path.join(self._real[folder], name)


def _first(met: set[str], key: str) -> bool:
    if key in met:
        return False
    met.add(key)
    return True


def _walk(root: Path, suffixes: frozenset[str], found: _Found, confine: Confinement | None = None) -> None:
    def failed(e: OSError) -> None:
        found.fail(e.filename, unreadable(e))

    def skip(path: str, why: str) -> None:
        if found.first(path):
            found.skipped.append((path, why))

    for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
        if confine and dirpath != str(root) and confine.outside(dirpath):  # swapped for a symlink mid-walk
            found.fail(dirpath, OUTSIDE, resolve=False)
            dirnames[:] = []
            continue
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if d.startswith("."):
                skip(full, "hidden folder")
            elif d in SKIP_DIRS:
                skip(full, "tool folder")
            elif os.path.islink(full):  # os.walk lists it but does not go in
                skip(full, "link to a folder")
            elif confine and confine.excluded(full):  # the server's data dir: passed over without naming it
                continue
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if not found.first(p):
                continue
            if name.startswith("."):
                found.skipped.append((str(p), "hidden file"))
            elif p.suffix.lower() not in suffixes:
                found.skipped.append((str(p), "unsupported type"))
            else:
                found.files.append(p)
