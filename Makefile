# fcompile: `make demo` and `make test` are all a newcomer needs (see README.md).
#
#   make venv    .venv with the CPU build of torch, Triton, the package (editable) and a Jupyter kernel
#   make demo    executes notebooks/00_tour.ipynb headlessly -> build/tour.html, prints the summary
#   make test    the CPU test suite (what CI runs); GPU tests skip themselves without CUDA. It includes
#                the browser test: %%fcompile and the tour in a real JupyterLab driven by headless
#                Chromium (as root, installs Debian's chromium; elsewhere the test skips without it)
#   make test-e2e  the browser test alone
#   make lab     JupyterLab on the tour notebook
#   make bench   eager vs Inductor vs ours -> benchmarks/results-<device>-<date>.json
#   make clean   removes build outputs and caches (not .venv; `make distclean` removes that too)

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fcompile-installed
# CPU machines take the CPU wheel of torch (an unpinned torch pulls a multi-GB CUDA build) and the
# Triton whose interpreter works with numpy >= 2.4. On a CUDA machine the torch already installed
# system-wide is used instead (the venv sees system site-packages there). Override with TORCH_PINS=.
TORCH_PINS ?= torch==2.13.0 triton==3.9.0
HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
DEVICE ?= $(if $(HAVE_GPU),cuda,cpu)

.PHONY: venv chromium demo test test-e2e lab bench lint clean distclean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if command -v dot >/dev/null 2>&1 && command -v g++ >/dev/null 2>&1; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian packages graphviz g++"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends graphviz g++ >/dev/null; \
	else \
	  echo "warning: install graphviz (the 'dot' program) and g++ yourself; graph rendering and the C++ backend need them" >&2; \
	fi
	@test -x $(PY) || $(PYTHON) -m venv $(if $(HAVE_GPU),--system-site-packages) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(HAVE_GPU)" ] && $(PY) -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then \
	  echo "CUDA torch found: keeping it"; \
	elif [ -n "$(TORCH_PINS)" ]; then \
	  echo "$(PY) -m pip install -q $(TORCH_PINS)"; $(PY) -m pip install -q $(TORCH_PINS); \
	fi
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $(STAMP)

demo: venv
	$(PY) -m explorer tour --out build/tour.html

# Debian's chromium for the browser test (tests/test_e2e_lab.py; the playwright package that drives it
# is in the dev extras). As root with apt-get a failed install stops make; elsewhere the test skips and
# says why.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing Debian packages chromium fonts-liberation (for the browser test)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium fonts-liberation >/dev/null; \
	else \
	  echo "warning: install Debian's chromium yourself; the browser test (tests/test_e2e_lab.py) skips without it" >&2; \
	fi

# Two pytest-xdist processes (tests/conftest.py: the OpInfo sweeps run beside them); TEST_WORKERS=0 for one.
TEST_WORKERS ?= 2

test: venv chromium
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist load --durations=15 --junitxml=build/test-times.xml

test-e2e: venv chromium
	$(PY) -m pytest -q tests/test_e2e_lab.py

lab: venv
	$(VENV)/bin/jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks/00_tour.ipynb

bench: venv
	$(PY) -m compiler_core.bench --device $(DEVICE) --json benchmarks/results-$(DEVICE)-$$(date +%F).json

lint: venv
	$(VENV)/bin/ruff check compiler_core explorer tests

clean:
	rm -rf build .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
