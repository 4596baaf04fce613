"""The lowest floor of the tools: result files and what they say, read without judging them.

- `errors`: GateError (input on which a tool refuses a verdict), Interrupted, and `tool_main`, the way
  every command line ends on them (one line, exit 2 or 130);
- `timings`: a benchmark's figures as a result records them (wall time, GPU time, host-bound);
- `results`: result files as the tools read them, or why one cannot be used; runs aligned on one GPU-time
  method; this machine's newest baseline;
- `run_info`: what a result file says of its run beyond the timings (commit, date, GPU, tier, selection,
  world sizes), and node ids shortened for rows;
- `kernel_changes`: the kernels that changed between two runs' stored kernel tables;
- `parts`: the parts of one run read as one document and stored as one baseline (`perf.tools.combine`);
- `nccl_logs`: nccl-tests' logs and the suite's NCCL results as rows (`perf.tools.nccl_tests`);
- `corpus`: a same-code corpus (runs of one commit, GPU and method), or why it cannot be used.

Nothing here imports another floor of the tools (tests/test_layout.py checks it).
"""
