# Every target sets up what it needs: a virtualenv in .venv with the package installed.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 3
export KERAS_BACKEND ?= tensorflow

.PHONY: demo test test-fast bench lint clean install

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" tests

demo: $(STAMP)
	$(PY) tools/demo.py

bench: $(STAMP)
	$(PY) tools/bench/train_throughput.py
	$(PY) tools/bench/input_pipeline.py
	$(PY) tools/bench/decode_throughput.py

lint: $(STAMP)
	$(VENV)/bin/ruff check tf_transformer tests tools
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) runs build *.egg-info .pytest_cache
