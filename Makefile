# Set-up happens on first use: `make test` or `make bench` creates .venv (see scripts/bootstrap_env.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: env test bench baseline gate report clean-env

env: $(VENV)/.suite-ready

$(VENV)/.suite-ready: pyproject.toml scripts/bootstrap_env.py
	$(PYTHON) scripts/bootstrap_env.py $(VENV)

# Correctness tests (CPU is enough; Triton kernels run through its interpreter).
test: env
	TRITON_INTERPRET=$${TRITON_INTERPRET-$$($(PY) -c "import torch; print(0 if torch.cuda.is_available() else 1)")} \
		$(PY) -m pytest tests/ $(ARGS)

# The benchmark suite, compared against the stored baseline of this GPU (or CPU).
bench: env
	$(PY) -m pytest perf/ --benchmark-compare $(ARGS)

# Record a new baseline for this machine under baselines/<gpu>/ (a new numbered file, never an overwrite).
baseline: env
	$(PY) -m pytest perf/ --benchmark-save=$${NAME-baseline} $(ARGS)

# Fail only on slowdowns beyond the threshold and the runs' own noise that persist when measured again.
# GATE_ARGS go to the gate (--threshold, --z, --remeasure, --baseline); ARGS to pytest (perf/tools/gate.py).
gate: env
	$(PY) -m perf.tools.gate $(GATE_ARGS) -- $(ARGS)

# A Markdown and HTML report with plots of one result file, against BASELINE if given (perf/tools/report/).
# OUT sets the folder (default: reports/<RESULT's name>/).
report: env
	$(if $(RESULT),,$(error RESULT=FILE is needed, e.g. make report RESULT=baselines/<gpu>/0001_x.json))
	$(PY) -m perf.tools.report $(RESULT) $(if $(BASELINE),--baseline $(BASELINE)) $(if $(OUT),--out $(OUT))

clean-env:
	rm -rf $(VENV)
