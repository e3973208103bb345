"""Reading files only from inside some folders (the REST API's roots).

A check by name is not enough: a path checked when a request arrives can be swapped for a symlink
before the job reads it. So each file is opened first and the *opened descriptor* is checked
(where the kernel says it lies, /proc/self/fd), and nothing is read from one that lies outside.
``outside()`` is the cheaper check by name, used before anything is opened or listed, so an
escape that is in place already is refused without touching its target.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

OUTSIDE = "outside the folders this server may ingest from"
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO or a terminal never blocks the job


class Refused(Exception):
    """A file that is not read; str(exc) is the one-line reason."""


class Confinement:
    def __init__(self, roots: list[Path]) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots)

    def contains(self, real: str) -> bool:
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.roots)

    def outside(self, path: Path | str) -> bool:
        """Whether ``path``, its symlinks followed now, leads out of the roots."""
        return not self.contains(os.path.realpath(path))

    def read(self, path: Path, max_bytes: int) -> bytes:
        """The bytes of ``path`` if the file opened lies inside the roots and is a regular file of at
        most ``max_bytes``; else Refused."""
        try:
            fd = os.open(path, _FLAGS)
        except OSError as exc:
            raise Refused(unreadable(exc)) from exc
        try:
            if not self.contains(_opened_path(fd, path)):
                raise Refused(OUTSIDE)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Refused("not a regular file")
            if st.st_size > max_bytes:
                raise Refused(f"too large: {st.st_size / 1e6:.1f} MB > {max_bytes / 1e6:.1f} MB limit")
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(max_bytes + 1)
        except OSError as exc:
            raise Refused(unreadable(exc)) from exc
        finally:
            os.close(fd)
        if len(data) > max_bytes:  # it grew after fstat
            raise Refused(f"too large: over the {max_bytes / 1e6:.1f} MB limit")
        return data


def _opened_path(fd: int, path: Path) -> str:
    """Where the open file lies, as the kernel resolved it when opening."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: accept only if the name still resolves to the very file opened
        real = os.path.realpath(path)
        return real if os.path.samestat(os.stat(real), os.fstat(fd)) else ""


def unreadable(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    return f"unreadable: {exc.strerror or exc}"
