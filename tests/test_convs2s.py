"""ConvS2S: GLUConv1D, MultiStepAttention, encoder/decoder, incremental
decoding, harness, bad input."""

import keras
import numpy as np
import pytest

from keras_attention import ConvS2SDecoder, ConvS2SEncoder, GLUConv1D, MultiStepAttention
from keras_attention.convs2s import PRESETS
from tests import reference
from tests.harness import run_layer_test
from tests.test_score_attention import random, randomise

B, T, D = 2, 7, 6


@pytest.mark.parametrize(
    "kernel_size,causal", [(3, False), (4, False), (3, True), (1, True), (2, True)]
)
@pytest.mark.parametrize("filters", [D, 5])
def test_glu_conv_matches_reference(rng, kernel_size, causal, filters):
    x = random(rng, B, T, D)
    mask = np.array([[1] * 5 + [0] * 2, [1] * 7], bool)
    layer = GLUConv1D(filters, kernel_size, causal=causal)
    layer(x)
    randomise(layer, rng)
    left, right = (kernel_size - 1, 0) if causal else ((kernel_size - 1) // 2, kernel_size // 2)
    residual = (
        "identity"
        if filters == D
        else (np.asarray(layer.residual_kernel), np.asarray(layer.residual_bias))
    )
    want = reference.glu_conv(
        x,
        np.asarray(layer.kernel),
        np.asarray(layer.bias),
        left,
        right,
        residual,
        mask.astype(float),
    )
    np.testing.assert_allclose(np.asarray(layer(x, mask=mask)), want, atol=1e-5)


def test_glu_conv_without_residual(rng):
    x = random(rng, B, T, D)
    layer = GLUConv1D(4, 3, residual=False)
    out = np.asarray(layer(x))
    want = reference.glu_conv(x, np.asarray(layer.kernel), np.asarray(layer.bias), 1, 1)
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_glu_conv_initialisation_scale():
    layer = GLUConv1D(64, 5, dropout=0.2)
    layer.build((None, None, 128))
    std = float(np.std(np.asarray(layer.kernel)))
    assert abs(std - np.sqrt(4 * 0.8 / (5 * 128))) < 0.01  # N(0, sqrt(4(1-p)/(k d_in)))


def test_causal_outputs_do_not_see_the_future(rng):
    x = random(rng, B, T, D)
    layer = GLUConv1D(D, 3, causal=True)
    before = np.asarray(layer(x))
    changed = x.copy()
    changed[:, 4:] += 5.0
    after = np.asarray(layer(changed))
    np.testing.assert_allclose(after[:, :4], before[:, :4], atol=1e-6)
    assert not np.allclose(after[:, 4:], before[:, 4:])


def test_padding_does_not_leak(rng):
    x = random(rng, B, T, D)
    mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1] * 6 + [0]], bool)
    layer = GLUConv1D(D, 5)
    out = np.asarray(layer(x, mask=mask))
    noisy = np.where(mask[..., None], x, 100.0).astype("float32")
    np.testing.assert_allclose(np.asarray(layer(noisy, mask=mask))[mask], out[mask], atol=1e-6)


def test_glu_conv_step_equals_full_causal(rng):
    x = random(rng, B, T, D)
    layer = GLUConv1D(5, 3, causal=True)
    full = np.asarray(layer(x))
    buffer = layer.init_buffer(B)
    steps = []
    for i in range(T):
        y, buffer = layer.step(x[:, i : i + 1], buffer)
        steps.append(np.asarray(y))
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


@pytest.mark.parametrize("width", [8, 5])
def test_multi_step_attention_matches_reference(rng, width):
    h, g = random(rng, B, T, width), random(rng, B, T, 8)
    z, values = random(rng, B, 4, 8), random(rng, B, 4, 8)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    layer = MultiStepAttention()
    layer(h, g, z, values)
    randomise(layer, rng)
    out, weights = layer(h, g, z, values, source_mask=mask, return_attention_scores=True)
    projection = (
        {}
        if width == 8
        else {"Wc": np.asarray(layer.context_kernel), "bc": np.asarray(layer.context_bias)}
    )
    want, want_w = reference.multi_step_attention(
        h,
        g,
        z,
        values,
        np.asarray(layer.state_kernel),
        np.asarray(layer.state_bias),
        mask,
        **projection,
    )
    np.testing.assert_allclose(np.asarray(weights), want_w, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
    assert np.all(np.asarray(weights)[0, :, 3] == 0.0)


def make_pair(dropout=0.0):
    encoder = ConvS2SEncoder(20, 8, [(12, 3), (10, 5)], max_length=16, dropout=dropout)
    decoder = ConvS2SDecoder(20, 8, [(12, 3), (9, 2), (12, 1)], max_length=16, dropout=dropout)
    return encoder, decoder


def tokens(rng, batch=B):
    source = rng.integers(1, 20, (batch, 7))
    source[0, 5:] = 0  # padding
    return source, rng.integers(1, 20, (batch, 6))


def test_encoder_returns_keys_and_values(rng):
    encoder, _ = make_pair()
    source, _ = tokens(rng)
    keys, values = encoder(source)
    e = np.asarray(encoder.token_embedding(source))
    np.testing.assert_allclose(np.asarray(values), np.asarray(keys) + e, atol=1e-6)  # z + e
    np.testing.assert_array_equal(np.asarray(keys._keras_mask), source != 0)
    # Padding does not leak: more padding leaves the real positions unchanged.
    longer = np.concatenate([source, np.zeros((B, 4), source.dtype)], 1)
    np.testing.assert_allclose(
        np.asarray(encoder(longer)[0])[:, :5], np.asarray(keys)[:, :5], atol=1e-5
    )
    # ... whereas an encoder that did not zero padding would differ: check the
    # test can tell, by feeding the padding as a real token.
    unmasked = np.where(longer == 0, 19, longer)
    assert not np.allclose(
        np.asarray(encoder(unmasked)[0])[0, :5], np.asarray(keys)[0, :5], atol=1e-5
    )


def test_incremental_decoding_equals_full_pass(rng):
    encoder, decoder = make_pair()
    source, target = tokens(rng)
    keys, values = encoder(source)
    full, full_scores = decoder(target, keys, values, return_attention_scores=True)
    cache = decoder.init_cache(keys, values)
    for i in range(target.shape[1]):
        logits, scores, cache = decoder.step(target[:, i], cache, i)
        np.testing.assert_allclose(np.asarray(logits), np.asarray(full)[:, i], atol=1e-5)
        for layer_scores, layer_full in zip(scores, full_scores):
            np.testing.assert_allclose(
                np.asarray(layer_scores), np.asarray(layer_full)[:, i], atol=1e-6
            )
    assert np.all(np.asarray(full_scores[0])[0, :, 5:] == 0.0)  # padded source gets no weight


def test_cache_reorder_equals_permuted_batch(rng):
    encoder, decoder = make_pair()
    source, target = tokens(rng, batch=3)
    order = np.array([2, 0, 0])
    keys, values = encoder(source)
    full = np.asarray(decoder(target[order], *encoder(source[order])))
    cache = decoder.init_cache(keys, values)
    for i in range(3):
        _, _, cache = decoder.step(target[:, i], cache, i)
    cache = keras.tree.map_structure(lambda t: keras.ops.take(t, order, axis=0), cache)
    for i in range(3, 6):
        logits, _, cache = decoder.step(target[order, i], cache, i)
        np.testing.assert_allclose(np.asarray(logits), full[:, i], atol=1e-5)


def test_step_inside_while_loop(rng):
    encoder, decoder = make_pair()
    source, target = tokens(rng)
    keys, values = encoder(source)
    full = np.asarray(decoder(target, keys, values))
    steps = target.shape[1]

    def body(i, cache, out):
        logits, _, cache = decoder.step(keras.ops.take(target, i, axis=1), cache, i)
        return i + 1, cache, keras.ops.slice_update(out, [0, i, 0], logits[:, None])

    _, _, out = keras.ops.while_loop(
        lambda i, c, o: i < steps,
        body,
        (0, decoder.init_cache(keys, values), keras.ops.zeros((B, steps, 20))),
    )
    np.testing.assert_allclose(np.asarray(out), full, atol=1e-5)


def test_presets_build():
    preset = PRESETS["tiny"]
    encoder = ConvS2SEncoder(11, preset["embed_dim"], preset["encoder"], max_length=8)
    decoder = ConvS2SDecoder(11, preset["embed_dim"], preset["decoder"], max_length=8)
    source = np.ones((1, 5), "int32")
    assert decoder(source, *encoder(source)).shape == (1, 5, 11)


# -- harness --------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [
        {"filters": 6, "kernel_size": 3},
        {"filters": 4, "kernel_size": 4, "dropout": 0.1},
        {"filters": 6, "kernel_size": 2, "causal": True},
    ],
)
def test_harness_glu_conv(rng, kwargs):
    x = random(rng, B, T, D)
    mask = np.array([[1] * 5 + [0] * 2, [1] * 6 + [0]], bool)
    run_layer_test(
        GLUConv1D,
        kwargs,
        inputs={"inputs": x, "mask": mask},
        masked_inputs={"inputs": ~mask},
        valid_outputs=mask,
    )


def test_harness_multi_step_attention(rng):
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], bool)
    run_layer_test(
        MultiStepAttention,
        {},
        inputs={
            "decoder_state": random(rng, B, T, 5),
            "target_embedding": random(rng, B, T, 8),
            "encoder_keys": random(rng, B, 4, 8),
            "encoder_values": random(rng, B, 4, 8),
            "source_mask": mask,
        },
        masked_inputs={"encoder_keys": ~mask, "encoder_values": ~mask},
    )


def test_harness_encoder(rng):
    source, _ = tokens(rng)
    run_layer_test(
        ConvS2SEncoder,
        {
            "vocab_size": 20,
            "embed_dim": 8,
            "convolutions": [(12, 3), (12, 3)],
            "max_length": 16,
            "dropout": 0.1,
        },
        inputs={"source_tokens": source.astype("int32")},
    )


def test_harness_decoder(rng):
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    run_layer_test(
        ConvS2SDecoder,
        {"vocab_size": 20, "embed_dim": 8, "convolutions": [(12, 3), (10, 2)], "max_length": 16},
        inputs={
            "target_tokens": rng.integers(1, 20, (B, 6)).astype("int32"),
            "encoder_keys": random(rng, B, 5, 8),
            "encoder_values": random(rng, B, 5, 8),
            "source_mask": mask,
        },
        call_kwargs={"return_attention_scores": True},
        masked_inputs={"encoder_keys": ~mask, "encoder_values": ~mask},
    )


# -- bad input --------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"filters": 0, "kernel_size": 3}, r"`filters` of GLUConv1D must be a positive integer"),
        (
            {"filters": 4, "kernel_size": 0},
            r"`kernel_size` of GLUConv1D must be a positive integer",
        ),
        (
            {"filters": 4, "kernel_size": 3, "dropout": 2.0},
            r"`dropout` of GLUConv1D must be a float",
        ),
    ],
)
def test_error_glu_conv_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        GLUConv1D(**kwargs)


def test_error_step_needs_causal(rng):
    layer = GLUConv1D(4, 3)
    layer(random(rng, B, T, D))
    with pytest.raises(ValueError, match="needs causal=True"):
        layer.step(random(rng, B, 1, D), layer.init_buffer(B))


def test_error_width_mismatch_names_both_widths(rng):
    with pytest.raises(
        ValueError,
        match=r"`target_embedding` must have the width of `encoder_keys` \(E = 8\).*"
        r"received target_embedding width 6 and encoder_keys width 8",
    ):
        MultiStepAttention()(
            random(rng, B, T, 5), random(rng, B, T, 6), random(rng, B, 4, 8), random(rng, B, 4, 8)
        )
    _, decoder = make_pair()
    with pytest.raises(ValueError, match=r"embed_dim = 8.*received encoder width 6"):
        decoder(np.ones((B, 3), "int32"), random(rng, B, 4, 6), random(rng, B, 4, 6))


def test_error_convolutions_and_positions(rng):
    with pytest.raises(
        ValueError, match=r"`convolutions` of ConvS2SEncoder must be a non-empty list"
    ):
        ConvS2SEncoder(10, 8, [])
    with pytest.raises(ValueError, match=r"must hold \(width, kernel_size\) pairs; received 3"):
        ConvS2SDecoder(10, 8, [3])
    encoder = ConvS2SEncoder(10, 8, [(8, 3)], max_length=4)
    with pytest.raises(
        ValueError, match=r"max_length=4\) has positions 0..3; received positions 0..5"
    ):
        encoder(np.ones((1, 6), "int32"))


def test_init_cache_builds_an_unbuilt_decoder(rng):
    encoder, decoder = make_pair()
    source, target = tokens(rng)
    keys, values = encoder(source)
    logits, _, _ = decoder.step(target[:, 0], decoder.init_cache(keys, values), 0)
    np.testing.assert_allclose(
        np.asarray(logits), np.asarray(decoder(target, keys, values))[:, 0], atol=1e-5
    )


# -- fairseq fconv ------------------------------------------------------------------
# fairseq's FConvEncoder / FConvDecoder / AttentionLayer (eval mode), transcribed
# into NumPy from its equations with its own parameter layouts: Linear weights
# (out, in), ConvTBC weights (k, in, out), learned positions from padding_idx + 1.
# Our layers get these parameters by the porting recipe of ConvS2SDecoder's
# docstring, so the test checks the recipe too.
PAD = 1
SQ = np.sqrt(0.5)


def _fs_linear(x, p):
    return x @ p["weight"].T + p["bias"]


def _fs_conv_tbc(x, p, left, right):
    k = p["weight"].shape[0]
    xp = np.pad(x, ((0, 0), (left, right), (0, 0)))
    return sum(xp[:, j : j + x.shape[1]] @ p["weight"][j] for j in range(k)) + p["bias"]


def _fs_glu(x):
    a, b = np.split(x, 2, axis=-1)
    return a / (1 + np.exp(-b))


def _fs_embed(p, tokens):
    nonpad = tokens != PAD
    positions = np.cumsum(nonpad, 1) * nonpad + PAD  # make_positions
    return p["tokens"][tokens] + p["positions"][positions]


def fairseq_fconv(p, src, tgt):
    pad = src == PAD  # (B, S)
    x = e = _fs_embed(p["encoder"], src)
    x = _fs_linear(x, p["encoder"]["fc1"])
    for layer in p["encoder"]["layers"]:
        residual = x if layer["proj"] is None else _fs_linear(x, layer["proj"])
        x = np.where(pad[..., None], 0.0, x)
        k = layer["conv"]["weight"].shape[0]
        x = _fs_glu(_fs_conv_tbc(x, layer["conv"], (k - 1) // 2, k // 2))
        x = (x + residual) * SQ
    z = np.where(pad[..., None], 0.0, _fs_linear(x, p["encoder"]["fc2"]))
    y = (z + e) * SQ
    g = _fs_embed(p["decoder"], tgt)
    x = _fs_linear(g, p["decoder"]["fc1"])
    for layer in p["decoder"]["layers"]:
        residual = x if layer["proj"] is None else _fs_linear(x, layer["proj"])
        k = layer["conv"]["weight"].shape[0]
        x = _fs_glu(_fs_conv_tbc(x, layer["conv"], k - 1, 0))  # future steps removed
        # AttentionLayer
        attention_residual = x
        q = (_fs_linear(x, layer["in_projection"]) + g) * SQ
        scores = np.where(pad[:, None, :], -np.inf, q @ z.transpose(0, 2, 1))
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        s = (~pad).sum(1)[:, None, None].astype(float)
        c = (weights @ y) * (s * np.sqrt(1.0 / s))
        x = (_fs_linear(c, layer["out_projection"]) + attention_residual) * SQ
        x = (x + residual) * SQ
    return _fs_linear(_fs_linear(x, p["decoder"]["fc2"]), p["decoder"]["fc3"])


def _fs_params(rng, vocab, embed, enc_convs, dec_convs, out_embed, max_positions):
    def linear(n_in, n_out):
        return {"weight": rng.normal(0, 0.4, (n_out, n_in)), "bias": rng.normal(0, 0.1, n_out)}

    def conv(k, n_in, n_out):
        return {
            "weight": rng.normal(0, 0.3, (k, n_in, 2 * n_out)),
            "bias": rng.normal(0, 0.1, 2 * n_out),
        }

    def stack(convs, attention):
        width, layers = convs[0][0], []
        for out, k in convs:
            layer = {
                "proj": None if width == out else linear(width, out),
                "conv": conv(k, width, out),
            }
            if attention:
                layer.update(in_projection=linear(out, embed), out_projection=linear(embed, out))
            layers.append(layer)
            width = out
        return layers, width

    def embeddings():
        return {
            "tokens": rng.normal(0, 0.5, (vocab, embed)),
            "positions": rng.normal(0, 0.5, (max_positions + PAD + 1, embed)),
        }

    enc_layers, enc_width = stack(enc_convs, False)
    dec_layers, dec_width = stack(dec_convs, True)
    return {
        "encoder": {
            **embeddings(),
            "fc1": linear(embed, enc_convs[0][0]),
            "layers": enc_layers,
            "fc2": linear(enc_width, embed),
        },
        "decoder": {
            **embeddings(),
            "fc1": linear(embed, dec_convs[0][0]),
            "layers": dec_layers,
            "fc2": linear(dec_width, out_embed),
            "fc3": linear(out_embed, vocab),
        },
    }


def _port_fconv(p, encoder, decoder):
    """Load fairseq-layout parameters (weight norm already folded)."""

    def dense(layer, q):
        layer.kernel.assign(q["weight"].T)
        layer.bias.assign(q["bias"])

    for ours, theirs in ((encoder, p["encoder"]), (decoder, p["decoder"])):
        ours.token_embedding.embeddings.assign(theirs["tokens"])
        table = ours.token_embedding.position_embedding.position_embeddings
        table.assign(theirs["positions"][PAD + 1 : PAD + 1 + table.shape[0]])
        dense(ours.in_projection, theirs["fc1"])
        for conv, layer in zip(ours.convolution_layers, theirs["layers"]):
            conv.kernel.assign(layer["conv"]["weight"])
            conv.bias.assign(layer["conv"]["bias"])
    dense(encoder.out_projection, p["encoder"]["fc2"])
    for conv, layer in zip(encoder.convolution_layers, p["encoder"]["layers"]):
        if layer["proj"] is not None:
            conv.residual_kernel.assign(layer["proj"]["weight"].T)
            conv.residual_bias.assign(layer["proj"]["bias"])
    for index, layer in enumerate(p["decoder"]["layers"]):
        if layer["proj"] is not None:
            dense(decoder.residual_projections[index], layer["proj"])
        attention = decoder.attention_layers[index]
        attention.state_kernel.assign(layer["in_projection"]["weight"].T)
        attention.state_bias.assign(layer["in_projection"]["bias"])
        attention.context_kernel.assign(layer["out_projection"]["weight"].T)
        attention.context_bias.assign(layer["out_projection"]["bias"])
    dense(decoder.hidden_projection, p["decoder"]["fc2"])
    dense(decoder.output_projection, p["decoder"]["fc3"])


def _ported_fconv(rng):
    vocab, embed, max_length = 15, 6, 10
    enc_convs, dec_convs = [(8, 3), (5, 2)], [(8, 3), (7, 2), (7, 1)]
    p = _fs_params(rng, vocab, embed, enc_convs, dec_convs, 4, max_length)
    common = dict(max_length=max_length, dropout=0.0, padding_id=PAD, fairseq_compatible=True)
    encoder = ConvS2SEncoder(vocab, embed, enc_convs, **common)
    decoder = ConvS2SDecoder(vocab, embed, dec_convs, output_embed_dim=4, **common)
    source = rng.integers(2, vocab, (2, 6))
    source[0, 4:] = PAD  # right padding
    target = rng.integers(2, vocab, (2, 5))
    keys, values = encoder(source)
    decoder(target, keys, values, source_mask=source != PAD)
    _port_fconv(p, encoder, decoder)
    return encoder, decoder, source, target, fairseq_fconv(p, source, target)


# TensorFlow only to keep the portable JAX run short (eager JAX takes over a
# minute here); the layers are keras.ops and their harness runs on JAX.
@pytest.mark.tensorflow
def test_fairseq_compatible_matches_fairseq_fconv_equations(rng):
    encoder, decoder, source, target, want = _ported_fconv(rng)
    keys, values = encoder(source)
    full = np.asarray(decoder(target, keys, values, source_mask=source != PAD))
    np.testing.assert_allclose(full, want, rtol=1e-4, atol=1e-4)
    # The default (the paper as written) differs: fairseq is a choice.
    plain = MultiStepAttention()
    h, g, z = random(rng, 1, 2, 6), random(rng, 1, 2, 6), random(rng, 1, 3, 6)
    assert plain(h, g, z, z).shape == MultiStepAttention(fairseq_compatible=True)(h, g, z, z).shape
    assert plain.context_kernel is None  # C = E: no projection unless fairseq_compatible


@pytest.mark.tensorflow  # eager step-by-step decoding is slow on JAX; the equations are portable
def test_fairseq_compatible_incremental_decoding_matches_fairseq(rng):
    encoder, decoder, source, target, want = _ported_fconv(rng)
    keys, values = encoder(source)
    cache = decoder.init_cache(keys, values, source != PAD)
    for i in range(target.shape[1]):
        logits, _, cache = decoder.step(target[:, i], cache, i)
        np.testing.assert_allclose(np.asarray(logits), want[:, i], rtol=1e-4, atol=1e-4)


@pytest.mark.tensorflow  # the decoder's harness already runs on JAX; this adds only the config
def test_harness_fairseq_decoder(rng):
    keys = random(rng, B, 4, 8)
    run_layer_test(
        ConvS2SDecoder,
        {
            "vocab_size": 11,
            "embed_dim": 8,
            "convolutions": [(6, 3), (5, 2)],
            "max_length": 8,
            "dropout": 0.0,
            "fairseq_compatible": True,
            "output_embed_dim": 3,
        },
        inputs={
            "target_tokens": rng.integers(1, 11, (B, 3)),
            "encoder_keys": keys,
            "encoder_values": keys,
        },
    )


@pytest.mark.tensorflow
def test_fairseq_compatible_model_config_round_trip(rng):
    from keras_attention.seq2seq import ConvS2SSeq2Seq

    model = ConvS2SSeq2Seq.from_preset("tiny", 20, 20, fairseq_compatible=True, output_embed_dim=8)
    inputs = (rng.integers(3, 20, (2, 4)), rng.integers(3, 20, (2, 3)))
    want = np.asarray(model(inputs))
    clone = ConvS2SSeq2Seq.from_config(model.get_config())
    clone(inputs)
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(np.asarray(clone(inputs)), want, atol=1e-6)
    assert clone.decoder.hidden_projection.units == 8 and clone.encoder.fairseq_compatible


def test_glu_conv_on_zero_time_steps_gets_a_value_error():
    with pytest.raises(
        ValueError,
        match=r"`inputs` of GLUConv1D must have at least one time step; received .*\(2, 0, 4\)",
    ):
        GLUConv1D(4, 3)(np.ones((2, 0, 4), "float32"))
