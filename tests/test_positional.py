"""PositionalEmbedding: the sinusoid equation, learned positions, masks."""

import keras
import numpy as np
import pytest

from keras_attention import PositionalEmbedding, TokenAndPositionEmbedding
from tests import reference
from tests.harness import run_layer_test
from tests.test_score_attention import random


def test_sinusoidal_matches_equation(rng):
    x = random(rng, 2, 7, 6)
    out = np.asarray(PositionalEmbedding(max_length=32)(x))
    np.testing.assert_allclose(out, x + reference.sinusoidal(7, 6), atol=1e-5)
    # PE(0) = [sin 0, cos 0, ...] = [0, 1, 0, 1, ...]
    np.testing.assert_allclose(out[0, 0] - x[0, 0], [0, 1, 0, 1, 0, 1], atol=1e-6)


def test_sinusoidal_odd_width_and_start_index(rng):
    x = random(rng, 1, 3, 5)
    out = PositionalEmbedding(max_length=32)(x, start_index=4)
    np.testing.assert_allclose(np.asarray(out), x + reference.sinusoidal(3, 5, start=4), atol=1e-5)


def test_learned_adds_rows_of_the_table(rng):
    x = random(rng, 2, 3, 4)
    layer = PositionalEmbedding(max_length=5, mode="learned")
    out = np.asarray(layer(x, start_index=2))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_allclose(out, x + table[2:5], atol=1e-6)


def test_incremental_equals_full(rng):
    x = random(rng, 2, 6, 4)
    for mode in ("sinusoidal", "learned"):
        layer = PositionalEmbedding(max_length=6, mode=mode)
        full = np.asarray(layer(x))
        steps = [np.asarray(layer(x[:, i : i + 1], start_index=i)) for i in range(6)]
        np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-6)


def test_propagates_padding_mask():
    tokens = np.array([[1, 2, 0], [3, 0, 0]])
    x = keras.layers.Embedding(5, 4, mask_zero=True)(tokens)
    out = PositionalEmbedding(max_length=8)(x)
    np.testing.assert_array_equal(np.asarray(out._keras_mask), tokens != 0)


@pytest.mark.parametrize("mode", ["sinusoidal", "learned"])
def test_harness(rng, mode):
    x = random(rng, 2, 5, 6)
    run_layer_test(PositionalEmbedding, {"max_length": 8, "mode": mode}, inputs={"inputs": x})


def test_error_past_max_length(rng):
    layer = PositionalEmbedding(max_length=4, mode="learned")
    with pytest.raises(
        ValueError, match=r"max_length=4\) has positions 0..3; received positions 0..5"
    ):
        layer(random(rng, 1, 6, 2))
    with pytest.raises(ValueError, match=r"received positions 3..4"):
        layer(random(rng, 1, 2, 2), start_index=3)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"max_length": 0}, r"`max_length` of PositionalEmbedding must be a positive integer"),
        ({"max_length": 4, "mode": "rotary"}, r"`mode` of PositionalEmbedding must be one of"),
    ],
)
def test_error_constructor(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        PositionalEmbedding(**kwargs)


def test_error_rank(rng):
    with pytest.raises(ValueError, match=r"`inputs` of PositionalEmbedding must have rank 3"):
        PositionalEmbedding(4)(random(rng, 2, 4))


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_token_and_position_harness(rng, position):
    ids = rng.integers(1, 10, (2, 5)).astype("int32")
    run_layer_test(
        TokenAndPositionEmbedding,
        {"vocab_size": 10, "embed_dim": 4, "max_length": 8, "position": position},
        inputs={"tokens": ids},
        mixed_precision=False,
    )


def test_token_and_position_is_scaled_lookup_plus_positions(rng):
    ids = np.array([[3, 1, 4, 0]], "int32")
    layer = TokenAndPositionEmbedding(6, 4, 8, scale_embeddings=True, mask_zero=True)
    out = np.asarray(layer(ids, start_index=2))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(
        out, table[ids] * 2.0 + reference.sinusoidal(4, 4, start=2), atol=1e-5
    )
    np.testing.assert_array_equal(np.asarray(layer.compute_mask(ids)), [[True, True, True, False]])
