"""Who owns the embedded store of a data dir.

The embedded store admits one process. A running `search serve` records its address, pid and a
local access token in ``<data dir>/server.json`` (user-only), and every other face on that data
dir works through its REST API instead of opening the store. A record whose pid is gone is stale:
ignored, and replaced by the next server."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict, dataclass
from pathlib import Path

from search.process import alive

FILE = "server.json"


@dataclass(frozen=True)
class Owner:
    url: str  # http://host:port of the REST API
    pid: int
    token: str  # sent as X-API-Key by local faces; accepted next to the configured API key
    data_dir: str

    def alive(self) -> bool:
        return alive(self.pid)

    def describe(self) -> str:
        return f"pid {self.pid}, {self.url}"


def serving(settings) -> Owner | None:
    """The server that owns ``settings``' embedded store, if one runs. With a Qdrant server
    (QDRANT_URL) there is no owner: every process opens the store itself."""
    return None if settings.qdrant_url else find(settings.data_dir)


def record_path(data_dir: Path) -> Path:
    return Path(data_dir) / FILE


def find(data_dir: Path) -> Owner | None:
    """The live server that owns ``data_dir``'s store, if any (a stale record is ignored)."""
    try:
        data = json.loads(record_path(data_dir).read_text())
        owner = Owner(**{k: data[k] for k in ("url", "pid", "token", "data_dir")})
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return owner if owner.alive() else None


def claim(data_dir: Path, url: str) -> Owner:
    """Record this process as the owner (after its store opened, so two servers cannot both get here)."""
    owner = Owner(url=url, pid=os.getpid(), token=secrets.token_urlsafe(24), data_dir=str(data_dir))
    path = record_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is a credential
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(owner), f)
    os.replace(tmp, path)
    return owner


def release(data_dir: Path) -> None:
    """Remove the record if it is this process's."""
    path = record_path(data_dir)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
