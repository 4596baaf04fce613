"""What the benchmarks run: the models' steps, attention providers, matmuls, copies, CUDA graphs,
torch.compile, collectives and data-parallel training, each as a callable the harness times.

A workload builds its inputs and returns its step and the work one call does (perf.harness.Work);
the benchmark (perf/test_*.py) hands both to the `bench` fixture. Runs of ranks (`rank_runs`,
`launched_session`) start the processes a distributed workload measures in, once per configuration.
"""
