"""Why a local Triton start failed, read from the run's log (Triton's output and the supervisor's)."""

from __future__ import annotations

import re
from pathlib import Path

from search.triton.supervise import LOAD_ENDED

# every start on a CPU-only host logs these errors
CPU_HOST_NOISE = ("CUDA driver version is insufficient", "CudaDriverHelper has not been initialized")


def failure_summary(log: Path) -> str:
    """The model-load errors from Triton's log, in one line; else the loads that never ended."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    gave_up = [ln.removeprefix("[supervise] ") for ln in lines if ln.startswith("[supervise]") and "giving up" in ln]
    if gave_up:
        return gave_up[-1]
    # A port another process took between our check and Triton's bind says it all.
    taken = [ln.split("] ", 1)[-1].strip() for ln in lines if "already in use" in ln]
    if taken:
        return "; ".join(taken)
    lines = [ln for ln in lines if not any(noise in ln for noise in CPU_HOST_NOISE)]
    errors = []
    for line in lines:
        if "failed to load" in line or "Invalid argument" in line or "unable to" in line.lower():
            msg = line.split("] ", 1)[-1].strip()
            if msg not in errors:
                errors.append(msg)
    loading = _still_loading(lines)
    if not errors and loading:
        return f"the load of {', '.join(repr(n) for n in loading)} never ended"
    if not errors:
        errors = [ln.split("] ", 1)[-1].strip() for ln in lines if ln.startswith("E")][-3:]
    # Triton's own last word: a refused command line prints the usage, the reason, then a blank line
    said = [ln.strip() for ln in lines if ln.strip()]
    return "; ".join(e for e in errors if e) or (said[-1] if said else "no output")


def _still_loading(lines: list[str]) -> list[str]:
    """Models whose last load in the log has begun and not ended."""
    state: dict[str, bool] = {}
    for line in lines:
        if m := re.search(r'"loading: ([^:"]+):', line):
            state[m[1]] = True
        elif m := LOAD_ENDED.search(line):
            state[m[1]] = False
    return [name for name, pending in state.items() if pending]
