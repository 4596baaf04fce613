"""The layout of perf/: which part may import which, and no import cycle.

Read from the source (ast), every import of every module, those inside functions included, so that a
deferred import counts as much as one at the top. The rule, lowest part last:

    benchmarks (perf/test_*.py) -> plugin, tables, workloads -> tiers, harness -> cases, storage
    tools -> tables, cases, storage

and below all of them the training stack (model, kernels, parallel). The tools read result files: they
never import a benchmark, the plugin, a workload or the harness (one exception: asking which machine
this is, to find its baselines). Inside perf/tools/ the parts are floors, each importing only those below:

    commands (perf/tools/*.py) -> running/, reporting/ -> judging/ -> reading/
    history (perf/history/) -> judging/, reading/

running/ and reporting/ never import each other; of the tools only the commands import the history (the
gate's --against history), and the history imports no command, nothing that runs pytest and no report.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "perf"

# The parts of perf/ by module name; a module belongs to the first part whose prefix it has.
PARTS = (
    ("perf.test_", "benchmarks"),
    ("perf.plugin", "plugin"),
    ("perf.tools.reading", "reading"),
    ("perf.tools.judging", "judging"),
    ("perf.tools.running", "running"),
    ("perf.tools.reporting", "reporting"),
    ("perf.tools", "commands"),  # the command lines (python -m perf.tools.gate, ...) and the package
    ("perf.tables", "tables"),
    ("perf.workloads", "workloads"),
    ("perf.tiers", "tiers"),
    ("perf.listing", "listing"),
    ("perf.harness", "harness"),
    ("perf.cases", "cases"),
    ("perf.storage", "storage"),
    ("perf.history", "history"),
)
# The parts of perf/ each part may import. A part may import its own modules, except benchmarks:
# what two benchmarks share is a workload.
ALLOWED = {
    "benchmarks": {"workloads", "tables", "tiers", "harness", "cases"},
    "plugin": {"plugin", "workloads", "tables", "tiers", "harness", "cases", "storage", "history"},
    "workloads": {"workloads", "tiers", "harness", "cases"},
    "tables": {"tables", "cases"},
    "tiers": {"cases"},
    "listing": {"tiers", "cases"},  # python -m perf.listing: the suites, from their declarations
    "harness": {"harness", "storage"},
    "cases": {"cases"},
    "storage": set(),
    # The tools' floors, lowest first: result files read; the rules judging them; pytest runs started and
    # what is printed and written, apart; the command lines, which alone may open the history.
    "reading": {"reading", "storage"},
    "judging": {"judging", "reading", "storage"},
    "running": {"running", "judging", "reading", "storage"},
    "reporting": {"reporting", "judging", "reading", "tables", "cases", "storage"},
    "commands": {"running", "reporting", "judging", "reading", "tables", "cases", "storage", "history"},
    # The results database: it reads result files as the tools do (their errors, figures and kernel tables)
    # and judges by their rule (noise thresholds); the gate's command judges against it.
    "history": {"history", "judging", "reading", "storage"},
    "package": set(),  # perf/__init__.py
}
# Single imports beyond the rule, each with its reason.
EXCEPTIONS = {
    # The gate without --baseline compares with this machine's newest baseline: it asks the harness
    # which machine this is, inside the one function that needs it (torch is imported only then).
    ("perf.tools.reading.results", "perf.harness.machine"),
}
# The repository's other packages each part may import: the training stack it measures, or only the
# registries of model/ (presets, precisions) where it reads results. Nothing imports tests or scripts.
PROJECT = {"model", "kernels", "parallel", "tests", "scripts", "conftest"}
OUTSIDE = {
    "benchmarks": {"model", "kernels"},
    "plugin": set(),
    "workloads": {"model", "kernels", "parallel"},
    "tables": {"model"},
    "tiers": {"model"},
    "harness": {"model"},
    "cases": {"kernels", "model"},
    "storage": set(),
    "reading": set(),
    "judging": set(),
    "running": set(),
    "reporting": {"model"},  # the report's plots: presets and precisions by name
    "commands": set(),
    "history": set(),
    "package": set(),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def perf_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PERF.rglob("*.py"))}


def part_of(module: str) -> str:
    if module == "perf":
        return "package"
    for prefix, part in PARTS:
        if module.startswith(prefix) and (prefix.endswith("_") or module[len(prefix) :][:1] in ("", ".")):
            return part
    raise LookupError(f"{module} is in no part of perf/: give it a place in PARTS and in the README's layout")


def imports_in(source: str, package: str, known: set[str]) -> set[str]:
    """Every module `source` imports: `from a import b` counts as a.b where b is a module, else as a;
    relative imports are taken from `package`, the package the source is in."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, for every module of perf/."""
    modules = perf_modules()
    known = set(modules)
    return {
        module: imports_in(
            path.read_text(), module if path.name == "__init__.py" else module.rpartition(".")[0], known
        )
        for module, path in modules.items()
    }


def against_the_rule(graph: dict[str, set[str]]) -> list[str]:
    """One line per import that the rule does not allow."""
    wrong = []
    for module, imported in sorted(graph.items()):
        part = part_of(module)
        for target in sorted(imported):
            top = target.split(".")[0]
            if top == "perf" and target in graph:
                allowed = ALLOWED[part] - ({"benchmarks"} if part == "benchmarks" else set())
                if part_of(target) not in allowed and (module, target) not in EXCEPTIONS:
                    wrong.append(f"{module} ({part}) imports {target} ({part_of(target)})")
            elif top in PROJECT and top not in OUTSIDE[part]:
                wrong.append(f"{module} ({part}) imports {target} (outside perf/)")
    return wrong


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Import cycles among perf's modules, each as the path that closes it."""
    found, state = [], {}  # state: 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module] & graph.keys()):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_every_module_has_a_part():
    for module in perf_modules():
        part_of(module)


def test_imports_run_one_way():
    wrong = against_the_rule(import_graph())
    assert not wrong, "imports against the layout's direction:\n" + "\n".join(wrong)


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("perf.tools.gate", "from perf.workloads.lm import lm_workload", "perf.workloads.lm (workloads)"),
        ("perf.tables.memory", "import perf.test_memory", "perf.test_memory (benchmarks)"),
        ("perf.harness.bench", "from perf import tiers", "perf.tiers (tiers)"),
        ("perf.tools.reporting.plots", "from parallel.ddp import DDPFlat", "parallel.ddp (outside perf/)"),
        # The floors of the tools: a rule that opened the history, a reader that judged, a report that ran
        # pytest, a runner that printed a verdict, the history that ran pytest or called a command, a command
        # calling another.
        (
            "perf.tools.judging.changes",
            "from perf.history.store import connect",
            "perf.history.store (history)",
        ),
        ("perf.tools.judging.outcome", "import perf.history.baseline", "perf.history.baseline (history)"),
        (
            "perf.tools.reading.results",
            "from perf.tools.judging import changes",
            "perf.tools.judging.changes (judging)",
        ),
        (
            "perf.tools.reporting.verdict",
            "from perf.tools.running.runs import measure",
            "perf.tools.running.runs (running)",
        ),
        (
            "perf.tools.running.sides",
            "from perf.tools.reporting import verdict",
            "perf.tools.reporting.verdict (reporting)",
        ),
        (
            "perf.history.baseline",
            "from perf.tools.running.runs import measure",
            "perf.tools.running.runs (running)",
        ),
        ("perf.history.steps", "from perf.tools import gate", "perf.tools.gate (commands)"),
        ("perf.tools.gate", "from perf.tools import noise", "perf.tools.noise (commands)"),
    ],
)
def test_the_rule_finds_an_import_against_it(module, source, expected):
    """The checks themselves: an import added against the rule, or one closing a cycle, is found."""
    graph = import_graph()
    graph[module] = graph[module] | imports_in(source, module.rpartition(".")[0], set(graph))
    assert any(line.endswith(f"imports {expected}") for line in against_the_rule(graph))


def test_a_cycle_is_found():
    graph = import_graph()
    graph["perf.cases.transfer"] = graph["perf.cases.transfer"] | {"perf.cases.collectives"}
    assert ["perf.cases.collectives", "perf.cases.transfer", "perf.cases.collectives"] in cycles(graph)


def test_case_names_are_those_the_workloads_run():
    """The attention providers' names, which tiers, tables and the report read from perf/cases/, are
    the ones perf/workloads/attention.py implements, in the same order."""
    from perf.cases.attention import PROVIDER_NAMES
    from perf.workloads.attention import PROVIDERS

    assert tuple(PROVIDERS) == PROVIDER_NAMES
