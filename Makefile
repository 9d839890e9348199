# Two commands on a fresh machine:
#   make demo   set up (virtualenv, packages, the Ding corpus) and run the main job
#   make test   set up, lint, and run the test suite (TensorFlow, then the portable part on JAX)
# Also: make test-torch (the portable part on PyTorch), make bench, make results.
PYTHON ?= python3
VENV ?= .venv
VENV_JAX ?= .venv-jax
VENV_TORCH ?= .venv-torch
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
JAX_STAMP := $(VENV_JAX)/.installed-stamp
TORCH_STAMP := $(VENV_TORCH)/.installed-stamp
DING := /usr/share/trans/de-en
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export TF_CPP_MIN_LOG_LEVEL ?= 2

# What must hold on every backend: the shared layer harness, each family
# trained, decoding and saving, 0.1.0 files, and the docstring examples.
PORTABLE := tests/test_portability.py tests/test_compatibility.py tests/test_registry.py tests/test_layout.py \
	tests/test_score_attention.py tests/test_multi_head.py tests/test_positional.py \
	tests/test_transformer.py tests/test_convs2s.py tests/test_rnn.py tests/test_spatial.py \
	tests/test_cell.py
PORTABLE_ARGS := -q -n 2 -p no:cacheprovider -m "not tensorflow" -k "harness or portability or compatibility or registry or layout"
DOCTESTS := -q -p no:cacheprovider --doctest-modules keras_attention --ignore=keras_attention/serving

.PHONY: demo test test-torch lint bench results setup clean

setup: $(STAMP) $(DING)

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[recipes,dev]"
	touch $@

# A second virtualenv with Keras on JAX (CPU wheels) and no TensorFlow.
$(JAX_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV_JAX)
	$(VENV_JAX)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_JAX)/bin/python -m pip install --quiet -e ".[jax]" scipy "pytest>=8" "pytest-xdist>=3" h5py
	touch $@

# PyTorch: on machines whose pip finds the CPU wheel (torch==X+cpu) that one
# is taken; elsewhere PyPI's default Linux wheel pulls CUDA (several GB).
$(TORCH_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV_TORCH)
	$(VENV_TORCH)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TORCH)/bin/python -m pip install --quiet -e . torch scipy "pytest>=8" "pytest-xdist>=3" h5py
	touch $@

# The German-English sentences of the translation recipes (Debian package).
$(DING):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq trans-de-en

demo: $(STAMP) $(DING)
	$(VENV)/bin/keras-attention-translate demo --output runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint $(STAMP) $(JAX_STAMP) $(DING)
	$(PY) -m pytest -q -rs -n 2 tests
	KERAS_BACKEND=jax $(VENV_JAX)/bin/python -m pytest $(DOCTESTS)
	KERAS_BACKEND=jax $(VENV_JAX)/bin/python -m pytest $(PORTABLE_ARGS) $(PORTABLE)

test-torch: $(TORCH_STAMP)
	KERAS_BACKEND=torch $(VENV_TORCH)/bin/python -m pytest $(DOCTESTS)
	KERAS_BACKEND=torch $(VENV_TORCH)/bin/python -m pytest $(PORTABLE_ARGS) $(PORTABLE)

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/attention.py
	$(PY) bench/convs2s.py
	$(PY) bench/generation.py
	$(PY) bench/spatial.py

results: $(STAMP) $(DING)
	$(VENV)/bin/keras-attention-results

clean:
	rm -rf $(VENV) $(VENV_JAX) $(VENV_TORCH) *.egg-info .pytest_cache
