"""The masking helpers (`keras_attention/masking.py`) through the layers
that use them: masks read as boolean (a float additive mask is refused, not
inverted), scores past float16's range kept finite and exact under mixed
precision, and NaN or inf in masked key positions kept out of every
attention's output."""

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
)
from tests.harness import BFLOAT16_CRASH, ONEDNN_CAPPED_BELOW_AVX512


def test_a_float_additive_mask_is_refused_not_inverted():
    q, v = np.ones((1, 1, 2), "float32"), np.ones((1, 3, 2), "float32")
    additive = np.array([[0.0, -1e9, -1e9]], "float32")
    with pytest.raises(ValueError, match=r"value_mask.*boolean \(True = attend\).*== 0"):
        DotProductAttention()(q, v, value_mask=additive)
    with pytest.raises(ValueError, match="query_mask"):
        MultiHead(num_heads=1)(q, v, query_mask=np.array([[0.5]], "float32"))


@pytest.mark.tensorflow
def test_inside_a_traced_function_a_non_one_entry_reads_as_masked():
    import tensorflow as tf

    layer = DotProductAttention()
    q, v = np.ones((1, 1, 2), "float32"), np.ones((1, 3, 2), "float32")
    mask = np.array([[1.0, -1e9, 0.0]], "float32")
    attend = tf.function(lambda m: layer(q, v, value_mask=m, return_attention_scores=True)[1])
    np.testing.assert_array_equal(ops.convert_to_numpy(attend(mask)), [[[1.0, 0.0, 0.0]]])


@pytest.mark.parametrize("dtype", ["bool", "int32", "float32"])
def test_boolean_and_zero_one_masks_agree(dtype, rng):
    q = rng.normal(size=(2, 2, 4)).astype("float32")
    v = rng.normal(size=(2, 3, 4)).astype("float32")
    zero_one = np.array([[1, 1, 0], [1, 0, 0]])
    for layer in (DotProductAttention(), MultiHead(num_heads=2)):
        _, weights = layer(q, v, value_mask=zero_one.astype(dtype), return_attention_scores=True)
        weights = ops.convert_to_numpy(weights)
        # Reference: the softmax of q·k over the keys the mask allows.
        _, expected = layer(q, v, value_mask=zero_one == 1, return_attention_scores=True)
        np.testing.assert_array_equal(weights, ops.convert_to_numpy(expected))
        assert np.all(weights[..., 2] == 0.0) and np.all(weights[1, ..., 1] == 0.0)
        np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-6)


def test_a_mask_given_as_a_python_list_is_taken_as_an_array():
    query, value = np.ones((1, 2, 3), "float32"), np.arange(6, dtype="float32").reshape(1, 2, 3)
    listed = DotProductAttention()(query, value, value_mask=[[True, False]])
    np.testing.assert_allclose(np.asarray(listed), [[[0, 1, 2], [0, 1, 2]]])


def _identity_multi_head(width):
    layer = MultiHead(num_heads=1, key_dim=width)
    layer.build((None, None, width), (None, None, width))
    eye = np.eye(width, dtype="float32")
    for kernel in (layer.query_kernel, layer.key_kernel, layer.value_kernel):
        kernel.assign(eye[:, None, :])
    layer.output_kernel.assign(eye[None])
    return layer


def _identity_general(width):
    layer = GeneralAttention()
    layer.build((None, None, width), (None, None, width))
    layer.kernel.assign(np.eye(width, dtype="float32"))
    return layer


LARGE_INPUT_LAYERS = {
    "dot": lambda width: DotProductAttention(),
    "general": _identity_general,
    "local_dot": lambda width: LocalAttention("dot", window=3, mode="last"),
    "multi_head": _identity_multi_head,
}


@pytest.mark.parametrize(
    "policy",
    [
        "mixed_float16",
        pytest.param(
            "mixed_bfloat16",
            marks=pytest.mark.skipif(ONEDNN_CAPPED_BELOW_AVX512, reason=BFLOAT16_CRASH),
        ),
    ],
)
@pytest.mark.parametrize("name", sorted(LARGE_INPUT_LAYERS))
def test_large_inputs_give_finite_exact_weights_under_mixed_precision(name, policy):
    keras.config.set_dtype_policy(policy)
    width, magnitude = 8, 200.0
    # q·k0 = 8 · 200² = 3.2e5 > 65504 (float16's largest), even / sqrt(8).
    query = np.full((1, 1, width), magnitude, "float32")
    keys = np.stack([np.full(width, magnitude), -np.full(width, magnitude), np.zeros(width)])
    keys = keys[None].astype("float32")  # (1, 3, 8), also the values
    layer = LARGE_INPUT_LAYERS[name](width)
    output, weights = layer(query, keys, return_attention_scores=True)
    weights = ops.convert_to_numpy(ops.cast(weights, "float32")).reshape(-1)
    np.testing.assert_array_equal(weights, [1.0, 0.0, 0.0])  # key 0 alone
    output = ops.convert_to_numpy(ops.cast(output, "float32")).reshape(-1)
    np.testing.assert_array_equal(output, np.full(width, magnitude))


def _convs2s_attention(query, value, **kwargs):
    """MultiStepAttention called like the other attentions (decoder state and
    target embedding from `query`, keys and values from `value`)."""
    from keras_attention import MultiStepAttention

    layer = MultiStepAttention()
    mask = kwargs.get("value_mask")
    return layer(query, query, value, value, source_mask=mask)


# Every attention layer, called as `attend(query (B, Tq, D), value (B, Tv, D),
# value_mask=...)`.
ATTENTIONS = {
    "dot": lambda q, v, **k: DotProductAttention()(q, v, **k),
    "scaled_dot": lambda q, v, **k: DotProductAttention(scale=True)(q, v, **k),
    "general": lambda q, v, **k: GeneralAttention()(q, v, **k),
    "additive": lambda q, v, **k: AdditiveAttention(units=4)(q, v, **k),
    "concat": lambda q, v, **k: ConcatAttention()(q, v, **k),
    "local": lambda q, v, **k: LocalAttention(window=3)(q, v, **k),
    "local_predictive": lambda q, v, **k: LocalAttention(window=3, mode="predictive")(q, v, **k),
    "multi_head": lambda q, v, **k: MultiHead(2, 2)(q, v, **k),
    "multi_head_gqa_rope": lambda q, v, **k: MultiHead(
        2, 2, num_key_value_heads=1, position_encoding="rope"
    )(q, v, **k),
    "convs2s_multi_step": _convs2s_attention,
}


@pytest.mark.parametrize("planted", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_nan_and_inf_in_masked_key_positions_stay_out_of_every_attention(name, planted, rng):
    keras.utils.set_random_seed(3)
    query = rng.normal(size=(2, 3, 4)).astype("float32")
    value = rng.normal(size=(2, 5, 4)).astype("float32")
    mask = np.array([[True, True, True, False, False], [True, True, True, True, False]])
    dirty = value.copy()
    dirty[~mask] = planted  # what padding may hold: uninitialised memory, an overflow
    keras.utils.set_random_seed(3)
    expected = np.asarray(ATTENTIONS[name](query, value, value_mask=mask))
    keras.utils.set_random_seed(3)
    got = np.asarray(ATTENTIONS[name](query, dirty, value_mask=mask))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
