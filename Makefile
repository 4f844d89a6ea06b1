# The whole set-up is `make demo` and `make test`; both build .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
FIXTURES ?= ../shared/fixtures

.PHONY: setup test demo bench fuzz lint package clean check-java

setup: $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required by Spark 4.3 and was not found on PATH." \
	  "Install it with: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }

$(STAMP): pyproject.toml | check-java
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

test: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest

bench: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_decode.py
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_writer.py
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_datasource.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
