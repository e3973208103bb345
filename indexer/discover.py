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
    With ``confine``, a root or folder that leads out of its roots is reported, not listed."""
    files: list[Path] = []
    bad: list[FileOutcome] = []
    skipped: list[tuple[str, str]] = []
    for root in roots:
        if confine and confine.outside(root):
            bad.append(FileOutcome(str(root), FAILED, OUTSIDE))
            continue
        try:
            mode = root.stat().st_mode
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                why = "broken symbolic link" if root.is_symlink() else "no such file or folder"
            else:
                why = unreadable(exc)
            bad.append(FileOutcome(str(root), FAILED, why))
        else:
            if stat.S_ISDIR(mode):
                _walk(root, suffixes, files, bad, skipped, confine)
            elif not stat.S_ISREG(mode):  # a FIFO, socket or device: reading it could block forever
                bad.append(FileOutcome(str(root), FAILED, "not a regular file"))
            elif root.suffix.lower() in suffixes:
                files.append(root)
            else:
                bad.append(FileOutcome(str(root), FAILED, f"unsupported file type '{root.suffix or root.name}'"))
    return files, bad, skipped


def _walk(root: Path, suffixes: frozenset[str], files: list[Path], bad: list[FileOutcome],
          skipped: list[tuple[str, str]], confine: Confinement | None = None) -> None:
    def failed(e: OSError) -> None:
        bad.append(FileOutcome(e.filename, FAILED, unreadable(e)))

    for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
        if confine and dirpath != str(root) and confine.outside(dirpath):  # swapped for a symlink mid-walk
            bad.append(FileOutcome(dirpath, FAILED, OUTSIDE))
            dirnames[:] = []
            continue
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            if d.startswith("."):
                skipped.append((full, "hidden folder"))
            elif d in SKIP_DIRS:
                skipped.append((full, "tool folder"))
            elif os.path.islink(full):  # os.walk lists it but does not go in
                skipped.append((full, "link to a folder"))
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if name.startswith("."):
                skipped.append((str(p), "hidden file"))
            elif p.suffix.lower() not in suffixes:
                skipped.append((str(p), "unsupported type"))
            else:
                files.append(p)
