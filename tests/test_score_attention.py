"""Dot, general, additive, concat and local attention: reference values,
mask semantics, the shared harness and bad input."""

import keras
import numpy as np
import pytest

from keras_attention import (
    AdditiveAttention,
    ConcatAttention,
    DotProductAttention,
    GeneralAttention,
    LocalAttention,
)
from tests import reference
from tests.harness import run_layer_test

B, TQ, TV, DQ, DK, DV = 2, 3, 5, 4, 4, 6


def random(rng, *shape):
    return rng.normal(size=shape).astype("float32")


def randomise(layer, rng):
    """Give every weight a random value (biases included) so that the
    reference test covers all of them."""
    for w in layer.weights:
        w.assign(rng.normal(scale=0.5, size=w.shape).astype("float32"))


@pytest.fixture
def data(rng):
    q, k, v = random(rng, B, TQ, DQ), random(rng, B, TV, DK), random(rng, B, TV, DV)
    value_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    return q, k, v, value_mask


def check_against(layer, scores_fn, data, **call):
    q, k, v, value_mask = data
    out, weights = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True, **call)
    want_out, want_w = reference.attend(scores_fn(q, k), v, value_mask[:, None, :])
    np.testing.assert_allclose(np.asarray(weights), want_w, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5)
    return np.asarray(out), np.asarray(weights)


@pytest.mark.parametrize("scale", [False, True])
def test_dot_product_matches_reference(data, scale):
    check_against(
        DotProductAttention(scale=scale), lambda q, k: reference.dot_scores(q, k, scale), data
    )


def test_general_matches_reference(data, rng):
    layer = GeneralAttention()
    q, k, v, _ = data
    layer(q, v, key=k)
    randomise(layer, rng)
    W = np.asarray(layer.kernel)
    check_against(layer, lambda q, k: reference.general_scores(q, k, W), data)


@pytest.mark.parametrize("normalize", [False, True])
def test_additive_matches_reference(data, rng, normalize):
    layer = AdditiveAttention(units=7, normalize=normalize)
    q, k, v, _ = data
    layer(q, v, key=k)
    randomise(layer, rng)
    vec = np.asarray(layer.score_vector, np.float64)
    if normalize:
        vec = float(layer.score_scale) * vec / np.linalg.norm(vec)
    check_against(
        layer,
        lambda q, k: reference.additive_scores(
            q,
            k,
            np.asarray(layer.query_kernel),
            np.asarray(layer.key_kernel),
            np.asarray(layer.bias),
            vec,
        ),
        data,
    )


@pytest.mark.parametrize("hidden_units", [(6,), (6, 5)])
def test_concat_matches_reference(data, rng, hidden_units):
    layer = ConcatAttention(hidden_units=hidden_units)
    q, k, v, _ = data
    layer(q, v, key=k)
    randomise(layer, rng)
    kernels = [np.asarray(w) for w in layer.kernels]
    biases = [np.asarray(b) for b in layer.biases]
    assert kernels[0].shape == (DK + DQ, hidden_units[0])  # W¹ acts on [k_j; q_i]
    check_against(layer, lambda q, k: reference.concat_scores(q, k, kernels, biases), data)


def test_single_step_query_equals_one_row(data):
    q, k, v, value_mask = data
    layer = AdditiveAttention(units=5)
    full, full_w = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True)
    step, step_w = layer(q[:, 1], v, key=k, value_mask=value_mask, return_attention_scores=True)
    assert step.shape == (B, DV) and step_w.shape == (B, TV)
    np.testing.assert_allclose(np.asarray(step), np.asarray(full)[:, 1], atol=1e-6)
    np.testing.assert_allclose(np.asarray(step_w), np.asarray(full_w)[:, 1], atol=1e-6)


@pytest.mark.parametrize(
    "make,prepares",
    [
        (lambda: AdditiveAttention(units=5), True),
        (lambda: ConcatAttention(hidden_units=(5, 3)), True),
        (lambda: LocalAttention(window=1, mode="last", score="additive", units=5), True),
        (lambda: GeneralAttention(), False),
    ],
)
def test_prepared_key_gives_the_same_attention(data, rng, make, prepares):
    """`prepare_key` (Bahdanau's W_k k_j + b, computed once per memory) then
    `prepared_key=`: the same outputs and weights as from the key itself."""
    q, k, v, value_mask = data
    layer = make()
    layer(q, v, key=k)
    randomise(layer, rng)
    assert layer.prepares_key() is prepares
    plain = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True)
    prepared = layer.prepare_key(k)
    if prepares:  # the keys' share of the score, not the keys
        assert prepared.shape == (B, TV, 5)
    for query, rows in ((q, slice(None)), (q[:, 1], 1)):
        got = layer(
            query, v, key=k, value_mask=value_mask, return_attention_scores=True,
            prepared_key=prepared,
        )  # fmt: skip
        for a, b in zip(got, plain):
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b)[:, rows], atol=1e-6
            )


@pytest.mark.parametrize("mode", ["last", "monotonic"])
@pytest.mark.parametrize("score", ["dot", "general"])
def test_local_matches_reference(data, rng, mode, score):
    q, k, v, value_mask = data
    layer = LocalAttention(window=1, mode=mode, score=score)
    layer(q, v, key=k)
    randomise(layer, rng)
    scores = (
        reference.dot_scores(q, k)
        if score == "dot"
        else reference.general_scores(q, k, np.asarray(layer.scorer.kernel))
    )
    lengths = value_mask.sum(1)
    centres = np.tile(np.arange(TQ), (B, 1))
    window = reference.local_window(mode, 1, TQ, TV, lengths, centres)
    out, weights = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True)
    want_out, want_w = reference.attend(scores, v, window & value_mask[:, None, :])
    np.testing.assert_allclose(np.asarray(weights), want_w, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5)
    if mode == "last":  # the tapped delay line: the last D=1 valid state only
        np.testing.assert_allclose(np.asarray(out)[0], np.tile(v[0, 2], (TQ, 1)), atol=1e-6)


def test_local_predictive_matches_reference(data, rng):
    q, k, v, value_mask = data
    layer = LocalAttention(window=2, mode="predictive", score="dot", units=3)
    layer(q, v, key=k)
    randomise(layer, rng)
    lengths = value_mask.sum(1)
    Wp, vp = (
        np.asarray(layer.position_kernel, np.float64),
        np.asarray(layer.position_vector, np.float64),
    )
    centres = lengths[:, None] / (
        1 + np.exp(-(np.tanh(q @ Wp) @ vp))
    )  # p = S·sigmoid(v_pᵀ tanh(W_p q))
    sigma = 2 / 2
    j = np.arange(TV)[None, None, :]
    gaussian = -((j - centres[..., None]) ** 2) / (2 * sigma**2)
    window = reference.local_window("predictive", 2, TQ, TV, lengths, centres)
    out, weights = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True)
    want_out, want_w = reference.attend(
        reference.dot_scores(q, k) + gaussian, v, window & value_mask[:, None, :]
    )
    np.testing.assert_allclose(np.asarray(weights), want_w, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want_out, atol=1e-5)


def test_local_monotonic_single_step_uses_query_positions(data):
    q, k, v, _ = data
    layer = LocalAttention(window=1, mode="monotonic")
    full = np.asarray(layer(q, v, key=k))
    step = layer(q[:, 2], v, key=k, query_positions=np.array([2, 2]))
    np.testing.assert_allclose(np.asarray(step), full[:, 2], atol=1e-6)


# -- masks ------------------------------------------------------------------
def test_masked_keys_get_zero_weight_and_empty_rows_are_zero(data):
    q, k, v, _ = data
    value_mask = np.array([[1, 0, 1, 0, 0], [0, 0, 0, 0, 0]], bool)
    out, weights = DotProductAttention()(
        q, v, key=k, value_mask=value_mask, return_attention_scores=True
    )
    weights, out = np.asarray(weights), np.asarray(out)
    assert np.all(weights[0][:, ~value_mask[0]] == 0.0)
    np.testing.assert_allclose(weights[0].sum(-1), 1.0, atol=1e-6)
    assert np.all(weights[1] == 0.0) and np.all(out[1] == 0.0)
    assert np.all(np.isfinite(out))


def test_causal_and_explicit_masks(data):
    q, _, _, _ = data
    x = np.concatenate([q, q[:, :2]], 1)  # (B, 5, D) self-attention
    attention_mask = np.ones((B, 5, 5), bool)
    attention_mask[:, :, 0] = False
    layer = DotProductAttention()
    _, weights = layer(
        x, x, use_causal_mask=True, attention_mask=attention_mask, return_attention_scores=True
    )
    weights = np.asarray(weights)
    assert np.all(np.triu(weights[0], 1) == 0.0)  # no position sees a later one
    assert np.all(weights[..., 0] == 0.0)
    assert np.all(weights[:, 0] == 0.0)  # position 0 may see only key 0, which is masked


def test_keras_mask_is_used_and_propagated():
    tokens = np.array([[3, 4, 5, 0], [6, 7, 0, 0]])
    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    x = embed(tokens)
    layer = DotProductAttention()
    out, weights = layer(x, x, return_attention_scores=True)
    weights = np.asarray(weights)
    assert np.all(weights[0][:, 3] == 0.0) and np.all(weights[1][:, 2:] == 0.0)
    np.testing.assert_array_equal(np.asarray(out._keras_mask), tokens != 0)


def test_dropout_only_in_training(data):
    q, k, v, _ = data
    layer = DotProductAttention(dropout=0.5, seed=1)
    inference = np.asarray(layer(q, v, key=k, training=False))
    np.testing.assert_allclose(inference, np.asarray(layer(q, v, key=k)), atol=0)
    assert not np.allclose(np.asarray(layer(q, v, key=k, training=True)), inference)


# -- the shared harness -------------------------------------------------------
LAYERS = [
    (DotProductAttention, {}),
    (DotProductAttention, {"scale": True, "dropout": 0.1}),
    (GeneralAttention, {}),
    (AdditiveAttention, {"units": 5}),
    (AdditiveAttention, {"units": 5, "normalize": True}),
    (ConcatAttention, {"hidden_units": (6, 3)}),
    (LocalAttention, {"window": 2, "mode": "last"}),
    (LocalAttention, {"window": 1, "mode": "monotonic", "score": "general"}),
    (LocalAttention, {"window": 2, "mode": "predictive", "score": "additive", "units": 4}),
]


@pytest.mark.parametrize("layer_cls,kwargs", LAYERS, ids=lambda p: getattr(p, "__name__", str(p)))
def test_harness(layer_cls, kwargs, rng):
    q, k, v = random(rng, B, TQ, DQ), random(rng, B, TV, DK), random(rng, B, TV, DV)
    value_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
    run_layer_test(
        layer_cls,
        kwargs,
        inputs={"query": q, "value": v, "key": k, "value_mask": value_mask},
        masked_inputs={"value": ~value_mask, "key": ~value_mask},
    )


def test_harness_query_mask(rng):
    q, v = random(rng, B, TQ, DQ), random(rng, B, TV, DV)
    query_mask = np.array([[1, 1, 0], [1, 0, 0]], bool)
    run_layer_test(
        AdditiveAttention,
        {"units": 3},
        inputs={"query": q, "value": v, "query_mask": query_mask},
        masked_inputs={"query": ~query_mask},
        valid_outputs=query_mask,
        mixed_precision=False,
    )


def test_harness_causal(rng):
    x = random(rng, B, TV, DQ)
    run_layer_test(
        DotProductAttention,
        {"scale": True},
        inputs={"query": x, "value": x},
        call_kwargs={"use_causal_mask": True, "return_attention_scores": True},
        train=False,
    )


# -- bad input ----------------------------------------------------------------
def test_error_mismatched_feature_sizes(rng):
    with pytest.raises(ValueError, match=r"Dk \(last dimension of key\) = 3"):
        DotProductAttention()(random(rng, B, TQ, 4), random(rng, B, TV, 3))


def test_error_key_value_lengths(rng):
    with pytest.raises(ValueError, match=r"Tv of key = 4"):
        GeneralAttention()(random(rng, B, TQ, 4), random(rng, B, TV, 4), key=random(rng, B, 4, 4))


@pytest.mark.parametrize("shape", [(4,), (B, TQ, 2, DQ)])
def test_error_wrong_query_rank(rng, shape):
    with pytest.raises(ValueError, match=r"`query` of AdditiveAttention must have rank 2 or 3"):
        AdditiveAttention(4)(random(rng, *shape), random(rng, B, TV, DV))


def test_error_wrong_value_rank(rng):
    with pytest.raises(ValueError, match=r"`value` of DotProductAttention must have rank 3"):
        DotProductAttention()(random(rng, B, TQ, DQ), random(rng, B, DQ))


@pytest.mark.parametrize(
    "name,mask",
    [
        ("value_mask", np.ones((B, TV + 1), bool)),
        ("query_mask", np.ones((B, TQ + 2), bool)),
        ("attention_mask", np.ones((B, TV, TQ), bool)),
    ],
)
def test_error_mask_shape(rng, name, mask):
    with pytest.raises(ValueError, match=rf"`{name}` of DotProductAttention must have shape"):
        DotProductAttention()(random(rng, B, TQ, DQ), random(rng, B, TV, DQ), **{name: mask})


@pytest.mark.parametrize("window", [0, -1, 1.5])
def test_error_window(window):
    with pytest.raises(
        ValueError,
        match=rf"`window` of LocalAttention must be a positive integer; received window={window}",
    ):
        LocalAttention(window=window)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"window": 2, "mode": "center"}, r"`mode` of LocalAttention must be one of"),
        ({"window": 2, "score": "cosine"}, r"`score` of LocalAttention must be one of"),
    ],
)
def test_error_local_choices(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        LocalAttention(**kwargs)


def test_error_monotonic_single_step_needs_positions(rng):
    with pytest.raises(ValueError, match="needs `query_positions`"):
        LocalAttention(window=1, mode="monotonic")(random(rng, B, DQ), random(rng, B, TV, DQ))


def test_error_causal_with_single_step(rng):
    with pytest.raises(ValueError, match="use_causal_mask=True.*rank-3 query"):
        DotProductAttention()(random(rng, B, DQ), random(rng, B, TV, DQ), use_causal_mask=True)


@pytest.mark.parametrize(
    "make,pattern",
    [
        (
            lambda: AdditiveAttention(units=0),
            r"`units` of AdditiveAttention must be a positive integer",
        ),
        (
            lambda: ConcatAttention(hidden_units=()),
            r"`hidden_units` of ConcatAttention must be a non-empty",
        ),
        (
            lambda: DotProductAttention(dropout=1.5),
            r"`dropout` of DotProductAttention must be a float in \[0, 1\)",
        ),
        (
            lambda: DotProductAttention(scale="yes"),
            r"`scale` of DotProductAttention must be a bool",
        ),
    ],
)
def test_error_constructor_arguments(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make()
