"""Training on several replicas equals training on one with the global
batch (TensorFlow's MirroredStrategy over two logical CPUs), once
`adapt_for_distribution` gives the loss the global token count. Without
it each replica returned its own mean and Keras, which expects each
replica's share, applied about twice the gradient and logged twice the
loss. The token metrics (accuracy, perplexity) of a batch are the same
either way, on the same weights.
The second batch, of 7 pairs, splits unevenly (4 and 3): the logged loss,
which Keras weighs by each replica's batch size, is the one replica's only
once each replica's update is weighed by the global batch."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import json, sys
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from keras_attention.seq2seq import (
    MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity, RecurrentSeq2Seq
)
from keras_attention.training.distribute import adapt_for_distribution

rng = np.random.default_rng(0)
source = rng.integers(3, 13, (15, 6)).astype("int32")
target_in = rng.integers(3, 13, (15, 5)).astype("int32")
target_in[:, 0] = 1
target_out = rng.integers(3, 13, (15, 5)).astype("int32")
target_out[4:8, 2:] = 0  # the second replica's half has fewer real tokens

def train(replicas, adapt):
    keras.utils.set_random_seed(0)
    strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if replicas == 2
                else tf.distribute.get_strategy())
    with strategy.scope():
        model = RecurrentSeq2Seq(13, 13, 8, 8, attention="general")
        model.build()
        model.compile(keras.optimizers.SGD(0.5), MaskedCrossEntropy(),
                      metrics=[MaskedAccuracy(), MaskedPerplexity()])
        if adapt:
            adapt_for_distribution(model)
    history = model.fit((source, target_in), target_out, batch_size=8, epochs=1, shuffle=False,
                        verbose=0)
    metrics = [history.history[name][0] for name in ("token_accuracy", "perplexity")]
    return history.history["loss"][0], [np.asarray(w) for w in model.get_weights()], metrics

# One MirroredStrategy per process: two in one process share collective keys.
loss_1, weights_1, metrics_1 = train(1, False)
loss_2, weights_2, metrics_2 = train(2, sys.argv[1] == "adapted")
print(json.dumps({
    "loss_1": loss_1, "loss_2": loss_2, "metrics_1": metrics_1, "metrics_2": metrics_2,
    "weights": max(float(np.abs(a - b).max()) for a, b in zip(weights_1, weights_2)),
}))
"""


@pytest.mark.large
@pytest.mark.tensorflow
@pytest.mark.parametrize("mode", ["adapted", "raw"])
def test_two_replicas_train_like_one_with_the_global_batch(mode):
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    numbers = json.loads(result.stdout.strip().splitlines()[-1])
    assert 1.0 < numbers["metrics_1"][1] < 100.0  # perplexity: near the vocabulary size, 13
    if mode == "adapted":
        # The metrics sum tokens over replicas (the halves have different
        # token counts, so a mean of replica means would differ).
        assert numbers["metrics_2"] == pytest.approx(numbers["metrics_1"], rel=1e-5)
        assert numbers["loss_2"] == pytest.approx(numbers["loss_1"], rel=1e-5)
        assert numbers["weights"] < 1e-5
    else:  # the defect the adaptation fixes, still there without it
        assert numbers["loss_2"] > 1.5 * numbers["loss_1"]
        assert numbers["weights"] > 1e-3
