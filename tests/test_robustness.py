"""Issue 11: inputs that used to give silently wrong answers or raw backend
errors. Masks that are not boolean, float16 scores past 65504, learned
positions past `max_length`, generation of padding/`<sos>`, and bad input
that must be a `ValueError`."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import (
    ConvS2SSeq2Seq,
    DotProductAttention,
    GeneralAttention,
    LocalAttention,
    MultiHead,
    PositionalEmbedding,
)
from keras_attention.seq2seq import greedy_search

# -- masks (defect 6) ----------------------------------------------------------


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


# -- float16 scores (defect 8) -------------------------------------------------


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


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
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


# -- learned positions past max_length (defect 7) --------------------------------


def _built_learned_positions():
    layer = PositionalEmbedding(4, mode="learned")
    layer(np.zeros((1, 2, 2), "float32"))
    return layer


def test_learned_positions_past_max_length_raise_when_the_length_is_static():
    layer = _built_learned_positions()
    too_long = np.zeros((1, 6, 2), "float32")
    with pytest.raises(ValueError, match=r"max_length=4\) has positions 0..3; .*0..5"):
        layer(too_long)
    # A tensor start_index (a decoding loop's counter) with a static length
    # that alone exceeds max_length.
    with pytest.raises(ValueError, match=r"positions 0..3; .*start_index >= 0"):
        layer(too_long, start_index=ops.convert_to_tensor(0))
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        # XLA: the length is known when the function is traced.
        with pytest.raises(ValueError, match="positions 0..3"):
            tf.function(layer, jit_compile=True)(too_long)
    elif keras.backend.backend() == "jax":
        import jax

        with pytest.raises(ValueError, match="positions 0..3"):
            jax.jit(lambda x: layer(x))(too_long)


@pytest.mark.tensorflow
def test_learned_positions_past_max_length_raise_in_a_graph_with_unknown_length():
    import tensorflow as tf

    import keras_attention.serving  # noqa: F401  (installs the graph assert)

    layer = _built_learned_positions()
    embed = tf.function(layer, input_signature=[tf.TensorSpec((None, None, 2), "float32")])
    assert embed(np.zeros((1, 4, 2), "float32")).shape == (1, 4, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"max_length=4\) has positions"):
        embed(np.zeros((1, 6, 2), "float32"))


@pytest.mark.tensorflow
def test_convs2s_past_max_length_under_xla_raises_when_the_length_is_static():
    import tensorflow as tf

    model = ConvS2SSeq2Seq(12, 12, 8, hidden_dim=8, num_layers=1, max_length=6)
    model.teacher_forced(np.full((1, 3), 4, "int32"), np.full((1, 3), 4, "int32"))
    translate = tf.function(lambda s: greedy_search(model, s, 5)["tokens"], jit_compile=True)
    assert translate(np.full((1, 6), 4, "int32")).shape == (1, 5)
    with pytest.raises(ValueError, match=r"max_length=6\) has positions 0..5"):
        translate(np.full((1, 10), 4, "int32"))
