# Tome: `make run` starts everything embedded; `make test` runs lint and the whole test suite.
#
#   make run                        the embedded default (espeak): no torch, no neural engine, no dev tools
#   make run ENGINE=qwen3-tts       installs the engine's extra too and runs with it (fish-speech likewise)
#   make run PORT=9000              serves the API on another port (TOME_API_PORT)
#   make run PYTHON=python3.13      any Python 3.11-3.13; a .venv of another Python is rebuilt
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
ENGINE ?= $(or $(TOME_ENGINE),espeak)
PORT ?= $(or $(TOME_API_PORT),8000)
PY := $(VENV)/bin/python
comma := ,

PYTHON_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
ifeq ($(filter 3.11 3.12 3.13,$(PYTHON_VERSION))$(filter clean,$(MAKECMDGOALS)),)
$(error Tome needs Python 3.11, 3.12 or 3.13; PYTHON=$(PYTHON) is $(if $(PYTHON_VERSION),$(PYTHON_VERSION),not found or does not run). Name another: make run PYTHON=python3.12)
endif

# What each engine adds to the embedded base (pyproject.toml's extras).
ENGINE_EXTRAS_espeak :=
ENGINE_EXTRAS_qwen3-tts := qwen3
ENGINE_EXTRAS_fish-speech := fish
ifeq ($(origin ENGINE_EXTRAS_$(ENGINE)),undefined)
$(error ENGINE=$(ENGINE): espeak, qwen3-tts or fish-speech)
endif

# One stamp per Python version, pyproject.toml and extras set: `make run` (base) and `make test` (every extra)
# each know whether their own set is installed. A set's install also stamps the sets it contains.
HASH := $(shell cksum < pyproject.toml | cut -d' ' -f1)
stamp = $(VENV)/.installed-py$(PYTHON_VERSION)-$(HASH)-$(or $(1),base)
RUN_STAMP := $(call stamp,$(ENGINE_EXTRAS_$(ENGINE)))
ALL_STAMP := $(call stamp,all)

.PHONY: run test test-fast lint format bench chaos migrate clean

# $* names the extras set: base, qwen3, fish, or all (dev, qwen3 and fish: what the tests need).
$(VENV)/.installed-py$(PYTHON_VERSION)-$(HASH)-%: pyproject.toml
	@if [ -e $(PY) ] && [ "$$($(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" != "$(PYTHON_VERSION)" ]; then \
		echo "tome: $(VENV) was made by another Python than $(PYTHON) ($(PYTHON_VERSION)); rebuilding it"; \
		rm -rf $(VENV); \
	fi
	test -x $(PY) || $(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install -e '.$(if $(filter-out base,$*),[$(if $(filter all,$*),dev$(comma)qwen3$(comma)fish,$*)])'
	$(if $(filter all qwen3,$*),$(PY) -m pip install --no-deps 'qwen-tts==0.1.1')
	$(if $(filter all fish,$*),$(PY) -m pip install --no-deps 'fish-speech==0.1.0' 'descript-audio-codec==1.0.0' 'descript-audiotools==0.7.2')
	rm -f $(filter-out $(foreach s,base qwen3 fish all,$(call stamp,$(s))),$(wildcard $(VENV)/.installed-*))
	touch $(sort $@ $(call stamp,base) $(if $(filter all,$*),$(call stamp,qwen3) $(call stamp,fish)))

run: $(RUN_STAMP)
	TOME_ENGINE=$(ENGINE) TOME_API_PORT=$(PORT) $(PY) scripts/run_embedded.py

migrate: $(RUN_STAMP)
	$(PY) -m models.migrate

lint: $(ALL_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) scripts/check_layers.py

format: $(ALL_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# The suite in TEST_PROCESSES pytest-xdist processes (more than the cores: most tests wait on the worker,
# API and browser processes they start), each test file whole in one process (its module fixtures are
# built once); and the tests marked `serial`, whose claim compares the timings of their own processes, in
# a pytest of their own. scripts/run_tests.py runs lint, the parallel part and the serial part at once,
# lint and the parallel part at the idle CPU priority: they take only the CPU the serial tests leave.
TEST_PROCESSES ?= 4
PYTEST_PARALLEL = -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder
# Each part ends with its slowest tests (setup, call and teardown apart): where the suite's time goes.
PYTEST_DURATIONS = --durations=30
# The serial run collects only the test files that mark a test `serial` (found when make runs), not the
# whole suite again; PYTEST_ARGS (read from the environment by scripts/run_tests.py), when given,
# replaces them.
SERIAL_FILES = $(sort $(shell grep -rl --include='test_*.py' 'mark\.serial' tests))
export PYTEST_ARGS
# This make, for the lint run (named otherwise: make runs a recipe line that names $(MAKE) even under -n).
LINT_MAKE := $(MAKE)

# Python caches bytecode for the tests even where the environment says not to (PYTHONDONTWRITEBYTECODE):
# otherwise every worker, API and CLI process the suite starts compiles the project's modules again, and
# every pytest process rewrites every test module again (pytest keeps the rewritten ones as bytecode too).
# The caches are __pycache__ folders beside the sources, which git ignores.
test test-fast: export PYTHONDONTWRITEBYTECODE =

# One thread for each OpenMP and BLAS pool (torch, OpenBLAS) unless the environment names a count: the
# pytest processes and the workers they start already fill the cores, where a pool's extra threads only
# spin against the others (docs/benchmarks.md, "Imports on first use": Qwen3 tests took 2-3 times the CPU).
test test-fast: export OMP_NUM_THREADS ?= 1

test: $(ALL_STAMP)
	$(PY) scripts/run_tests.py --make="$(LINT_MAKE)" --parallel="$(PYTEST_PARALLEL) $(PYTEST_DURATIONS)" \
		--serial="$(PYTEST_DURATIONS)" $(SERIAL_FILES)

# The inner loop: lint, then the unit, API and cache tests (no worker processes, no chaos): minutes, not the whole suite.
test-fast: lint
	$(PY) -m pytest $(PYTEST_PARALLEL) tests/unit tests/api tests/cache tests/storage tests/test_migrations.py $(PYTEST_ARGS)

bench: $(ALL_STAMP)
	$(PY) -m bench

# The full reliability battery (scenario A: 200 jobs x 20 chunks under kills, restarts and a frozen worker
# on its own PostgreSQL and Redis; scenario B: the embedded stack under 20 concurrent jobs), then the fuzzers.
chaos: $(ALL_STAMP)
	$(PY) -m tests.chaos $(CHAOS_ARGS)
	$(PY) -m tests.chaos.fuzz

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
