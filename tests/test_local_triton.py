"""Locating the local Triton server in the nvidia-pytriton wheel."""

import importlib.util
import subprocess
import sys

import pytest

from search.errors import TritonError
from search.triton import wheel


def test_the_server_is_found_without_importing_the_wheels_client():
    # Importing pytriton pulls its own client (gevent, ...), which a host with only the server's needs lacks
    code = ("import sys, search.triton.local; from search.triton.wheel import prepare_backends; import tempfile, pathlib; "
            "prepare_backends(pathlib.Path(tempfile.mkdtemp()) / 'backends'); "
            "print(sorted(m for m in ('pytriton', 'gevent') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_missing_wheel_is_named(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytriton" else real(name, *a))
    with pytest.raises(TritonError, match="pip install nvidia-pytriton"):
        wheel.prepare_backends(tmp_path / "backends")
