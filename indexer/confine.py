"""Reading files only from inside some folders (the REST API's roots).

A name checked on arrival can be swapped for a symlink before the job reads it, so each file is
opened first and the opened descriptor's real location (/proc/self/fd) is checked. ``outside()``
is the cheaper check by name, run before anything is opened, so an escape already in place is
refused without touching its target."""

from __future__ import annotations

import os
from pathlib import Path

# The reader and its reasons live below the indexer, so the query services and the MCP face share them
from search.media.files import Refused, read_regular, unreadable

__all__ = ["OUTSIDE", "Confinement", "Refused", "unreadable"]
OUTSIDE = "outside the folders this server may ingest from"


class Confinement:
    """``exclude``: folders never read even inside a root (the server's data dir), except below a
    root inside them (a knowledge base's uploads): the deepest folder that holds a path decides."""

    def __init__(self, roots: list[Path], exclude: list[Path] = ()) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots)
        self.exclude = tuple(os.path.realpath(e) for e in exclude)

    def contains(self, real: str) -> bool:
        root = max((len(r) for r in self.roots if _under(real, r)), default=-1)
        return root >= 0 and root > max((len(e) for e in self.exclude if _under(real, e)), default=-1)

    def excluded(self, path: Path | str) -> bool:
        """Whether ``path`` is one of the folders never read (the data dir): a walk passes it over
        in silence, so a job's report does not tell a scoped key where the server keeps its data."""
        return os.path.realpath(path) in self.exclude

    def outside(self, path: Path | str) -> bool:
        """Whether ``path``, its symlinks followed now, leads out of the roots."""
        return not self.contains(os.path.realpath(path))

    def read(self, path: Path, max_bytes: int) -> bytes:
        """The bytes of ``path`` if the file opened lies inside the roots and is a regular file of at
        most ``max_bytes``; else Refused."""
        return read_regular(path, max_bytes, inside=self.contains, outside=OUTSIDE)


def _under(real: str, folder: str) -> bool:
    return real == folder or real.startswith(folder.rstrip("/") + "/")
