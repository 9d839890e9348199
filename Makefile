# Two commands on a fresh machine:
#   make demo   set up (virtualenv, packages, the Ding corpus) and run the main job
#   make test   set up and run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DING := /usr/share/trans/de-en
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: demo test bench results setup clean

setup: $(STAMP) $(DING)

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[recipes,dev]"
	touch $(STAMP)

# The German-English sentences of the translation recipes (Debian package).
$(DING):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq trans-de-en

demo: $(STAMP) $(DING)
	$(PY) -m recipes.translate demo --output runs/demo

test: $(STAMP) $(DING)
	$(PY) -m pytest -q -n 2 tests

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/attention.py
	$(PY) bench/convs2s.py
	$(PY) bench/generation.py
	$(PY) bench/spatial.py

results: $(STAMP) $(DING)
	$(PY) -m recipes.results

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
