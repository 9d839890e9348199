"""PositionalEmbedding: the sinusoid equation, learned positions, masks."""

import keras
import numpy as np
import pytest
from keras import ops

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


def _built_learned_positions():
    return _built_positions("learned")


def _built_positions(mode):
    layer = PositionalEmbedding(4, mode=mode)
    layer(np.zeros((1, 2, 2), "float32"))
    return layer


def _table(layer):
    """The rows a layer of `_built_positions` adds at positions 0..3."""
    if layer.mode == "sinusoidal":
        return reference.sinusoidal(4, 2)
    return ops.convert_to_numpy(layer.position_embeddings)


def test_sinusoidal_positions_with_a_tensor_start_are_the_equation_from_the_table(rng):
    """A traced `start_index` reads the table of positions 0..max_length-1
    (folded into a constant), an int one the equation at any position."""
    layer = PositionalEmbedding(max_length=8)
    x = random(rng, 2, 3, 6)
    out = layer(x, start_index=ops.convert_to_tensor(5))
    np.testing.assert_allclose(
        ops.convert_to_numpy(out), x + reference.sinusoidal(3, 6, start=5), atol=1e-5
    )
    out = layer(random(rng, 1, 12, 6) * 0, start_index=30)  # past max_length: still the equation
    np.testing.assert_allclose(
        ops.convert_to_numpy(out)[0], reference.sinusoidal(12, 6, start=30), atol=1e-5
    )
    with pytest.raises(ValueError, match=r"mode='sinusoidal', max_length=8\) has positions 0..7"):
        layer(random(rng, 1, 9, 6), start_index=ops.convert_to_tensor(0))


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


@pytest.mark.parametrize("mode", ["sinusoidal", "learned"])
def test_table_positions_past_max_length_are_nan_where_nothing_can_raise(mode):
    """A traced `start_index` (a decoding counter) under
    XLA, `jax.jit` or eagerly without a graph assert: the positions past the
    table get NaN (the documented sentinel), never a clamped row."""
    layer = _built_positions(mode)
    table = _table(layer)
    x = np.zeros((1, 2, 2), "float32")
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        compiled = tf.function(lambda x, s: layer(x, start_index=s), jit_compile=True)
        run = lambda s: compiled(x, tf.constant(s))  # noqa: E731
    elif keras.backend.backend() == "jax":
        import jax

        compiled = jax.jit(lambda x, s: layer(x, start_index=s))
        run = lambda s: compiled(x, np.int32(s))  # noqa: E731
    else:
        run = lambda s: layer(x, start_index=ops.convert_to_tensor(s))  # noqa: E731
    np.testing.assert_allclose(ops.convert_to_numpy(run(2))[0], table[2:4], atol=1e-6)
    out = ops.convert_to_numpy(run(3))[0]  # positions 3 and 4 of 0..3
    np.testing.assert_allclose(out[0], table[3], atol=1e-6)
    assert np.isnan(out[1]).all()


@pytest.mark.tensorflow
@pytest.mark.parametrize("layer_name", ["positional", "token_and_position"])
def test_learned_positions_past_max_length_under_xla_with_unknown_length_are_nan(layer_name):
    """`tf.function(jit_compile=True)` traced with an
    unknown length: XLA drops the assert and clamps the gather, so a length-6
    input to 4 positions gave the last row twice more. Now those positions
    are NaN (a loss turns NaN: TerminateOnNaN stops training); eagerly the
    static length is a ValueError."""
    import tensorflow as tf

    if layer_name == "positional":
        layer = _built_learned_positions()
        spec = tf.TensorSpec((None, None, 2), "float32")
        inputs = np.zeros((1, 6, 2), "float32")
    else:
        layer = TokenAndPositionEmbedding(5, 2, 4, position="learned")
        layer(np.ones((1, 2), "int32"))
        spec = tf.TensorSpec((None, None), "int32")
        inputs = np.ones((1, 6), "int32")
    table = layer.position_embedding if layer_name != "positional" else layer
    table = table.position_embeddings.numpy()
    embed = tf.function(layer, jit_compile=True, input_signature=[spec])
    out = embed(inputs).numpy()[0]
    shift = out[:4] - table  # the token part (0 or one token's row) is the same at every position
    np.testing.assert_allclose(shift, np.broadcast_to(shift[:1], shift.shape), atol=1e-6)
    assert np.isnan(out[4:]).all() and not np.isnan(out[:4]).any()
    loss = keras.losses.MeanSquaredError()(np.zeros_like(out), out)
    assert np.isnan(float(loss))
    with pytest.raises(ValueError, match=r"max_length=4\) has positions 0..3"):
        layer(inputs)  # eager: the length is known


def test_a_padding_id_outside_the_vocabulary_is_refused():
    with pytest.raises(
        ValueError,
        match=r"`padding_id` of TokenAndPositionEmbedding must be a token id in \[0, 10\)",
    ):
        TokenAndPositionEmbedding(10, 4, 8, padding_id=10)


@pytest.mark.tensorflow
def test_a_compiled_decoding_loop_evaluates_no_sinusoid():
    """XLA fuses an elementwise producer into each of its consumers: the
    position formula evaluated per decoding step was computed again in
    every kernel reading the embedding (4 sines and 4 cosines here, half of
    a small model's greedy step). Gathered from the folded table, the
    optimized program has none."""
    import tensorflow as tf

    from keras_attention.seq2seq import TransformerSeq2Seq
    from keras_attention.seq2seq.generation import greedy_search

    model = TransformerSeq2Seq(
        50, 50, hidden_dim=16, num_heads=2, intermediate_dim=32, num_layers=1, max_length=8
    )
    model.build()
    search = tf.function(
        lambda source: greedy_search(model, source, 8)["tokens"], jit_compile=True, autograph=False
    )
    hlo = search.experimental_get_compiler_ir(tf.ones((2, 5), tf.int32))(stage="optimized_hlo")
    assert " while(" in hlo
    assert hlo.count(" sine(") == 0 and hlo.count(" cosine(") == 0
