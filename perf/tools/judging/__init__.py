"""The tools' rules: what decides slower, faster or the same, on figures read by perf/tools/reading/. Pure
functions of results; nothing here runs pytest or prints.

- `regression_rule`: the gate's rule for one figure of one benchmark (threshold and noise bound, the
  host-bound threshold, a slowdown the SM clock explains);
- `noise_thresholds`: a runner's noise file as each benchmark's thresholds; `noise_spread`: the noise file's
  content from runs (`perf.tools.noise`);
- `changes`: every benchmark of two runs judged at its thresholds (the suspects), and each re-measurement of
  the suspects judged;
- `outcome`: one category per benchmark, the same in the gate and the report;
- `paired_rule` and `kernel_shares`: the A/B's rule over alternated runs, kernel by kernel too; ABRun;
- `bisect_search`: the search for the first slower commit, given a way to measure one;
- `window_rule`: the gate against history's baseline and thresholds from a window of runs;
- `replay` and `plants`: the rules replayed on a same-code corpus, with slowdowns planted in its runs.
"""
