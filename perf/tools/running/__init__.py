"""Starting the benchmarks from a tool: pytest runs and other commits checked out beside this tree.

- `runs`: pytest in a tree writing a result file, read back (an interrupt passed to it once);
- `worktrees`: another commit checked out beside this tree, removed however the block ends;
- `sides`: the gate's two runs, the baseline and the current results, read or measured here;
- `remeasure`: the gate's suspects measured again and judged each round;
- `ab`: the gate's A/B, base and this tree measured alternately and judged by their pairs;
- `bisect_runs`: the commits a bisection searches, and measuring one of them.

Nothing here prints a verdict (perf/tools/reporting/ does) or imports it.
"""
