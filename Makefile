# Two commands on a fresh machine (Python 3.11 + pip): `make demo`, `make test`.
# `make demo` installs the core only (the solve path: a few hundred MB, no JAX/OR-Tools/cvxpy);
# `make test` installs every extra and the test tools (`.[test]`). Each step says what it does
# and pip shows its progress.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
CORE_STAMP := $(VENV)/.installed-core
STAMP  := $(VENV)/.installed

export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export OPTSCHED_PEER_DATA ?= $(abspath ../shared/data)

.PHONY: demo test bench install install-core clean

# (Python 3.11's own pip suffices: upgrading it first cost ~45 s on a busy machine.)
$(PY):
	@echo "==> creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)

# The core: what `make demo` needs.
$(CORE_STAMP): pyproject.toml | $(PY)
	@echo "==> installing optsched (core: solve, allocator, client; ~290 MB, about a minute) into $(VENV)"
	$(PY) -m pip install -e .
	touch $(CORE_STAMP)

# Everything the test suite needs (every extra, pytest, hypothesis, schemathesis); includes the core.
$(STAMP): pyproject.toml | $(PY)
	@echo "==> installing optsched with every extra and the test tools ('.[test]'; ~2 GB, several minutes) into $(VENV)"
	$(PY) -m pip install -e '.[test]'
	touch $(CORE_STAMP) $(STAMP)

install-core: $(CORE_STAMP)

install: $(STAMP)

demo: $(CORE_STAMP)
	@echo "==> optsched solve (the built-in 12-job example, max-min fairness)"
	$(VENV)/bin/optsched solve

# The suite on TEST_WORKERS processes (pytest-xdist): more workers than CI's 2 cores, since the
# real-time tests (Slurm, the local and Ray runtimes, the browser) mostly wait. `--dist loadgroup`
# keeps the tests that share a server, Slurm cluster or scratch folder on one worker, in order
# (tests/conftest.py). `make test TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 3

test: $(STAMP)
	@echo "==> the test suite (pytest on $(TEST_WORKERS) workers)"
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	$(VENV)/bin/optsched bench --csv bench.csv $(if $(QUICK),--quick) $(if $(OLD),--compare $(OLD))

clean:
	rm -rf $(VENV) build *.egg-info
