"""Create the suite's virtual environment, reusing any torch the calling Python already has.

    python3 scripts/bootstrap_env.py [VENV_DIR]      (default .venv; `make` calls this)

Why not `python3 -m venv --system-site-packages`: on GPU runners the system `python3` is often
itself a virtual environment holding a CUDA build of torch, and a venv made from it would see
the base interpreter's packages, not that torch. Instead the new venv gets a `.pth` file listing
the calling interpreter's site-packages, so whatever it can import (torch, triton) is reused and
never replaced.

Where no torch is importable:
  * with an NVIDIA GPU (nvidia-smi present), pip installs $TORCH_SPEC (default: torch);
  * without one, it installs $TORCH_CPU_SPEC (default: torch==2.13.0) first, so that the
    dependency `torch>=2.6` does not pull a multi-GB CUDA build onto a CPU-only machine.
    Set TORCH_INDEX_URL to a CPU wheel index if your pip would otherwise fetch a CUDA build.

Offline installs: pip honours PIP_NO_INDEX=1 and PIP_FIND_LINKS=/path/to/wheels.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".suite-ready"


def parent_site_dirs() -> list[str]:
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    seen: list[str] = []
    for d in dirs:
        if d not in seen and os.path.isdir(d):
            seen.append(d)
    return seen


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def venv_site_packages(python: Path) -> Path:
    out = subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    )
    return Path(out.decode().strip())


def has_module(python: Path, name: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {name}"], capture_output=True).returncode == 0


def pip_install(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def project_dependencies() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def main() -> int:
    venv_dir = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".venv").resolve()
    python = venv_python(venv_dir)
    if not python.exists():
        print(f"creating {venv_dir} (reusing packages of {sys.executable})", flush=True)
        venv.EnvBuilder(with_pip=True, symlinks=True).create(venv_dir)
        # Appended after the venv's own site-packages: packages installed into the venv win,
        # everything else (a preinstalled torch) comes from the calling interpreter.
        pth = venv_site_packages(python) / "_inherit_parent_site.pth"
        pth.write_text("\n".join(parent_site_dirs()) + "\n")

    if not has_module(python, "torch"):
        if shutil.which("nvidia-smi"):
            spec = os.environ.get("TORCH_SPEC", "torch")
        else:
            spec = os.environ.get("TORCH_CPU_SPEC", "torch==2.13.0")
            print(f"no torch and no NVIDIA GPU: installing the CPU build {spec}", flush=True)
        extra = ["--index-url", os.environ["TORCH_INDEX_URL"]] if os.environ.get("TORCH_INDEX_URL") else []
        pip_install(python, *extra, spec)

    pip_install(python, "-q", *project_dependencies())
    # Requirements met by the inherited site-packages install no scripts here, and a `pytest` found
    # further down PATH would run under the other interpreter, without this venv's packages.
    pytest_script = venv_dir / "bin" / "pytest"
    if not pytest_script.exists():
        pytest_script.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pytest "$@"\n')
        pytest_script.chmod(0o755)
    (venv_dir / STAMP).write_text("ok\n")
    version = subprocess.check_output(
        [
            str(python),
            "-c",
            "import torch; print(torch.__version__, 'cuda' if torch.cuda.is_available() else 'cpu')",
        ]
    )
    print(f"environment ready in {venv_dir}: torch {version.decode().strip()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
