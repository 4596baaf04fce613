"""The suite's pytest plugin, in parts that the repository's conftest.py loads (`pytest_plugins`):

- `options`: the command-line options and the tier they choose;
- `session`: the run's device and tier, set up once; the session as one rank of a launcher's job;
- `baselines`: where results are stored (baselines/<gpu>/) and what --benchmark-compare compares with;
- `result_files`: results written whole, an interrupted or failed run's as partial (pytest.ini loads it
  first);
- `parametrize`: the tier's axes as benchmark parameters and ids;
- `fixtures`: `device`, `tier`, `timing_policy`, `bench`; an out-of-memory as a skip;
- `summary`: the header after collection and the end-of-run figures, tables and notes.
- `history`: with --history, the run recorded into the results database (perf/history/).
"""
