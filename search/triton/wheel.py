"""The ``tritonserver`` shipped in the ``nvidia-pytriton`` wheel: where its files are, the backend
directory a run serves from, and the environment the server and its python-backend stubs run in."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path

from search.errors import TritonError

STANDIN_BACKENDS = Path(__file__).parent / "backends"


def pytriton_dir() -> Path:
    # Found, not imported: only the wheel's files are used, and importing it pulls its own client (gevent).
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise TritonError("the local Triton server needs the nvidia-pytriton package: pip install nvidia-pytriton==0.7.0")
    return Path(spec.origin).parent / "tritonserver"


def _libs_dir() -> Path:
    return pytriton_dir().parent.parent / "nvidia_pytriton.libs"


def prepare_backends(dest: Path) -> Path:
    """A writable backend directory: the wheel's python backend, the stub for this Python, and
    the project's Python-based ``onnxruntime`` stand-in (the wheel has no C++ onnxruntime backend)."""
    src = pytriton_dir()
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = src / "python_backend_stubs" / py / "triton_python_backend_stub"
    if not stub.exists():
        raise TritonError(f"nvidia-pytriton ships no python-backend stub for Python {py}")
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for f in list((src / "backends" / "python").glob("*.*")) + [stub]:
        if f.is_file():
            target = python_dir / f.name
            if not target.exists() or target.stat().st_size != f.stat().st_size:
                _copy_private(f, target)
    for backend in STANDIN_BACKENDS.iterdir():
        if backend.is_dir() and (backend / "model.py").exists():
            (dest / backend.name).mkdir(exist_ok=True)
            _copy_private(backend / "model.py", dest / backend.name / "model.py")
    return dest


def _copy_private(src: Path, dest: Path) -> None:
    """copy2 without group and other access: it copies the wheel's modes (0644, 0755 for the stub)
    past the umask, and the run dir lies in the private data dir (search/datadir.py)."""
    shutil.copy2(src, dest)
    dest.chmod(dest.stat().st_mode & 0o700)


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    libdirs = [str(_libs_dir()), sysconfig.get_config_var("LIBDIR") or ""]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in [*libdirs, env.get("LD_LIBRARY_PATH", "")] if p)
    # The stub runs the first python3 on PATH, isolated: it must be this environment's.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("PYTHONPATH", None)
    return env
