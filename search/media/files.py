"""Reading a file that a request or a user names: opened without blocking, regular files only, and
bounded in size; shared by ingest's confinement, the query services and the MCP face.

Nothing is decided by name before the open, since a name can be swapped in between (for a FIFO
that blocks for ever, or a symlink out): the opened descriptor's type, size and, given ``inside``,
real location (/proc/self/fd) are checked."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC  # a FIFO or a terminal never blocks the open
NOT_REGULAR = "not a regular file"


class Refused(Exception):
    """A file that is not read; str(exc) is the one-line reason."""


class NotRegular(Refused):
    """A FIFO, socket, device or directory: nothing is read from it."""


class Outside(Refused):
    """The opened file lies where ``inside`` does not allow."""


def read_regular(path: Path | str, max_bytes: int, *, inside: Callable[[str], bool] | None = None,
                 outside: str = "outside the allowed folders") -> bytes:
    """The bytes of ``path`` if it opens as a regular file of at most ``max_bytes`` and, given
    ``inside`` (the opened file's real path -> allowed), lies where it allows; else Refused (Outside,
    with the reason ``outside``, before anything is read from it)."""
    try:
        fd = os.open(path, FLAGS)
    except OSError as exc:
        raise Refused(unreadable(exc)) from exc
    try:
        if inside is not None and not inside(opened_path(fd, path)):
            raise Outside(outside)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("unreadable: Is a directory" if stat.S_ISDIR(st.st_mode) else NOT_REGULAR)
        if st.st_size > max_bytes:
            raise Refused(f"too large: {st.st_size / 1e6:.1f} MB > {max_bytes / 1e6:.1f} MB limit")
        os.set_blocking(fd, True)  # a regular file: reads are plain again
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)  # bounded even if it grew after fstat
    except OSError as exc:
        raise Refused(unreadable(exc)) from exc
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise Refused(f"too large: over the {max_bytes / 1e6:.1f} MB limit (it grew while read)")
    return data


def opened_path(fd: int, path: Path | str) -> str:
    """Where the open file lies, as the kernel resolved it when opening."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: accept only if the name still resolves to the very file opened
        real = os.path.realpath(path)
        try:
            return real if os.path.samestat(os.stat(real), os.fstat(fd)) else ""
        except OSError:
            return ""


def unreadable(exc: OSError) -> str:
    """The one-line reason an open or stat failed."""
    if exc.errno == errno.ELOOP:
        return "a symlink loop (too many levels of symbolic links)"
    if exc.errno == errno.ENOENT and exc.filename is not None and os.path.islink(exc.filename):
        return "broken symbolic link"  # the link is there, what it names is not
    return f"unreadable: {exc.strerror or exc}"


def photo_reason(exc: Refused) -> str:
    """``exc``'s reason as the photo faces have always said it."""
    text = str(exc)
    return {"unreadable: No such file or directory": "no such file",
            "unreadable: Is a directory": "is a directory, not an image"}.get(text, text)
