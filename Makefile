# The two commands a newcomer needs: `make train` and `make test`. Both build .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ARGS ?=
WHEEL_PYTHON ?=
EXTRAS ?= dev
EXCLUDE ?=
WHEELS ?=

.PHONY: help train corpus test test-slow test-all compare prepare explore tensorboard benchmark lint clean \
	wheelhouse install-offline rehearse-gpu-check

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# The venv is rebuilt when pyproject.toml is newer than it. torch is pinned in pyproject.toml
# (an unpinned torch would pull a multi-GB CUDA build on a CPU machine).
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,serve,sweep,explore]'
	$(PY) -m pip install --quiet -e '.[align]' || echo "eflomal could not be built: the attention alignment metric (AER) will be reported as unavailable"
	$(PY) -m pip install --quiet -e '.[ko]' || echo "mecab-ko could not be installed: Korean BLEU falls back from ko-mecab to 13a (and says so)"
	touch $@

train: $(VENV)/.installed  ## train the default model (bahdanau, Ding de->en); ARGS="model=transformer ..."
	$(PY) -m seq2seq.train $(ARGS)

# The tests check the real default corpus (the canonical Ding counts), so they build it first
# (fetched once; later runs reuse the caches in seconds), and SEQ2SEQ_REQUIRE_CORPUS=1 makes
# that test fail rather than skip without it.
corpus: $(VENV)/.installed  ## build (or reuse) the real default corpus and tokenizer
	$(PY) -m seq2seq.prepare

test: corpus  ## the fast tier of the offline test suite (builds the real corpus first)
	SEQ2SEQ_REQUIRE_CORPUS=1 $(PY) -m pytest -q -m "not slow" $(ARGS)

test-slow: corpus  ## the second tier: learning smoke tests, DDP, compare and benchmark end to end
	SEQ2SEQ_REQUIRE_CORPUS=1 $(PY) -m pytest -q -m slow $(ARGS)

test-all: corpus  ## both tiers
	SEQ2SEQ_REQUIRE_CORPUS=1 $(PY) -m pytest -q $(ARGS)

prepare: $(VENV)/.installed  ## build (or reuse) the corpus and tokenizer and print their statistics
	$(PY) -m seq2seq.prepare $(ARGS)

compare: $(VENV)/.installed  ## train every variant on the same budget; writes results/compare.md
	$(PY) -m seq2seq.compare $(ARGS)

explore: $(VENV)/.installed  ## the attention explorer on 127.0.0.1:8000; ARGS="ckpt=[A/checkpoints/best.pt,B/...]"
	$(PY) -m seq2seq.explore $(ARGS)

tensorboard: $(VENV)/.installed  ## TensorBoard over all runs
	$(VENV)/bin/tensorboard --logdir runs $(ARGS)

benchmark: $(VENV)/.installed  ## training speed, decoding time and memory of each variant
	$(PY) scripts/benchmark.py $(ARGS)

lint: $(VENV)/.installed  ## ruff
	$(VENV)/bin/ruff check seq2seq tests scripts

# For a machine with torch but no package registry (the lent H200): the wheels of everything but
# torch, built here; WHEEL_PYTHON=3.12 for another version, EXTRAS=sweep,serve,align for extras,
# EXCLUDE=scripts/preinstalled/h200.txt to also write the subset that machine lacks.
wheelhouse:  ## wheels of every dependency but torch: WHEEL_PYTHON=3.12 EXTRAS=dev EXCLUDE=file
	$(PYTHON) scripts/wheelhouse.py $(if $(WHEEL_PYTHON),--python $(WHEEL_PYTHON)) \
		--extras '$(EXTRAS)' $(if $(EXCLUDE),--exclude $(EXCLUDE)) \
		$(if $(FALLBACKS),--fallbacks $(FALLBACKS))

install-offline:  ## .venv on PYTHON's own torch from WHEELS (a wheelhouse), no registry
	scripts/install_offline.sh $(PYTHON) $(WHEELS)

rehearse-gpu-check: $(VENV)/.installed  ## the device check rehearsed here: no network, a stand-in torch, the CPU
	scripts/rehearse_gpu_check.sh $(ARGS)

clean:  ## remove runs, results of runs and caches (keeps data/ and .venv)
	rm -rf runs outputs multirun .pytest_cache .ruff_cache
