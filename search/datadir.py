"""The data dir is the user's only: indexed text, uploads, thumbnails, jobs and the owner's token are
nobody else's business, whatever the umask.

``private(data_dir)``, called once per process by what opens the data dir, creates it 0700, takes
group and other access off everything in it (directories and owner-executable files 0700, files
0600) and sets the umask to 077, so what the process or its children create later is private too.
Symlinks are never followed.

Not called by `search models build`: the model repository lies outside the data dir, and Triton in
docker (another user) reads it."""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

log = logging.getLogger("search.datadir")
_done: set[tuple[str, int, int]] = set()  # (real path, device, inode) of the data dirs made private
_lock = threading.Lock()


def private(data_dir: Path) -> Path:
    """``data_dir``, created if need be, and private from now on in this process (see the module)."""
    os.umask(os.umask(0o077) | 0o077)  # a stricter umask the user set stays
    root = os.path.realpath(data_dir)  # a data dir that is a link: the folder it names
    with _lock:
        if _identity(root) in _done:  # the very folder seen already (one deleted and made again is new)
            return Path(data_dir)
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)
        except OSError:  # not ours to create: what writes there says so in its own words (the store's, ...)
            return Path(data_dir)
        made = _tighten(root)
        _done.add(_identity(root))
    if made:
        log.warning("data dir %s: made %d entries private (directories 0700, files 0600)", data_dir, made)
    return Path(data_dir)


def _identity(root: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(root)
    except OSError:
        return None
    return root, st.st_dev, st.st_ino


def _tighten(root: str) -> int:
    """Take group and other access off ``root`` and everything under it; how many entries changed."""
    made = int(_chmod(root, None))
    # fwalk: each name is looked up in its own directory's fd, so a link swapped in for a parent
    # directory cannot lead the walk out of the data dir.
    for _, dirnames, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        made += sum(_chmod(name, dir_fd) for name in dirnames + filenames)
    return made


def _chmod(name: str, dir_fd: int | None) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode) or not mode & 0o077:
            return False
        try:
            os.chmod(name, mode & 0o700, dir_fd=dir_fd, follow_symlinks=False)
        except NotImplementedError:  # a link swapped in since the stat, or a libc without a no-follow chmod
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                return False
            os.chmod(name, mode & 0o700, dir_fd=dir_fd)
        return True
    except OSError:  # gone meanwhile, or not ours: left as it is
        return False
