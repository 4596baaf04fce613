# Set-up happens on first use: `make test` or `make bench` creates .venv (see scripts/bootstrap_env.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=
# Which releases of pyproject.toml's ranges the environment gets: newest (what a new user gets) or lowest.
# torch and triton that python3 already has are reused either way. One VENV per RESOLVE.
RESOLVE ?= newest
STAMP := $(VENV)/.suite-ready$(if $(filter-out newest,$(RESOLVE)),-$(RESOLVE))

.PHONY: env test lint bench baseline gate noise report bisect clean-env

env: $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap_env.py
	$(PYTHON) scripts/bootstrap_env.py $(VENV) --resolve $(RESOLVE)

# Correctness tests (CPU is enough; Triton kernels run through its interpreter). tests/ is pytest.ini's
# testpaths, run when ARGS names no path: a path in ARGS selects instead of it. A process per core
# (pytest-xdist): on a fresh GPU machine most of the time is compiling (Triton kernels, TorchInductor),
# which one process does one at a time. TEST_WORKERS=0 runs them in this process. The tests that time
# the GPU or the host run alone (the `alone` marker, tests/alone.py), handed out last. loadgroup hands out
# one test at a time in the order collected (load would give a worker a run of them, the compiling ones
# all to one). Nothing in the tests' own processes is a benchmark (those they start measure):
# --benchmark-disable, which also keeps pytest-benchmark from warning that xdist disables it.
# tests/conftest.py turns TRITON_INTERPRET on where torch sees no CUDA GPU, before any kernel is imported.
TEST_WORKERS ?= auto

test: env
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --benchmark-disable $(ARGS)

# Lint and format check with pyproject.toml's [tool.ruff], at one ruff release: another formats differently.
RUFF_SPEC ?= ruff==0.17.6
lint: env
	$(PY) -m pip install -q "$(RUFF_SPEC)"
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# ARGS go to pytest as they are, and pytest's own parser tells their paths from option values:
# perf/ is not given as a path but as pytest's testpaths (PERF_TESTPATHS), which pytest runs only when ARGS
# names no path or node id. --benchmark-compare takes an optional value, so it is followed by that option,
# never by ARGS, and compares with the newest baseline; a --benchmark-compare=NUM in ARGS comes later and wins.
# tests/test_make_args.py checks the commands.
PERF_TESTPATHS := -o testpaths=perf

# The benchmark suite, compared against the stored baseline of this GPU (or CPU).
bench: env
	$(PY) -m pytest --benchmark-compare $(PERF_TESTPATHS) $(ARGS)

# Record a new baseline for this machine under baselines/<gpu>/ (a new numbered file, never an overwrite).
baseline: env
	$(PY) -m pytest $(PERF_TESTPATHS) --benchmark-save=$${NAME-baseline} $(ARGS)

# Fail only on slowdowns beyond the threshold and the runs' own noise that persist when measured again.
# GATE_ARGS go to the gate (--threshold, --z, --remeasure, --baseline); ARGS to pytest (perf/tools/gate.py),
# where paths or node ids under perf/ replace perf/. BASE=REF measures commit REF and this tree alternately
# here instead of comparing with a stored baseline (A/B, docs/gate.md).
gate: env
	$(PY) -m perf.tools.gate $(if $(BASE),--base $(BASE)) $(GATE_ARGS) -- $(ARGS)

# This runner's noise: the selection (ARGS; e.g. --tier pr) run NOISE_RUNS times back to back, each benchmark's
# run-to-run spread stored in baselines/<gpu>/noise.json, from which the gate takes its GPU- and wall-time thresholds.
NOISE_RUNS ?= 3

noise: env
	$(PY) -m perf.tools.noise --runs $(NOISE_RUNS) -- $(ARGS)

# The first commit between GOOD and BAD that made the selection (ARGS, needed: pytest arguments) slower on this
# machine (perf/tools/bisect.py); BISECT_ARGS go to the tool (--runs, --noise, --threshold, --save DIR).
bisect: env
	$(if $(and $(GOOD),$(BAD)),,$(error GOOD=REF and BAD=REF are needed, e.g. make bisect GOOD=v1 BAD=HEAD ARGS="-k forward"))
	$(PY) -m perf.tools.bisect $(GOOD) $(BAD) $(BISECT_ARGS) -- $(ARGS)

# A Markdown and HTML report with plots of one result file, against BASELINE if given (perf/tools/report.py).
# OUT sets the folder (default: reports/<RESULT's name>/).
report: env
	$(if $(RESULT),,$(error RESULT=FILE is needed, e.g. make report RESULT=baselines/<gpu>/0001_x.json))
	$(PY) -m perf.tools.report $(RESULT) $(if $(BASELINE),--baseline $(BASELINE)) $(if $(OUT),--out $(OUT))

clean-env:
	rm -rf $(VENV)
