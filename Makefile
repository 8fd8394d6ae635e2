# The README's commands.  Python packages install into .venv; `make test` also installs the
# Debian packages the tests run for real (scripts/test-deps.sh: sshd, Prometheus,
# Alertmanager, Chromium) when they are missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: all install test bench demo check clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# .pyc for the package's own modules: an editable install has none, and where
# PYTHONDONTWRITEBYTECODE is set Python never writes them, so every start would compile all
# of logwatch again (~0.05 s of each `logwatch replay`); an installed wheel ships them.
# Incremental (only changed modules), so it runs at every `make install`.
install: $(STAMP)
	$(BIN)/python -m compileall -q logwatch

test: install
	scripts/test-deps.sh
	$(BIN)/logwatch rules check -q
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python bench/run.py

demo: install
	$(BIN)/logwatch demo

check: install
	$(BIN)/logwatch rules check

clean:
	rm -rf $(VENV) .pytest_cache bench/out
