"""pytest wiring of the benchmark suite, kept in perf/plugin/ and loaded here for every run under this
folder (benchmarks under perf/, correctness tests under tests/). `session` sets a run up with the
parts listed before it, which are therefore loaded first.

The measuring itself lives in perf/harness/; the plugin decides what runs, where results are stored
and what the terminal says about it.
"""

pytest_plugins = [
    "perf.plugin.options",  # --tier, --presets, ...: the options and the tier they choose
    "perf.plugin.result_files",  # result files written whole; an interrupted or failed run's as partial
    "perf.plugin.baselines",  # results stored and compared per GPU model under baselines/<gpu>/
    "perf.plugin.session",  # the run's device and tier; the session as one rank of torchrun or srun
    "perf.plugin.parametrize",  # the tier's axes as benchmark parameters, with the ids baselines keep
    "perf.plugin.fixtures",  # device, tier, timing_policy, bench; an out-of-memory becomes a skip
    "perf.plugin.summary",  # where and how it runs, and the end-of-run figures, tables and notes
    "perf.plugin.history",  # --history: the run recorded into the results database
]
