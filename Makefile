# The two commands the README promises: `make main` (cake's main job) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup main test test-gpu render check lint

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	# torch first and pinned: on these machines 2.13.0 (CPU) is a local file; any newer torch works too
	$(BIN)/pip install -q torch==2.13.0 || $(BIN)/pip install -q torch
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Render, migrate and verify must be fixed points; then compile every program of every arch with
# NVRTC (with a register/shared-memory report), and show what this machine would select.
main: setup
	$(BIN)/cake render --check
	$(BIN)/cake migrate --check
	$(BIN)/cake verify
	$(BIN)/cake build
	$(BIN)/cake doctor

lint: setup
	$(BIN)/ruff check cake tests tools
	$(BIN)/ruff format --check cake tests tools
	$(BIN)/mypy

test: lint
	@# pytest exits 5 when it collects nothing: say so, and fail
	$(BIN)/python -m pytest -q || { rc=$$?; [ $$rc -ne 5 ] || echo 'pytest collected no tests'; exit $$rc; }

# On a machine with an H200: the GPU tests, then again on the arch-neutral twins.
test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu
	CAKE_ARCH=sm_90 $(BIN)/python -m pytest -q -m gpu

render: setup
	$(BIN)/cake render
	$(BIN)/cake migrate

check: setup
	$(BIN)/cake render --check
	$(BIN)/cake migrate --check
	$(BIN)/cake verify
