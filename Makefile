# mrcnet: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo deps venv lint typecheck bench clean

# System packages (clang, iproute2, tshark...) are installed only when missing.
deps:
	@bash tools/install-deps.sh

$(STAMP): pyproject.toml setup.py cffi_build.py
	@$(MAKE) --no-print-directory deps
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=68" wheel cffi
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

# The whole suite, after ruff and mypy (the code standard is part of the test).
test: $(STAMP) lint
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check mrcnet tests tools cffi_build.py
	$(VENV)/bin/mypy mrcnet

# The full demo (needs root): a fabric with mrcd, a transfer through a link failure, then
# everything removed. Missing Debian packages are checked on every run (cheap).
demo: $(STAMP)
	@$(MAKE) --no-print-directory deps
	$(PY) -m mrcnet.demo $(DEMO_ARGS)

bench: $(STAMP)
	$(PY) tools/bench_wire.py

clean:
	rm -rf build dist *.egg-info mrcnet/_native*.so mrcnet/_native.c mrcnet/_fastpath*.so mrcnet/_fastpath.c
