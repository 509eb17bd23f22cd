# The two commands of the quick start: `make demo` and `make test`.
# Each creates .venv on first use; the CPU set-up pins torch through constraints/cpu.txt.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints/cpu.txt

.PHONY: demo test lint venv-local venv-dev clean

demo: venv-local
	$(BIN)/servelab run

test: venv-dev
	$(BIN)/python -m pytest

lint: venv-dev
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools

venv-local: $(VENV)/.local-installed
venv-dev: $(VENV)/.dev-installed

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.local-installed: $(VENV)/bin/python pyproject.toml constraints/cpu.txt
	$(PIP) -e '.[local]'
	touch $@

$(VENV)/.dev-installed: $(VENV)/bin/python pyproject.toml constraints/cpu.txt
	$(PIP) -e '.[local,dev]'
	touch $@ $(VENV)/.local-installed

clean:
	rm -rf $(VENV) servelab-runs .pytest_cache .ruff_cache
