"""Server-side paths a request names: allowed only inside the configured roots."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import HTTPException

from search.api.backend import Backend


def allowed_path(backend: Backend, raw: str, name: str, *, local: bool = False) -> Path:
    """The resolved path if it lies inside a root (after following symlinks), else a 4xx naming the
    field. ``local``: the request comes from the owner's user on this machine (search/owner.py), who
    may ingest any path it can read, as `indexer ingest` without a server would."""
    if not os.path.isabs(raw):
        raise HTTPException(400, f"{name}: must be an absolute path, got {raw!r}")
    if local:
        path = Path(raw)
        if not os.path.lexists(path):
            raise HTTPException(404, f"{name}: {raw} does not exist")
        return path
    try:
        path = Path(raw).resolve()  # follows every symlink and '..'; the roots check comes before existence,
        inside = backend.inside_roots(path)  # so nothing outside the roots can be probed
        exists = inside and path.exists()
    except (OSError, ValueError) as exc:  # NUL bytes, names too long, symlink loops
        raise HTTPException(400, f"{name}: not a usable path ({exc})") from exc
    if not inside:
        roots = ", ".join(str(r) for r in backend.roots)
        raise HTTPException(403, f"{name}: {raw} is outside the folders this server may ingest from ({roots})")
    if not exists:
        raise HTTPException(404, f"{name}: {raw} does not exist")
    if path.is_dir() and (link := backend.outside_link(path)) is not None:  # the indexer reads symlinked files in folders
        raise HTTPException(403, f"{name}: {link} is a symlink to a file outside the allowed folders")
    return path
