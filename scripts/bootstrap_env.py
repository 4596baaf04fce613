"""Create the suite's virtual environment, reusing any torch the calling Python already has.

    python3 scripts/bootstrap_env.py [VENV_DIR] [--resolve newest|lowest]   (default .venv, newest;
                                                                            `make env` calls this)

The project's other dependencies are resolved for the venv itself, whatever the calling Python has:
`newest` (the default) installs the newest releases pyproject.toml allows, as a new user gets them;
`lowest` the lower bound of each range (CI checks both ends). torch and triton are the exception: one
the calling Python has is reused, never replaced (a GPU runner's build, and the triton it was built
with). The releases the venv ended with are printed.

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

import argparse
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
RESOLUTIONS = ("newest", "lowest")
# Bound to the torch build: reused where the calling Python has them, installed at the newest otherwise.
BUILD_BOUND = ("torch", "triton")
# Printed once the venv is ready: what decides how the suite behaves.
SHOWN = ("torch", "triton", "pytest", "pytest-benchmark", "pytest-xdist", "hypothesis", "nvidia-ml-py")
SHOWN += ("matplotlib", "numpy")


def stamp(resolve: str) -> str:
    """The file `make env` checks for: `.suite-ready`, or `.suite-ready-lowest`."""
    return ".suite-ready" if resolve == "newest" else f".suite-ready-{resolve}"


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
    """Whether `python` finds the module, without importing it (torch's import takes seconds)."""
    found = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({name!r}) is None)"
    return subprocess.run([str(python), "-c", found], capture_output=True).returncode == 0


def pip_install(python: Path, *args: str) -> None:
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def project_dependencies() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def requirement_name(spec: str) -> str:
    """The distribution a requirement names: 'pytest-benchmark>=5.1,<6' -> 'pytest-benchmark'."""
    return spec.split(";")[0].split("[")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip()


def lowest(spec: str) -> str:
    """A requirement pinned to its lower bound: 'pytest-benchmark>=5.1,<6' -> 'pytest-benchmark==5.1'."""
    requirement, _, marker = spec.partition(";")
    bounds = [part.strip() for part in requirement.split(",")]
    found = [b.split(">=", 1)[1].strip() for b in bounds if ">=" in b]
    if not found:
        raise SystemExit(f"pyproject.toml: {spec!r} has no lower bound (>=) for --resolve lowest")
    pinned = f"{requirement_name(spec)}=={found[0]}"
    return f"{pinned};{marker}" if marker else pinned


def versions(python: Path) -> str:
    """The releases the venv imports, of the packages that decide how the suite behaves."""
    script = (
        "from importlib import metadata\n"
        f"for name in {SHOWN!r}:\n"
        "    try: print(name, metadata.version(name))\n"
        "    except metadata.PackageNotFoundError: print(name, '(not installed)')\n"
    )
    out = subprocess.check_output([str(python), "-c", script]).decode().split("\n")
    return ", ".join(line for line in out if line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("venv", nargs="?", default=str(ROOT / ".venv"), help="the folder (.venv)")
    parser.add_argument(
        "--resolve", default="newest", help=f"which releases of the ranges: {', '.join(RESOLUTIONS)}"
    )
    options = parser.parse_args()
    if options.resolve not in RESOLUTIONS:
        parser.error(f"--resolve (RESOLVE) {options.resolve!r}: accepted are {', '.join(RESOLUTIONS)}")
    venv_dir = Path(options.venv).resolve()
    python = venv_python(venv_dir)
    if not python.exists():
        print(f"creating {venv_dir} (reusing torch and triton of {sys.executable})", flush=True)
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

    dependencies = project_dependencies()
    # torch and triton only where missing (a torch build's own are reused); the rest installed into the
    # venv even where the calling Python has an older release in range, their own needs only where needed.
    missing = [
        s
        for s in dependencies
        if requirement_name(s) in BUILD_BOUND and not has_module(python, requirement_name(s))
    ]
    rest = [spec for spec in dependencies if requirement_name(spec) not in BUILD_BOUND]
    if options.resolve == "newest":
        pip_install(python, "-q", "--upgrade", *missing, *rest)
    else:
        pip_install(python, "-q", *missing, *map(lowest, rest))
    # Requirements met by the inherited site-packages install no scripts here, and a `pytest` found
    # further down PATH would run under the other interpreter, without this venv's packages.
    pytest_script = venv_dir / "bin" / "pytest"
    if not pytest_script.exists():
        pytest_script.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pytest "$@"\n')
        pytest_script.chmod(0o755)
    for other in RESOLUTIONS:
        (venv_dir / stamp(other)).unlink(missing_ok=True)
    (venv_dir / stamp(options.resolve)).write_text(f"{options.resolve}\n")
    print(f"environment ready in {venv_dir} ({options.resolve} allowed releases)")
    print(f"  {versions(python)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
