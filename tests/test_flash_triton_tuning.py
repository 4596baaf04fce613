"""Stored FlashAttention Triton tuning tables: written, merged, looked up, and left out with a note when
they do not fit (kernels/flash_attention_triton/stored.py, scripts/tune_flash_triton.py)."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import triton

from kernels.flash_attention_triton import stored as tuning
from kernels.flash_attention_triton import stored_writing
from model.config import PRESETS
from perf.storage import folder_name

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "tune_flash_triton.py"
H100 = {
    "name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "driver": "580.95", "cuda": "12.8",
    "torch": "2.9.0+cu128", "triton": "3.5.0", "commit": "0123456789abcdef", "dirty": False,
}  # fmt: skip
H200 = {**H100, "name": "NVIDIA H200"}
GPU = torch.device("cuda", 0)  # only a key's last element: nothing runs on it
FORWARD_KEY = (1024, 1024, True, 64, True, torch.bfloat16, GPU)
BACKWARD_KEY = (4096, 4096, False, 128, False, torch.float32, GPU)
FORWARD = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3)
BACKWARD = triton.Config(
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 64, "ATOMIC_DQ": 1},
    num_warps=4,
    num_stages=2,
)


@pytest.fixture(autouse=True)
def fresh_process_state(monkeypatch, tmp_path):
    """Each test as a new process: no notes issued yet, no files read, and the repository's tables
    looked for in tmp_path/tuned, not in kernels/tuned."""
    monkeypatch.setattr(tuning, "_NOTES", {})
    monkeypatch.setattr(tuning, "_USED", {})
    monkeypatch.setattr(tuning, "_VALID", {})
    monkeypatch.setattr(tuning, "TUNED_DIR", tmp_path / "tuned")
    monkeypatch.delenv(tuning.ENV, raising=False)
    tuning._read_stamped.cache_clear()


def entries() -> list[dict]:
    return [
        stored_writing.case_entry("forward", FORWARD_KEY, FORWARD, ms=0.25, shape={"batch": 16, "heads": 32}),
        stored_writing.case_entry("backward", BACKWARD_KEY, BACKWARD),
    ]


def stored_h100(tmp_path: Path) -> Path:
    """The H100's table where the repository's would be."""
    path = tmp_path / "tuned" / "nvidia-h100-80gb-hbm3.json"
    stored_writing.write_table(path, H100, entries(), "python scripts/tune_flash_triton.py --cases attention")
    return path


def test_a_written_table_takes_the_users_umask(tmp_path):
    previous = os.umask(0o027)
    try:
        path = stored_h100(tmp_path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not mkstemp's 0600


def test_a_written_table_gives_back_each_configuration_on_its_gpu(tmp_path):
    path = stored_h100(tmp_path)
    assert path == tuning.table_path(H100["name"])
    forward = tuning.lookup("forward", FORWARD_KEY, H100["name"])
    backward = tuning.lookup("backward", BACKWARD_KEY, H100["name"])
    assert (forward.kwargs, forward.num_warps, forward.num_stages) == ({"BLOCK_M": 128, "BLOCK_N": 64}, 8, 3)
    assert forward == FORWARD and backward == BACKWARD  # kwargs in the order the kernel gives them
    assert list(backward.kwargs) == ["BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "ATOMIC_DQ"]
    # Another dtype, causality, bucket or kernel is another case: not stored.
    assert tuning.lookup("forward", (*FORWARD_KEY[:5], torch.float16, GPU), H100["name"]) is None
    assert tuning.lookup("forward", (2048, *FORWARD_KEY[1:]), H100["name"]) is None
    assert tuning.lookup("backward", FORWARD_KEY, H100["name"]) is None
    assert tuning.lookup("forward", FORWARD_KEY, None) is None  # no GPU (the interpreter): no table
    document = json.loads(path.read_text())
    assert document["machine_info"]["parts"][0]["command"].endswith("--cases attention")
    assert document["machine_info"]["parts"][0]["commit"] == H100["commit"]
    assert document["cases"][0]["ms"] == 0.25
    lines = tuning.describe(H100["name"])
    assert lines[0].startswith(
        f"stored configurations for {H100['name']}: {path}, 2 cases (1 forward, 1 backward)"
    )
    assert "tuned at 0123456789ab on " in lines[0]
    assert "launched 2 stored configurations and autotuned 3 cases not stored" in lines[1]


def test_the_table_is_read_again_when_the_file_changes(tmp_path):
    path = stored_h100(tmp_path)
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) == FORWARD
    other = triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2)
    path.unlink()
    stored_writing.write_table(
        path, H100, [stored_writing.case_entry("forward", FORWARD_KEY, other)], "again"
    )
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a new mtime even on coarse clocks
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) == other


def test_without_a_table_every_case_autotunes_silently(tmp_path):
    stored_h100(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.lookup("forward", FORWARD_KEY, "NVIDIA A100-SXM4-80GB") is None
    expected = tmp_path / "tuned" / "nvidia-a100-sxm4-80gb.json"
    assert tuning.describe("NVIDIA A100-SXM4-80GB") == [
        f"no stored table for NVIDIA A100-SXM4-80GB ({expected}); each case autotunes"
    ]


def test_off_uses_no_table(tmp_path, monkeypatch):
    stored_h100(tmp_path)
    monkeypatch.setenv(tuning.ENV, "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to note: no table is asked for
        assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) is None
    assert tuning.describe(H100["name"]) == [
        f"{tuning.ENV}=off: no stored configurations for {H100['name']}; each case autotunes"
    ]


def test_a_path_in_the_variable_is_the_table_used(tmp_path, monkeypatch):
    path = tmp_path / "elsewhere.json"
    stored_writing.write_table(path, H100, entries(), "tuned elsewhere")
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) is None  # the repository has none
    monkeypatch.setenv(tuning.ENV, str(path))
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) == FORWARD
    assert str(path) in tuning.describe(H100["name"])[0]
    monkeypatch.setenv(tuning.ENV, str(tmp_path / "missing.json"))
    with pytest.warns(tuning.TuningTableWarning, match="missing.json: no such file"):
        assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) is None


def test_a_table_of_another_gpu_is_left_out_with_a_note_once(tmp_path, monkeypatch):
    source = stored_h100(tmp_path)
    copied = tmp_path / "tuned" / "nvidia-h200.json"  # copied or renamed into the H200's place
    copied.write_text(source.read_text())
    with pytest.warns(tuning.TuningTableWarning, match="tuned on NVIDIA H100 80GB HBM3, not on this GPU"):
        assert tuning.lookup("forward", FORWARD_KEY, H200["name"]) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once per process
        assert tuning.lookup("backward", BACKWARD_KEY, H200["name"]) is None
    assert any("nvidia-h200.json: tuned on NVIDIA H100" in line for line in tuning.describe(H200["name"]))
    monkeypatch.setenv(tuning.ENV, str(source))  # chosen by path, still not for another GPU
    with pytest.warns(tuning.TuningTableWarning, match="not on this GPU \\(NVIDIA H200\\)"):
        assert tuning.lookup("forward", FORWARD_KEY, H200["name"]) is None
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) == FORWARD


def _damaged(document: dict, change: str) -> object:
    if change == "format":
        return {**document, "format_version": 99}
    if change == "no cases":
        return {k: v for k, v in document.items() if k != "cases"}
    if change == "no gpu":
        return {**document, "machine_info": {**document["machine_info"], "gpu": {}}}
    case = dict(document["cases"][0])
    if change == "no num_warps":
        case["config"] = {k: v for k, v in case["config"].items() if k != "num_warps"}
    elif change == "head_dim a string":
        case["head_dim"] = "64"
    elif change == "bucket not a power of two":
        case["seq_q_bucket"] = 1000
    elif change == "repeated case":
        return {**document, "cases": [case, case]}
    return {**document, "cases": [case, *document["cases"][1:]]}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("not json", "not valid JSON"),
        ("a list", "not a JSON object but a list"),
        ("format", "format_version 99; this code reads 1"),
        ("no cases", "cases missing"),
        ("no gpu", "machine_info.gpu: name missing"),
        ("no num_warps", "cases\\[0\\].config: num_warps missing"),
        ("head_dim a string", "cases\\[0\\]: head_dim must be one of .*; got '64'"),
        ("bucket not a power of two", "cases\\[0\\]: seq_q_bucket must be a power of two; got 1000"),
        ("repeated case", "cases\\[1\\] repeats the case of cases\\[0\\]"),
    ],
)
def test_an_unreadable_table_is_left_out_with_a_note_naming_file_and_problem(tmp_path, change, problem):
    path = stored_h100(tmp_path)
    if change == "not json":
        path.write_text(path.read_text()[:-20])
    elif change == "a list":
        path.write_text("[]")
    else:
        path.write_text(json.dumps(_damaged(json.loads(path.read_text()), change)))
    with pytest.warns(tuning.TuningTableWarning, match=f"nvidia-h100-80gb-hbm3.json: {problem}"):
        assert tuning.lookup("forward", FORWARD_KEY, H100["name"]) is None
    assert any("not used, each case autotunes" in line for line in tuning.describe(H100["name"]))
    with pytest.raises(tuning.TuningTableError, match=problem):
        tuning.read_table(path)


def test_entries_the_kernel_could_not_choose_are_dropped_the_rest_used(tmp_path):
    stored_h100(tmp_path)

    def only_forward(kernel, key, config):
        assert key[5] in (torch.bfloat16, torch.float32) and key[6] is None
        return kernel == "forward"

    with pytest.warns(
        tuning.TuningTableWarning, match="1 of 2 stored configurations left out.*first: backward"
    ):
        assert tuning.lookup("backward", BACKWARD_KEY, H100["name"], only_forward) is None
    assert tuning.lookup("forward", FORWARD_KEY, H100["name"], only_forward) == FORWARD
    assert any("1 of 2 stored configurations left out" in line for line in tuning.describe(H100["name"]))
    assert "1 cases (1 forward, 0 backward)" in tuning.describe(H100["name"])[0]

    def broken(kernel, key, config):
        raise KeyError("HEAD_DIM")

    with pytest.warns(tuning.TuningTableWarning, match="2 of 2 .*the check raised KeyError"):
        assert tuning.lookup("forward", FORWARD_KEY, H100["name"], broken) is None


def test_merging_keeps_both_parts_and_replaces_a_case_tuned_again(tmp_path):
    path = tmp_path / "table.json"
    stored_writing.write_table(path, H100, entries(), "part one")
    again = triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3)
    third_key = (16384, 16384, True, 128, True, torch.bfloat16, GPU)
    part_two = [
        stored_writing.case_entry("forward", FORWARD_KEY, again),
        stored_writing.case_entry("forward", third_key, FORWARD),
    ]
    with pytest.raises(tuning.TuningTableError, match="exists; merge adds"):
        stored_writing.write_table(path, {**H100, "commit": "fedcba"}, part_two, "part two")
    document = stored_writing.write_table(
        path, {**H100, "commit": "fedcba"}, part_two, "part two", merge=True
    )
    assert [p["command"] for p in document["machine_info"]["parts"]] == ["part one", "part two"]
    assert [p["commit"] for p in document["machine_info"]["parts"]] == [H100["commit"], "fedcba"]
    assert [p["cases"] for p in document["machine_info"]["parts"]] == [2, 2]
    assert tuning.read_table(path) == document
    cases = {(e["kernel"], e["seq_q_bucket"]): e for e in document["cases"]}
    assert len(cases) == 3
    assert cases["forward", 1024]["config"]["kwargs"] == {"BLOCK_M": 64, "BLOCK_N": 64}
    assert [cases[c]["part"] for c in (("forward", 1024), ("forward", 16384), ("backward", 4096))] == [
        1,
        1,
        0,
    ]
    # Sorted by kernel then key, one case per line: a re-tuning's diff shows the cases it changed.
    order = [(e["kernel"], e["seq_q_bucket"], e["head_dim"]) for e in document["cases"]]
    assert order == [("forward", 1024, 64), ("forward", 16384, 128), ("backward", 4096, 128)]
    lines = path.read_text().splitlines()
    assert sum(line.strip().startswith('{"kernel"') for line in lines) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["table.json"]  # no temporary file left behind


@pytest.mark.parametrize(
    ("other", "message"),
    [
        (H200, "tuned on NVIDIA H100 80GB HBM3, this run is on NVIDIA H200"),
        ({**H100, "triton": "3.6.0"}, "tuned with triton 3.5.0, this run has triton 3.6.0"),
        ({**H100, "torch": "2.10.0"}, "tuned with torch 2.9.0\\+cu128, this run has torch 2.10.0"),
    ],
)
def test_merging_refuses_another_gpu_or_other_versions(tmp_path, other, message):
    path = tmp_path / "table.json"
    stored_writing.write_table(path, H100, entries(), "part one")
    before = path.read_text()
    with pytest.raises(tuning.TuningTableError, match=message):
        stored_writing.write_table(path, other, entries(), "part two", merge=True)
    assert path.read_text() == before


def test_writing_refuses_entries_it_could_not_read_back(tmp_path):
    bad = {**entries()[0], "head_dim": 12}
    with pytest.raises(tuning.TuningTableError, match="cases\\[0\\]: head_dim"):
        stored_writing.write_table(tmp_path / "t.json", H100, [bad], "x")
    with pytest.raises(tuning.TuningTableError, match="gpu_info lacks commit"):
        stored_writing.write_table(
            tmp_path / "t.json", {k: v for k, v in H100.items() if k != "commit"}, [], "x"
        )
    assert not (tmp_path / "t.json").exists()


@pytest.mark.parametrize(
    "name",
    ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "  Tesla V100 (PCIe) ", "cpu x86_64"],
)
def test_file_names_follow_the_baselines_folder_rule(name):
    assert tuning.folder_name(name) == folder_name(name)
    assert tuning.table_path(name).name == f"{folder_name(name)}.json"


# --------------------------------------------------------------------------- the tuning command
@functools.cache
def _script():
    """The command as a module (scripts/ is no package); registered, as its dataclass needs."""
    spec = importlib.util.spec_from_file_location("tune_flash_triton", SCRIPT)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "FLASH_TRITON_CONFIG")}
    command = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env={**environ, **env}, check=False
    )


def test_the_command_lists_the_model_cases():
    listed = _run("--list", "--cases", "model", "--contexts", "512")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    expected = [
        f"b{PRESETS[p].batch_size}-h{PRESETS[p].num_heads}-s512-d{PRESETS[p].head_dim}-causal {dtype}"
        for dtype in ("bf16", "fp32")
        for p in ("small", "medium", "large", "xl", "2.7b")
    ]
    assert [" ".join(line.split()[2:]) for line in lines[:-1]] == expected
    assert expected[0] == "b4-h12-s512-d64-causal bf16" and expected[4] == "b4-h32-s512-d80-causal bf16"
    assert [line.split()[:2] for line in lines[:2]] == [["model", "small@512"], ["model", "medium@512"]]
    assert lines[-1] == "10 cases"


def test_the_command_selects_and_filters_cases():
    script = _script()
    cases, _ = script.select_cases(["attention", "scaling"], ["bf16"], None, [128], [512])
    # (1, 16, 16384, 128) causal is in both sweeps: tuned once.
    assert len(cases) == len({(c.batch, c.heads, c.seq, c.head_dim, c.causal) for c in cases})
    assert {c.head_dim for c in cases} == {128} and {c.dtype for c in cases} == {"bf16"}
    assert sum(c.source == "attention" for c in cases) == 6 and sum(c.source == "scaling" for c in cases) == 9
    cases, _ = script.select_cases(["model"], ["fp16"], [2048], None, [512, 2048])
    assert [(c.source, c.seq, c.dtype) for c in cases][:1] == [("model small@2048", 2048, "fp16")]
    assert len(cases) == 5


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dtypes", "fp64"], "argument --dtypes: 'fp64': accepted bf16, fp16, fp32"),
        (["--cases", "attention,sweep"], "argument --cases: 'sweep': accepted attention, scaling, model"),
        (["--head-dims", "12"], "argument --head-dims: '12': accepted 16, 24, 32"),
        (["--contexts", "0"], "argument --contexts: '0': accepted positive integers"),
        (["--seqs", "1024", "--head-dims", "16", "--cases", "model"], "no case left after the filters"),
    ],
)
def test_the_command_refuses_bad_options(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        sys.exit(_script().main(["--list", *args]))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_needs_a_gpu_and_no_forced_configuration(monkeypatch, capsys):
    refused = _run("--cases", "model", CUDA_VISIBLE_DEVICES="")
    assert refused.returncode == 2
    assert refused.stderr.startswith("tune_flash_triton: error: no CUDA GPU visible")
    assert len(refused.stderr.strip().splitlines()) == 1
    monkeypatch.setenv("FLASH_TRITON_CONFIG", "forward:BLOCK_M=64,BLOCK_N=32")
    assert _script().main(["--cases", "model"]) == 2
    assert "FLASH_TRITON_CONFIG is set" in capsys.readouterr().err
