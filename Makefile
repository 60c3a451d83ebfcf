# Tome: `make run` starts everything embedded; `make test` runs lint and the whole test suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test test-fast lint format bench chaos migrate clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,qwen3,fish]'
	$(PY) -m pip install --quiet --no-deps 'qwen-tts==0.1.1'
	$(PY) -m pip install --quiet --no-deps 'fish-speech==0.1.0' 'descript-audio-codec==1.0.0' 'descript-audiotools==0.7.2'
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(PY) scripts/run_embedded.py

migrate: $(STAMP)
	$(PY) -m models.migrate

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: lint
	$(PY) -m pytest $(PYTEST_ARGS)

# The inner loop: lint, then the unit, API and cache tests (no worker processes, no chaos): minutes, not the whole suite.
test-fast: lint
	$(PY) -m pytest tests/unit tests/api tests/cache tests/storage tests/test_migrations.py $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) -m bench

# The full reliability battery (scenario A: 200 jobs x 20 chunks under kills, restarts and a frozen worker
# on its own PostgreSQL and Redis; scenario B: the embedded stack under 20 concurrent jobs), then the fuzzers.
chaos: $(STAMP)
	$(PY) -m tests.chaos $(CHAOS_ARGS)
	$(PY) -m tests.chaos.fuzz

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
