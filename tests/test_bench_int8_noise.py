"""`bench/int8_noise.py`: it perturbs exactly the weights int8 rounds (with
them rounded, the float model computes the int8 model's logits), and each
change stays within half its channel's int8 step."""

import numpy as np
import pytest
from keras import ops

from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq, TransformerSeq2Seq
from keras_attention.serving.records import quantized_copy
from tests.bench_helpers import load_bench

SOURCE = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 2, 0]])
TARGET_IN = np.array([[1, 6, 7, 8], [1, 11, 12, 0]])
FAMILIES = {
    "transformer": lambda: TransformerSeq2Seq(
        24, 24, hidden_dim=16, num_heads=2, intermediate_dim=24, num_layers=1,
        max_length=16, position="relative", tie_embeddings=True,
    ),
    "convs2s": lambda: ConvS2SSeq2Seq(
        24, 24, embed_dim=8, encoder_convolutions=[(16, 3), (24, 3)],
        decoder_convolutions=[(16, 3), (24, 2)], max_length=16,
    ),
    "rnn": lambda: RecurrentSeq2Seq(24, 24, embed_dim=8, hidden_dim=16, attention="general"),
}  # fmt: skip


def rounded(values, axes):
    """Abs-max int8 per output channel, written here: `(q · s, s)`."""
    step = np.abs(values).max(axis=axes, keepdims=True) / np.float32(127)
    return np.clip(np.round(values / step), -127, 127) * step, step


# The RNN's case covers Keras's Embedding (`make test`); ConvS2S's this
# library's int8 layers and Keras's Dense, the Transformer's MultiHead one
# more of this library's layers (`make test-large`).
@pytest.mark.parametrize(
    "family",
    [
        pytest.param(family, marks=pytest.mark.large if family != "rnn" else ())
        for family in sorted(FAMILIES)
    ],
)
def test_the_rounded_weights_are_all_that_int8_changes(family):
    noise = load_bench("int8_noise")
    model = FAMILIES[family]()
    model((SOURCE, TARGET_IN))
    quantized = quantized_copy(model, "int8")
    weights = noise.rounded_weights(model)
    for variable, axes in weights:
        variable.assign(rounded(ops.convert_to_numpy(variable), axes)[0])
    np.testing.assert_allclose(
        ops.convert_to_numpy(model((SOURCE, TARGET_IN))),
        ops.convert_to_numpy(quantized((SOURCE, TARGET_IN))),
        rtol=1e-5,
        atol=1e-5,
    )


def convs2s_weights(noise):
    """A built ConvS2S, the weights int8 rounds and their values."""
    model = FAMILIES["convs2s"]()
    model((SOURCE, TARGET_IN))
    weights = noise.rounded_weights(model)
    return model, weights, [ops.convert_to_numpy(variable).copy() for variable, _ in weights]


def restore(weights, values):
    for (variable, _), value in zip(weights, values):
        variable.assign(value)


@pytest.mark.large(reason="a benchmark's smoke run")
def test_a_perturbation_stays_within_half_a_step_and_reports_its_size():
    noise = load_bench("int8_noise")
    model, weights, before = convs2s_weights(noise)
    others = {id(v) for v, _ in weights}
    untouched = [(v, ops.convert_to_numpy(v).copy()) for v in model.weights if id(v) not in others]
    squares = noise.perturb(weights, seed=1)
    changes = [ops.convert_to_numpy(v) - b for (v, _), b in zip(weights, before)]
    total = 0.0
    for change, values, (_, axes) in zip(changes, before, weights):
        step = rounded(values, axes)[1]
        assert np.all(np.abs(change) <= step / 2 + 1e-7)
        assert np.mean(np.abs(change) > step / 10) > 0.7  # spread across the range
        total += float(np.sum(change.astype("float64") ** 2))
    assert squares == pytest.approx(total, rel=1e-4)
    for variable, values in untouched:
        np.testing.assert_array_equal(ops.convert_to_numpy(variable), values)
    # Another seed, another draw; the same seed, the same one.
    restore(weights, before)
    assert noise.perturb(weights, seed=2) != pytest.approx(squares, rel=1e-9)
    restore(weights, before)
    assert noise.perturb(weights, seed=1) == squares


@pytest.mark.large(reason="a benchmark's smoke run")
def test_rounding_all_but_one_part_leaves_that_part_float():
    noise = load_bench("int8_noise")
    _, weights, before = convs2s_weights(noise)
    change = noise.round_weights(weights, keep="decoder")
    kept = total = 0
    for (variable, axes), values in zip(weights, before):
        now = ops.convert_to_numpy(variable)
        if "decoder" in variable.path:
            np.testing.assert_array_equal(now, values)
            kept += 1
        else:
            np.testing.assert_allclose(now, rounded(values, axes)[0], rtol=1e-6, atol=1e-7)
            total += float(np.sum((now - values).astype("float64") ** 2))
    assert 0 < kept < len(weights)
    assert change == pytest.approx(total, rel=1e-4) and change > 0
