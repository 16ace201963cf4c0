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
.PHONY: help install run lock gen compile test test-quick test-system test-compat test-reliability lint fmt typecheck check bench clean

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The Node.js client's packages (clients/node/package-lock.json), installed only where npm is.
NODE_DEPS := $(if $(shell command -v npm 2>/dev/null),clients/node/node_modules/.installed)

# Every environment of the project installs from a lock under requirements/ (hash-checked; `make
# lock` refreshes them on purpose): uv, from requirements/tools.txt, installs the rest.
UV := $(VENV)/bin/uv
# The code generators' own environment (requirements/gen.txt: grpcio-tools 1.72.1, whose
# protobuf 6 cannot share .venv's protobuf 7).
GEN_VENV ?= .venv-gen
export CHECKPOINTD_GEN_PYTHON := $(abspath $(GEN_VENV))/bin/python
# The compatibility environments of `make test-compat`, one per requirements/compat-*.txt.
COMPAT_ROOT ?= .venv-compat
COMPAT_ENVS := floor langgraph-api

install: $(VENV)/.installed $(GEN_VENV)/.installed $(NODE_DEPS) ## .venv from requirements/dev.txt (both packages editable, every extra, the dev tools), .venv-gen for `make gen`; npm ci in clients/node if npm exists.

clients/node/node_modules/.installed: clients/node/package.json clients/node/package-lock.json
	cd clients/node && npm ci --no-audit --no-fund
	touch $@

# A virtualenv with uv in it (hash-checked by pip), then the lock and the two packages from the
# tree. `uv pip sync` would also remove what the lock does not list: install keeps what is there.
$(UV): requirements/tools.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
		-r requirements/tools.txt
	touch $@

# What serving needs, nothing else: the first command on a fresh machine waits for this only.
$(VENV)/.serve-installed: $(UV) requirements/serve.txt pyproject.toml pyclient/pyproject.toml
	$(UV) pip install --quiet --python $(PY) --require-hashes -r requirements/serve.txt
	$(UV) pip install --quiet --python $(PY) --no-deps -e ./pyclient -e .
	touch $@

$(VENV)/.installed: $(VENV)/.serve-installed requirements/dev.txt
	$(UV) pip install --quiet --python $(PY) --require-hashes -r requirements/dev.txt
	touch $@

$(GEN_VENV)/.installed: $(UV) requirements/gen.txt
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(GEN_VENV)
	$(UV) pip install --quiet --python $(GEN_VENV)/bin/python --require-hashes -r requirements/gen.txt
	touch $@

run: $(VENV)/.serve-installed ## Serve on the embedded SQLite default, approvals page on http://127.0.0.1:7471/ (installs requirements/serve.txt only).
	$(BIN)/checkpointd serve --console-listen 127.0.0.1:7471

lock: $(UV) ## Re-resolve requirements/*.txt from their .in files and the packages' ranges (LOCKS="serve dev" for some).
	$(PY) tools/lock.py $(LOCKS)

gen: install ## Regenerate the protobuf code from proto/ (in .venv-gen) and the sync client from the async one.
	$(CHECKPOINTD_GEN_PYTHON) tools/gen_proto.py
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

# The whole-system runs: the fault suites, the frameworks' own suites, fastaiagent's flows
# across processes, the approvals page in Chromium, the Node.js client and savers in node
# processes, the benchmark harness end to end and the image's build steps. `make test` leaves them to `make test-system` (the same reduced size, in CI) and
# `make test-reliability` (the fault and peer suites at full size), so the inner loop stays
# within minutes.
SYSTEM_TESTS := tests/reliability tests/peer tests/e2e/test_fastaiagent_e2e.py tests/console \
	tests/polyglot tests/test_bench_smoke.py tests/packaging/test_dockerfile.py

# The twenty slowest tests close every run, so a test that grows is seen.
DURATIONS := --durations=20

test: install compile ## Run the test suite (both backends) but the whole-system runs, in TEST_WORKERS processes.
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(DURATIONS) $(addprefix --ignore=,$(SYSTEM_TESTS))

test-quick: install compile ## The inner loop: the unit, store and contract tests on SQLite only (about a minute).
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(DURATIONS) -m "not postgres" tests/unit tests/store \
		tests/contract

test-system: install compile ## The whole-system runs at reduced size: fault suites (kill -9, outages, lost replies, worker kills and stalls, fuzz), fastaiagent's and LangGraph's own suites, fastaiagent's flows across processes, the approvals page in Chromium, the Node.js client, the benchmark harness, the image's build steps. CI runs it after make test.
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(DURATIONS) $(SYSTEM_TESTS)

# The client's and the savers' tests (tests/client, tests/graph) in each compatibility
# environment: "floor" has every range of both packages at its floor (protobuf 6.30, grpcio
# 1.72.1, langgraph 1.0.6, ...) and runs its own server; "langgraph-api" has the client next to
# LangGraph's Agent Server 0.16 (grpcio 1.81, protobuf 6.33) and talks to .venv's server. The
# newest versions are requirements/dev.txt's, which `make test` runs everything on.
test-compat: install compile $(foreach env,$(COMPAT_ENVS),$(COMPAT_ROOT)/$(env)/.installed) ## The client and savers' tests at the dependency floors and next to langgraph-api 0.16 (requirements/compat-*.txt).
	$(COMPAT_ROOT)/floor/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -p no:cacheprovider tests/client tests/graph
	CHECKPOINTD_TEST_SERVER_PYTHON=$(abspath $(PY)) $(COMPAT_ROOT)/langgraph-api/bin/python -m pytest \
		-n $(TEST_WORKERS) --dist loadgroup -p no:cacheprovider tests/client tests/graph

$(COMPAT_ROOT)/%/.installed: requirements/compat-%.txt $(UV) pyproject.toml pyclient/pyproject.toml
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(COMPAT_ROOT)/$*
	$(UV) pip install --quiet --python $(COMPAT_ROOT)/$*/bin/python --require-hashes -r $<
	$(UV) pip install --quiet --python $(COMPAT_ROOT)/$*/bin/python --no-deps -e ./pyclient \
		$(if $(filter floor,$*),-e .)
	touch $@

test-reliability: install compile ## The fault suites, fastaiagent's own suites and end-to-end flows on every backend, and the memory bounds behind PgBouncer, at full size: crashes, outages, lost replies, fuzz (long; CONTRIBUTING.md).
	CHECKPOINTD_RELIABILITY=full $(PY) -m pytest tests/reliability tests/peer tests/contract/test_bounds.py tests/e2e/test_fastaiagent_e2e.py

lint: install ## ruff, the settings table of docs/operations.md, the generated sync client, the locks against their .in files, the release version's copies, buf lint, buf breaking against the committed v1 image, hadolint.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PY) tools/settings_table.py --check
	$(PY) tools/unasync.py --check
	$(PY) tools/lock.py --check
	$(PY) tools/release.py --check
	$(BIN)/buf lint
	$(BIN)/buf breaking --against proto/buf-images/v1.binpb
	$(BIN)/hadolint Dockerfile

fmt: install ## Format the code.
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install ## mypy --strict over the server, the client and the tests.
	$(BIN)/mypy

check: lint typecheck test test-compat ## Everything CI runs.

bench: install ## The sidecar against fastaiagent's in-process checkpointers, both backends (minutes; bench/README.md).
	$(PY) bench/run.py

clean: ## Remove the virtualenv and caches.
	rm -rf $(VENV) $(GEN_VENV) $(COMPAT_ROOT) .pytest_cache .mypy_cache .ruff_cache
