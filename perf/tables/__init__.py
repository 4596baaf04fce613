"""The end-of-run tables: each suite's results (their extra_info) as text, one table per suite.

`summary.SUMMARY_TABLES` lists them in order; the end of a run prints them (perf/plugin/summary.py)
and the report repeats them (perf/tools/report.py). A table reads results only, by the names of
perf/cases/, so a stored result file renders the same tables as the run that wrote it.
"""
