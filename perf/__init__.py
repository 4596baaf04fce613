"""The benchmark suite. Benchmarks (test_*.py) sit at the top of perf/, beside the measuring core:

- `harness/`: timing, GPU busy time, NVTX ranges, memory snapshots, machine info (the `bench` fixture's
  `Bench`); `tiers.py`: what each tier runs; `storage.py`: where results are stored;
- `cases/`: each suite's cases by the names results record; `workloads/`: what a benchmark runs;
- `tables/`: the end-of-run tables; `plugin/`: the pytest wiring conftest.py loads;
- `tools/`: the gate, combine and the report, which read result files and never the benchmarks.

Imports run one way: benchmarks -> plugin, tables, workloads -> tiers, harness -> cases, storage ->
model, kernels, parallel; the tools read tables, cases and storage only (tests/test_layout.py).
"""
