"""The baseline tools: they read result files (pytest-benchmark JSON), never the benchmarks.

The command lines, where users call them, each parsing its arguments and calling down the floors below:

- `python -m perf.tools.gate`: the regression gate, a run (or a stored result) against this GPU's
  baseline by the gate's rule, re-measuring suspects before it fails (A/B against a commit with --base);
- `python -m perf.tools.noise`: a runner's noise file, from which the gate takes each benchmark's thresholds;
- `python -m perf.tools.bisect`: the first commit between two that made a selection slower;
- `python -m perf.tools.combine`: the parts of one run, measured in several invocations, as one baseline;
- `python -m perf.tools.nccl_tests`: the collectives' bus bandwidth beside nccl-tests';
- `python -m perf.tools.report`: Markdown, HTML and plots of a result, alone or against a baseline;
- `python -m perf.tools.calibrate`: the rules replayed on a same-code corpus, their false alarms and catches.

The floors, each importing only those below it (tests/test_layout.py checks it):

- `reporting/` and `running/`: what the tools print and write (verdicts, the report), and starting pytest runs
  and worktrees; neither imports the other;
- `judging/`: the rules that decide slower, faster or the same, and the thresholds they judge at;
- `reading/` (lowest): result files and what they say, and the errors the tools raise.

perf/history (the results database) imports `reading/` and `judging/` only; of the tools only the gate's
command imports it (`--against history`).
"""
