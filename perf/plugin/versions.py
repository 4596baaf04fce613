"""The releases this suite accepts: pyproject.toml's dependency ranges, checked before anything runs.

A package outside its range (a pytest-benchmark 4 inherited from the machine's Python, a 6 not yet
tried) stops the run with one line naming the installed release and the accepted range, instead of
failing in the middle of it or losing its results at the end.
"""

from __future__ import annotations

import tomllib
from importlib import metadata

import pytest
from packaging.requirements import Requirement

from perf.storage import ROOT


def declared() -> list[str]:
    """pyproject.toml's dependencies, as written there."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def out_of_range(requirements: list[str]) -> list[str]:
    """A message per installed package whose release is outside its range, of the requirements that apply
    to this platform (missing packages are not judged: the suite says what it lacks where it needs it)."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            accepted = text.split(";")[0].strip()
            problems.append(
                f"{requirement.name} {installed} is installed; this suite accepts {accepted} "
                "(pyproject.toml; `make env` installs an accepted release)"
            )
    return problems


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    problems = out_of_range(declared())
    if problems:
        raise pytest.UsageError("; ".join(problems))
