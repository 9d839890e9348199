"""MultiHead's fused path (`keras.ops.dot_product_attention`) against its
plain path: equal outputs where it is taken, the plain path where it is not;
and every attention layer's logits kept in float32 under mixed precision."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import (
    AdditiveAttention,
    ConcatAttention,
    DotProductAttention,
    GeneralAttention,
    LocalAttention,
    MultiHead,
    MultiStepAttention,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
    masking,
)
from tests.harness import BFLOAT16_CRASH, ONEDNN_CAPPED_BELOW_AVX512
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


# -- mixed precision with large inputs -------------------------------------------

MIXED_POLICIES = [
    pytest.param("mixed_float16", id="float16"),
    pytest.param(
        "mixed_bfloat16",
        id="bfloat16",
        marks=pytest.mark.skipif(ONEDNN_CAPPED_BELOW_AVX512, reason=BFLOAT16_CRASH),
    ),
]


def _cached_steps(layer, query, key, value, value_mask):
    """`layer.step` over the query in two chunks (the fused path's call)."""
    cache = layer.init_cache(B, TQ)
    first, _, cache = layer.step(query[:, :2], cache, 0, return_weights=False)
    second, _, _ = layer.step(query[:, 2:], cache, 2, return_weights=False)
    return ops.concatenate([first, second], axis=1)


def _attend(layer, query, key, value, value_mask):
    return layer(query, value, key=key, value_mask=value_mask)


def _multi_head(**kwargs):
    return lambda: MultiHead(2, 4, **kwargs)


# name: (make the layer, call it on (query, key, value, value_mask)).
MIXED_PRECISION_CASES = {
    "dot": (lambda: DotProductAttention(scale=True), _attend),
    "general": (GeneralAttention, _attend),
    "additive": (lambda: AdditiveAttention(units=4), _attend),
    "concat": (lambda: ConcatAttention(hidden_units=[4]), _attend),
    "local": (lambda: LocalAttention("general", window=2, mode="predictive"), _attend),
    "multi_head": (_multi_head(), _attend),
    "multi_head_plain": (_multi_head(use_fused_attention=False), _attend),
    "multi_query": (_multi_head(num_key_value_heads=1), _attend),
    "rope": (_multi_head(position_encoding="rope"), _attend),
    "alibi": (_multi_head(position_encoding="alibi"), _attend),
    "relative": (_multi_head(position_encoding="relative"), _attend),
    "window": (_multi_head(sliding_window=2), _attend),
    "cached_step": (_multi_head(position_encoding="rope"), _cached_steps),
    "multi_step": (
        MultiStepAttention,
        lambda layer, q, k, v, mask: layer(q, q, k, v, source_mask=mask),
    ),
    "encoder": (
        lambda: TransformerEncoderLayer(2, 16),
        lambda layer, q, k, v, mask: layer(v, padding_mask=mask),
    ),
    "decoder": (
        lambda: TransformerDecoderLayer(2, 16),
        lambda layer, q, k, v, mask: layer(q, v, encoder_padding_mask=mask),
    ),
}


@pytest.mark.parametrize("policy", MIXED_POLICIES)
@pytest.mark.parametrize("name", sorted(MIXED_PRECISION_CASES))
def test_large_inputs_under_mixed_precision_match_float32(name, policy):
    """Queries and keys of 300 in 8 dimensions give logits of ~1e5, past
    float16's 65504 (bfloat16 rounds them to multiples of 512, erasing the
    position terms): each layer must give finite outputs in the compute
    dtype, close to the same layer with the same weights under float32.
    Equal keys and values that grow with the position (300 to 550) make the
    output depend on every weight; the Transformer layers attend over the
    values themselves."""
    make, run = MIXED_PRECISION_CASES[name]
    query = np.full((B, TQ, D), 300.0, "float32")
    key = np.full((B, TV, D), 300.0, "float32")
    value = np.broadcast_to(300.0 + 50.0 * np.arange(TV)[:, None], (B, TV, D)).astype("float32")
    value_mask = np.ones((B, TV), bool)
    value_mask[1, -2:] = False
    inputs = (query, key, value, value_mask)
    reference = make()
    if name == "cached_step":
        reference(query, query)
    want = ops.convert_to_numpy(run(reference, *inputs))
    keras.config.set_dtype_policy(policy)
    mixed = make()
    if name == "cached_step":
        mixed(query, query)
    else:
        run(mixed, *inputs)
    mixed.set_weights(reference.get_weights())
    out = run(mixed, *inputs)
    assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
    out = ops.convert_to_numpy(ops.cast(out, "float32"))
    assert np.isfinite(out).all(), f"{name} under {policy} gave non-finite outputs"
    # float16 keeps 11 significant bits, bfloat16 8: the outputs' own rounding.
    tolerance = 0.01 if policy == "mixed_float16" else 0.04
    np.testing.assert_allclose(out, want, atol=tolerance * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("policy", ["float32", *MIXED_POLICIES])
def test_masked_scores_below_minus_1e9_keep_their_weight(policy):
    """Inputs near float16's range: q·k = 8 · 2¹⁴ · -2¹⁴ = -2³¹. A masked key
    filled with -1e9 would outweigh every allowed one, and the row would get
    zero weights; the dtype's most negative value keeps the allowed keys'."""
    keras.config.set_dtype_policy(policy)
    magnitude = 2.0**14  # exact in float16 and bfloat16
    query = np.full((1, 1, D), magnitude, "float32")
    value = np.full((1, 3, D), -magnitude, "float32")
    value_mask = np.array([[True, True, False]])
    output, weights = DotProductAttention()(
        query, value, value_mask=value_mask, return_attention_scores=True
    )
    weights = ops.convert_to_numpy(ops.cast(weights, "float32"))
    np.testing.assert_array_equal(weights.reshape(-1), [0.5, 0.5, 0.0])
    np.testing.assert_array_equal(ops.convert_to_numpy(ops.cast(output, "float32")), value[:, :1])
    scores = np.array([[-7e9, -8e9, 0.0]], "float32")
    weights = masking.masked_softmax(scores, np.array([[True, True, False]]))
    np.testing.assert_array_equal(ops.convert_to_numpy(weights), [[1.0, 0.0, 0.0]])
