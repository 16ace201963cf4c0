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
.PHONY: help install run gen compile test test-reliability lint fmt typecheck check bench clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The Node.js client's packages (clients/node/package-lock.json), installed only where npm is.
NODE_DEPS := $(if $(shell command -v npm 2>/dev/null),clients/node/node_modules/.installed)

install: $(VENV)/.installed $(NODE_DEPS) ## Create .venv (both packages, dev tools); npm ci in clients/node if npm exists.

clients/node/node_modules/.installed: clients/node/package.json clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund
	touch $@

$(VENV)/.installed: pyproject.toml pyclient/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e './pyclient[fastaiagent]' -e '.[test,dev,bench]'
	touch $@

run: install ## Serve on the embedded SQLite default, approvals page on http://127.0.0.1:7471/.
	$(BIN)/checkpointd serve --console-listen 127.0.0.1:7471

gen: install ## Regenerate the protobuf code from proto/ and the sync client from the async one.
	$(PY) tools/gen_proto.py
	$(PY) tools/unasync.py

# Worker processes of `make test` (pytest-xdist; 0 runs in this one process). The tests mostly
# wait on server subprocesses, sockets and Postgres, so more workers than CPUs still pay.
# loadgroup hands tests out one or two at a time, longest first, and runs the timing-sensitive
# ones on one worker (tests/conftest.py).
TEST_WORKERS ?= 5

# The tests start about a thousand server processes. Byte-compiled once here, the sources are
# not compiled again by each of them (PYTHONDONTWRITEBYTECODE, if set, stops Python caching).
compile:
	$(PY) -m compileall -q -j 0 server pyclient

test: install compile ## Run the test suite (both backends), in TEST_WORKERS processes.
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

test-reliability: install compile ## The fault suites, fastaiagent's own suites and end-to-end flows on every backend, and the memory bounds behind PgBouncer, at full size: crashes, outages, lost replies, fuzz (long; README).
	CHECKPOINTD_RELIABILITY=full $(PY) -m pytest tests/reliability tests/peer tests/contract/test_bounds.py tests/e2e/test_fastaiagent_e2e.py

lint: install ## ruff, the README's settings table, the generated sync client, buf lint, buf breaking against the committed v1 image, hadolint.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PY) tools/settings_table.py --check
	$(PY) tools/unasync.py --check
	$(BIN)/buf lint
	$(BIN)/buf breaking --against proto/buf-images/v1.binpb
	$(BIN)/hadolint Dockerfile

fmt: install ## Format the code.
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install ## mypy --strict over the server, the client and the tests.
	$(BIN)/mypy

check: lint typecheck test ## Everything CI runs.

bench: install ## The sidecar against fastaiagent's in-process checkpointers, both backends (minutes; bench/README.md).
	$(PY) bench/run.py

clean: ## Remove the virtualenv and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
