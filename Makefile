# Two commands do everything on a fresh machine:
#   make check   - check every reference kernel on the default engine and write reports/
#   make test    - run the test suite (pytest -n auto)
# and two for contributors:
#   make docs    - the site in docs/_build/html (warnings are errors)
#   make lint    - ruff check, ruff format --check and mypy, at the versions of pyproject.toml's lint extra
# Every target installs into a virtual environment inside the clone, .venv/ (git-ignored), made with
# $(BASE_PYTHON) on first use, so that the interpreter on PATH is never changed.  PYTHON=... names another
# interpreter to install into and run with instead (.ci/run passes its own environment's python this way).
BASE_PYTHON ?= python3
VENV ?= .venv
ifeq ($(origin PYTHON),undefined)
PYTHON := $(VENV)/bin/python
ENVIRONMENT := $(PYTHON)
else
ENVIRONMENT :=
endif
PIP := $(PYTHON) -m pip
TORCH ?= torch==2.13.0
# a pip constraints file for the install (.ci/run: .ci/constraints-lowest.txt, the lowest supported versions)
CONSTRAINTS ?=
PIN := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# PyTorch's own index of CPU-only wheels: a bare torch requirement from PyPI is the multi-GB CUDA build
CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: install torch check test bench lint docs

install: $(ENVIRONMENT)
	@$(PYTHON) -c "import torch" 2>/dev/null || $(MAKE) --no-print-directory torch
	@if $(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then \
		$(PIP) install -q $(PIN) -e ".[test]"; \
	else \
		$(PIP) install -q $(PIN) -e ".[test,cpu]"; \
	fi

$(VENV)/bin/python:  # the clone's own virtual environment (only when PYTHON is not given)
	@echo "graphsafe: making a virtual environment in $(VENV)/ with $(BASE_PYTHON) (PYTHON=... uses another interpreter)"
	@$(BASE_PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "graphsafe: '$(BASE_PYTHON) -m venv' failed: install Python's venv module (Debian, Ubuntu: the" \
		     "python3-venv package), or name an interpreter to install into with make PYTHON=..."; exit 1; }

torch:  # no torch yet: the CUDA build where an NVIDIA GPU answers, PyTorch's CPU wheels elsewhere
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "graphsafe: an NVIDIA GPU is present: installing $(TORCH) (the CUDA build)"; \
		$(PIP) install -q $(PIN) "$(TORCH)"; \
	else \
		echo "graphsafe: no NVIDIA GPU: installing $(TORCH) from PyTorch's CPU wheel index $(CPU_INDEX)"; \
		$(PIP) install -q $(PIN) "$(TORCH)" --index-url $(CPU_INDEX) --timeout 15 --retries 1 || { \
			echo "graphsafe: PyTorch's CPU wheel index could not be used; installing $(TORCH) from pip's" \
			     "configured index instead (without a CPU-only mirror that is the multi-GB CUDA build)"; \
			$(PIP) install -q $(PIN) "$(TORCH)"; }; \
	fi

check: install  # exit 0 when every reference variant gets exactly its expected verdict
	$(PYTHON) -m graphsafe check all --report-dir reports --seed 0 --expected

test: install
	$(PYTHON) -m pytest -n auto -q

lint: install  # each of the three runs; the target fails if any of them does
	$(PIP) install -q $(PIN) -e ".[lint]"
	@rc=0; \
	echo "lint: ruff check ."; $(PYTHON) -m ruff check . || rc=1; \
	echo "lint: ruff format --check ."; $(PYTHON) -m ruff format --check . || rc=1; \
	echo "lint: mypy (graphsafe/, configured in pyproject.toml)"; $(PYTHON) -m mypy || rc=1; \
	exit $$rc

bench: install  # the measuring scripts, then the tables of every result file (the docs' Benchmarks page)
	$(PYTHON) benchmarks/throughput.py && $(PYTHON) benchmarks/detection.py && \
	$(PYTHON) benchmarks/engine_table.py && $(PYTHON) benchmarks/tables.py

docs: install  # the documentation site, generated from the code and benchmarks/results at build time
	$(PIP) install -q $(PIN) -e ".[docs]"
	$(PYTHON) -m sphinx -W --keep-going -q -b html docs docs/_build/html
