"""Issue 11: inputs that used to give silently wrong answers or raw backend
errors. Masks that are not boolean, float16 scores past 65504, learned
positions past `max_length`, generation of padding/`<sos>`, and bad input
that must be a `ValueError`."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import (
    AdditiveAttention,
    BilinearSampler,
    ConvS2SSeq2Seq,
    DotProductAttention,
    GeneralAttention,
    GLUConv1D,
    LocalAttention,
    MultiHead,
    PositionalEmbedding,
    TokenAndPositionEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from keras_attention.seq2seq import beam_search, greedy_search, sample
from keras_attention.seq2seq.scheduled_sampling import scheduled_sampling_logits

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


def test_learned_positions_past_max_length_are_nan_where_nothing_can_raise():
    """Issue 24, section 4: a traced `start_index` (a decoding counter) under
    XLA, `jax.jit` or eagerly without a graph assert: the positions past the
    table get NaN (the documented sentinel), never a clamped row."""
    layer = _built_learned_positions()
    table = ops.convert_to_numpy(layer.position_embeddings)
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
    """Issue 24, section 4: `tf.function(jit_compile=True)` traced with an
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


@pytest.mark.tensorflow
def test_convs2s_past_max_length_under_xla_raises_when_the_length_is_static():
    import tensorflow as tf

    model = ConvS2SSeq2Seq(12, 12, 8, hidden_dim=8, num_layers=1, max_length=6)
    model.teacher_forced(np.full((1, 3), 4, "int32"), np.full((1, 3), 4, "int32"))
    translate = tf.function(lambda s: greedy_search(model, s, 2)["tokens"], jit_compile=True)
    assert translate(np.full((1, 6), 4, "int32")).shape == (1, 2)
    with pytest.raises(ValueError, match=r"max_length=6\) has positions 0..5"):
        translate(np.full((1, 10), 4, "int32"))


# -- generation (defect 16) ------------------------------------------------------

PAD, SOS, EOS, A, B = 0, 1, 2, 3, 4


class PaddingLovingModel:
    """A scripted `Seq2Seq` whose most probable tokens are padding and <sos>:

        after <sos>: pad 0.4, <sos> 0.3, A 0.2, <eos> 0.1
        after A:     pad 0.35, <sos> 0.35, <eos> 0.2, A 0.05, B 0.05
        otherwise:   <eos> 1

    Without padding and <sos>, greedy reads A <eos> (p = 0.2 · 0.2) and a
    beam of 2 finds <eos> (0.1) and A <eos> (0.04).
    """

    sos_id, eos_id, padding_id = SOS, EOS, PAD

    def __init__(self):
        table = np.full((5, 5), 1e-12)
        table[:, EOS] = 1.0
        table[SOS] = [0.4, 0.3, 0.1, 0.2, 1e-12]
        table[A] = [0.35, 0.35, 0.2, 0.05, 0.05]
        self.log_table = np.log(table / table.sum(1, keepdims=True)).astype("float32")

    def encode(self, source, max_length=None, training=None):
        return {"attention": ops.zeros((ops.shape(source)[0], ops.shape(source)[1]))}

    def decode_step(self, tokens, state, training=None):
        return ops.take(self.log_table, tokens, axis=0), state, state["attention"]

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


def _assert_real_tokens_then_padding(tokens, lengths):
    """Each row: `lengths` tokens none of which is padding or <sos>, the
    last of them <eos> unless the row is full, then padding only."""
    for row, length in zip(tokens.reshape(-1, tokens.shape[-1]), lengths.reshape(-1)):
        assert not np.isin(row[:length], [PAD, SOS]).any(), row
        assert (row[length:] == PAD).all(), row
        assert length == len(row) or row[length - 1] == EOS, row


def test_greedy_and_beam_never_generate_padding_or_sos():
    model, source = PaddingLovingModel(), np.ones((2, 3), "int32")
    greedy = {k: ops.convert_to_numpy(v) for k, v in greedy_search(model, source, 4).items()}
    np.testing.assert_array_equal(greedy["tokens"], [[A, EOS, PAD, PAD]] * 2)
    np.testing.assert_array_equal(greedy["lengths"], [2, 2])
    np.testing.assert_allclose(np.exp(greedy["scores"]), [0.04, 0.04], rtol=1e-5)

    beam = beam_search(model, source, 4, beam_width=2, alpha=0.0)
    beam = {k: ops.convert_to_numpy(v) for k, v in beam.items()}
    np.testing.assert_array_equal(beam["tokens"][0], [[EOS, PAD, PAD, PAD], [A, EOS, PAD, PAD]])
    np.testing.assert_allclose(np.exp(beam["scores"][0]), [0.1, 0.04], rtol=1e-5)
    _assert_real_tokens_then_padding(beam["tokens"], beam["lengths"])

    drawn = sample(model, np.ones((64, 3), "int32"), 4, seed=3)
    _assert_real_tokens_then_padding(
        ops.convert_to_numpy(drawn["tokens"]), ops.convert_to_numpy(drawn["lengths"])
    )
    # Scheduled sampling, free running: after <sos> the model's own argmax
    # is A (not padding), so step 1 sees the distribution after A.
    logits = scheduled_sampling_logits(
        model, source, np.full((2, 2), SOS, "int32"), 1.0, draw="argmax"
    )
    np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 1], model.log_table[[A, A]])


def test_top_k_beyond_the_usable_vocabulary_is_refused_and_a_wider_beam_is_padded():
    model, source = PaddingLovingModel(), np.ones((2, 3), "int32")
    usable = r"must be at most 3, the tokens it can generate \(a vocabulary of 5 less"
    with pytest.raises(ValueError, match=r"`top_k` of sample " + usable):
        sample(model, source, 4, top_k=6)
    assert beam_search(model, source, 4, beam_width=3)["tokens"].shape == (2, 3, 4)
    # A beam wider than the hypotheses there are (a wide beam is how an
    # exhaustive search is checked): in one step only <eos>, A and B can be
    # generated, so the fourth entry is empty, never a duplicate.
    beam = beam_search(model, source, 1, beam_width=4, alpha=0.0)
    beam = {k: ops.convert_to_numpy(v) for k, v in beam.items()}
    np.testing.assert_array_equal(beam["tokens"][0], [[EOS], [A], [B], [PAD]])
    np.testing.assert_array_equal(beam["lengths"][0], [1, 1, 1, 0])
    assert beam["scores"][0, 3] <= -1e8


# -- bad input: a ValueError, not a backend error -----------------------------------


@pytest.mark.parametrize(
    "layer", [AdditiveAttention(4), DotProductAttention(), MultiHead(num_heads=2)]
)
def test_a_keras_style_list_call_gets_a_pointed_error(layer):
    q, v = np.ones((2, 3, 4), "float32"), np.ones((2, 5, 4), "float32")
    with pytest.raises(ValueError, match=r"call `layer\(query, value\)`.*not `layer\(\[query"):
        layer([q, v])
    assert tuple(layer(q, v).shape) == (2, 3, 4)  # the right call works


def _cached_multi_head():
    layer = MultiHead(num_heads=2)
    x = np.ones((2, 3, 4), "float32")
    layer(x, x)
    return layer.step(x[:, :2], layer.init_cache(2, 3), 2)


BAD_INPUTS = {
    "batch mismatch": (
        lambda: DotProductAttention()(np.ones((2, 3, 4)), np.ones((3, 5, 4))),
        r"DotProductAttention: query, value, key must have the same batch size .* "
        r"received query 2, value 3, key 3",
    ),
    "batch mismatch, multi-head": (
        lambda: MultiHead(num_heads=2)(np.ones((2, 3, 4)), np.ones((3, 5, 4))),
        r"MultiHead: query, value, key must have the same batch size",
    ),
    "GLUConv1D on length 0": (
        lambda: GLUConv1D(4, 3)(np.ones((2, 0, 4), "float32")),
        r"`inputs` of GLUConv1D must have at least one time step; received .*\(2, 0, 4\)",
    ),
    "empty image": (
        lambda: BilinearSampler()(np.ones((1, 0, 0, 1)), np.zeros((1, 2, 2, 2))),
        r"`image` of BilinearSampler must have at least one pixel .*\(1, 0, 0, 1\)",
    ),
    "layer_norm_epsilon 0": (
        lambda: TransformerEncoderLayer(2, 8, layer_norm_epsilon=0.0),
        r"`layer_norm_epsilon` of TransformerEncoderLayer must be a number > 0 .*=0.0",
    ),
    "layer_norm_epsilon < 0": (
        lambda: TransformerDecoderLayer(2, 8, layer_norm_epsilon=-1e-5),
        r"`layer_norm_epsilon` of TransformerDecoderLayer must be a number > 0",
    ),
    "MultiHead.step past the cache": (
        _cached_multi_head,
        r"cache holds positions 0..2; received positions 2..3 \(cache_index=2, 2 new\)",
    ),
    "top_k above the vocabulary": (
        lambda: sample(PaddingLovingModel(), np.ones((1, 2), "int32"), 3, top_k=9),
        r"`top_k` of sample must be at most 3, .*received top_k=9",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_inputs_that_do_not_fit_get_value_errors(case):
    call, pattern = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=pattern):
        call()
