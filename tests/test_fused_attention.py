"""MultiHead's fused path (`keras.ops.dot_product_attention`) against its
plain path: equal outputs where it is taken, the plain path where it is not."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import MultiHead
from tests.test_score_attention import random, randomise

B, TQ, TV, D = 2, 4, 6, 8


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the calls of `keras.ops.dot_product_attention`."""
    calls = []
    original = keras.ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mask"))
        return original(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", spy)
    return calls


def twins(rng, query, value, **kwargs):
    """The same layer (same weights) with and without the fused path."""
    fused = MultiHead(num_heads=4, key_dim=4, **kwargs)
    plain = MultiHead(num_heads=4, key_dim=4, use_fused_attention=False, **kwargs)
    for layer in (fused, plain):  # built on the plain path: no fused call counted
        layer(query, value, return_attention_scores=True)
    randomise(fused, rng)
    plain.set_weights(fused.get_weights())
    return fused, plain


def padding(query_length):
    """A query mask `(B, query_length)` and a value mask `(B, TV)`, each
    with padding in one sequence."""
    query_mask = np.ones((B, query_length), bool)
    query_mask[1, -1] = False
    value_mask = np.ones((B, TV), bool)
    value_mask[0, -2:] = False
    return query_mask, value_mask


@pytest.mark.parametrize(
    "layer_kwargs",
    [
        {},
        {"num_key_value_heads": 2},
        {"num_key_value_heads": 1},
        {"position_encoding": "rope"},
        {"sliding_window": 2},
    ],
    ids=["plain", "gqa", "mqa", "rope", "window"],
)
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "padding+causal"])
def test_fused_equals_plain(rng, fused_calls, layer_kwargs, masks):
    x = random(rng, B, TV, D)
    fused, plain = twins(rng, x, x, **layer_kwargs)
    query_mask, value_mask = padding(TV) if "padding" in masks else (None, None)
    call = {"value_mask": value_mask, "query_mask": query_mask}
    call["use_causal_mask"] = "causal" in masks
    got = fused(x, x, **call)
    assert len(fused_calls) == 1
    want = plain(x, x, **call)
    assert len(fused_calls) == 1
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


def test_cross_attention_and_one_step_query(rng, fused_calls):
    q, v = random(rng, B, TQ, D), random(rng, B, TV, D + 2)
    fused, plain = twins(rng, q, v)
    _, value_mask = padding(TQ)
    for query in (q, q[:, 0]):
        got = fused(query, v, value_mask=value_mask)
        want = plain(query, v, value_mask=value_mask)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)
    assert len(fused_calls) == 2


def test_cached_decoding_step(rng, fused_calls):
    x = random(rng, B, TV, D)
    fused, plain = twins(rng, x, x, position_encoding="rope", num_key_value_heads=2)
    caches = {layer: layer.init_cache(B, TV) for layer in (fused, plain)}
    for start, stop in ((0, 3), (3, 4), (4, 6)):
        outputs = {}
        for layer in (fused, plain):
            outputs[layer], weights, caches[layer] = layer.step(
                x[:, start:stop], caches[layer], start, return_weights=layer is plain
            )
        assert weights is not None
        np.testing.assert_allclose(
            np.asarray(outputs[fused]), np.asarray(outputs[plain]), atol=1e-5
        )
    assert len(fused_calls) == 3
    full = fused(x, x, use_causal_mask=True)
    np.testing.assert_allclose(np.asarray(outputs[fused]), np.asarray(full[:, 4:]), atol=1e-5)


def test_query_with_no_key_gives_zero_heads(rng, fused_calls):
    q, v = random(rng, B, TQ, D), random(rng, B, TV, D)
    v[0, -2:] = np.nan  # masked keys: must not leak into any output
    fused, plain = twins(rng, q, v)
    query_mask = np.ones((B, TQ), bool)
    query_mask[1, 2] = False
    value_mask = np.ones((B, TV), bool)
    value_mask[0, -2:] = False
    attention_mask = np.ones((B, TQ, TV), bool)
    attention_mask[0, 1] = False
    call = {"query_mask": query_mask, "value_mask": value_mask, "attention_mask": attention_mask}
    got = np.asarray(fused(q, v, **call))
    want = np.asarray(plain(q, v, **call))
    assert len(fused_calls) == 1
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, atol=1e-5)
    bias = np.asarray(fused.output_bias)
    np.testing.assert_allclose(got[0, 1], bias, atol=1e-6)  # its heads are 0
    np.testing.assert_allclose(got[1, 2], bias, atol=1e-6)


def test_compiled_model_takes_fused_path(rng, fused_calls):
    x = random(rng, B, TV, D)
    fused, plain = twins(rng, x, x)
    inputs = keras.Input((TV, D))
    models = [
        keras.Model(inputs, layer(inputs, inputs, use_causal_mask=True)) for layer in (fused, plain)
    ]
    got, want = (model.predict(x, verbose=0) for model in models)
    assert fused_calls
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize(
    "layer_kwargs,call_kwargs",
    [
        ({}, {"return_attention_scores": True}),
        ({"dropout": 0.5}, {"training": True}),
        ({"position_encoding": "alibi"}, {}),
        ({"position_encoding": "relative"}, {}),
        ({"value_dim": 3}, {}),
        ({"use_fused_attention": False}, {}),
    ],
    ids=["scores", "dropout", "alibi", "relative", "value_dim", "off"],
)
def test_plain_path_where_the_op_differs(rng, fused_calls, layer_kwargs, call_kwargs):
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4, **layer_kwargs)
    layer(x, x, **call_kwargs)
    assert not fused_calls


def test_dropout_outside_training_takes_fused_path(rng, fused_calls):
    x = random(rng, B, TV, D)
    fused, plain = twins(rng, x, x, dropout=0.5)
    np.testing.assert_allclose(
        np.asarray(fused(x, x, training=False)), np.asarray(plain(x, x)), atol=1e-5
    )
    assert len(fused_calls) == 1


def test_config(fused_calls):
    layer = MultiHead(num_heads=2, key_dim=4, use_fused_attention=False)
    config = layer.get_config()
    assert config["use_fused_attention"] is False
    assert MultiHead.from_config(config).use_fused_attention is False
    del config["use_fused_attention"]  # a config saved before the option existed
    assert MultiHead.from_config(config).use_fused_attention is True
    with pytest.raises(ValueError, match="`use_fused_attention` of MultiHead must be True or"):
        MultiHead(num_heads=2, use_fused_attention="auto")


def test_scores_still_returned(rng):
    x = random(rng, B, TV, D)
    out, scores = MultiHead(num_heads=2, key_dim=4)(x, x, return_attention_scores=True)
    assert ops.shape(scores) == (B, 2, TV, TV)
    assert ops.shape(out) == (B, TV, D)
