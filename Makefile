# Two commands on a fresh machine (Python 3.11 + pip): `make demo`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export OPENBLAS_NUM_THREADS ?= 1
export OMP_NUM_THREADS ?= 1
export OPTSCHED_PEER_DATA ?= $(abspath ../shared/data)

.PHONY: demo test bench install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/optsched solve

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(VENV)/bin/optsched bench --csv bench.csv $(if $(QUICK),--quick) $(if $(OLD),--compare $(OLD))

clean:
	rm -rf $(VENV) build *.egg-info
