"""`bench/gpu_training.py` pads the recipe's bucketed batches to two shapes
(so that XLA compiles two steps, not one per bucket and batch size): the
padded batch must train the model exactly as the original does."""

import numpy as np
import pytest

from tests.bench_helpers import load_bench

# A run's settings for a model small enough to build in a test.
TINY = {
    "family": "convs2s",
    "embed_dim": 16,
    "hidden_dim": 16,
    "num_layers": 1,
    "dropout": 0.0,
    "max_length": 32,
    "learning_rate": 1e-3,
    "label_smoothing": 0.1,
    "warmup": 0,
}


def bucket_batch(rows, width, seed):
    """A batch as the recipe's buckets give it: pairs of random lengths, each
    padded with 0 to the bucket's `width` (target_in/out one shorter)."""
    rng = np.random.default_rng(seed)
    source = np.zeros((rows, width), "int32")
    target = np.zeros((rows, width), "int32")
    for row in range(rows):
        n, m = rng.integers(2, width, size=2)
        source[row, :n] = rng.integers(4, 60, n)
        target[row, :m] = rng.integers(4, 60, m)
        target[row, 0] = 1  # [START]
    return (source, target[:, :-1]), target[:, 1:]


def test_two_shapes_keep_every_batch_and_its_loss():
    from keras_attention_recipes.translation.model import build_model

    bench = load_bench("gpu_training")
    model = build_model(TINY, 64, 64)
    for seed, (rows, width) in enumerate([(139, 11), (66, 23), (17, 31), (46, 33)]):
        (source, target_in), target_out = bucket_batch(rows, width, seed)
        (padded_source, padded_in), padded_out = bench.few_shapes((source, target_in), target_out)
        shape = padded_source.shape
        assert shape in bench.SHAPES and padded_in.shape == padded_out.shape == (
            shape[0],
            shape[1] - 1,
        )
        np.testing.assert_array_equal(padded_source[:rows, :width], source)
        np.testing.assert_array_equal(padded_out[:rows, : width - 1], target_out)
        assert not padded_source[rows:].any() and not padded_out[:, width - 1 :].any()
        np.testing.assert_allclose(
            model.test_on_batch((padded_source, padded_in), padded_out),
            model.test_on_batch((source, target_in), target_out),
            rtol=1e-5,
        )


def test_models_compile_with_xla_whatever_the_run_says():
    """The recipe's runs compile without XLA (`jit: false`, the CPU's faster
    choice); on the JAX backend that is an op-by-op step, most likely why no
    epoch finished in 160 s on an H100. The bench's models compile with it, and keep
    the rest of the run's settings and the model's own."""
    from keras_attention_recipes.translation.model import build_model

    bench = load_bench("gpu_training")
    run = {**TINY, "dropout": 0.1, "jit": False, "epochs": 8}
    demo = bench.model_spec(run, "demo")
    assert "epochs" not in demo and "average_last" not in demo
    assert {k: v for k, v in demo.items() if k != "jit"} == {
        k: v for k, v in run.items() if k not in ("jit", "epochs")
    }
    assert build_model(demo, 64, 64).jit_compile is True
    translator = bench.model_spec(run, "translator")
    assert translator["jit"] is True
    assert (translator["hidden_dim"], translator["dropout"]) == (256, 0.2)


def test_a_scored_copy_evaluates_as_its_run_with_the_trained_settings():
    """A copy scored here compiles as the run does (its `jit`), has the
    settings the weights trained with, and keeps the bench's per-token loss
    apart from the recipe's `val_loss`."""
    bench = load_bench("gpu_training")
    run = {**TINY, "jit": False, "val_loss": 4.02, "train_seconds": 457.5, "epochs": 8}
    trained = {**run, "hidden_dim": 32, "dropout": 0.3, "jit": True}
    record = {"val_averaged": 4.1163, "epochs": []}
    settings = bench.copy_settings(run, trained, "demo", record)
    assert settings["jit"] is False
    assert (settings["hidden_dim"], settings["dropout"]) == (32, 0.3)
    assert "val_loss" not in settings and "train_seconds" not in settings
    assert settings["gpu_val_loss"] == 4.1163 and settings["gpu_training"] is record


def test_a_cosine_decay_ends_at_the_bench_s_last_step():
    """The CPU run's `total_steps` counts its own epochs; the bench plans its
    own, so a cosine decay reaches 0 at its last step, not the CPU run's."""
    from keras_attention_recipes.translation.model import learning_rate

    bench = load_bench("gpu_training")
    run = {**TINY, "decay": "cosine", "warmup": 10, "total_steps": 2056, "learning_rate": 2e-3}
    spec = bench.training_spec(run, "demo", 40, 257)
    assert spec["total_steps"] == 40 * 257 and spec["jit"] is True
    schedule = learning_rate(spec)
    assert float(schedule(10)) == pytest.approx(2e-3)
    assert float(schedule(2056)) > 1e-3  # the CPU run's end is early in this one
    assert float(schedule(40 * 257)) == pytest.approx(0.0, abs=1e-9)
