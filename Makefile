# The two commands: `make demo` runs Allot, `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
PYTEST_ARGS ?=

.PHONY: demo test lint install bench engine slurm-up slurm-down philly-table

# The `allot` command (cli/, its own distribution) goes into the same venv; a change to either
# pyproject.toml reinstalls.
$(VENV)/.installed: pyproject.toml cli/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]' -e ./cli
	touch $@

install: $(VENV)/.installed

# DEBUG is off by default (production); the demo, and only the demo, runs with it on.
demo: export DEBUG = 1
demo: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	PORT=$(PORT) $(PY) manage.py rundemo --port $(PORT)

test: install
	DEBUG=1 $(PY) manage.py makemigrations --check --dry-run
	scripts/run-tests $(PY) $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) -m scheduling.engine.bench --pending 10000 --running 4000 --nodes 512 --json

# The engine and the simulator compiled with mypyc into build/engine: `manage.py simulate`
# (and the what-if replays it runs) use it once built, the replay tools with --compiled; the
# pure-Python engine stays the live loop's and the tests'.
engine: install
	$(PY) -m scheduling.engine.sim.compiled build

slurm-up:
	scripts/slurm-up.sh

slurm-down:
	scripts/slurm-down.sh
