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

# The tests in tiers (tests/conftest.py).  `make check` is the edit loop: the rule packs and the
# pure core (no daemon, sshd, receiver, browser or subprocess), about a minute.  `make test` is
# everything, in TEST_WORKERS processes: most integration tests wait on real processes and
# clocks, not on the CPU, so more workers than cores pays (measured in the README).  Tests
# marked `serial` hold a latency or CPU budget: they run alone, after the others.
TEST_WORKERS ?= 6

test: install
	scripts/test-deps.sh
	$(BIN)/logwatch rules check -q
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist worksteal -m "not serial"
	$(BIN)/python -m pytest -q -p no:cacheprovider -m serial

check: install
	$(BIN)/logwatch rules check -q
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not integration" -n 2

bench: install
	$(BIN)/python bench/run.py

demo: install
	$(BIN)/logwatch demo

clean:
	rm -rf $(VENV) .pytest_cache bench/out
