"""The cluttered-digits recipe: a tiny run, its export loaded by plain
TensorFlow in a fresh process, tuning that resumes, and CLI errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from recipes import spatial_transformer_digits as recipe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_clutter_places_the_digit_and_clutter():
    rng = np.random.default_rng(0)
    digits = np.zeros((3, 28, 28), "float32")
    digits[:, 10:18, 10:18] = 1.0
    canvases = recipe.clutter(digits, rng)
    assert canvases.shape == (3, 60, 60, 1)
    assert np.all(canvases.sum(axis=(1, 2, 3)) >= 64.0)  # the whole 8x8 stroke is on the canvas


def test_tiny_run_trains_reports_and_exports(tmp_path):
    output, exports = str(tmp_path / "run"), str(tmp_path / "exports")
    recipe.main(
        ["--limit", "100", "--epochs", "1", "--output", output, "--export", "--export-dir", exports]
    )
    results = json.load(open(os.path.join(output, "results.json")))
    assert set(results) == {"cnn", "spatial_transformer"} and all(
        0 <= v <= 1 for v in results.values()
    )
    assert os.path.getsize(os.path.join(output, "transformed.png")) > 1000
    version = os.path.join(exports, "digits", "1")
    assert os.path.exists(os.path.join(version, "saved_model.pb"))
    assert os.path.exists(os.path.join(exports, "digits", "models.config"))
    from keras_attention.serving.export import read_warmup_requests

    assert [s for s, _ in read_warmup_requests(version)] == [
        "serving_default",
        "image_bytes",
        "transformed",
    ]

    # A fresh process with only TensorFlow: the three signatures work and agree.
    script = f"""
import io, numpy as np, tensorflow as tf, sys
assert "keras_attention" not in sys.modules
loaded = tf.saved_model.load({version!r})
rng = np.random.default_rng(0)
image = rng.random((2, 60, 60, 1)).astype("float32")
out = loaded.signatures["serving_default"](image=tf.constant(image))
assert out["probabilities"].shape == (2, 10) and out["class"].shape == (2,)
np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
png = tf.io.encode_png(tf.cast(tf.round(image[0] * 255), tf.uint8)).numpy()
from_bytes = loaded.signatures["image_bytes"](image_bytes=tf.constant([png, png]))
direct = loaded.signatures["serving_default"](
    image=tf.constant(np.round(image[:1] * 255) / 255, tf.float32)
)
np.testing.assert_allclose(
    from_bytes["probabilities"].numpy()[0], direct["probabilities"].numpy()[0], atol=1e-5
)
warped = loaded.signatures["transformed"](image=tf.constant(image))["transformed"]
assert warped.shape == (2, 30, 30, 1)
from recipes.serving_client import rest_body, tensors_from_rest_body
import json
body = json.loads(
    json.dumps(
        rest_body(dict(image_bytes=np.array([png], dtype=object)), "image_bytes", "instances")
    )
)
assert body["instances"][0]["b64"]
via_rest = loaded.signatures["image_bytes"](
    image_bytes=tf.constant(tensors_from_rest_body(body, ["image_bytes"])["image_bytes"])
)
np.testing.assert_allclose(
    via_rest["probabilities"].numpy()[0], from_bytes["probabilities"].numpy()[0], atol=1e-6
)
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


def test_tuning_runs_and_resumes(tmp_path):
    args = [
        "--tune",
        "--algorithm",
        "random",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--limit",
        "60",
        "--output",
        str(tmp_path),
    ]
    recipe.main(args)
    best = json.load(open(tmp_path / "best_hyperparameters.json"))
    assert {"learning_rate", "loc_filters", "loc_units", "transform"} <= set(best)
    trials = os.listdir(tmp_path / "tuning" / "digits")
    recipe.main(args)  # resumes: the 2 trials are done, no new ones
    assert sorted(os.listdir(tmp_path / "tuning" / "digits")) == sorted(trials)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--epochs", "0"], "--epochs must be >= 1; got 0"),
        (["--limit", "5"], "--limit must be >= 20; got 5"),
        (["--hyperparameters", "/nonexistent.json"], "--hyperparameters /nonexistent.json"),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(argv, message):
    result = subprocess.run(
        [sys.executable, "-m", "recipes.spatial_transformer_digits", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
