"""Whether a process is still there: the owner record of a data dir and the local Triton server both ask."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (killed, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:  # it ended between the two looks
        return False
    except OSError:
        return True
