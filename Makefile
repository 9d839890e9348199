# Two commands on a fresh machine:
#   make demo   set up (virtualenv + install) and run the main job
#   make test   set up and run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test bench setup clean

setup: $(STAMP)

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[recipes,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m recipes.attention_demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/attention.py
	$(PY) bench/convs2s.py
	$(PY) bench/generation.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
