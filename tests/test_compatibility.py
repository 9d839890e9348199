"""Files written by keras_attention 0.1.0 (before the three-tier layout)
load and compute what they computed then (`tests/data/v0_1_0`, made by
`tests/data/make_v0_1_0_fixtures.py` at commit 88acf34)."""

import glob
import os
import warnings

import keras
import numpy as np
import pytest

import keras_attention  # noqa: F401  (registers the classes)

DATA = os.path.join(os.path.dirname(__file__), "data", "v0_1_0")
NAMES = sorted(
    os.path.basename(p)[: -len(".keras")] for p in glob.glob(os.path.join(DATA, "*.keras"))
)


def test_every_family_has_a_fixture():
    assert {
        "rnn_general",
        "rnn_local",
        "rnn_multihead",
        "rnn_none",
        "convs2s",
        "transformer",
        "general",
        "local",
        "multihead",
        "glu",
        "convs2s_encoder",
    } <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_0_1_0_file_loads_with_the_same_outputs(name):
    saved = np.load(os.path.join(DATA, f"{name}.npz"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # loading old names is quiet
        loaded = keras.saving.load_model(os.path.join(DATA, f"{name}.keras"))
    if "source" in saved:
        output = loaded((saved["source"], saved["target_in"]))
    else:
        inputs = [saved[key] for key in sorted(k for k in saved.files if k.startswith("arr_"))]
        output = loaded(*inputs)
        output = output[0] if isinstance(output, (tuple, list)) else output
    np.testing.assert_allclose(keras.ops.convert_to_numpy(output), saved["output"], atol=1e-5)
