"""The one name table: keras_attention.get."""

import keras
import numpy as np
import pytest

import keras_attention
from keras_attention import (
    AdditiveAttention,
    ConcatAttention,
    DotProductAttention,
    GeneralAttention,
    LocalAttention,
    MultiHead,
)
from keras_attention.registry import ATTENTION


@pytest.mark.parametrize(
    "name,cls",
    [
        ("dot", DotProductAttention),
        ("scaled_dot", DotProductAttention),
        ("general", GeneralAttention),
        ("additive", AdditiveAttention),
        ("concat", ConcatAttention),
        ("local", LocalAttention),
        ("multihead", MultiHead),
    ],
)
def test_names_give_layers_that_attend(rng, name, cls):
    layer = keras_attention.get(name)
    assert type(layer) is cls
    out, weights = layer(
        rng.normal(size=(2, 3, 8)), rng.normal(size=(2, 5, 8)), return_attention_scores=True
    )
    weights = keras.ops.convert_to_numpy(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
    assert tuple(out.shape) == (2, 3, 8)


def test_defaults_and_overrides():
    assert keras_attention.get("scaled_dot").scale is True
    local = keras_attention.get("local")
    assert (local.window, local.mode, type(local.scorer)) == (4, "predictive", GeneralAttention)
    assert keras_attention.get("local", window=9, mode="last").window == 9
    assert keras_attention.get("multihead", num_heads=2).num_heads == 2


def test_layers_and_configs_pass_through():
    layer = AdditiveAttention(units=3)
    assert keras_attention.get(layer) is layer
    clone = keras_attention.get(keras.saving.serialize_keras_object(layer))
    assert type(clone) is AdditiveAttention and clone.units == 3


def test_the_table_is_the_only_one():
    """Models and recipes resolve names here: their choices are the table's."""
    from recipes import translate

    assert set(translate.ATTENTION) == set(ATTENTION) | {"none"}
    assert keras_attention.registry.names() == tuple(ATTENTION)


@pytest.mark.parametrize(
    "call,pattern",
    [
        (
            lambda: keras_attention.get("cosine"),
            r"`identifier` must be one of \['dot', .*received 'cosine'",
        ),
        (
            lambda: keras_attention.get(GeneralAttention(), window=3),
            r"constructor arguments go with a mechanism name",
        ),
        (
            lambda: LocalAttention(MultiHead(2), window=2),
            r"`score` of LocalAttention must be a score layer",
        ),
        (lambda: LocalAttention("local", window=2), r"`score` of LocalAttention must be one of"),
    ],
)
def test_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
