"""The MultiHead variants: RoPE, ALiBi, relative positions (Shaw),
grouped-query attention, sliding windows; references, equivalences, cached
decoding, the harness and bad input."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import LocalAttention, MultiHead
from keras_attention.relative_position import (
    RelativePositionEmbedding,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
)
from tests import reference
from tests.harness import run_layer_test
from tests.test_score_attention import random, randomise

B, T, D = 2, 6, 8

VARIANTS = {
    "rope": {"position_encoding": "rope"},
    "alibi": {"position_encoding": "alibi"},
    "relative": {"position_encoding": "relative", "max_relative_position": 2},
    "relative-keys-only": {
        "position_encoding": "relative",
        "max_relative_position": 3,
        "relative_values": False,
    },
    "gqa": {"num_key_value_heads": 2},
    "multi-query": {"num_key_value_heads": 1},
    "window": {"sliding_window": 2},
    "rope-gqa-window": {"position_encoding": "rope", "num_key_value_heads": 2, "sliding_window": 1},
}


def weights_of(layer):
    return {
        w.path.split("/")[-1]: np.asarray(w, np.float64)
        for w in layer.weights
        if "relative" not in w.path
    }


def built(rng, x, **kwargs):
    layer = MultiHead(num_heads=4, key_dim=4, **kwargs)
    layer(x, x)
    randomise(layer, rng)
    return layer


@pytest.mark.parametrize(
    "variant,causal",
    [(v, v in ("rope", "relative", "gqa", "window")) for v in VARIANTS]
    + [("alibi", True), ("window", False)],  # both directions where it matters
)
def test_matches_reference(rng, variant, causal):
    kwargs = VARIANTS[variant]
    x = random(rng, B, T, D)
    layer = built(rng, x, **kwargs)
    out, scores = layer(x, x, use_causal_mask=causal, return_attention_scores=True)
    relative = {}
    if kwargs.get("position_encoding") == "relative":
        relative["relative_key"] = np.asarray(layer.relative_key.embeddings, np.float64)
        if layer.relative_value is not None:
            relative["relative_value"] = np.asarray(layer.relative_value.embeddings, np.float64)
    want, want_scores = reference.multi_head_variant(
        x,
        x,
        x,
        weights_of(layer),
        reference.causal(T)[None] if causal else None,
        kv_heads=kwargs.get("num_key_value_heads"),
        position=kwargs.get("position_encoding"),
        slopes=[2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8],  # 2^(-8h/H), H = 4
        window=kwargs.get("sliding_window"),
        **relative,
    )
    np.testing.assert_allclose(np.asarray(scores), want_scores, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


@pytest.mark.parametrize(
    "variant", ["rope", "alibi", "relative", "relative-keys-only", "multi-query", "rope-gqa-window"]
)
def test_cached_decoding_equals_full_causal_pass(rng, variant):
    x = random(rng, B, T, D)
    layer = built(rng, x, **VARIANTS[variant])
    full = np.asarray(layer(x, x, use_causal_mask=True))
    cache = layer.init_cache(B, T)
    heads = VARIANTS[variant].get("num_key_value_heads", 4)
    assert tuple(cache[0].shape) == (B, heads, T, 4)  # the cache holds the KV heads only
    first, _, cache = layer.step(x[:, :3], cache, 0)  # a prompt, then one at a time
    outputs = [np.asarray(first)]
    for i in range(3, T):
        out, _, cache = layer.step(x[:, i : i + 1], cache, i)
        outputs.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-5)


def test_rotary_matches_reference_and_layer(rng):
    x = random(rng, B, T, D)
    out = np.asarray(RotaryEmbedding()(x, start_index=3))
    for b in range(B):
        np.testing.assert_allclose(out[b], reference.rope(x[b], np.arange(3, 3 + T)), atol=1e-5)


def test_rope_scores_depend_only_on_relative_offset(rng):
    x = random(rng, B, T, D)
    layer = built(rng, x, position_encoding="rope")
    positions = ops.arange(T)
    scores = []
    for shift in (0, 5, 37):
        key, value = layer.project_key_value(x, key_positions=positions + shift)
        _, weights = layer.attend(x, key, value, query_positions=positions + shift)
        scores.append(np.asarray(weights))
    np.testing.assert_allclose(scores[1], scores[0], atol=1e-5)
    np.testing.assert_allclose(scores[2], scores[0], atol=1e-5)


def test_alibi_slopes_follow_the_paper():
    np.testing.assert_allclose(alibi_slopes(8), [2.0**-k for k in range(1, 9)])
    # 6 heads: the 4 slopes of 4 heads, then every other slope of 8 heads.
    np.testing.assert_allclose(
        alibi_slopes(6), [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    )
    bias = np.asarray(alibi_bias(6, np.arange(4), np.arange(7)))
    distance = np.abs(np.arange(4)[:, None] - np.arange(7)[None, :])
    np.testing.assert_allclose(bias, -np.asarray(alibi_slopes(6))[:, None, None] * distance)


def test_alibi_extrapolates_past_the_training_length(rng):
    """Trained (one step) at length 6, run at length 48: no position table
    bounds it, the outputs are finite, and causal outputs of the first 6
    positions are those of the training length."""
    x = random(rng, B, 8 * T, D)
    inputs = keras.Input((None, D))
    layer = MultiHead(num_heads=2, key_dim=4, position_encoding="alibi")
    model = keras.Model(inputs, layer(inputs, inputs, use_causal_mask=True))
    model.compile("sgd", "mse")
    model.fit(x[:, :T], x[:, :T], verbose=0)
    long = np.asarray(model(x))
    assert long.shape == (B, 8 * T, D) and np.all(np.isfinite(long))
    np.testing.assert_allclose(long[:, :T], np.asarray(model(x[:, :T])), atol=1e-5)


def test_gqa_equals_multi_head_with_repeated_key_value_heads(rng):
    x = random(rng, B, T, D)
    gqa = built(rng, x, num_key_value_heads=2)
    plain = MultiHead(num_heads=4, key_dim=4)
    plain(x, x)
    for w in plain.weights:
        name = w.path.split("/")[-1]
        value = np.asarray(getattr(gqa, name))
        if name.startswith(("key", "value")):  # KV head g serves query heads 2g, 2g+1
            value = np.repeat(value, 2, axis=-2)
        w.assign(value)
    np.testing.assert_allclose(np.asarray(gqa(x, x)), np.asarray(plain(x, x)), atol=1e-5)
    # num_key_value_heads == num_heads is today's MultiHead, weights and all.
    same = MultiHead(num_heads=4, key_dim=4, num_key_value_heads=4)
    same(x, x)
    same.set_weights(plain.get_weights())
    np.testing.assert_allclose(np.asarray(same(x, x)), np.asarray(plain(x, x)), atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_sliding_window_is_local_monotonic_window(rng, causal):
    x = random(rng, B, T, D)
    # LocalAttention's half-width D keeps |i - j| <= D: sliding_window D + 1.
    layer = built(rng, x, sliding_window=3)
    _, scores = layer(x, x, use_causal_mask=causal, return_attention_scores=True)
    local = LocalAttention("scaled_dot", window=2, mode="monotonic")
    _, local_scores = local(x, x, use_causal_mask=causal, return_attention_scores=True)
    for head in range(4):
        np.testing.assert_array_equal(np.asarray(scores)[:, head] > 0, np.asarray(local_scores) > 0)


@pytest.mark.parametrize("peer_name", ["MultiHeadAttention", "GroupQueryAttention"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3])
def test_sliding_window_matches_keras(rng, causal, window, peer_name):
    """`sliding_window=s` keeps |i - j| < s, as Keras's MultiHeadAttention
    and GroupQueryAttention (same weights, same outputs and weights); 0.2.x
    kept |i - j| <= s."""
    x = random(rng, B, T, D)
    if peer_name == "MultiHeadAttention":
        peer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, sliding_window=window)
        ours = MultiHead(num_heads=2, key_dim=4, sliding_window=window)
    else:
        peer = keras.layers.GroupQueryAttention(
            head_dim=4, num_query_heads=4, num_key_value_heads=2, sliding_window=window
        )
        ours = MultiHead(num_heads=4, key_dim=4, num_key_value_heads=2, sliding_window=window)
    peer(x, x)
    randomise(peer, rng)
    ours(x, x)
    ours.set_weights(peer.get_weights())
    want, want_scores = peer(x, x, use_causal_mask=causal, return_attention_scores=True)
    got, scores = ours(x, x, use_causal_mask=causal, return_attention_scores=True)
    np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want), atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(scores), ops.convert_to_numpy(want_scores), atol=1e-6
    )
    kept = ops.convert_to_numpy(scores)[0, 0] > 0
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    np.testing.assert_array_equal(kept, (np.abs(i - j) < window) & ((j <= i) | (not causal)))


def test_sliding_window_of_a_0_2_config_is_the_same_window(rng):
    """A config written by 0.2.x (no `sliding_window_rule`) meant |i - j| <= w:
    it is read as w + 1, for every class that takes the argument; configs
    written now say `sliding_window_rule: keras` and round-trip."""
    from keras_attention import TransformerDecoderLayer, TransformerEncoderLayer
    from keras_attention.seq2seq import TransformerSeq2Seq

    layer = MultiHead(num_heads=2, key_dim=4, sliding_window=2)
    config = layer.get_config()
    assert config["sliding_window_rule"] == "keras"
    assert MultiHead.from_config(config).sliding_window == 2
    assert "sliding_window_rule" not in MultiHead(2, 4).get_config()  # no window: as before
    old = {k: v for k, v in config.items() if k != "sliding_window_rule"}
    assert MultiHead.from_config(old).sliding_window == 3
    assert MultiHead.from_config({**old, "sliding_window": None}).sliding_window is None
    for cls in (TransformerEncoderLayer, TransformerDecoderLayer):
        config = cls(2, 8, sliding_window=2).get_config()
        assert cls.from_config(config).sliding_window == 2
        config.pop("sliding_window_rule")
        assert cls.from_config(config).sliding_window == 3
    model = TransformerSeq2Seq(9, 9, 8, 2, 16, 1, max_length=8, sliding_window=1)
    config = model.get_config()
    assert TransformerSeq2Seq.from_config(config).sliding_window == 1
    config.pop("sliding_window_rule")
    restored = TransformerSeq2Seq.from_config(config)
    assert restored.sliding_window == 2
    assert restored.encoder_layers[0].sliding_window == 2
    with pytest.raises(ValueError, match="`sliding_window_rule` of a MultiHead config must be"):
        MultiHead.from_config({**old, "sliding_window_rule": "torch"})
    # Same outputs: the 0.2.x window w, read now, keeps what w kept then.
    x = random(rng, B, T, D)
    old_layer = MultiHead.from_config(old)
    old_layer(x, x)
    randomise(old_layer, rng)
    _, scores = old_layer(x, x, return_attention_scores=True)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    np.testing.assert_array_equal(ops.convert_to_numpy(scores)[0, 0] > 0, np.abs(i - j) <= 2)


@pytest.mark.parametrize(
    "kwargs",
    [
        VARIANTS["rope-gqa-window"],
        {"position_encoding": "alibi", "num_key_value_heads": 1},
        VARIANTS["relative"],
    ],
)
def test_harness_variants(rng, kwargs):
    x = random(rng, B, T, D)
    run_layer_test(
        MultiHead,
        {"num_heads": 4, "key_dim": 2, **kwargs},
        inputs={"query": x, "value": x},
        call_kwargs={"use_causal_mask": True},
    )


def test_harness_position_layers(rng):
    run_layer_test(
        RotaryEmbedding, {"max_wavelength": 100.0}, inputs={"inputs": random(rng, B, T, D)}
    )
    layer = RelativePositionEmbedding(2, 3)
    assert tuple(layer(np.arange(4), np.arange(5)).shape) == (4, 5, 3)
    restored = RelativePositionEmbedding.from_config(layer.get_config())
    assert restored.get_config() == layer.get_config()


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            {"num_key_value_heads": 3},
            r"`num_key_value_heads` of MultiHead must divide `num_heads`.*num_heads=4, "
            r"num_key_value_heads=3",
        ),
        (
            {"position_encoding": "sinusoidal"},
            r"`position_encoding` of MultiHead must be one of \[None, 'rope', 'alibi', "
            r"'relative'\]; received position_encoding='sinusoidal'",
        ),
        ({"sliding_window": 0}, r"`sliding_window` of MultiHead must be a positive integer"),
    ],
)
def test_error_variant_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MultiHead(num_heads=4, key_dim=4, **kwargs)


def test_error_rope_needs_an_even_key_dim(rng):
    with pytest.raises(ValueError, match=r"`key_dim` must be even; received key_dim=3"):
        MultiHead(2, 3, position_encoding="rope")(random(rng, B, T, D), random(rng, B, T, D))


BAD_WAVELENGTHS = {
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
}


@pytest.mark.parametrize("case", sorted(BAD_WAVELENGTHS))
def test_a_rope_wavelength_must_be_finite_and_positive(case):
    call, pattern = BAD_WAVELENGTHS[case]
    with pytest.raises(ValueError, match=pattern):
        call()
