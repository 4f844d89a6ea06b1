# The whole set-up is `make demo` and `make test`; both build .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup test cluster-test demo bench bench-scale bench-config bench-wide bench-many fuzz lint package clean check-java

setup: $(STAMP) chromium

check-java:
	@command -v java >/dev/null 2>&1 || { echo "Java 17 is required by Spark 4.3 and was not found on PATH." \
	  "Install it with: apt-get install -y openjdk-17-jre-headless" >&2; exit 1; }

$(STAMP): pyproject.toml | check-java
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	@echo "compiling the decode kernels once for this machine (numba's disk cache; no job compiles them again)"
	$(PY) -c "import decoding.compiled"
	@touch $(STAMP)

test: $(STAMP) chromium
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest

# Only the tests that start Spark daemons of their own (marker `cluster`, also part of `make test`): a standalone
# Master and two Workers on 127.0.0.1 running the packaged zip (tests/test_cluster.py), and a Spark Connect server
# (tests/test_connect.py), and the bench's cluster figure (tests/test_bench_smoke.py); tests/conftest.py starts each
# once per session and tools/sparkcluster.py stops them by pid.  Skipped, with the reason, where Java cannot start them.
cluster-test: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -m cluster

# The inner loop: the pure-Python tests (no Spark session, no browser, no cluster, nothing slow) in under a
# minute; the markers are registered in pyproject.toml.  `make test` still runs everything.
FAST := not spark and not slow and not browser and not cluster
test-fast: $(STAMP)
	$(PY) -m pytest -m "$(FAST)"

# A two-broker demo dump (generated once into demo-out/, then reused), audited through spark-submit.
demo: $(STAMP)
	$(PY) tools/demo.py

# Every figure of issue 9 on one generated 1 GiB dump, and issue 41's scheduled audits (a 1 and a 4 GiB dump grown
# by 64 MiB, audited in full and with --state), into bench/results.json (see BENCHMARKS.md); options through
# BENCH_ARGS, e.g. make bench BENCH_ARGS="--size 64 --skip audit incremental".  The bench_*.py scripts are the
# deeper single-topic studies.
BENCH_ARGS ?=
bench: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/run.py $(BENCH_ARGS)

# The audit's cost per GB from 256 MiB to 4 GiB (1 GiB segments), with each job's peak memory per process:
# about 15 minutes and 6 GB of cached dumps; into bench/results-scale.json (BENCHMARKS.md, "Scaling").
bench-scale: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/run.py --skip framing decode writer index spark audit cluster incremental \
	  --scale-mib 1024 --scale-segment-mib 1024 --scale-steps 1 4 16 --scale-flows 10 --scale-jobs audit --scale-rounds 1 \
	  --scale-warmup-step 1 --scale-warmups 1 --results bench/results-scale.json $(BENCH_ARGS)

# Config files at any size (issue 40): a generated 1 GiB consumerOffset.json (once, into bench/cache/), each phase
# of its reading in a process under `prlimit --as` of 8 GiB, peak resident memory and outcome, into
# bench/results-config.json (BENCHMARKS.md, "Config files at any size"); e.g. BENCH_ARGS="--mib 256".
bench-config: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_config.py $(BENCH_ARGS)

# Wide and many (issue 40): the same bytes over 40,000 consume queues against 64, 64 brokers of 16 MiB against one
# of 1 GiB, 4,096 segments of 8 KiB against one of 32 MiB, each pair in one warm local[2] session; dumps generated
# once into /tmp/benchcache (about 4 GB); ratios into bench/results-wide.json (BENCHMARKS.md, "Wide and many");
# e.g. BENCH_ARGS="--mib 256 --only queues".
bench-wide: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_wide.py $(BENCH_ARGS)

# Bad input at scale (issue 40): a million tiny consume-queue files and a log of 100,000 segments of 8 KiB, audited
# with every file listed and under --max-files/--max-segments; generated once into /tmp/bench-many; peak driver
# memory into bench/results-many-files.json (BENCHMARKS.md, "Bad input at scale: many files").
bench-many: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/bench_many_files.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# --- the front door: spark-submit zip, generated job docs, headless browser for the HTML report tests ---
.PHONY: chromium docs

# The zip's kernels compiled into this machine's numba cache (keyed on their source, as executors key it: see
# docs/cluster.md), so a local spark-submit of the zip compiles nothing.
package:
	$(PYTHON) tools/package.py dist/rocketmq_forensics.zip
	@if [ -x $(PY) ]; then cd / && PYTHONPATH=$(abspath dist/rocketmq_forensics.zip) $(abspath $(PY)) -c "import decoding.compiled"; fi

docs: $(STAMP)
	$(PY) tools/jobs_docs.py --write docs/jobs.md
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) tools/schema_docs.py --write docs/output-schemas.md

# Debian's chromium, for tests/support/browser.py; installed when missing (root and apt-get, as on the project's
# machines), otherwise the command to run is printed.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-headless-shell >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium (headless browser for the HTML report tests)" >&2; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      chromium fonts-dejavu-core >/dev/null; \
	  else echo "chromium is required by the HTML report tests: sudo apt-get install chromium" >&2; exit 1; fi; }

# --- hostile dumps (issue 10): the fuzz profile and the large damage campaign, for local hunting ---
# FUZZ_EXAMPLES (hypothesis examples per fuzz test, default 2000), CAMPAIGN_SEEDS (default 40), and for the
# mutated whole stores FUZZ_STORE_EXAMPLES (default 200) and FUZZ_AUDITS (default 8) size it.
fuzz: $(STAMP)
	ROCKETMQ_FUZZ=1 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest tests/test_fuzz_parsers.py \
	  tests/test_damage_campaign.py tests/test_safety.py tests/test_fuzz_stores.py
