"""Inputs that used to give silently wrong answers or raw backend
errors. Masks that are not boolean, float16 scores past 65504, learned
positions past `max_length`, generation of padding/`<sos>`, and bad input
that must be a `ValueError`."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import (
    AdditiveAttention,
    AffineGrid,
    AttentionDecoder,
    BilinearSampler,
    ConcatAttention,
    ConvS2SSeq2Seq,
    DotProductAttention,
    FeedForward,
    GeneralAttention,
    GLUConv1D,
    LocalAttention,
    MultiHead,
    PositionalEmbedding,
    RotaryEmbedding,
    TokenAndPositionEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from keras_attention.seq2seq import GreedySearch, beam_search, greedy_search, sample
from keras_attention.seq2seq.scheduled_sampling import scheduled_sampling_logits
from tests.harness import BFLOAT16_CRASH, ONEDNN_CAPPED_BELOW_AVX512

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
    """A traced `start_index` (a decoding counter) under
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


# -- library arguments ------------------------------------------------------------


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


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_integer_and_boolean_inputs_are_refused_by_every_attention(name, dtype):
    # An int32 softmax is all zeros: DotProductAttention returned zeros.
    query, value = np.ones((1, 2, 4), dtype), np.ones((1, 3, 4), dtype)
    with pytest.raises(TypeError, match=r"`\w+` of \w+ must be a floating-point tensor; .*"):
        ATTENTIONS[name](query, value)


FLOAT_LAYERS = {
    "PositionalEmbedding": lambda x: PositionalEmbedding(8)(x),
    "PositionalEmbedding learned": lambda x: PositionalEmbedding(8, mode="learned")(x),
    "RotaryEmbedding": lambda x: RotaryEmbedding()(x),
    "TransformerEncoderLayer": lambda x: TransformerEncoderLayer(2, 8)(x),
    "TransformerDecoderLayer": lambda x: TransformerDecoderLayer(2, 8)(x, np.ones((1, 3, 4))),
    "FeedForward": lambda x: FeedForward(8)(x),
    "GLUConv1D": lambda x: GLUConv1D(4, 3)(x),
    "BilinearSampler": lambda x: BilinearSampler()(
        ops.reshape(x, (1, 2, 2, 3)), np.zeros((1, 2, 2, 2), "float32")
    ),
}


@pytest.mark.parametrize("name", sorted(FLOAT_LAYERS))
def test_integer_inputs_are_refused_by_the_positional_and_other_float_layers(name):
    # PositionalEmbedding on ints truncated its sinusoids to 0/1.
    with pytest.raises(TypeError, match="must be a floating-point tensor; received dtype int32"):
        FLOAT_LAYERS[name](np.ones((1, 3, 4), "int32"))


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


def test_a_mask_given_as_a_python_list_is_taken_as_an_array():
    query, value = np.ones((1, 2, 3), "float32"), np.arange(6, dtype="float32").reshape(1, 2, 3)
    listed = DotProductAttention()(query, value, value_mask=[[True, False]])
    np.testing.assert_allclose(np.asarray(listed), [[[0, 1, 2], [0, 1, 2]]])


@pytest.mark.parametrize("align_corners", [True, False])
def test_a_one_pixel_axis_samples_its_centre_as_pytorch(align_corners):
    # torch.nn.functional.affine_grid(identity, (1, 1, 1, 1), align_corners)
    # is [[[[0, 0]]]] for both values (linspace_from_neg_one returns 0 for
    # one step); for (1, 1, 1, 3) the x axis is linspace(-1, 1, 3) or
    # (2i + 1) / 3 - 1 and y is 0.
    identity = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], "float32")
    grid = np.asarray(AffineGrid((1, 1), align_corners=align_corners)(identity))
    np.testing.assert_allclose(grid, [[[[0.0, 0.0]]]])
    row = np.asarray(AffineGrid((1, 3), align_corners=align_corners)(identity))[0, 0]
    xs = [-1.0, 0.0, 1.0] if align_corners else [-2 / 3, 0.0, 2 / 3]
    np.testing.assert_allclose(row, np.stack([xs, [0.0] * 3], -1), atol=1e-6)


def test_plot_attention_refuses_an_alignment_too_large_to_draw():
    from keras_attention.seq2seq.plotting import plot_attention

    tokens = list(range(2000))
    with pytest.raises(ValueError, match=r"at most 150 tokens per axis; received 2000 target"):
        plot_attention(np.full((2000, 2000), 1e-3, "float32"), tokens, tokens)
    with pytest.raises(ValueError, match=r"draw fewer panels"):
        plot_attention(np.full((9, 100, 100), 1e-3, "float32"), tokens[:100], tokens[:100])


def _tiny(family="recurrent", **kwargs):
    from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq, TransformerSeq2Seq

    if family == "recurrent":
        return RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8, **kwargs)
    if family == "transformer":
        return TransformerSeq2Seq(
            10, 10, hidden_dim=8, num_heads=2, intermediate_dim=8, num_layers=1, **kwargs
        )
    return ConvS2SSeq2Seq(10, 10, 8, hidden_dim=8, num_layers=1, **kwargs)


def test_numpy_integers_are_taken_and_configs_hold_plain_ints():
    import json

    layer = AdditiveAttention(units=np.int64(8))
    assert type(layer.get_config()["units"]) is int
    head = MultiHead(np.int64(2), np.int32(4), num_key_value_heads=np.int64(1))
    config = head.get_config()
    assert (type(config["num_heads"]), type(config["num_key_value_heads"])) == (int, int)
    encoder = TransformerEncoderLayer(np.int64(2), np.int64(8), dropout=np.float32(0.25))
    json.dumps(encoder.get_config())
    json.dumps(ConcatAttention(hidden_units=[np.int64(4)]).get_config())
    json.dumps(LocalAttention(window=np.int16(2)).get_config())
    model = _tiny("transformer")
    source = np.array([[4, 5, 2]])
    tokens = greedy_search(model, source, max_length=np.int64(6))["tokens"]
    assert tuple(tokens.shape) == (1, 6)
    beams = beam_search(model, source, np.int32(4), beam_width=np.int64(2))["tokens"]
    assert tuple(beams.shape) == (1, 2, 4)


def _schedule(peak):
    from keras_attention.seq2seq import InverseSquareRootSchedule

    return InverseSquareRootSchedule(peak, 10)


def _scheduled_sampling(**kwargs):
    from keras_attention.seq2seq import ScheduledSampling

    return ScheduledSampling(**kwargs)


MEANINGLESS = {
    "RotaryEmbedding max_wavelength=0": (
        lambda: RotaryEmbedding(max_wavelength=0),
        r"`max_wavelength` of RotaryEmbedding must be a finite number > 0; received .*=0",
    ),
    "RotaryEmbedding max_wavelength=-10": (
        lambda: RotaryEmbedding(max_wavelength=-10),
        r"`max_wavelength` of RotaryEmbedding must be a finite number > 0",
    ),
    "RotaryEmbedding max_wavelength=inf": (
        lambda: RotaryEmbedding(max_wavelength=float("inf")),
        r"`max_wavelength` of RotaryEmbedding must be a finite number > 0",
    ),
    "MultiHead rope_max_wavelength=0": (
        lambda: MultiHead(2, 2, position_encoding="rope", rope_max_wavelength=0.0),
        r"`max_wavelength` of MultiHead must be a finite number > 0",
    ),
    "TokenAndPositionEmbedding padding_id=vocab_size": (
        lambda: TokenAndPositionEmbedding(10, 4, 8, padding_id=10),
        r"`padding_id` of TokenAndPositionEmbedding must be a token id in \[0, 10\)",
    ),
    "TransformerSeq2Seq hidden_dim=10, num_heads=4": (
        lambda: _transformer_seq2seq(hidden_dim=10, num_heads=4),
        r"`hidden_dim` of TransformerSeq2Seq must be divisible by `num_heads`.*"
        r"hidden_dim=10, num_heads=4",
    ),
    "InverseSquareRootSchedule peak=inf": (
        lambda: _schedule(float("inf")),
        r"`peak_learning_rate` of InverseSquareRootSchedule must be a finite number > 0",
    ),
    "InverseSquareRootSchedule peak=nan": (
        lambda: _schedule(float("nan")),
        r"`peak_learning_rate` of InverseSquareRootSchedule must be a finite number > 0",
    ),
    "ScheduledSampling k=inf": (
        lambda: _scheduled_sampling(schedule="inverse_sigmoid", k=float("inf")),
        r"`k` of ScheduledSampling must be a finite number > 0",
    ),
    "ScheduledSampling probability='0.5'": (
        lambda: _scheduled_sampling(probability="0.5"),
        r"`probability` of ScheduledSampling must be in \[0, 1\]; received probability='0.5'",
    ),
    "beam_search alpha=nan": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, alpha=float("nan")),
        r"`alpha` of beam_search must be a finite number >= 0; received alpha=nan",
    ),
    "beam_search coverage_penalty=inf": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, coverage_penalty=float("inf")),
        r"`coverage_penalty` of beam_search must be a number >= 0",
    ),
    "beam_search repetition_penalty=nan": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, repetition_penalty=float("nan")),
        r"`repetition_penalty` of beam_search must be a number > 0",
    ),
    "sample temperature=inf": (
        lambda: sample(_tiny(), np.array([[4, 2]]), 4, temperature=float("inf")),
        r"`temperature` of sample must be > 0 \(a finite number\); received temperature=inf",
    ),
    "sample top_p=nan": (
        lambda: sample(_tiny(), np.array([[4, 2]]), 4, top_p=float("nan")),
        r"`top_p` of sample must be in \(0, 1\]",
    ),
    "greedy_search min_length > max_length": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 6, min_length=10),
        r"`min_length` of greedy_search must be at most max_length=6",
    ),
    "beam_search coverage_penalty without attention": (
        lambda: beam_search(_tiny(attention=None), np.array([[4, 2]]), 4, coverage_penalty=0.2),
        r"`coverage_penalty` of beam_search needs a model with attention .* "
        r"RecurrentSeq2Seq has none",
    ),
    # Wrong types: our message, not Python's.
    "alpha='0.6'": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, alpha="0.6"),
        r"`alpha` of beam_search must be a finite number >= 0; received alpha='0.6'",
    ),
    "suppress_tokens=5": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 4, suppress_tokens=5),
        r"`suppress_tokens` of greedy_search must be a list of token ids",
    ),
    # Shapes: our message, not TensorFlow's.
    "greedy_search on an empty batch": (
        lambda: greedy_search(_tiny(), np.zeros((0, 3), "int32"), 4),
        r"`source` of greedy_search is an empty batch \(shape \(0, 3\)\)",
    ),
    "model((source, target)) with different batches": (
        lambda: _tiny()((np.ones((2, 3), "int32"), np.ones((3, 4), "int32"))),
        r"RecurrentSeq2Seq: source, target_in must have the same batch size .*source 2, "
        r"target_in 3",
    ),
    "AttentionDecoder target and memory batches differ": (
        lambda: AttentionDecoder(10, 4, 8, attention="dot")(
            np.ones((2, 3), "int32"), np.ones((3, 5, 8), "float32"), [np.zeros((2, 8))] * 2
        ),
        r"AttentionDecoder: target_tokens, memory must have the same batch size .*"
        r"target_tokens 2, memory 3",
    ),
    "BilinearSampler image and grid batches differ": (
        lambda: BilinearSampler()(np.ones((2, 4, 4, 1), "float32"), np.zeros((3, 2, 2, 2))),
        r"BilinearSampler: image, grid must have the same batch size .*image 2, grid 3",
    ),
    "MultiHead.init_cache(max_length=-1)": (
        lambda: MultiHead(2, 2).init_cache(1, max_length=-1),
        r"`max_length` of MultiHead.init_cache must be a positive integer; received .*=-1",
    ),
    # Token ids outside the vocabulary.
    "source id >= vocabulary": (
        lambda: greedy_search(_tiny(), np.array([[4, 50, 2]]), 4),
        r"`source` of greedy_search must hold token ids in \[0, 10\) .*holding 50 at index "
        r"\(0, 1\)",
    ),
    "negative source id": (
        lambda: greedy_search(_tiny(), np.array([[4, -5, 2]]), 4),
        r"`source` of greedy_search must hold token ids in \[0, 10\) .*holding -5",
    ),
    "prefix id >= vocabulary": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, prefix=np.array([[40]])),
        r"`prefix` of beam_search must hold token ids in \[0, 10\) .*holding 40",
    ),
    "prefix holding <sos>": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 4, prefix=np.array([[1, 4]])),
        r"`prefix` of greedy_search must not hold 1 \(<sos>",
    ),
    "model call with target ids >= vocabulary": (
        lambda: _tiny()((np.array([[4, 2]]), np.array([[1, 12]]))),
        r"`target_in` of RecurrentSeq2Seq must hold token ids in \[0, 10\) .*holding 12",
    ),
    # Float ids: the embedding's gather would truncate them (4.7 read as 4).
    "generate with float source ids": (
        lambda: _tiny().generate(np.array([[4.7, 2.0]], "float32"), GreedySearch(max_length=4)),
        r"`source` of \w+ must be integer token ids; received dtype float32",
    ),
    "beam_search with float source ids": (
        lambda: beam_search(_tiny(), np.array([[4.0, 2.0]]), 4),
        r"`source` of beam_search must be integer token ids; received dtype float64",
    ),
    "encode with float source ids": (
        lambda: _tiny("transformer").encode(np.array([[4.0, 2.0]], "float32")),
        r"`source` of TransformerSeq2Seq must be integer token ids; received dtype float32",
    ),
}


def _transformer_seq2seq(**kwargs):
    from keras_attention.seq2seq import TransformerSeq2Seq

    return TransformerSeq2Seq(10, 10, **kwargs)


@pytest.mark.parametrize("family", ["recurrent", "transformer", "convolutional"])
@pytest.mark.parametrize(
    "ids, pattern",
    [
        ({"sos_id": 2, "eos_id": 2}, r"`sos_id` and `eos_id` of \w+ must differ"),
        ({"eos_id": 0}, r"`eos_id` and `padding_id` of \w+ must differ"),
        ({"eos_id": 10}, r"`eos_id` of \w+ must be a token id in \[0, 10\)"),
        ({"padding_id": -1}, r"`padding_id` of \w+ must be a token id in \[0, 10\)"),
        ({"sos_id": np.int64(11)}, r"`sos_id` of \w+ must be a token id in \[0, 10\)"),
    ],
)
def test_every_family_refuses_special_ids_that_cannot_work(family, ids, pattern):
    with pytest.raises(ValueError, match=pattern):
        _tiny(family, **ids)


@pytest.mark.parametrize("case", sorted(MEANINGLESS))
def test_meaningless_values_wrong_types_and_ids_get_our_messages(case):
    call, pattern = MEANINGLESS[case]
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()


@pytest.mark.tensorflow
def test_target_ids_past_the_vocabulary_fail_in_the_graph_with_our_message():
    import tensorflow as tf

    import keras_attention.serving  # noqa: F401  (installs the run-time check)

    model = _tiny()
    model((np.array([[4, 2]]), np.array([[1, 4]])))
    spec = tf.TensorSpec((None, None), tf.int32)
    run = tf.function(lambda s, t: model((s, t)), input_signature=[spec, spec])
    assert run(np.array([[4, 2]], "int32"), np.array([[1, 4]], "int32")).shape == (1, 2, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`target_in` of RecurrentSeq2Seq"):
        run(np.array([[4, 2]], "int32"), np.array([[1, 12]], "int32"))


def test_fit_with_target_ids_past_the_vocabulary_names_the_array():
    model = _tiny()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    source, target_in = np.array([[4, 2]]), np.array([[1, 4]])
    with pytest.raises(ValueError, match=r"`y \(target_out\)` of RecurrentSeq2Seq.fit must hold"):
        model.fit((source, target_in), np.array([[4, 12]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`x\[0\] \(source\)` of RecurrentSeq2Seq.fit .*-1"):
        model.fit((np.array([[-1, 2]]), target_in), np.array([[4, 2]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`x\[0\] \(source\)` of .*fit must be integer token ids"):
        model.fit((source + 0.7, target_in), np.array([[4, 2]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`y \(target_out\)` of .*fit must be integer token ids"):
        model.fit((source, target_in), np.array([[4.0, 2.0]]), epochs=1, verbose=0)
