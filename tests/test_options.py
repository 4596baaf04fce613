"""The suite's option values (perf/plugin/options.py): every comma-separated option refuses an empty item,
naming itself, and the device option's errors name it too (perf/harness/machine.py)."""

from __future__ import annotations

import re

import pytest

from perf import harness
from perf.plugin.options import OPTION_AXES, read

COMMA_AXES = [axis for axis in OPTION_AXES if axis.read != "name"]


def test_every_option_but_the_single_names_is_a_comma_list():
    assert {axis.read for axis in COMMA_AXES} == {"names", "ints", "sizes", "floats"}
    assert "presets" in {axis.option for axis in COMMA_AXES}


def _valid_item(axis) -> str:
    return {"names": axis.choices[0] if axis.choices else "", "ints": "2", "sizes": "1M", "floats": "1"}[
        axis.read
    ]


@pytest.mark.parametrize("axis", COMMA_AXES, ids=lambda axis: axis.option)
@pytest.mark.parametrize("pattern", ["{v},,{v}", "{v},", ",{v}", "{v}, ,{v}"])
def test_an_empty_item_is_refused_naming_the_option(axis, pattern):
    raw = pattern.format(v=_valid_item(axis))
    assert read(axis, _valid_item(axis))  # the item alone is accepted
    with pytest.raises(pytest.UsageError, match=rf"^--{axis.option}: empty item in '{re.escape(raw)}'"):
        read(axis, raw)


@pytest.mark.parametrize("axis", COMMA_AXES, ids=lambda axis: axis.option)
def test_spaces_around_items_are_kept_out_and_an_empty_value_is_refused(axis):
    item = _valid_item(axis)
    assert read(axis, f" {item} , {item}") == read(axis, f"{item},{item}")
    with pytest.raises(pytest.UsageError, match=rf"^--{axis.option}: empty;"):
        read(axis, " , ")


@pytest.mark.parametrize("name", ["tpu", "gpu", "cuda:x", "CPU"])
def test_an_unknown_device_names_the_option_and_what_is_accepted(name):
    with pytest.raises(ValueError) as err:
        harness.resolve_device(name)
    assert str(err.value) == f"--device {name}: unknown device; accepted: auto, cpu, cuda, cuda:N"
