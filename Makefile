# Cluster Doctor — developer entry points. The README's quick start is `make demo` and `make test`;
# both build and reuse the virtual environment in .venv themselves.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
REQS := requirements.txt requirements-dev.txt include/suites/requirements.txt constraints.txt
export PYTHONPATH := $(CURDIR)/plugins:$(CURDIR)/include:$(CURDIR)/tools
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: .venv test demo bench-store bench-discovery bench constraints clean help

help:
	@echo "make demo             run the continuous_validation DAG once on a simulated cluster"
	@echo "make test             the whole test suite (real Postgres, Kubernetes API emulator, CPU suites)"
	@echo "make bench-store      validation_latest view vs naive query on ~10M history rows"
	@echo "make bench-discovery  discovery + prioritization over 5,000 nodes / 150,000 pods"
	@echo "make .venv            build the virtual environment only"

.venv: $(STAMP)

$(STAMP): $(REQS)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (found %s)" % sys.version.split()[0])'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv==0.13.8
	@# pip, not uv, for torch: pip takes a local CPU wheel where the machine has one (find-links);
	@# uv would download a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt \
		-r requirements.txt -r requirements-dev.txt -r include/suites/requirements.txt
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/python tools/demo.py

bench-store: $(STAMP)
	$(BIN)/python bench/bench_store.py

bench-discovery: $(STAMP)
	$(BIN)/python bench/bench_discovery.py

bench: bench-store bench-discovery

# Regenerate the full pin set after changing a requirements file.
constraints: $(STAMP)
	{ echo "# Full transitive pin set for the venv (regenerate: make constraints). Applied as -c, so it only"; \
	  echo "# constrains what the requirement files ask for."; \
	  $(BIN)/uv pip compile --quiet --python-version 3.11 --no-header --annotation-style line \
		requirements.txt requirements-dev.txt include/suites/requirements.txt; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache .demo
