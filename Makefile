# Every target sets up what it needs: a virtualenv in .venv with the package installed.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 3
export KERAS_BACKEND ?= tensorflow

.PHONY: demo test test-fast bench lint clean install reproduce reproduce-seeds

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

# Tests run in TEST_JOBS processes (pytest-xdist; default: the usable cores, at most 4), one test
# file per process at a time (--dist loadfile: a file's module fixtures are built once).
# TEST_JOBS=0 runs them in this process, one after another.
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)
PYTEST    := $(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile

test: $(STAMP)
	$(PYTEST) tests

test-fast: $(STAMP)
	$(PYTEST) -m "not slow" tests

demo: $(STAMP)
	$(PY) tools/demo.py

# Transformer-Tiny on Multi30k (Wu et al., ACL 2021): tools/reproduce_multi30k.sh; resumable
# (run it again after an interruption). RUN, MINUTES (whole-run training budget) and SET
# (space-separated overrides, e.g. SET="train.seed=2 data.seed=2") may be given; BASELINE=FILE
# (another system's test2016 output) adds a paired comparison with it to the report. CONFIG picks
# the preset (multi30k_tiny_fairseq: the same recipe with fairseq's initialisation and batching).
RUN     ?= runs/multi30k_tiny
MINUTES ?= 105
SET     ?=
CONFIG  ?= multi30k_tiny
reproduce: $(STAMP)
	PY=$(PY) MINUTES=$(MINUTES) CONFIG=$(CONFIG) tools/reproduce_multi30k.sh $(RUN) -- $(SET)

# The same on several seeds, one run after another (RUN-seedN, train.seed = data.seed = N),
# then tools/multi30k_summary.py over them: one run is one draw (runs on different seeds
# spread by about +-0.8 BLEU), a recipe is judged by the mean. Resumable like reproduce:
# finished runs are skipped, and the summary is written to RUN-seeds.md.
SEEDS ?= 1 2 3
reproduce-seeds: $(STAMP)
	@for s in $(SEEDS); do \
	  PY=$(PY) MINUTES=$(MINUTES) CONFIG=$(CONFIG) tools/reproduce_multi30k.sh $(RUN)-seed$$s -- train.seed=$$s data.seed=$$s $(SET) \
	    || exit $$?; \
	done
	$(PY) tools/multi30k_summary.py $(foreach s,$(SEEDS),$(RUN)-seed$(s)) --json $(RUN)-seeds.json > $(RUN)-seeds.md
	@cat $(RUN)-seeds.md

bench: $(STAMP)
	$(PY) tools/bench/train_throughput.py
	$(PY) tools/bench/input_pipeline.py
	$(PY) tools/bench/decode_throughput.py

lint: $(STAMP)
	$(VENV)/bin/ruff check tf_transformer tests tools
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) runs build *.egg-info .pytest_cache
