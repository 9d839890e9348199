"""MultiHead: reference values, masks, cached decoding, harness, bad input."""

import numpy as np
import pytest
from keras import ops

from keras_attention import MultiHead
from keras_attention.heads import project_heads
from tests import reference
from tests.harness import run_layer_test
from tests.test_score_attention import random, randomise

B, TQ, TV, D = 2, 4, 6, 8


def numpy(x):
    """A tensor or variable as a float64 array, on every backend."""
    return np.asarray(ops.convert_to_numpy(x), np.float64)


def weights_of(layer):
    return {w.path.split("/")[-1]: np.asarray(w, np.float64) for w in layer.weights}


@pytest.mark.parametrize("value_dim,output_dim", [(None, None), (3, 5)])
def test_matches_reference(rng, value_dim, output_dim):
    q, v = random(rng, B, TQ, D), random(rng, B, TV, D + 2)
    k = random(rng, B, TV, D - 1)
    layer = MultiHead(num_heads=2, key_dim=4, value_dim=value_dim, output_dim=output_dim)
    layer(q, v, key=k)
    randomise(layer, rng)
    value_mask = np.array([[1, 1, 1, 1, 0, 0], [1] * 6], bool)
    out, scores = layer(q, v, key=k, value_mask=value_mask, return_attention_scores=True)
    want, want_scores = reference.multi_head(q, k, v, weights_of(layer), value_mask[:, None, :])
    assert scores.shape == (B, 2, TQ, TV)
    np.testing.assert_allclose(np.asarray(scores), want_scores, atol=1e-5)
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)


def test_causal_self_attention_matches_reference(rng):
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=4, key_dim=2)
    layer(x, x)
    randomise(layer, rng)
    out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    want, _ = reference.multi_head(x, x, x, weights_of(layer), reference.causal(TV)[None])
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-4)
    assert np.all(np.triu(np.asarray(scores), 1) == 0.0)


def test_cached_decoding_equals_full_causal_pass(rng):
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4)
    full, full_scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    cache = layer.init_cache(B, TV)
    outputs = []
    for i in range(TV):
        out, scores, cache = layer.step(x[:, i : i + 1], cache, i)
        np.testing.assert_allclose(
            np.asarray(scores)[..., : i + 1],
            np.asarray(full_scores)[:, :, i : i + 1, : i + 1],
            atol=1e-6,
        )
        outputs.append(np.asarray(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), np.asarray(full), atol=1e-5)
    # Several positions at once (a prompt), then one more.
    cache = layer.init_cache(B, TV)
    first, _, cache = layer.step(x[:, :4], cache, 0)
    rest, _, cache = layer.step(x[:, 4:], cache, 4)
    np.testing.assert_allclose(np.concatenate([first, rest], 1), np.asarray(full), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"num_key_value_heads": 1, "value_dim": 3}, {"use_bias": False}, {"int8": True}],
)
def test_project_heads_side_by_side_equals_each_projection(rng, kwargs):
    """One product with the query, key and value kernels side by side (a
    decoding step's) gives each projection's heads: x W_h + b_h."""
    kwargs = dict(kwargs)
    int8 = kwargs.pop("int8", False)
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4, **kwargs)
    layer(x, x)
    randomise(layer, rng)
    if int8:
        layer.quantize("int8")
    heads = project_heads(layer, ops.convert_to_tensor(x), "query", "key", "value")
    for name, got in zip(("query", "key", "value"), heads):
        kernel = numpy(getattr(layer, f"{name}_kernel"))
        if int8:  # W = q · s, one scale per (head, feature)
            kernel = kernel * numpy(getattr(layer, f"{name}_kernel_scale"))[None]
        want = np.einsum("btd,dhk->bhtk", x, kernel)
        bias = getattr(layer, f"{name}_bias")
        if bias is not None:
            want = want + numpy(bias)[None, :, None, :]
        np.testing.assert_allclose(numpy(got), want, atol=1e-5)
    single = project_heads(layer, ops.convert_to_tensor(x), "value")[0]
    np.testing.assert_allclose(numpy(single), numpy(heads[2]), atol=1e-6)


def test_cached_decoding_of_an_int8_layer_equals_its_full_causal_pass(rng):
    """The step's one product rescales each kernel's outputs by its own
    scales (int8 read outside `dequantized`)."""
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4, value_dim=3)
    layer(x, x)
    randomise(layer, rng)
    layer.quantize("int8")
    full = numpy(layer(x, x, use_causal_mask=True))
    cache = layer.init_cache(B, TV)
    outputs = []
    for i in range(TV):
        out, _, cache = layer.step(x[:, i : i + 1], cache, i)
        outputs.append(numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=1e-5)


def test_cached_decoding_inside_while_loop(rng):
    """The cache works in a compiled loop with a tensor index (what
    generation and export need)."""
    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4)
    full = layer(x, x, use_causal_mask=True)

    def body(i, cache, outputs):
        step = ops.slice(x, [0, i, 0], [B, 1, D])
        out, _, cache = layer.step(step, cache, i)
        return i + 1, cache, ops.slice_update(outputs, [0, i, 0], out)

    _, _, outputs = ops.while_loop(
        lambda i, c, o: i < TV, body, (0, layer.init_cache(B, TV), ops.zeros((B, TV, D)))
    )
    np.testing.assert_allclose(np.asarray(outputs), np.asarray(full), atol=1e-5)


def test_cross_attention_with_projected_source(rng):
    q, enc = random(rng, B, TQ, D), random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4)
    mask = np.array([[1, 1, 1, 0, 0, 0], [1] * 6], bool)
    full = layer(q, enc, value_mask=mask)
    key, value = layer.project_key_value(enc)
    out, _ = layer.attend(q, key, value, mask[:, None, :])
    np.testing.assert_allclose(np.asarray(out), np.asarray(full), atol=1e-6)


def test_harness(rng):
    q, v = random(rng, B, TQ, D), random(rng, B, TV, 5)
    value_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], bool)
    run_layer_test(
        MultiHead,
        {"num_heads": 2, "key_dim": 3, "dropout": 0.1},
        inputs={"query": q, "value": v, "value_mask": value_mask},
        masked_inputs={"value": ~value_mask},
    )


def test_harness_self_attention_with_scores(rng):
    x = random(rng, B, TV, D)
    run_layer_test(
        MultiHead,
        {"num_heads": 4, "key_dim": 2, "output_dim": 3},
        inputs={"query": x, "value": x},
        call_kwargs={"use_causal_mask": True, "return_attention_scores": True},
    )


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            {"num_heads": 0, "key_dim": 4},
            r"`num_heads` of MultiHead must be a positive integer; received num_heads=0",
        ),
        ({"num_heads": 2, "key_dim": 0}, r"`key_dim` of MultiHead must be a positive integer"),
        (
            {"num_heads": 2, "key_dim": 4, "dropout": -0.1},
            r"`dropout` of MultiHead must be a float in \[0, 1\)",
        ),
    ],
)
def test_error_constructor(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MultiHead(**kwargs)


def test_error_ranks_and_masks(rng):
    layer = MultiHead(2, 4)
    with pytest.raises(ValueError, match=r"`query` of MultiHead must have rank 2 or 3"):
        layer(random(rng, B, 1, TQ, D), random(rng, B, TV, D))
    layer = MultiHead(2, 4)
    with pytest.raises(
        ValueError, match=r"`value_mask` of MultiHead must have shape \(B, Tv\) = \(2, 6\)"
    ):
        layer(random(rng, B, TQ, D), random(rng, B, TV, D), value_mask=np.ones((B, 5), bool))


def test_error_step_before_build(rng):
    layer = MultiHead(2, 4)
    with pytest.raises(ValueError, match=r"MultiHead.step\(\) needs a built layer"):
        layer.step(random(rng, B, 1, D), layer.init_cache(B, 3), 0)


def test_single_step_query_equals_one_position_of_a_sequence(rng):
    layer = MultiHead(2)  # key_dim defaults to the query width / heads
    query, value = random(rng, B, D), random(rng, B, TV, D)
    mask = np.ones((B, TV), bool)
    mask[0, 4:] = False
    step, step_scores = layer(query, value, value_mask=mask, return_attention_scores=True)
    full, full_scores = layer(query[:, None], value, value_mask=mask, return_attention_scores=True)
    assert layer.key_dim == D // 2
    np.testing.assert_allclose(np.asarray(step), np.asarray(full)[:, 0], atol=1e-6)
    np.testing.assert_allclose(np.asarray(step_scores), np.asarray(full_scores)[:, :, 0], atol=1e-6)
    assert np.asarray(step_scores).shape == (B, 2, TV)


def test_error_heads_must_divide_the_query_width(rng):
    with pytest.raises(ValueError, match=r"`num_heads` must divide the query width .* num_heads=3"):
        MultiHead(3)(random(rng, B, TQ, 8), random(rng, B, TV, 8))


def test_portability_causal_alignment_end_is_ours_start_is_keras(rng):
    """With fewer queries than keys, ours aligns the queries with the end of
    the keys (incremental decoding); Keras aligns them with the start."""
    import keras

    from keras_attention.masking import causal_mask

    end, start = np.asarray(causal_mask(2, 4)), np.asarray(causal_mask(2, 4, "start"))
    np.testing.assert_array_equal(end, [[1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(start, [[1, 0, 0, 0], [1, 1, 0, 0]])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(causal_mask(3, 3, "start")), causal_mask(3, 3)
    )
    keras_causal = getattr(keras.layers.MultiHeadAttention(1, 2), "_compute_causal_mask", None)
    if keras_causal is not None:  # Keras's own (private) helper, where it exists
        q, v = np.zeros((1, 2, 3), "float32"), np.zeros((1, 4, 3), "float32")
        np.testing.assert_array_equal(ops.convert_to_numpy(keras_causal(q, v))[0], start)
    q, x = random(rng, B, 2, D), random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4)
    _, ours = layer(q, x, use_causal_mask=True, return_attention_scores=True)
    _, as_keras = layer(
        q, x, attention_mask=causal_mask(2, TV, "start")[None], return_attention_scores=True
    )
    assert (
        np.all(ops.convert_to_numpy(ours)[:, :, 0, TV - 1 :] == 0.0)
        and ops.convert_to_numpy(ours)[0, 0, 0, 2] > 0
    )
    assert np.all(ops.convert_to_numpy(as_keras)[:, :, 0, 1:] == 0.0)
    with pytest.raises(ValueError, match='`alignment` of causal_mask must be "end" or "start"'):
        causal_mask(2, 4, "middle")


def _cached_multi_head():
    layer = MultiHead(num_heads=2)
    x = np.ones((2, 3, 4), "float32")
    layer(x, x)
    return layer.step(x[:, :2], layer.init_cache(2, 3), 2)


BAD_CACHE_CALLS = {
    "MultiHead.step past the cache": (
        _cached_multi_head,
        r"cache holds positions 0..2; received positions 2..3 \(cache_index=2, 2 new\)",
    ),
    "MultiHead.init_cache(max_length=-1)": (
        lambda: MultiHead(2, 2).init_cache(1, max_length=-1),
        r"`max_length` of MultiHead.init_cache must be a positive integer; received .*=-1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CACHE_CALLS))
def test_a_cache_call_that_does_not_fit_gets_a_value_error(case):
    call, pattern = BAD_CACHE_CALLS[case]
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("int8", [False, True])
def test_a_search_scope_lays_out_the_step_kernels_once(rng, int8):
    """Inside `dequantized` (a search's loop) the layer's step products read
    kernels laid out on entering: W^Q and [W^Q | W^K | W^V] flattened, the
    float values (dequantized for int8), and the step computes as outside."""
    from keras_attention import quantization

    x = random(rng, B, TV, D)
    layer = MultiHead(num_heads=2, key_dim=4, num_key_value_heads=1, value_dim=3)
    layer(x, x)
    randomise(layer, rng)
    if int8:
        layer.quantize("int8")

    def flat(name):  # (D, H, d) -> (D, H·d), as float values
        kernel = numpy(getattr(layer, f"{name}_kernel"))
        if int8:
            kernel = kernel * numpy(getattr(layer, f"{name}_kernel_scale"))[None]
        return kernel.reshape(D, -1)

    outside = layer.step(x[:, :3], layer.init_cache(B, TV), 0)[0]
    assert quantization.prepared(layer, "query") is None
    with quantization.dequantized(layer):
        np.testing.assert_allclose(
            numpy(quantization.prepared(layer, "query+key+value")),
            np.concatenate([flat("query"), flat("key"), flat("value")], axis=1),
            atol=1e-6,
        )
        np.testing.assert_allclose(
            numpy(quantization.prepared(layer, "query")), flat("query"), atol=1e-6
        )
        inside = layer.step(x[:, :3], layer.init_cache(B, TV), 0)[0]
    assert quantization.prepared(layer, "query") is None
    np.testing.assert_allclose(numpy(inside), numpy(outside), atol=1e-5)


def test_a_search_scope_takes_cross_attention_over_a_wider_source_and_unbuilt_layers(rng):
    """A cross-attention layer whose key/value inputs are wider than its
    queries gets W^Q laid out, not a side-by-side kernel its widths cannot
    make; an unbuilt layer is left out; both attend as outside the scope."""
    from keras_attention import quantization

    queries, source = random(rng, B, TQ, D), random(rng, B, TV, D + 4)
    layer = MultiHead(num_heads=2, key_dim=4)
    outside = numpy(layer(queries, source))
    unbuilt = MultiHead(num_heads=2, key_dim=4)
    with quantization.dequantized(layer), quantization.dequantized(unbuilt):
        assert quantization.prepared(layer, "query+key+value") is None
        np.testing.assert_allclose(
            numpy(quantization.prepared(layer, "query")),
            numpy(layer.query_kernel).reshape(D, -1),
            atol=0,
        )
        np.testing.assert_allclose(numpy(layer(queries, source)), outside, atol=1e-6)
