"""Suite declarations (perf/cases/declare.py): one name per axis gives its argument and option, a
declaration that cannot work is an error naming the suite and the field, and declared tables render from
results (perf/tables/declared.py)."""

from __future__ import annotations

import pytest

from perf.cases.declare import (
    RUN_FIGURES,
    Axis,
    DeclarationError,
    Figure,
    Flag,
    Key,
    Suite,
    Table,
    cell,
    checked,
    declared_suites,
    singular,
)
from perf.harness.bench import Bench
from perf.plugin import options
from perf.storage import PERF
from perf.tables.declared import render
from perf.tiers import Tier


@pytest.mark.parametrize(
    ("name", "argument"),
    [
        ("presets", "preset"),
        ("attention_providers", "attention_provider"),
        ("bucket_sizes_mb", "bucket_size_mb"),
        ("launches", "launch"),
        ("weighted_sum_sizes", "weighted_sum_size"),
    ],
)
def test_an_axis_name_gives_its_argument_and_option(name, argument):
    axis = Axis(name)
    assert (axis.param, axis.option) == (argument, name.replace("_", "-"))
    assert singular(name) == argument


def test_an_axis_without_argument_or_option_or_set_by_another_has_none():
    assert Axis("optimizer", argument=False).param is None
    assert Axis("compile_presets", set_by="presets").option is None
    assert Axis("compile_attentions", has_option=False).option is None


def test_an_axis_whose_name_is_not_plural_is_refused():
    with pytest.raises(ValueError, match="Axis optimizer: name it in the plural"):
        Axis("optimizer")


def test_every_declared_axis_takes_its_names_from_its_own():
    for suite in declared_suites():
        for axis in suite.axes:
            assert axis.param is None or axis.param == singular(axis.name)
            if isinstance(axis, Axis):
                assert axis.option in (None, axis.name.replace("_", "-"))


TABLE = Table(
    "sizes", keys=(Key("rows"),), figures=(Figure("gb_per_s", "GB/s"),), across=("provider", ("a", "b"))
)


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (
            lambda: Suite(
                "s", records=("rows", "provider"), tables=(Table("t", (Key("row"),), TABLE.figures),)
            ),
            r"suite 's': table 't' shows row, which the suite never records",
        ),
        (
            lambda: Suite(
                "s",
                records=("rows", "provider"),
                tables=(Table("t", (Key("rows"),), (Figure("gbps", "x"),)),),
            ),
            r"suite 's': table 't' shows gbps",
        ),
        (
            lambda: Suite(
                "s",
                records=("rows", "provider"),
                tables=(TABLE.__class__(**{**TABLE.__dict__, "ratios": (("a", "c"),)}),),
            ),
            r"suite 's': table 'sizes' ratio a/c names values not in its across values a, b",
        ),
        (
            lambda: Suite("s", axes=(Axis("sizes"),), flags=(Flag("all-sizes", "size", (1,), ""),)),
            r"suite 's': flag --all-sizes sets unknown axis 'size'",
        ),
        (lambda: Suite("s", cells={"nightly": ()}), r"suite 's': cells of unknown tier 'nightly'"),
        (lambda: checked([Suite("s"), Suite("s")]), r"suite 's': declared twice"),
        (
            lambda: checked([Suite("s", axes=(Axis("s_presets", set_by="preset"),))]),
            r"suite 's': axis s_presets set_by unknown axis 'preset'",
        ),
        (
            lambda: checked([Suite("s", axes=(Axis("sizes"),)), Suite("t", axes=(Axis("sizes"),))]),
            r"axes declared by more than one suite: sizes",
        ),
    ],
    ids=["key", "figure", "ratio", "flag", "tier", "two-suites", "set-by", "axis-twice"],
)
def test_a_declaration_that_cannot_work_names_the_suite_and_the_field(declaration, message):
    with pytest.raises(DeclarationError, match=message):
        declaration()


def test_a_table_may_show_the_run_figures_and_the_records():
    suite = Suite(
        "s",
        records=("rows", "provider"),
        tables=(TABLE, Table("t", (Key("rows"),), (Figure("gpu_ms", "ms"),))),
    )
    assert [t.suite for t in suite.tables_of()] == ["s", "s"]
    assert "gpu_ms" in RUN_FIGURES


def test_bench_refuses_a_field_its_suite_does_not_declare():
    bench = Bench(None, None, None, suite="s", records=("rows",))
    assert bench._fields({"rows": 4}) == {"suite": "s", "rows": 4}
    assert bench._fields({"rows": 4, "suite": "other"}) == {"suite": "other", "rows": 4}
    with pytest.raises(
        TypeError, match=r"suite 's': bench.run records colums, which the suite does not declare"
    ):
        bench._fields({"colums": 4})
    assert Bench(None, None, None)._fields({"anything": 1}) == {"anything": 1}


def test_a_declared_table_renders_rows_in_key_order_with_ratios_and_dashes():
    table = Table(
        "t", keys=(Key("rows"),), figures=(Figure("gb_per_s", "GB/s", ".1f"),),
        across=("provider", ("a", "b")), ratios=(("a", "b"),), suite="s",
    )  # fmt: skip
    results = [
        {"suite": "s", "rows": 10, "provider": "a", "gb_per_s": 4.0},
        {"suite": "s", "rows": 10, "provider": "b", "gb_per_s": 2.0},
        {"suite": "s", "rows": 2, "provider": "a"},  # untimed
        {"suite": "other", "rows": 1, "provider": "a", "gb_per_s": 1.0},
    ]
    header, first, second = render(table, results)
    assert header.split() == ["rows", "a", "GB/s", "b", "GB/s", "a/b"]
    assert first.split() == ["2", "-", "-", "-"] and second.split() == ["10", "4.0", "2.0", "2.00x"]
    assert render(table, results[-1:]) == []


# --------------------------------------------------------------------------- cells
class _Item:
    """What the cell checks read of a collected benchmark."""

    def __init__(self, node_id: str, **params):
        self.nodeid, self.path = node_id, PERF / node_id.removeprefix("perf/").split("::")[0]
        self.callspec = type("CallSpec", (), {"params": params})()


def test_a_cell_keeps_the_cells_whose_arguments_take_its_values():
    bf16 = cell("test_x.py::test_y", precision="bf16", size=(1, 2), shape=lambda s: s > 4)
    assert bf16.keeps("perf/test_x.py::test_y[a]", {"precision": "bf16", "size": 2, "shape": 8})
    assert not bf16.keeps("perf/test_x.py::test_y[a]", {"precision": "bf16", "size": 3, "shape": 8})
    assert not bf16.keeps("perf/test_x.py::test_y[a]", {"precision": "bf16", "size": 2, "shape": 4})
    assert not bf16.keeps("perf/test_x.py::test_z[a]", {"precision": "bf16", "size": 2, "shape": 8})
    assert cell("test_x.py::test_y").keeps("perf/test_x.py::test_y[anything]", {"precision": "fp32"})


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (
            cell("test_x.py::test_y", precision="fp8"),
            r"suite 's': tier 'pr' cell test_x.py::test_y\[precision=fp8\] keeps none of the 2 collected",
        ),
        (
            cell("test_x.py::test_y", dtype="bf16"),
            r"suite 's': tier 'pr' cell .* names dtype, which test_x.py::test_y does not take; it takes",
        ),
    ],
    ids=["matches-nothing", "unknown-argument"],
)
def test_a_cell_that_keeps_nothing_stops_the_run_naming_its_suite(declared, message):
    tier = Tier("pr", {}, (("s", declared),))
    items = [
        _Item("perf/test_x.py::test_y[fp32]", precision="fp32"),
        _Item("perf/test_x.py::test_y[bf16]", precision="bf16"),
    ]
    with pytest.raises(pytest.UsageError, match=message):
        options._check_cells(tier, items)
    options._check_cells(Tier("pr", {}, (("s", cell("test_x.py::test_y", precision="bf16")),)), items)


def test_cells_given_as_id_patterns_are_refused():
    with pytest.raises(
        DeclarationError, match=r"suite 's': cells of tier 'pr' take cell\('test_x.py::test_y'"
    ):
        Suite("s", cells={"pr": ("test_x.py::test_y[*]",)})
