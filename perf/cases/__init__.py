"""The suites' cases by name: what each suite can run and what its results record.

Tiers choose among these values (perf/tiers.py), the workloads run them (perf/workloads/), and the
end-of-run tables and the report read results back by the same names (perf/tables/, perf/tools/),
which is why they live here rather than beside the code that runs them: readers of result files need
the names and their order, not the workloads. Nothing here imports the rest of perf/ except the
byte sizes the collectives share.
"""
