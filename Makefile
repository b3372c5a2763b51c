# The two commands of the README's quick start, and the pieces they are made of.
#   make demo   set up, then run the main job on the shipped matrix
#   make test   set up, then pass the lint checks and the whole test suite (what .ci/run calls)
#   make docs   the documentation site (docs/, mkdocs.yml), built strictly into .state/site

VENV        ?= .venv
BIN         := $(VENV)/bin
PYTHON      ?= python3
STATE       ?= .state
# The cell this machine can build without an NPU or a registry to pull from:
# Debian 12, its own Python 3.11 in a venv, torch 2.13.0.
DEMO_CELL   ?= cann9.1.0-910b-debian12-py3.11-torch_npu2.13.0-x86_64
# Nothing can be pulled here, so the base image is made locally (setup-engine).
BASE_IMAGE  ?= local/debian:12
# Wheels preferred over the index when present (this machine keeps torch there).
WHEELHOUSE  ?= $(wildcard /opt/wheels)

# A host Python with torch runs the smoke program's own tests outside images.
TORCH_VENV  ?= .venv-torch

.PHONY: setup engine demo lint docs cli-reference knowledge test test-fast bench torch-venv

$(BIN)/ascend-build: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

setup: $(BIN)/ascend-build

engine:
	ASCEND_BUILD_STATE=$(STATE) bash scripts/setup-engine.sh

demo: setup engine
	$(BIN)/ascend-build validate
	$(BIN)/ascend-build render
	$(BIN)/ascend-build image --cell $(DEMO_CELL) --base-image $(BASE_IMAGE) \
		$(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE)) --state-dir $(STATE)

$(TORCH_VENV)/bin/python:
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q $(if $(WHEELHOUSE),--find-links $(WHEELHOUSE)) torch==2.13.0

torch-venv: $(TORCH_VENV)/bin/python

# ruff (pyflakes, bugbear) and mypy over builder/, tests/ and benchmarks/, configured in pyproject.toml; both must find nothing.
lint: setup
	$(BIN)/ruff check
	$(BIN)/mypy

# Three workers (pytest-xdist): the two arm64 builds under qemu and the other engine tests run
# side by side, the tests that need no engine fill in (groups: tests/conftest.py).
# TEST_WORKERS=0 runs the suite serially in one process.
TEST_WORKERS ?= 3

# The docs site, built strictly: a broken link, a missing anchor or a page left out of mkdocs.yml's
# nav fails it. The site is not committed.
docs: setup
	$(BIN)/mkdocs build --strict --site-dir $(STATE)/site

# builder/data's parsed files (torchnpu-tables, cann-products, downstream-pins) from the documents kept
# under tests/fixtures/documents/; tests/test_published_tables.py fails when one is stale.
knowledge: setup
	$(BIN)/ascend-build releases tables --write

# docs/reference/cli.md from the CLI's own help (typer's generator); tests/test_docs.py fails when stale.
cli-reference: setup
	$(BIN)/python scripts/cli_reference.py

# --durations: the 25 slowest tests, so a run shows where the suite's time goes.
test: setup lint docs engine torch-venv
	ASCEND_BUILD_TORCH_PYTHON=$(TORCH_VENV)/bin/python $(BIN)/pytest --durations=25 \
		$(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

# Everything that needs no Docker Engine (seconds, not minutes).
test-fast: setup lint
	$(BIN)/pytest -m 'not engine'

bench: setup engine
	$(BIN)/python -m benchmarks.run_all
