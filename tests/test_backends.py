"""A `.keras` file saved on TensorFlow loads on JAX with the same outputs
(a layer of each family and a small TransformerSeq2Seq). The JAX side runs
in the JAX virtualenv `make test` builds (`.venv-jax`, or the interpreter in
$KERAS_ATTENTION_JAX_PYTHON); without one the test skips and says so."""

import json
import os
import subprocess

import keras
import numpy as np
import pytest

import keras_attention as ka

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAX_PYTHON = os.environ.get(
    "KERAS_ATTENTION_JAX_PYTHON", os.path.join(ROOT, ".venv-jax", "bin", "python")
)

LOADER = """
import json, sys
import keras, numpy as np
import keras_attention  # registers the classes
assert keras.backend.backend() == "jax"
worst = {}
for case in json.load(open(sys.argv[1])):
    data = np.load(case["npz"])
    model = keras.saving.load_model(case["keras"])
    inputs = [data[f"input_{i}"] for i in range(case["inputs"])]
    output = model(tuple(inputs)) if case["tuple"] else model(*inputs)
    output = output[0] if isinstance(output, (tuple, list)) else output
    worst[case["name"]] = float(np.abs(keras.ops.convert_to_numpy(output) - data["output"]).max())
print(json.dumps(worst))
"""


def cases(rng):
    q, v = (
        rng.normal(size=(2, 3, 6)).astype("float32"),
        rng.normal(size=(2, 5, 6)).astype("float32"),
    )
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    source = np.array([[3, 4, 5, 6, 0], [7, 8, 9, 0, 0]], "int32")
    target_in = np.array([[1, 5, 6, 7], [1, 8, 9, 0]], "int32")
    return {
        "additive": (ka.AdditiveAttention(), (q, v), False),
        "local": (
            ka.LocalAttention(ka.GeneralAttention(), window=2, mode="predictive"),
            (q, v),
            False,
        ),
        "multihead": (ka.MultiHead(2), (q, v), False),
        "glu": (ka.GLUConv1D(8, 3, causal=True), (x,), False),
        "transformer_encoder": (ka.TransformerEncoderLayer(2, 16), (x,), False),
        "token_and_position": (ka.TokenAndPositionEmbedding(20, 8, 16), (source,), False),
        "recurrent_encoder": (ka.RecurrentEncoder(20, 4, 6), (source,), False),
        "transformer_seq2seq": (
            ka.TransformerSeq2Seq(20, 21, 8, 2, 16, 1, max_length=8),
            (source, target_in),
            True,
        ),
    }


@pytest.mark.large(
    reason=(
        "a JAX process beside TensorFlow's; `make test`'s JAX run loads the 0.1.0 and "
        "0.2.0 files saved on TensorFlow (test_compatibility.py)"
    )
)
@pytest.mark.tensorflow
def test_keras_files_saved_on_tensorflow_load_on_jax(tmp_path, rng):
    assert keras.backend.backend() == "tensorflow"
    if not os.path.exists(JAX_PYTHON):
        pytest.skip(f"no JAX interpreter at {JAX_PYTHON} (make test builds .venv-jax)")
    manifest = []
    for name, (layer, inputs, as_tuple) in cases(rng).items():
        output = layer(tuple(inputs)) if as_tuple else layer(*inputs)
        output = output[0] if isinstance(output, (tuple, list)) else output
        path = str(tmp_path / f"{name}.keras")
        keras.saving.save_model(layer, path)
        np.savez(
            tmp_path / f"{name}.npz",
            output=keras.ops.convert_to_numpy(output),
            **{f"input_{i}": value for i, value in enumerate(inputs)},
        )
        manifest.append(
            {
                "name": name,
                "keras": path,
                "npz": str(tmp_path / f"{name}.npz"),
                "inputs": len(inputs),
                "tuple": as_tuple,
            }
        )
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    # At XLA's backend optimisation level 0, as `make test`'s JAX run: the
    # loader runs each model eagerly once, so compiling dominates.
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    env = {**os.environ, "KERAS_BACKEND": "jax", "XLA_FLAGS": flags.strip()}
    result = subprocess.run(
        [JAX_PYTHON, "-c", LOADER, str(tmp_path / "manifest.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    worst = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(worst) == {case["name"] for case in manifest}
    assert max(worst.values()) <= 1e-5, worst
