"""Server-side paths a request names: allowed only inside the roots of the knowledge base it writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from fastapi import HTTPException

from indexer.confine import OUTSIDE, unreadable
from search.api.backend import Backend
from search.paths import from_stored, readable
from search.store.schema import DEFAULT_KB


def allowed_path(backend: Backend, raw: str, name: str, *, local: bool = False, kb: str = DEFAULT_KB) -> Path:
    """The resolved path if it lies inside ``kb``'s roots (symlinks followed), else a 4xx naming the
    field. Only an early answer: the ingest job checks each file again as it opens it. ``raw`` may be
    in the stored form (search/paths.py). ``local``: the owner's user on this machine
    (search/owner.py), who may ingest any readable path, as `indexer ingest` without a server would;
    a missing path is then the job's failed file."""
    shown = readable(raw)
    if not os.path.isabs(raw):
        raise HTTPException(400, f"{name}: must be an absolute path, got {shown!r}")
    raw = from_stored(raw)
    if "\x00" in raw:  # one the stored form does not explain
        raise HTTPException(400, f"{name}: not a usable path (embedded null byte)")
    if local:
        return Path(raw)
    try:
        path = Path(os.path.realpath(raw))  # follows every symlink and '..'; a symlink loop is left as it is
    except (OSError, ValueError) as exc:
        raise HTTPException(400, f"{name}: not a usable path ({exc})") from exc
    if not backend.inside_roots(path, kb):  # before any existence check, so nothing outside can be probed
        # the path, never the roots: they would tell a key of one KB where the others' files are
        raise HTTPException(403, f"{name}: {shown} is {OUTSIDE} for knowledge base {kb!r}")
    try:
        is_dir = stat.S_ISDIR(path.stat().st_mode)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise HTTPException(404, f"{name}: {shown} does not exist") from exc
    except OSError as exc:  # a symlink loop, a name too long, no permission
        raise HTTPException(400, f"{name}: {shown} is not usable: {unreadable(exc)}") from exc
    if is_dir and (link := backend.outside_link(path, kb)) is not None:  # the indexer reads symlinked files in folders
        raise HTTPException(403, f"{name}: {readable(str(link))} is a symlink to a file outside the allowed folders")
    return path
