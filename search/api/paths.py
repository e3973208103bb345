"""Server-side paths a request names: allowed only inside the configured roots."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fastapi import HTTPException

from indexer.confine import unreadable
from search.api.backend import Backend


def allowed_path(backend: Backend, raw: str, name: str, *, local: bool = False) -> Path:
    """The resolved path if it lies inside a root (after following symlinks), else a 4xx naming the
    field. This only answers the request early: the ingest job checks each file again as it opens it.
    ``local``: the request comes from the owner's user on this machine (search/owner.py), who may
    ingest any path it can read, as `indexer ingest` without a server would."""
    if not os.path.isabs(raw):
        raise HTTPException(400, f"{name}: must be an absolute path, got {raw!r}")
    if local:
        path = Path(raw)
        if not os.path.lexists(path):
            raise HTTPException(404, f"{name}: {raw} does not exist")
        return path
    try:
        path = Path(os.path.realpath(raw))  # follows every symlink and '..'; a symlink loop is left as it is
    except (OSError, ValueError) as exc:  # NUL bytes
        raise HTTPException(400, f"{name}: not a usable path ({exc})") from exc
    if not backend.inside_roots(path):  # before any existence check, so nothing outside the roots can be probed
        roots = ", ".join(str(r) for r in backend.roots)
        raise HTTPException(403, f"{name}: {raw} is outside the folders this server may ingest from ({roots})")
    try:
        is_dir = stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise HTTPException(404, f"{name}: {raw} does not exist") from exc
    except OSError as exc:  # a symlink loop, a name too long, no permission
        raise HTTPException(400, f"{name}: {raw} is not usable: {unreadable(exc)}") from exc
    if is_dir:  # the indexer reads symlinked files it finds in folders: none may lead out
        for dirpath, _dirs, files in os.walk(path):
            for f in files:
                p = Path(dirpath, f)
                if p.is_symlink() and not backend.inside_roots(Path(os.path.realpath(p))):
                    raise HTTPException(403, f"{name}: {p} is a symlink to a file outside the allowed folders")
    return path
