"""Transformer encoder/decoder layers and FeedForward: reference values,
cached decoding, harness, bad input."""

import keras
import numpy as np
import pytest

from keras_attention import FeedForward, TransformerDecoderLayer, TransformerEncoderLayer
from tests import reference
from tests.harness import run_layer_test
from tests.test_multi_head import weights_of
from tests.test_score_attention import random, randomise

B, T, S, D = 2, 5, 6, 8


def norm(layer, x):
    return reference.layer_norm(x, np.asarray(layer.gamma), np.asarray(layer.beta), layer.epsilon)


def ffn(layer, x):
    return reference.feed_forward(
        x,
        np.asarray(layer.intermediate.kernel),
        np.asarray(layer.intermediate.bias),
        np.asarray(layer.projection.kernel),
        np.asarray(layer.projection.bias),
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_reference(rng, norm_first):
    x = random(rng, B, T, D)
    mask = np.array([[1, 1, 1, 0, 0], [1] * 5], bool)
    layer = TransformerEncoderLayer(num_heads=2, intermediate_dim=16, norm_first=norm_first)
    layer(x)
    randomise(layer, rng)
    out = np.asarray(layer(x, padding_mask=mask))

    def attention(h):
        return reference.multi_head(h, h, h, weights_of(layer.self_attention), mask[:, None, :])[0]

    if norm_first:  # x + Sublayer(LayerNorm(x))
        h = x + attention(norm(layer.self_attention_norm, x))
        want = h + ffn(layer.feed_forward, norm(layer.feed_forward_norm, h))
    else:  # LayerNorm(x + Sublayer(x)), the seeds' encoder listing
        h = norm(layer.self_attention_norm, x + attention(x))
        want = norm(layer.feed_forward_norm, h + ffn(layer.feed_forward, h))
    np.testing.assert_allclose(out, want, atol=1e-4)


def test_decoder_matches_reference(rng):
    x, enc = random(rng, B, T, D), random(rng, B, S, 4)
    enc_mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    layer = TransformerDecoderLayer(num_heads=2, intermediate_dim=16)
    layer(x, enc)
    randomise(layer, rng)
    out, scores = layer(x, enc, encoder_padding_mask=enc_mask, return_attention_scores=True)
    self_w, cross_w = weights_of(layer.self_attention), weights_of(layer.cross_attention)
    h = norm(
        layer.self_attention_norm,
        x + reference.multi_head(x, x, x, self_w, reference.causal(T)[None])[0],
    )
    cross, cross_scores = reference.multi_head(h, enc, enc, cross_w, enc_mask[:, None, :])
    h = norm(layer.cross_attention_norm, h + cross)
    want = norm(layer.feed_forward_norm, h + ffn(layer.feed_forward, h))
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
    np.testing.assert_allclose(np.asarray(scores["cross_attention"]), cross_scores, atol=1e-5)
    assert np.all(np.triu(np.asarray(scores["self_attention"]), 1) == 0.0)


VARIANTS = [  # MultiHead's issue-14 variants, passed to the self-attention (each one's
    # cached == full is tested on MultiHead, two here, all three on TransformerSeq2Seq)
    {"position_encoding": "rope", "num_key_value_heads": 1},
    {"position_encoding": "alibi", "sliding_window": 2},
    {"position_encoding": "relative", "max_relative_position": 2},
]


@pytest.mark.parametrize(
    "norm_first,with_encoder,variant",
    [(n, e, {}) for n in (False, True) for e in (True, False)]
    + [(False, True, VARIANTS[1]), (True, False, VARIANTS[0])],
)
def test_cached_decoding_equals_full_pass(rng, norm_first, with_encoder, variant):
    x, enc = random(rng, B, T, D), random(rng, B, S, D)
    enc_mask = np.array([[1, 1, 1, 0, 0, 0], [1] * 6], bool) if with_encoder else None
    encoder = enc if with_encoder else None
    layer = TransformerDecoderLayer(
        num_heads=2, intermediate_dim=16, norm_first=norm_first, **variant
    )
    full, scores = layer(x, encoder, encoder_padding_mask=enc_mask, return_attention_scores=True)
    cache = layer.init_cache(B, T, encoder)
    outputs = []
    for i in range(T):
        out, cross_scores, cache = layer.step(
            x[:, i : i + 1], cache, i, encoder_padding_mask=enc_mask
        )
        outputs.append(np.asarray(out))
        if with_encoder:
            np.testing.assert_allclose(
                np.asarray(cross_scores)[:, :, 0],
                np.asarray(scores["cross_attention"])[:, :, i],
                atol=1e-5,
            )
    np.testing.assert_allclose(np.concatenate(outputs, 1), np.asarray(full), atol=1e-5)


def test_cache_reorders_along_batch(rng):
    x, enc = random(rng, 3, T, D), random(rng, 3, S, D)
    layer = TransformerDecoderLayer(num_heads=2, intermediate_dim=16)
    order = np.array([2, 0, 0])
    full = np.asarray(layer(x[order], enc[order]))
    cache = layer.init_cache(3, T, enc)
    first, _, cache = layer.step(x[:, :2], cache, 0)
    cache = keras.tree.map_structure(lambda t: keras.ops.take(t, order, axis=0), cache)
    rest, _, cache = layer.step(x[order, 2:], cache, 2)
    np.testing.assert_allclose(np.asarray(rest), full[:, 2:], atol=1e-5)


def test_encoder_uses_keras_mask():
    tokens = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    x = keras.layers.Embedding(10, D, mask_zero=True)(tokens)
    layer = TransformerEncoderLayer(num_heads=2, intermediate_dim=8)
    out = layer(x)
    explicit = layer(keras.ops.convert_to_tensor(np.asarray(x)), padding_mask=tokens != 0)
    np.testing.assert_allclose(np.asarray(out)[0, :3], np.asarray(explicit)[0, :3], atol=1e-6)
    np.testing.assert_array_equal(np.asarray(out._keras_mask), tokens != 0)


def test_harness_feed_forward(rng):
    run_layer_test(
        FeedForward,
        {"intermediate_dim": 12, "dropout": 0.1},
        inputs={"inputs": random(rng, B, T, D)},
    )


@pytest.mark.parametrize("norm_first", [False, True])
def test_harness_encoder(rng, norm_first):
    x = random(rng, B, T, D)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], bool)
    run_layer_test(
        TransformerEncoderLayer,
        {"num_heads": 2, "intermediate_dim": 16, "norm_first": norm_first, "dropout": 0.1},
        inputs={"inputs": x, "padding_mask": mask},
        masked_inputs={"inputs": ~mask},
        valid_outputs=mask,
    )


def test_harness_decoder(rng):
    x, enc = random(rng, B, T, D), random(rng, B, S, 4)
    enc_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], bool)
    run_layer_test(
        TransformerDecoderLayer,
        {"num_heads": 2, "intermediate_dim": 16},
        inputs={"decoder_sequence": x, "encoder_sequence": enc, "encoder_padding_mask": enc_mask},
        call_kwargs={"return_attention_scores": True},
        masked_inputs={"encoder_sequence": ~enc_mask},
    )


def test_variants_apply_to_self_attention_only(rng):
    layer = TransformerDecoderLayer(2, 16, **VARIANTS[2], num_key_value_heads=1)
    layer(random(rng, B, T, D), random(rng, B, S, 4))
    assert layer.self_attention.position_encoding == "relative"
    assert layer.cross_attention.position_encoding is None  # content-based
    assert layer.cross_attention.num_key_value_heads == 1
    restored = TransformerDecoderLayer.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()


def test_harness_decoder_only(rng):
    run_layer_test(
        TransformerDecoderLayer,
        {"num_heads": 2, "intermediate_dim": 8, "key_dim": 3},
        inputs={"decoder_sequence": random(rng, B, T, D)},
    )


def test_error_heads_do_not_divide(rng):
    with pytest.raises(
        ValueError, match=r"`num_heads` must divide the model width.*num_heads=3 for width 8"
    ):
        TransformerEncoderLayer(num_heads=3, intermediate_dim=8)(random(rng, B, T, D))
    with pytest.raises(ValueError, match=r"num_heads=3 for width 8"):
        TransformerDecoderLayer(num_heads=3, intermediate_dim=8)(random(rng, B, T, D))


def test_error_encoder_presence(rng):
    layer = TransformerDecoderLayer(2, 8)
    layer(random(rng, B, T, D), random(rng, B, S, D))
    with pytest.raises(
        ValueError, match="built with an encoder_sequence .* called with no encoder_sequence"
    ):
        layer(random(rng, B, T, D))


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            {"num_heads": 0, "intermediate_dim": 8},
            r"`num_heads` of TransformerEncoderLayer must be a positive",
        ),
        (
            {"num_heads": 2, "intermediate_dim": 0},
            r"`intermediate_dim` of TransformerEncoderLayer must be a positive",
        ),
        (
            {"num_heads": 2, "intermediate_dim": 8, "dropout": 1.0},
            r"`dropout` of TransformerEncoderLayer",
        ),
    ],
)
def test_error_constructor(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        TransformerEncoderLayer(**kwargs)


def test_error_rank(rng):
    with pytest.raises(ValueError, match=r"`inputs` of TransformerEncoderLayer must have rank 3"):
        TransformerEncoderLayer(2, 8)(random(rng, B, D))


def test_error_init_cache_before_build():
    with pytest.raises(
        ValueError, match=r"TransformerDecoderLayer.init_cache\(\) needs a built layer"
    ):
        TransformerDecoderLayer(2, 8).init_cache(2, 4)


BAD_EPSILONS = {
    "layer_norm_epsilon 0": (
        lambda: TransformerEncoderLayer(2, 8, layer_norm_epsilon=0.0),
        r"`layer_norm_epsilon` of TransformerEncoderLayer must be a number > 0 .*=0.0",
    ),
    "layer_norm_epsilon < 0": (
        lambda: TransformerDecoderLayer(2, 8, layer_norm_epsilon=-1e-5),
        r"`layer_norm_epsilon` of TransformerDecoderLayer must be a number > 0",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_EPSILONS))
def test_a_layer_norm_epsilon_must_be_positive(case):
    call, pattern = BAD_EPSILONS[case]
    with pytest.raises(ValueError, match=pattern):
        call()


def hlo_computations(hlo):
    """`{name: lines}` of the computations of an optimized XLA program."""
    import re

    computations, name = {}, None
    for line in hlo.splitlines():
        if not line.startswith(" ") and line.rstrip().endswith("{"):
            name = re.match(r"^(?:ENTRY )?%?([\w.\-]+) ", line).group(1)
            computations[name] = []
        elif name is not None:
            computations[name].append(line)
    return computations


def loop_computations(hlo):
    """`{name: lines}` of the while loops' bodies and of every computation
    they call (their fusions), transitively."""
    import re

    computations = hlo_computations(hlo)
    todo = [match.group(1) for match in re.finditer(r"body=%([\w.\-]+)", hlo)]
    found = {}
    while todo:
        name = todo.pop()
        if name not in found and name in computations:
            found[name] = computations[name]
            todo += [
                m.group(1) for line in found[name] for m in re.finditer(r"calls=%([\w.\-]+)", line)
            ]
    return found


def compiled_greedy(model):
    """The optimized XLA program of `model`'s greedy search, 8 tokens, over
    one source of 5 tokens."""
    import tensorflow as tf

    from keras_attention.seq2seq.generation import greedy_search

    search = tf.function(
        lambda source: greedy_search(model, source, 8)["tokens"], jit_compile=True, autograph=False
    )
    return search.experimental_get_compiler_ir(tf.ones((1, 5), tf.int32))(stage="optimized_hlo")


def copies_in_the_loop(hlo, shapes):
    """The copies and transposes of a value of one of `shapes` (HLO shape
    strings) that a while loop of `hlo` makes."""
    return [
        line
        for lines in loop_computations(hlo).values()
        for line in lines
        if any(shape in line for shape in shapes) and (" copy(" in line or "transpose(" in line)
    ]


def fusions_with_a_product(hlo):
    """The loop fusions (`kind=kLoop`) of an optimized XLA program whose
    computation holds a `dot`: products XLA emits as elemental loops."""
    import re

    computations = hlo_computations(hlo)
    called = [re.search(r"calls=%([\w.\-]+)", line) for line in hlo.splitlines()]
    return [
        match.group(1)
        for line, match in zip(hlo.splitlines(), called)
        if "kind=kLoop" in line
        and match
        and any(" dot(" in body for body in computations[match.group(1)])
    ]


@pytest.mark.tensorflow
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_a_compiled_batch_one_decoding_step_makes_no_product_an_elemental_loop(int8, tied):
    """XLA's CPU compiler fuses a kernel reshaped inside the loop into a
    matrix-vector product (batch 1) and emits it as an elemental loop, about
    4x its matrix-vector routine. The step's query/key/value product and the
    cross-attention query read kernels laid out before the loop instead
    (`MultiHead.loop_kernels`), so no product of the compiled greedy search
    is a loop fusion."""

    from keras_attention.seq2seq import TransformerSeq2Seq

    model = TransformerSeq2Seq(
        50,
        50,
        hidden_dim=16,
        num_heads=2,
        intermediate_dim=32,
        num_layers=1,
        max_length=8,
        tie_embeddings=tied,
    )
    model.build()
    if int8:
        model.quantize("int8")
    hlo = compiled_greedy(model)
    assert " while(" in hlo
    # Calibrated on TensorFlow 2.21's XLA: a failure after an upgrade may be
    # XLA's fusion choices, not the library (look at the fusion's dot).
    assert fusions_with_a_product(hlo) == [], "a batch-1 product became an elemental loop"
    # A tied projection's table is transposed once a call, not at every step.
    table_copies = copies_in_the_loop(hlo, ("f32[16,50]", "f32[50,16]"))
    assert table_copies == []


@pytest.mark.tensorflow
def test_a_compiled_convs2s_step_does_not_copy_its_tied_table():
    """ConvS2S's tied output projection reads the table that the search's
    scope transposed once a call: no step of the compiled greedy search
    copies the table."""

    from keras_attention.seq2seq import ConvS2SSeq2Seq

    model = ConvS2SSeq2Seq(
        50,
        50,
        embed_dim=16,
        encoder_convolutions=[(16, 3)],
        decoder_convolutions=[(16, 3)],
        max_length=8,
        tie_embeddings=True,
    )
    model((np.ones((1, 5), "int32"), np.ones((1, 4), "int32")))
    hlo = compiled_greedy(model)
    table_copies = copies_in_the_loop(hlo, ("f32[16,50]", "f32[50,16]"))
    assert loop_computations(hlo) and table_copies == []
