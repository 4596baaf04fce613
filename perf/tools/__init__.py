"""The baseline tools: they read result files (pytest-benchmark JSON), never the benchmarks.

- `python -m perf.tools.gate`: the regression gate, a run (or a stored result) against this GPU's
  baseline by `regression_rule`, re-measuring suspects before it fails;
- `python -m perf.tools.combine`: the parts of one run, measured in several invocations, as one baseline;
- `python -m perf.tools.report`: Markdown, HTML and plots of a result, alone or against a baseline;
- `results`: result files as the three read them, or why one cannot be used.
"""
