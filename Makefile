# Two commands on a fresh machine:
#   make demo   set up (virtualenv, packages, the Ding corpus) and run the main job
#   make test   set up, lint, build the docs strictly, and run the test suite (TensorFlow, then
#               the portable part on JAX), less the tests marked `large`
# make test-large runs those: a recipe's processes end to end, whole runs exported beyond the
#   shared one, the other cases of sweeps, the rest of the portable part on JAX (.ci/run runs it
#   after make test).
# make docs builds the documentation site (docs/, mkdocs.yml) into site/.
# Also: make test-torch (the portable part on PyTorch), make bench, make bench-decoding,
#   make bench-rnn, make bench-training, make results, make bottleneck (attention against the
#   fixed context, by source length), make serving-check (exports run by TF Serving's TensorFlow),
#   make serving-oplists, make translator (the best translator in an hour of CPU),
#   make distilled (the demo's model trained on the translator's translations),
#   make gpu-check (the recipe on the GPUs through JAX; make gpu-check-prepare first where the
#   GPU machine has no network: says so in one line where there is no GPU).
PYTHON ?= python3
VENV ?= .venv
VENV_JAX ?= .venv-jax
VENV_TORCH ?= .venv-torch
VENV_PEERS ?= .venv-bench-peers
VENV_TFA ?= .venv-bench-tfa
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
JAX_STAMP := $(VENV_JAX)/.installed-stamp
JAX_DEPENDENCIES_STAMP := $(VENV_JAX)/.dependencies-stamp
TORCH_STAMP := $(VENV_TORCH)/.installed-stamp
PEERS_STAMP := $(VENV_PEERS)/.installed-stamp
TFA_STAMP := $(VENV_TFA)/.installed-stamp
# torch==2.13.0 takes the CPU wheel that lies on these machines (2.13.0+cpu);
# elsewhere, PyPI's default Linux wheel is the CUDA build (several GB):
# make bench-decoding TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
TORCH_SPEC ?= torch==2.13.0
DING := /usr/share/trans/de-en
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export TF_CPP_MIN_LOG_LEVEL ?= 2

# What must hold on every backend: the shared layer harness, each family
# trained, decoding and saving, 0.1.0 files, the decoding options, and the
# docstring examples. `make test`'s JAX run takes PORTABLE_JAX_K of them (the
# docstring examples, every layer's harness, each family trained, generating
# and saved: test_portability.py, the translation recipe without TensorFlow:
# test_recipe_portability.py, and the registry and layout checks);
# `make test-large`'s JAX run takes the rest (the families' variants, 0.1.0
# and 0.2.0 files, the decoding options, the searches, quantization,
# ensembles, the fused attention path against the plain one, shortlists), so that
# .ci/run runs each JAX case once. make test-torch runs them all.
PORTABLE := tests/test_portability.py tests/test_compatibility.py tests/test_registry.py tests/test_layout.py \
	tests/test_recipe_portability.py \
	tests/test_python_tokenizers_portability.py tests/test_batches_portability.py tests/test_text_translator_portability.py \
	tests/test_score_attention.py tests/test_multi_head.py tests/test_attention_variants.py \
	tests/test_positional.py tests/test_transformer.py tests/test_convs2s.py tests/test_rnn.py \
	tests/test_spatial.py tests/test_cell.py tests/test_decoding_options.py tests/test_search.py \
	tests/test_quantization.py tests/test_ensemble.py tests/test_fused_attention.py tests/test_shortlist.py
PORTABLE_K := harness or portability or compatibility or registry or layout or decoding_options or search or quantization or ensemble or fused or shortlist
PORTABLE_JAX_K := harness or portability or registry or layout
PORTABLE_ARGS := -q -n 2 -p no:cacheprovider -m "not tensorflow" -k "$(PORTABLE_K)"
PORTABLE_JAX_ARGS := -q -n 2 -p no:cacheprovider -m "not tensorflow" -k "$(PORTABLE_JAX_K)"
PORTABLE_JAX_LARGE_ARGS := -q -n 2 -p no:cacheprovider -m "not tensorflow" \
	-k "($(PORTABLE_K)) and not ($(PORTABLE_JAX_K))"
# ... and the cases of PORTABLE_JAX_K marked large on JAX (test_portability.py's
# variants of each family).
PORTABLE_JAX_MARKED_LARGE_ARGS := -q -n 2 -p no:cacheprovider --run_large -m "large and not tensorflow" \
	-k "$(PORTABLE_JAX_K)"
# The JAX run compiles hundreds of tiny programs and runs each a few times,
# so the tests compile at XLA's backend optimisation level 0 (no
# vectorisation: results may differ in the last bits, within the tests'
# tolerances; bench/ and the recipes keep XLA's default), each worker's
# programs on one thread. `make test JAX_TEST_ENV=KERAS_BACKEND=jax` runs them
# at XLA's defaults.
JAX_TEST_ENV := KERAS_BACKEND=jax \
	XLA_FLAGS="$${XLA_FLAGS:-} --xla_backend_optimization_level=0 --xla_cpu_multi_thread_eigen=false"
# XLA's persistent compilation cache, kept in the JAX virtualenv (the run
# writes about 30 MB; `make clean` deletes it): the tests build many small
# models whose programs are the same under new jitted functions, so one run
# reuses what it compiled, and a later `make test` reuses the whole cache.
# Keyed by the program, the JAX version and the machine. (A size limit would
# need the `filelock` package.)
JAX_CACHE_ENV := JAX_COMPILATION_CACHE_DIR=$(abspath $(VENV_JAX))/xla-cache \
	JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1
DOCTESTS := -q -n 2 -p no:cacheprovider --doctest-modules keras_attention --ignore=keras_attention/serving \
	--ignore=keras_attention/tokenizers

.PHONY: setup-both setup-jax gpu-check gpu-check-prepare translator distilled demo docs test test-large test-torch lint bench bench-decoding bench-rnn bench-training results bottleneck setup clean serving-check serving-oplists serving-venv

setup: $(STAMP) $(DING)

# setuptools notes every editable install of a mapped package folder
# (recipes/ installs as keras_attention_recipes) with a boxed "Editable
# installation" notice; that notice alone is silenced.
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(EDITABLE) $(PY) -m pip install --quiet -e ".[recipes,dev,docs]"
	touch $@

# A second virtualenv with Keras on JAX (CPU wheels) and no TensorFlow. First
# its packages: the library's dependencies and its `jax` extra (read from
# pyproject.toml), its `tokenizers` extra (sentencepiece, for the tokenizers'
# Python twins) and the test runner's. They install while the TensorFlow
# virtualenv does (`make test`, `setup-both`). The library's editable install
# follows once that virtualenv's is done: both write keras_attention.egg-info
# into this folder.
JAX_REQUIREMENTS := import tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	extras = project["optional-dependencies"]; \
	print(*project["dependencies"], *extras["recipes-jax"], sep="\n")
$(JAX_DEPENDENCIES_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV_JAX)
	$(VENV_JAX)/bin/python -m pip install --quiet --upgrade pip
	$(PYTHON) -c '$(JAX_REQUIREMENTS)' > $(VENV_JAX)/requirements.txt
	$(VENV_JAX)/bin/python -m pip install --quiet -r $(VENV_JAX)/requirements.txt \
		scipy "pytest>=8" "pytest-xdist>=3" h5py
	touch $@

$(JAX_STAMP): $(JAX_DEPENDENCIES_STAMP) $(STAMP) setup.py
	$(EDITABLE) $(VENV_JAX)/bin/python -m pip install --quiet --no-deps -e .
	touch $@

# The JAX virtualenv alone: the package and its `recipes-jax` extra, no
# TensorFlow (`.venv-jax/bin/keras-attention-translate translate ...`).
setup-jax: $(JAX_STAMP)

# Both virtualenvs' packages at once (two pip processes).
setup-both:
	$(MAKE) -j2 $(STAMP) $(JAX_DEPENDENCIES_STAMP)

# PyTorch: $(TORCH_SPEC), the CPU wheel on these machines (see above);
# elsewhere pass TORCH_SPEC, since PyPI's default Linux wheel pulls CUDA.
# The recipes' packages there: the `recipes-jax` extra's, less JAX.
TORCH_RECIPES := import tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
	print(*[r for r in extras["optional-dependencies"]["recipes-jax"] if not r.startswith("jax")])
$(TORCH_STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV_TORCH)
	$(VENV_TORCH)/bin/python -m pip install --quiet --upgrade pip
	$(EDITABLE) $(VENV_TORCH)/bin/python -m pip install --quiet -e . "$(TORCH_SPEC)" scipy "pytest>=8" "pytest-xdist>=3" h5py \
		$$($(PYTHON) -c '$(TORCH_RECIPES)')
	touch $@

# The German-English sentences of the translation recipes (Debian package).
$(DING):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq trans-de-en

# DEMO_FLAGS: the demo's flags on top of its defaults, e.g. DEMO_FLAGS=--overwrite to
# retrain a runs/demo that an earlier version trained with other settings (refused).
DEMO_FLAGS ?=
demo: $(STAMP) $(DING)
	$(VENV)/bin/keras-attention-translate demo --output runs/demo $(DEMO_FLAGS)

# The best translator the recipe trains in an hour on a 2-core CPU: an
# ensemble of four models of the demo's size (`train --members 4`, two to a
# core, seeds 0-3), each at most 12 epochs within 45 minutes, the mean of
# its last 3; then the ensemble on the test split, its export (all four in
# one SavedModel), and the hand-written everyday set through that export.
# On a slower CPU the time budget ends the members after fewer epochs.
# TRANSLATOR_WIDE_FLAGS with TRANSLATOR_MEMBERS=1 trains a single 256-wide
# ConvS2S instead. The demo's data and vocabularies, so `--ensemble
# runs/demo` works with it too. Scores: RESULTS.md.
TRANSLATOR := runs/translator
TRANSLATOR_MEMBERS := 4
TRANSLATOR_FLAGS := --family convs2s --embed-dim 128 --hidden-dim 128 --num-layers 2 --dropout 0.1 \
	--vocab-size 4000 --batch-tokens 1536 --dictionary 0.5 --warmup 400 --learning-rate 5e-3 \
	--average-last 3 --alpha 1.2 --epochs 12 --time-budget 45
TRANSLATOR_WIDE_FLAGS := --family convs2s --embed-dim 256 --hidden-dim 256 --num-layers 2 --dropout 0.2 \
	--vocab-size 4000 --batch-tokens 1536 --dictionary 0.5 --warmup 400 --learning-rate 2e-3 \
	--average-last 5 --alpha 1.2 --epochs 200 --time-budget 50 --bleu-every 2
TRANSLATOR_OTHERS = $(foreach k,$(shell seq 2 $(TRANSLATOR_MEMBERS)),$(TRANSLATOR)/members/$(k))
TRANSLATOR_ENSEMBLE = $(if $(TRANSLATOR_OTHERS),--ensemble $(TRANSLATOR_OTHERS))
# Sets the shell's $$trained to yes when every member has finished training.
TRANSLATOR_TRAINED = trained=yes; for run in $(TRANSLATOR) $(TRANSLATOR_OTHERS); do \
	if [ ! -f $$run/model.keras ] || [ -d $$run/backup ]; then trained=no; fi; done
translator: $(STAMP) $(DING)
	@$(TRANSLATOR_TRAINED); \
	if [ $$trained = yes ]; then \
		echo "$(TRANSLATOR) holds a trained translator: evaluating it (delete the folder to retrain)"; \
	else $(VENV)/bin/keras-attention-translate train --output $(TRANSLATOR) $(TRANSLATOR_FLAGS) \
		--members $(TRANSLATOR_MEMBERS); fi
	$(VENV)/bin/keras-attention-translate evaluate --output $(TRANSLATOR) $(TRANSLATOR_ENSEMBLE)
	$(VENV)/bin/keras-attention-translate export --output $(TRANSLATOR) --model-name translator-full \
		$(TRANSLATOR_ENSEMBLE)
	$(PY) bench/export_scores.py --export saved_models/translator-full/$$(ls saved_models/translator-full | sort -n | tail -1) \
		recipes/translation/testsets/everyday.tsv $(TRANSLATOR)/data/test.tsv

# The demo's model trained on the translator's translations of the training
# split instead of its references (`--distill-from`, sequence-level
# distillation; the members' ensemble translates):
# the demo's size and decoding speed, nearer the translator's scores. Trains
# the translator first when any of its members has not finished. Scores:
# RESULTS.md.
DISTILLED := runs/distilled
distilled: $(STAMP) $(DING)
	@$(TRANSLATOR_TRAINED); if [ $$trained = no ]; then $(MAKE) --no-print-directory translator; fi
	$(VENV)/bin/keras-attention-translate demo --output $(DISTILLED) \
		--distill-from $(TRANSLATOR) $(TRANSLATOR_OTHERS)

# The recipe on a machine's NVIDIA GPUs through Keras's JAX backend, no
# TensorFlow there (recipes/gpu_check.py): the demo's model trained for a
# few minutes on every GPU, scored on the Ding test split, a KerasTuner
# search of two trials (a worker per GPU), in one screen of times, target
# pieces per second and BLEU. Without a GPU: one line, exit 0, nothing
# installed. A GPU machine without network or the corpus takes what
# `make gpu-check-prepare` writes here: the run's data (GPU_CHECK) and the
# wheels of the packages its Python lacks (GPU_WHEELS: Keras, KerasTuner
# and theirs, at this virtualenv's versions, for GPU_PYTHON_VERSION).
# Export the trained run here afterwards:
#   keras-attention-translate export --output runs/gpu-check/train
GPU_CHECK := runs/gpu-check
GPU_WHEELS := .gpu-wheels
GPU_PYTHON ?= python3
GPU_PYTHON_VERSION ?= 3.12
GPU_SITE := $(CURDIR)/.gpu-site
GPU_PACKAGES := keras keras-tuner kt-legacy namex optree six
gpu-check-prepare: $(STAMP) $(DING) $(JAX_DEPENDENCIES_STAMP)
	$(PY) -m recipes.gpu_check --prepare --output $(GPU_CHECK)
	$(PY) -m pip download --quiet --no-deps --only-binary=:all: --dest $(GPU_WHEELS) \
		--python-version $(GPU_PYTHON_VERSION) --implementation cp --platform manylinux_2_28_x86_64 \
		--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		$$(for name in $(GPU_PACKAGES); do echo "$$name==$$($(VENV_JAX)/bin/python -c \
			"import importlib.metadata as m; print(m.version('$$name'))")"; done)
	@echo "gpu-check: carry $(GPU_CHECK) and $(GPU_WHEELS) with the working tree; there: make gpu-check"

gpu-check:
	@if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then \
		echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check"; \
	else \
		if ! $(GPU_PYTHON) -c "import keras, keras_tuner" 2>/dev/null; then \
			if [ -d $(GPU_WHEELS) ]; then \
				$(GPU_PYTHON) -m pip install --quiet --no-index --no-deps --target $(GPU_SITE) $(GPU_WHEELS)/*.whl; \
			else $(GPU_PYTHON) -m pip install --quiet --no-deps --target $(GPU_SITE) $(GPU_PACKAGES); fi \
		fi && \
		PYTHONPATH=$(GPU_SITE):$(CURDIR) KERAS_BACKEND=jax $(GPU_PYTHON) -m recipes.gpu_check --output $(GPU_CHECK); \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The two virtualenvs' packages install at once (`setup-both`), the library's
# editable installs one after the other. `--dist loadfile` runs each
# test file on one worker, so a file's module fixtures (tiny translators and
# their exports) are built once.
test: setup-both lint $(STAMP) $(JAX_STAMP) $(DING)
	site=$$(mktemp -d) && NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $$site; \
		status=$$?; rm -rf $$site; exit $$status
	$(PY) -m pytest -q -rs -n 2 --dist loadfile --durations=10 tests
	$(JAX_TEST_ENV) $(JAX_CACHE_ENV) $(VENV_JAX)/bin/python -m pytest $(DOCTESTS)
	$(JAX_TEST_ENV) $(JAX_CACHE_ENV) $(VENV_JAX)/bin/python -m pytest $(PORTABLE_JAX_ARGS) $(PORTABLE)

# The tests marked `large` (tests/conftest.py): several TensorFlow processes at
# once (distributed training and tuning, ensemble members, replicas), signals to
# running processes, the translation recipe's KerasTuner searches, the
# benchmarks' smoke runs, whole runs trained and exported beyond the shared one,
# and the other cases of sweeps that `make test` checks with one case; then the
# portable tests on JAX that `make test` leaves out (PORTABLE_JAX_K above).
# `make test` skips them; CI runs both.
test-large: $(STAMP) $(JAX_STAMP) $(DING)
	$(PY) -m pytest -q -rs -n 2 --durations=5 --run_large -m large tests
	$(JAX_TEST_ENV) $(JAX_CACHE_ENV) $(VENV_JAX)/bin/python -m pytest $(PORTABLE_JAX_LARGE_ARGS) $(PORTABLE)
	$(JAX_TEST_ENV) $(JAX_CACHE_ENV) $(VENV_JAX)/bin/python -m pytest $(PORTABLE_JAX_MARKED_LARGE_ARGS) $(PORTABLE)

# The documentation site, into site/ (not committed). MathJax, which renders
# the equations, comes from the npm package (npm pack, not committed); without
# npm the site still builds and the equations show as TeX source.
MATHJAX_VERSION := 3.2.2
MATHJAX := docs/javascripts/vendor/mathjax/tex-svg.js
$(MATHJAX):
	@tmp=$$(mktemp -d); \
	if command -v npm >/dev/null && (cd $$tmp && npm pack --silent mathjax@$(MATHJAX_VERSION) >/dev/null) \
		&& tar -xzf $$tmp/mathjax-$(MATHJAX_VERSION).tgz -C $$tmp; then \
		mkdir -p $(@D) && cp $$tmp/package/es5/tex-svg.js $$tmp/package/LICENSE $(@D)/; \
	else echo "no MathJax (npm pack mathjax@$(MATHJAX_VERSION) failed): equations show as TeX source"; fi; \
	rm -rf $$tmp

docs: $(STAMP) $(MATHJAX)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

test-torch: $(TORCH_STAMP)
	KERAS_BACKEND=torch $(VENV_TORCH)/bin/python -m pytest $(DOCTESTS)
	KERAS_BACKEND=torch KERAS_ATTENTION_EVERY_CASE=1 $(VENV_TORCH)/bin/python -m pytest $(PORTABLE_ARGS) $(PORTABLE)

bench: $(STAMP)
	$(EDITABLE) $(PY) -m pip install --quiet -e ".[bench]"
	$(PY) bench/attention.py
	$(PY) bench/convs2s.py
	$(PY) bench/generation.py
	$(PY) bench/spatial.py

# The runtime of a TF Serving release, in its own virtualenv: TF Serving
# 2.20.0 bundles TensorFlow 2.20 and TF Text 2.20. Another release:
#   make serving-check VENV_SERVING=.venv-serving-2.19 SERVING_TF=2.19.* SERVING_TEXT=2.19.*
VENV_SERVING ?= .venv-serving
SERVING_TF ?= 2.20.*
SERVING_TEXT ?= 2.20.*

$(VENV_SERVING)/.installed-stamp:
	$(PYTHON) -m venv $(VENV_SERVING)
	$(VENV_SERVING)/bin/python -m pip install --quiet "tensorflow==$(SERVING_TF)" "tensorflow-text==$(SERVING_TEXT)"
	touch $@

# TensorFlow 2.17 alone: TF Text 2.17 is not what TF Serving 2.17.1 bundles.
.venv-serving-2.17/.installed-stamp:
	$(PYTHON) -m venv .venv-serving-2.17
	.venv-serving-2.17/bin/python -m pip install --quiet "tensorflow==2.17.*"
	touch $@

serving-venv: $(VENV_SERVING)/.installed-stamp

# Trains and exports every kind (tiny; float32, int8, XLA, XLA int8), then
# runs every signature in both TensorFlows and compares the outputs, and each
# XLA export against its plain twin there: the tiny runs on their requests,
# runs/demo (when make demo has written it) on the whole Ding test split
# (tests/serving_runtime.py). SERVING_TRAINED="runs/demo runs/other" names
# the trained runs instead.
SERVING_TRAINED ?=
serving-check: $(STAMP) $(DING) $(VENV_SERVING)/.installed-stamp
	$(PY) tests/serving_runtime.py --runtime $(VENV_SERVING)/bin/python \
		$(if $(strip $(SERVING_TRAINED)),--trained $(SERVING_TRAINED))

# The committed op lists (keras_attention/serving/oplists/). TF Serving
# 2.17.1-2.19.1 bundle TF Text 2.12.1, which installs only beside TensorFlow
# 2.12 (Python <= 3.11): its ops come from a third virtualenv.
serving-oplists: $(STAMP)
	$(MAKE) serving-venv VENV_SERVING=.venv-serving SERVING_TF=2.20.* SERVING_TEXT=2.20.*
	$(MAKE) serving-venv VENV_SERVING=.venv-serving-2.19 SERVING_TF=2.19.* SERVING_TEXT=2.19.*
	$(MAKE) serving-venv VENV_SERVING=.venv-serving-tf2.12 SERVING_TF=2.12.* SERVING_TEXT=2.12.1
	$(MAKE) .venv-serving-2.17/.installed-stamp
	$(PY) keras_attention/serving/oplists/generate.py --serving 2.20 --core .venv-serving/bin/python
	$(PY) keras_attention/serving/oplists/generate.py --serving 2.19 --servers 2.19.0-2.19.1 \
		--core .venv-serving-2.19/bin/python --text .venv-serving-tf2.12/bin/python
	$(PY) keras_attention/serving/oplists/generate.py --serving 2.17 --servers 2.17.1 \
		--core .venv-serving-2.17/bin/python --text .venv-serving-tf2.12/bin/python

# The peers of bench/decoding.py (Hugging Face transformers on PyTorch CPU,
# CTranslate2) in their own virtualenv, run by the benchmark in a subprocess.
$(PEERS_STAMP): Makefile
	$(PYTHON) -m venv $(VENV_PEERS)
	$(VENV_PEERS)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_PEERS)/bin/python -m pip install --quiet $(TORCH_SPEC)
	$(VENV_PEERS)/bin/python -m pip install --quiet transformers ctranslate2
	touch $@

bench-decoding: $(STAMP) $(PEERS_STAMP)
	$(PY) bench/decoding.py --peers-python $(VENV_PEERS)/bin/python --profile

# The peer of bench/rnn.py: tensorflow-addons' last release, 0.23.0, beside
# TensorFlow 2.15.1 (Keras 2), whose wheels stop at Python 3.11.
PYTHON_TFA ?= python3.11
$(TFA_STAMP): Makefile
	$(PYTHON_TFA) -m venv $(VENV_TFA)
	$(VENV_TFA)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TFA)/bin/python -m pip install --quiet tensorflow==2.15.1 tensorflow-addons==0.23.0
	touch $@

bench-rnn: $(STAMP) $(TFA_STAMP)
	$(PY) bench/rnn.py --tfa-python $(VENV_TFA)/bin/python --repeats 7 --profile

# Training throughput of the translation models on the Ding corpus: 0.2.0's
# padded batches against length buckets, float32 / mixed bfloat16 / XLA.
bench-training: $(STAMP) $(DING)
	$(PY) bench/training.py

# RESULTS.md's table: every family at 12 epochs of the demo's data settings,
# one model after another.
RESULTS_FLAGS ?= --vocab-size 4000 --batch-tokens 1536 --dictionary 0.5 --warmup 400 --learning-rate 3e-3 --average-last 3
results: $(STAMP) $(DING)
	$(VENV)/bin/keras-attention-results --epochs 12 --hidden-dim 128 --embed-dim 128 \
		--flags="$(RESULTS_FLAGS)" --plot docs/ding_by_length.png \
		--only "no attention" "general attention" convs2s transformer

# The seeds' thesis measured: the RNN without attention, with each attention,
# ConvS2S and the Transformer at one budget, accuracy by source length
# (recipes/bottleneck.py; runs/bottleneck/: results.json, table.md, bottleneck.png).
bottleneck: $(STAMP)
	$(PY) -m recipes.bottleneck --output runs/bottleneck

clean:
	rm -rf $(VENV) $(VENV_JAX) $(VENV_TORCH) $(VENV_PEERS) $(VENV_TFA) .venv-serving* *.egg-info .pytest_cache \
		site docs/javascripts/vendor
