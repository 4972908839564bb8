# Cluster Doctor — developer entry points. The README's quick start is `make demo` and `make test`;
# both build and reuse the virtual environment in .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
SUITES_REQS := include/suites/requirements.txt
REQS := pyproject.toml $(SUITES_REQS) constraints.txt
# Bytecode outside the tree, in .venv/pycache: every process imports compiled modules (Airflow's ~4,000,
# compiled there by make .venv; the project's, the tools' and the tests' on first use), and pytest keeps its
# assertion-rewritten test modules there too: with PYTHONDONTWRITEBYTECODE (which some machines set in the
# environment) every pytest process rewrote all ~300 test files again, half of its collection's 14 s.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache

.PHONY: .venv test test-slow test-celery screenshots demo up down bench-store bench-discovery bench-guards bench-metrics bench-page bench-healthy bench-backfill bench constraints requirements clean help

help:
	@echo "make demo             run the continuous_validation DAG once on a simulated cluster"
	@echo "make up               the product running locally with its UI (Airflow, Postgres, a changing cluster)"
	@echo "make down             stop everything make up started"
	@echo "make test             the test suite (real Postgres, Kubernetes API emulator, CPU suites)"
	@echo "make test-slow        the few end-to-end scenarios that take many minutes by nature"
	@echo "make test-celery      the DAG under CeleryExecutor, 2 workers + Redis, with a results-DB outage"
	@echo "make screenshots      the README's pictures (Graph view, fleet, node page) from the real UI"
	@echo "make bench-store      validation_latest at 10M and 30M history rows, at 5,000 and 10,000 nodes; naive query; retention"
	@echo "make bench-discovery  discovery at 150,000 and 300,000 pods: memory, time vs one raw list, XCom"
	@echo "make bench-guards     one validation's node re-checks at 5,000 nodes / 150,000 pods vs the old ones"
	@echo "make bench-metrics    Prometheus scrape at 5,000 and 10,000 nodes x 4 tests vs the library's encoder"
	@echo "make bench-page       fleet page at 5,000 and 10,000 nodes, uncached; a node page with a year of hours"
	@echo "make bench-healthy    every suite 20x in CPU mode on this machine: false-failure rate"
	@echo "make bench-backfill   the README's backfill recipe on a real Airflow scheduler: pairs per run"
	@echo "make .venv            build the virtual environment only"

.venv: $(STAMP)

$(STAMP): $(REQS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found %s)" % sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==0.13.8
	@# pip, not uv, for torch: pip takes a local CPU wheel where the machine has one (find-links);
	@# uv would download a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	@# The project itself, editable: `cluster-doctor`, `python -m cluster_doctor` and the Airflow
	@# plugin entry point work from the venv without PYTHONPATH.
	@# --compile-bytecode, into PYTHONPYCACHEPREFIX (above): uv writes no .pyc by default, and a process
	@# that imports Airflow would otherwise compile its ~4,000 modules first (about 6 s: a DagRun, a CLI call).
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -c constraints.txt \
		-e ".[airflow,embedded,dev,celery]" -r $(SUITES_REQS)
	@# The moved-clock test runs (tests/clock.py) move the clock of every Python program a test starts:
	@# this hook, inert unless TESTS_CLOCK_OFFSET_S is set, puts tests/clock_site (a sitecustomize) on its path.
	echo 'import os, sys; os.environ.get("TESTS_CLOCK_OFFSET_S") and sys.path.append("$(CURDIR)/tests/clock_site")' \
		> "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/cluster_doctor_tests_clock.pth"
	touch $(STAMP)

# Three workers, one test file each at a time: files share their module fixtures (the stack test's
# Airflow, an e2e module's emulator), and every test owns its database, ports and temp dirs. Three on a
# 2-core machine because most of a test's time is waiting on the servers, pods and DagRuns it started:
# two workers kept 1.1 of the 2 cores busy (12:30 for 2,218 tests on 2026-11-28, 14:02 before five
# scenarios moved to test-slow, against 13:03 with three). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 3
# tools/system-packages first: it installs fio, chromium, docker-compose and redis-server when this user
# may (root or passwordless sudo); otherwise the tests that need them say so in pytest's first and last lines.
test: $(STAMP)
	@bash tools/system-packages
	$(BIN)/python -m pytest -m "not slow" --durations=30 $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder) $(PYTEST_ARGS)

# Scenarios that take many minutes by nature (e.g. a results-DB outage through every retry of two
# DagRuns, end to end); their faster task-level counterparts run in `make test`.
test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

# The real DAG under a real CeleryExecutor (Redis, two workers) against the emulator: a results-DB
# outage makes worker A spool, worker B records. Several minutes; not part of `make test`. Its last
# line: `stranded <n>, recorded <rows> of <attempts>` (figures in docs/deployment.md, section 8).
test-celery: $(STAMP)
	@bash tools/system-packages
	$(BIN)/python tools/celery_run.py $(CELERY_ARGS)

# The README's pictures (docs/images/): the Graph view, the fleet page with the fault node gpu-004 failing
# and that node's page. The stack test's own tests of them on the make up stack, in headless Chromium, write
# the PNGs they check; the fleet ones wait for the stack's first run to reach gpu-004. A few minutes.
screenshots: $(STAMP)
	@bash tools/system-packages
	CLUSTER_DOCTOR_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/stack/test_stack.py \
		-k 'test_the_graph_view_draws_the_dag or test_the_fleet_page_shows_the_failing_node' $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python tools/demo.py

# In the background under $(STACK_DIR): STACK_PORT=8090 make up for another port; CLUSTER_DOCTOR_*
# settings in the environment reach the stack. `make down` needs no venv build: nothing runs without one.
STACK_DIR ?= .stack
STACK_PORT ?= 8080
up: $(STAMP)
	$(BIN)/python tools/stack.py up --state-dir $(STACK_DIR) --port $(STACK_PORT)

down:
	@$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) tools/stack.py down --state-dir $(STACK_DIR)

bench-store: $(STAMP)
	$(BIN)/python bench/bench_store.py

bench-discovery: $(STAMP)
	$(BIN)/python bench/bench_discovery.py

bench-guards: $(STAMP)
	$(BIN)/python bench/bench_guards.py

bench-metrics: $(STAMP)
	$(BIN)/python bench/bench_metrics.py

bench-page: $(STAMP)
	$(BIN)/python bench/bench_page.py

bench-healthy: $(STAMP)
	$(BIN)/python bench/bench_healthy.py

bench-backfill: $(STAMP)
	$(BIN)/python bench/bench_backfill.py

bench: bench-store bench-discovery

# Regenerate the full pin set after changing pyproject.toml's dependencies or the suites' requirements.
constraints: $(STAMP)
	{ echo "# Full transitive pin set for the venv (regenerate: make constraints). Applied as -c, so it only"; \
	  echo "# constrains what the requirement files ask for."; \
	  $(BIN)/uv pip compile --quiet --python-version 3.11 --no-header --annotation-style line \
		--all-extras pyproject.toml $(SUITES_REQS); } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	$(PYTHON) tools/requirements.py

# requirements.txt (the pinned runtime set of the Airflow image) from pyproject.toml + constraints.txt.
requirements:
	$(PYTHON) tools/requirements.py

clean: down
	rm -rf $(VENV) .pytest_cache .demo $(STACK_DIR)
