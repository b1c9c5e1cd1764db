# mrcnet: the two commands a newcomer needs are `make demo` and `make test`.
# The interpreter: the distribution's /usr/bin/python3 when it is 3.11 or newer, else
# python3 on PATH (`make PYTHON=...` picks another). Debian builds its python3 with PGO
# and LTO and links libpython into the binary: the same code runs ~20 % faster there than
# under a --enable-shared build without them, as pyenv's are (docs/DECISIONS.md, "The
# interpreter").
SYSTEM_PY := /usr/bin/python3
ifeq ($(origin PYTHON), undefined)
PYTHON := $(shell $(SYSTEM_PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	2>/dev/null && echo $(SYSTEM_PY) || echo python3)
endif
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo deps venv lint typecheck bench clean

# System packages (clang, iproute2, tshark...) are installed only when missing.
deps:
	@PYTHON=$(PYTHON) bash tools/install-deps.sh

$(STAMP): pyproject.toml setup.py cffi_build.py
	@$(MAKE) --no-print-directory deps PYTHON=$(PYTHON)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=77" wheel cffi
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
