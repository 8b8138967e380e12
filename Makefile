# The two commands a newcomer needs: `make train` and `make test`. Both build .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=

.PHONY: help train test test-all compare prepare tensorboard benchmark lint clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# The venv is rebuilt when pyproject.toml is newer than it. torch is pinned in pyproject.toml
# (an unpinned torch would pull a multi-GB CUDA build on a CPU machine).
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

train: $(VENV)/.installed  ## train the default model (bahdanau, Ding de->en); ARGS="model=transformer ..."
	$(PY) -m seq2seq.train $(ARGS)

test: $(VENV)/.installed  ## the whole offline test suite (slow trainings excluded)
	$(PY) -m pytest -q -m "not slow" $(ARGS)

test-all: $(VENV)/.installed  ## every test, the slow ones too
	$(PY) -m pytest -q $(ARGS)

prepare: $(VENV)/.installed  ## build (or reuse) the corpus and tokenizer and print their statistics
	$(PY) -m seq2seq.prepare $(ARGS)

compare: $(VENV)/.installed  ## train every variant on the same budget; writes results/compare.md
	$(PY) -m seq2seq.compare $(ARGS)

tensorboard: $(VENV)/.installed  ## TensorBoard over all runs
	$(VENV)/bin/tensorboard --logdir runs $(ARGS)

benchmark: $(VENV)/.installed  ## training speed, decoding time and memory of each variant
	$(PY) scripts/benchmark.py $(ARGS)

lint: $(VENV)/.installed  ## ruff
	$(VENV)/bin/ruff check seq2seq tests scripts

clean:  ## remove runs, results of runs and caches (keeps data/ and .venv)
	rm -rf runs outputs multirun .pytest_cache .ruff_cache
