# checkpointd: the front door. `make help` lists what is here.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
# The local Postgres the Postgres half of the suite runs against; tests skip it when it is unreachable
# unless CHECKPOINTD_REQUIRE_PG=1.
export CHECKPOINTD_TEST_PG_DSN ?= postgresql://postgres@127.0.0.1:5432/test

.DEFAULT_GOAL := help
.PHONY: help install run gen test lint fmt typecheck check clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

install: $(VENV)/.installed ## Create .venv with both packages (editable) and the dev tools.

$(VENV)/.installed: pyproject.toml pyclient/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e './pyclient[fastaiagent]' -e '.[test,dev]'
	touch $@

run: install ## Serve on the embedded SQLite default (see README: Configuration).
	$(BIN)/checkpointd serve

gen: install ## Regenerate the protobuf code from proto/.
	$(PY) tools/gen_proto.py

test: install ## Run the test suite (both backends).
	$(PY) -m pytest

lint: install ## ruff and buf lint.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/buf lint

fmt: install ## Format the code.
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install ## mypy --strict over the server and the client.
	$(BIN)/mypy

check: lint typecheck test ## Everything CI runs.

clean: ## Remove the virtualenv and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
