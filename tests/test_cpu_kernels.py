"""numpy's OpenBLAS gets kernels the CPU can run, chosen from its instruction sets before numpy loads
(by both command lines, before any command runs)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import indexer.cli as indexer_cli
import search.cli.app as search_cli
from search.cpu_kernels import choose_openblas_kernels

EMERALD_RAPIDS = "fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl amx_int8"


@pytest.mark.parametrize("flags, core", [(EMERALD_RAPIDS, "SkylakeX"), ("fpu sse sse2 avx avx2 fma", "Haswell"),
                                         ("fpu sse sse2 sse3", None)])
def test_the_kernels_follow_the_first_cpus_flags(tmp_path, monkeypatch, flags, core):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    assert choose_openblas_kernels(str(cpuinfo)) == core
    assert os.environ.get("OPENBLAS_CORETYPE") == core


def test_a_users_choice_and_a_missing_cpuinfo_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Zen")
    assert choose_openblas_kernels(str(tmp_path / "none")) is None and os.environ["OPENBLAS_CORETYPE"] == "Zen"
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert choose_openblas_kernels(str(tmp_path / "none")) is None and "OPENBLAS_CORETYPE" not in os.environ


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")
def test_numpy_loaded_afterwards_runs_the_kernels_named():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    code = ("import os; from search.cpu_kernels import choose_openblas_kernels; choose_openblas_kernels(); "
            "import numpy, threadpoolctl; "
            "print(os.environ.get('OPENBLAS_CORETYPE'), [i.get('architecture') for i in threadpoolctl.threadpool_info()])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split(" ", 1)
    if out[0] != "None":  # an AVX2 CPU: numpy's OpenBLAS runs what was named
        assert out[0] in out[1], out


def test_both_command_lines_choose_them_before_a_command_runs(monkeypatch):
    for cli in (search_cli, indexer_cli):
        monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
        seen = []
        monkeypatch.setattr(cli, "choose_openblas_kernels", lambda: os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell"))
        monkeypatch.setattr(cli, "app", lambda *a, seen=seen, **k: seen.append(os.environ.get("OPENBLAS_CORETYPE")))
        cli.main()
        assert seen == ["Haswell"], cli.__name__
    # and neither loads numpy on import: the choice still counts when a command runs
    code = "import sys, indexer.cli, search.cli.app; assert 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
