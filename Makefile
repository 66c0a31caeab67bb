# Every target creates the virtual environment it needs; a fresh machine needs only python3.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs: what `koi bench` needs (the demo), and every extra the tests exercise.
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# A real Prometheus for the integration tests: Debian's package, unpacked, never installed.
PROM_DIR := .cache/prometheus
PROM_BIN := $(PROM_DIR)/usr/bin/prometheus
INT_STAMP := $(VENV)/.installed-integrations

.PHONY: venv demo test lint pytest test-integrations bench clean prometheus

venv: $(STAMP)

$(BASE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[report]'
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,dev,report,llm,dask,agent,k8s,render,test-k8s]'
	touch $(STAMP)

# `apt-get download` + `dpkg -x`: the binary lands in .cache/ and no service is installed or
# started.  Where apt is missing or refuses, say so and go on: the tests then skip with the
# reason (or fail, when KOI_REQUIRE_PROMETHEUS=1 as in CI).
prometheus:
	@if [ -x "$(PROM_BIN)" ] || command -v prometheus >/dev/null 2>&1; then :; else \
	  sh tests/integrations/fetch_prometheus.sh "$(PROM_DIR)" || \
	  echo "make: could not fetch Debian's prometheus package; its tests will skip"; fi

demo: $(BASE_STAMP)
	$(BIN)/koi bench

lint: venv
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	$(BIN)/mypy benchmarks/*.py

pytest: venv prometheus
	$(BIN)/python -m pytest -q -m "not integrations"

# Tests against large optional packages (SkyPilot): a separate target, also run by .ci/run.
$(INT_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[skypilot]'
	touch $(INT_STAMP)

test-integrations: $(INT_STAMP)
	$(BIN)/python -m pytest -q -m integrations tests/integrations

test: lint pytest

# The speed and scale scripts, each on its defaults; the other scripts in benchmarks/ read
# bench output or fit data and take arguments (their docstrings say which).
BENCH_SCRIPTS = replay surrogate selector_scale input_size sim tick

bench: venv
	@for f in $(BENCH_SCRIPTS); do echo "== benchmarks/$$f.py"; $(BIN)/python benchmarks/$$f.py || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache bench-out .cache
