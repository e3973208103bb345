#!/usr/bin/env bash
# Reproduces the "against modelscope itself" parity record in docs/ofa.md:
#  1. project venv: a tiny random OFA saved as a ModelScope checkpoint (tests/tiny_ofa.py), exported by
#     the project's `OFA().build` into a copy of triton_repo/ (prompt_type prev_output and none);
#  2. reference venv (setup_ref_env.sh): modelscope itself vs those served files (parity_project.py);
#  3. the vendored modelscope code vs modelscope, logits bit for bit (probe.py).
# REF_PY: the reference venv's python (default ./venv/bin/python); PROJECT_PY: the project venv's.
set -euo pipefail
cd "$(dirname "$0")"
REF_PY=${REF_PY:-venv/bin/python}
PROJECT_PY=${PROJECT_PY:-python}
mkdir -p work
for pt in prev_output none; do
  PYTHONPATH=../..:../../tests HF_HUB_OFFLINE=1 "$PROJECT_PY" - "$pt" <<'PY'
import shutil, sys
from pathlib import Path
import tiny_ofa
from search.models.ofa import OFA
pt, work = sys.argv[1], Path("work")
repo = work / f"repo_{pt}"
shutil.rmtree(repo, ignore_errors=True)
shutil.copytree("../../triton_repo", repo)
print(OFA().build(repo, str(tiny_ofa.save_tiny_ofa(work / f"tiny_ofa_{pt}", prompt_type=pt))).detail)
PY
  "$REF_PY" parity_project.py "work/tiny_ofa_$pt" "work/repo_$pt" | tee "parity_project_$pt.txt"
done
"$REF_PY" probe.py ref work/tiny_ofa_prev_output work/ref.npz
"$PROJECT_PY" probe.py vendored work/tiny_ofa_prev_output work/ref.npz | tee probe_output.txt
