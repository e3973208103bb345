"""The CLIs run as a user runs them, and the one-line error they must give (tests/test_cli.py,
tests/test_store_durability.py, tests/test_store_migrate.py)."""

from __future__ import annotations

import subprocess
import sys


def run(env, *args, module="search") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], env=env, capture_output=True, text=True, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    text = " ".join(lines)
    assert lines[0].startswith("error:") and all(w in text for w in words), proc.stderr
