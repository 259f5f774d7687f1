# Two commands do everything on a fresh machine:
#   make check   - check every reference kernel on the default engine and write reports/
#   make test    - run the test suite (pytest -n auto)
PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install check test bench

install:
	@# a bare `torch` requirement can pull a multi-GB CUDA build: take the CPU 2.13.0 wheel first
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PIP) install -q torch==2.13.0
	@if $(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(PIP) install -q -e ".[test]"; \
	else \
		$(PIP) install -q -e ".[test,cpu]"; \
	fi

check: install
	$(PYTHON) -m graphsafe.cli check all --report-dir reports

test: install
	$(PYTHON) -m pytest -n auto -q

bench: install  # the measuring scripts, then the README's tables from their results
	$(PYTHON) benchmarks/throughput.py && $(PYTHON) benchmarks/detection.py && \
	$(PYTHON) benchmarks/engine_table.py && $(PYTHON) benchmarks/tables.py
