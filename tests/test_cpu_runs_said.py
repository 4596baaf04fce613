"""A CPU run's figures are not measurements (the cpu tier checks that every suite runs): the gate's verdict
and the report say so beside their figures, and the gate does not advise `make noise`, which refuses there."""

from __future__ import annotations

from perf.tools import report
from tests.gate_files import run_gate, suite, write_results


def test_a_cpu_run_is_not_told_to_measure_noise(tmp_path, capsys):
    # `make noise` refuses on the CPU (no GPU-time spread to measure): the gate does not advise it there.
    base = write_results(tmp_path / "base.json", suite(), gpu=None)
    code, output, _ = run_gate(capsys, "--baseline", base, "--current", base, baselines_dir=tmp_path)
    assert code == 0 and "noise: no " in output and "make noise" not in output


def test_a_cpu_runs_verdict_says_it_is_not_a_measurement(tmp_path, capsys):
    base = write_results(tmp_path / "base.json", suite(), gpu=None)
    code, output, _ = run_gate(capsys, "--baseline", base, "--current", base, baselines_dir=tmp_path)
    assert code == 0 and "CPU run: not a measurement" in output
    on_gpu = write_results(tmp_path / "gpu.json", suite())
    code, output, _ = run_gate(capsys, "--baseline", on_gpu, "--current", on_gpu, baselines_dir=tmp_path)
    assert code == 0 and "CPU run" not in output


def test_the_report_of_a_cpu_run_says_it_is_not_a_measurement(tmp_path, capsys):
    run = write_results(tmp_path / "run.json", suite(), gpu=None)
    assert report.main([str(run), "--out", str(tmp_path / "report")]) == 0
    assert "CPU run: not a measurement" in capsys.readouterr().out
    on_gpu = write_results(tmp_path / "gpu.json", suite())
    assert report.main([str(on_gpu), "--out", str(tmp_path / "report2")]) == 0
    assert "CPU run" not in capsys.readouterr().out
