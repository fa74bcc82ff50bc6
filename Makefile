# rootgrep — `make run` serves the current directory, `make test` runs every test.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
ARGS   ?=
PORT   ?= 8765
SETUPTOOLS := $(shell grep -o 'setuptools==[0-9.]*' pyproject.toml | head -1)
PIP        := $(shell grep -o '"pip==[0-9.]*' pyproject.toml | head -1 | tr -d '"')
# the checkout is served unless ARGS names its own roots (`make run ARGS="--root X"`)
RUN_ROOT = $(if $(filter --root --root=%,$(ARGS)),,--root "$(CURDIR)")

.PHONY: install dist run test bench bench-growth bench-edits kill-loop lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/rootgrep
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) (set PYTHON=...)"; exit 2; }
	@# (the venv made without pip, and the pinned pip and build backend put in by the system's
	@# pip: ensurepip's older pip took 4 s to install and 8 s more to resolve; a pip that cannot
	@# `--python` (before 22.3), or an index without the pinned pip: the venv's own, as before.
	@# The backend first, so the editable install needs no isolated build environment: 8 s)
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install --quiet --disable-pip-version-check \
	    "$(PIP)" "$(SETUPTOOLS)" 2>/dev/null || { $(PYTHON) -m venv --clear $(VENV) && \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check "$(SETUPTOOLS)"; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e '.[dev]'
	@# (the checkout's bytecode, as pip writes a wheel's: a CLI run that may not write it,
	@# PYTHONDONTWRITEBYTECODE=1 or a read-only checkout, would compile every module each time)
	$(BIN)/python -m compileall -q src
	@touch $(STAMP)

# the sdist and the wheel (built from the sdist, which so holds all it needs) in dist/, offline:
# no build isolation, the backend is this venv's pinned setuptools; `pip install dist/*.whl`,
# `pipx install dist/*.whl` or `uv tool install dist/*.whl` then give a `rootgrep` command
dist: install
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .
	@rm -rf src/rootgrep.egg-info  # (the sdist step's, beside the package)

# exec: the server replaces the recipe's shell, so it is make's own child and the SIGTERM
# or SIGINT that stops make reaches it; --exit-with-parent: even a make killed by SIGKILL
# leaves no server holding the port
run: install
	exec $(BIN)/rootgrep serve --transport http --port $(PORT) --exit-with-parent $(RUN_ROOT) $(ARGS)

# JOBS test processes (pytest-xdist; JOBS=0 runs them all in this one): the suite waits on
# servers, subprocesses and the kernel about half of its time, so four share 2 cores well
# (measured on 2 cores, 2026-12-07, with --dist loadfile: -n 4 4m05 wall, -n 6 4m18: the CPU is
# what bounds it, about 7m50 of it)
JOBS ?= 4
# (bytecode written even where PYTHONDONTWRITEBYTECODE is set: each test process otherwise
# rewrites and compiles every test module's asserts again, 5 s of CPU each, every run)
# (--dist loadfile: a module's tests in one process, so a module's fixtures (a standard
# library index, ripgrep over 100k ignore rules, a built wheel) are made once, not once per
# process: 6m11 of user CPU, was 7m19)
# (and the test modules' asserts rewritten ahead, in two processes at once: on a fresh clone
# each test process would rewrite all of them itself, 4 x 5 s of CPU)
test: install
	@export PYTHONDONTWRITEBYTECODE=; \
	  $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider tests/e2e >/dev/null 2>&1 & \
	  $(BIN)/python -m pytest -q --collect-only -p no:cacheprovider --ignore=tests/e2e tests \
	    >/dev/null 2>&1; wait
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -x --timeout=300 -n $(JOBS) --dist loadfile tests

bench: install
	@mkdir -p .benchmarks
	$(BIN)/python -m pytest -q benchmarks --benchmark-enable --benchmark-only \
		--benchmark-columns=min,median,rounds --benchmark-sort=name \
		--benchmark-json=.benchmarks/latest.json
	$(BIN)/python benchmarks/report.py .benchmarks/latest.json
	$(BIN)/python benchmarks/index_peer.py
	$(BIN)/python benchmarks/cli_process.py
	$(BIN)/python benchmarks/reopen.py
	$(BIN)/python benchmarks/agent_tasks.py

# synthetic trees up to 500k files (tens of minutes, ~3 GB in TMPDIR while it runs); not part
# of `make bench`. ARGS passes options, e.g. `make bench-growth ARGS="--sizes 5000,20000"`
bench-growth: install
	@mkdir -p .benchmarks
	$(BIN)/python benchmarks/growth.py --out .benchmarks/growth.jsonl $(ARGS)

bench-edits: install
	@mkdir -p .benchmarks
	$(BIN)/python benchmarks/edit_cost.py --out .benchmarks/edit_cost.jsonl $(ARGS)

# SIGKILL an indexing process 100 times at build, fold, commit and state write; after each
# the index must open, re-sync and answer as a live scan (minutes). ARGS passes options,
# e.g. `make kill-loop ARGS="--kills 20 --files 300"`
kill-loop: install
	@mkdir -p .benchmarks
	$(BIN)/python benchmarks/kill_loop.py --json .benchmarks/kill_loop.json $(ARGS)

# 64 concurrent HTTP sessions x 100 mixed calls, twice, against one `rootgrep serve`: errors,
# p50/p99 latency, the server's RSS and fds (a few minutes on 2 cores; ARGS passes options,
# e.g. `make soak ARGS="--sessions 16 --rounds 3"`)
.PHONY: soak fuzz
soak: install
	$(BIN)/python benchmarks/soak.py $(ARGS)

# the property tests at benchmark length: tests/test_generated.py (over 100k examples; prints
# counts and times), the trigram plan's soundness and the word tokenizers
fuzz: install
	ROOTGREP_FUZZ=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider --timeout=3600 \
		tests/test_generated.py tests/test_plan.py tests/test_index_terms.py $(ARGS)

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: install
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info src/*.egg-info .pytest_cache .benchmarks
