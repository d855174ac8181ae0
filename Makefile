# One entry point for set-up, serving and testing. The README's two commands use it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup sysdeps compat serve ledger test lint unit fuzz bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark,registry]'
	touch $@

setup: $(VENV)/.installed

# kcat and a JDK for the real-client tests, chromium for the console's browser tests, the
# PostgreSQL server for strom connect's JDBC/CDC tests (Debian packages), installed only where missing.
sysdeps:
	@missing=""; \
	command -v kcat >/dev/null || missing="$$missing kcat"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -f /usr/share/doc/librdkafka-dev/examples/rdkafka_performance.c ] || missing="$$missing librdkafka-dev"; \
	if [ -n "$$missing" ]; then \
	  SUDO=$$(command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# The third-party clients of ../shared/compat (confluent-kafka, kafka-python, aiokafka, kcat, Java, kafkajs).
compat: sysdeps
	@if [ -x ../shared/compat/setup.sh ] || [ -f ../shared/compat/setup.sh ]; then bash ../shared/compat/setup.sh >/dev/null; \
	else echo "../shared/compat not found: real-client compat tests will be skipped"; fi

serve: setup
	$(VENV)/bin/strom serve

# The ledger example's CLI without activating the venv: make ledger ARGS="query stock"
ARGS ?= --help
ledger: setup
	$(VENV)/bin/strom-ledger $(ARGS)

lint: setup
	$(PY) -m ruff check src tests bench
	$(PY) -m mypy

unit: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

test: setup compat lint
	$(PY) -m pytest $(PYTEST_ARGS)

# The request fuzzer, long: FUZZ_FRAMES frames per core (two processes, different seeds).
FUZZ_FRAMES ?= 5000000
FUZZ_SEED ?= $(shell date +%s)
fuzz: setup
	$(PY) -m strom.testing.fuzzer --frames $(FUZZ_FRAMES) --seed $(FUZZ_SEED) & p1=$$!; \
	$(PY) -m strom.testing.fuzzer --frames $(FUZZ_FRAMES) --seed $$(($(FUZZ_SEED) + 1)); r2=$$?; \
	wait $$p1; r1=$$?; exit $$((r1 | r2))

bench: setup compat
	$(PY) bench/throughput.py
	$(PY) bench/latency.py
	$(PY) bench/transactions.py

bench-ledger: setup
	$(PY) bench/ledger.py

bench-spark: setup
	$(PY) bench/spark_decode.py
	$(PY) bench/spark_throughput.py

clean:
	rm -rf $(VENV) strom-data .pytest_cache .mypy_cache .ruff_cache
