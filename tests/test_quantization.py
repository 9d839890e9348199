"""Weight-only int8 quantization (`Seq2Seq.quantize`, keras_attention/quantization.py).

Every test here is portable (keras.ops only): the Makefile's PORTABLE
selection runs them on JAX too (`-k quantization`). The references
quantize the float kernels in NumPy here, per output channel
(abs-max / 127, rounded), and feed the dequantized kernels to a float twin
of the model: the quantized model must compute exactly that.
"""

import contextlib

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import (
    AdditiveAttention,
    GeneralAttention,
    GLUConv1D,
    MultiHead,
    MultiStepAttention,
    TokenAndPositionEmbedding,
    quantization,
)
from keras_attention.quantization import Int8Kernels, dequantized, quantize_array
from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    RecurrentSeq2Seq,
    TransformerSeq2Seq,
    get_search,
)

SOURCE = np.array([[3, 4, 5, 6, 7], [8, 9, 10, 2, 0]])
TARGET_IN = np.array([[1, 6, 7, 8], [1, 11, 12, 0]])
VOCAB = 24


def transformer(position, tie):
    def make():
        return TransformerSeq2Seq(
            VOCAB,
            VOCAB,
            hidden_dim=32,
            num_heads=2,
            intermediate_dim=48,
            num_layers=1,
            max_length=16,
            position=position,
            tie_embeddings=tie,
        )

    return make


FAMILIES = {
    "transformer-sinusoidal": transformer("sinusoidal", False),
    "transformer-learned-tied": transformer("learned", True),
    "transformer-relative-tied": transformer("relative", True),
    "transformer-rope": transformer("rope", False),
    # Widths that differ, so that GLUConv1D has a residual projection and
    # MultiStepAttention its W_c.
    "convs2s": lambda: ConvS2SSeq2Seq(
        VOCAB,
        VOCAB,
        embed_dim=16,
        encoder_convolutions=[(32, 3), (48, 3)],
        decoder_convolutions=[(32, 3), (48, 2)],
        max_length=16,
    ),
    # three-way tying: the int8 table and its scales serve all three
    "convs2s-shared": lambda: ConvS2SSeq2Seq(
        VOCAB,
        VOCAB,
        embed_dim=16,
        encoder_convolutions=[(32, 3), (48, 3)],
        decoder_convolutions=[(32, 3), (16, 2)],
        max_length=16,
        tie_embeddings=True,
        share_embeddings=True,
    ),
    "rnn-additive": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, embed_dim=16, hidden_dim=32, attention="additive", style="bahdanau"
    ),
    "rnn-general": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, embed_dim=16, hidden_dim=32, attention="general"
    ),
    "rnn-multihead": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, embed_dim=16, hidden_dim=32, attention="multihead"
    ),
}

# What must come out int8, per family: (layer class, attribute) pairs.
EXPECTED = {
    "transformer": {
        ("TokenAndPositionEmbedding", "embeddings"),
        *(("MultiHead", f"{p}_kernel") for p in ("query", "key", "value", "output")),
        ("Dense", "_kernel"),  # feed-forward (and the untied output projection)
    },
    "convs2s": {
        ("TokenAndPositionEmbedding", "embeddings"),
        ("Dense", "_kernel"),  # in/out projections, the output projection
        ("GLUConv1D", "kernel"),
        ("GLUConv1D", "residual_kernel"),
        ("MultiStepAttention", "state_kernel"),
        ("MultiStepAttention", "context_kernel"),
    },
    "rnn-additive": {
        ("Embedding", "_embeddings"),
        ("Dense", "_kernel"),
        ("AdditiveAttention", "query_kernel"),
        ("AdditiveAttention", "key_kernel"),
    },
    "rnn-general": {
        ("Embedding", "_embeddings"),
        ("Dense", "_kernel"),
        ("GeneralAttention", "kernel"),
    },
    "rnn-multihead": {
        ("Embedding", "_embeddings"),
        ("Dense", "_kernel"),
        *(("MultiHead", f"{p}_kernel") for p in ("query", "key", "value", "output")),
    },
}


def expected(family):
    return EXPECTED[family if family in EXPECTED else family.partition("-")[0]]


def int8_weights(layer):
    """`(attribute, scale attribute, reduced axes, Keras's convention)` of
    a quantized layer's int8 kernels. Keras's layers keep `127 / amax` and
    divide; this library's keep `amax / 127` and multiply."""
    if isinstance(layer, Int8Kernels):
        return [
            (name, f"{name}_scale", axes, False)
            for name, axes in layer.int8_kernels().items()
            if getattr(layer, name) is not None
        ]
    if isinstance(layer, keras.layers.Embedding):
        return [("_embeddings", "embeddings_scale", (1,), True)]
    if isinstance(layer, keras.layers.Dense):
        return [("_kernel", "kernel_scale", (0,), True)]
    return []


def reference_int8(w, axes):
    """NumPy: per-output-channel abs-max int8 of `w` (float32), written here
    independently of the library: `(q, scale with the reduced axes kept)`."""
    w = np.asarray(w, np.float32)
    amax = np.abs(w).max(axis=axes, keepdims=True)
    scale = amax / np.float32(127)
    return np.clip(np.round(w / scale), -127, 127), scale


def layers_of(model):
    return list(model._flatten_layers(include_self=False, recursive=True))


def quantized_with_twin(make):
    """A built float model, its logits, and after `quantize()` the model
    and a float twin holding the float weights."""
    model = make()
    float_logits = ops.convert_to_numpy(model((SOURCE, TARGET_IN)))
    twin = make()
    twin((SOURCE, TARGET_IN))
    twin.set_weights(model.get_weights())
    model.quantize()
    return model, twin, float_logits


# `make test` checks every kind of layer's int8 kernels (relative and rotary
# attention, tied tables, ConvS2S's shared ones, RNN attentions); the other
# position tables and the untied variants are large (`make test-large`).
LARGE_FAMILIES = ("transformer-sinusoidal", "transformer-learned-tied", "convs2s", "rnn-general")


@pytest.mark.parametrize(
    "family",
    [
        pytest.param(family, marks=pytest.mark.large if family in LARGE_FAMILIES else ())
        for family in sorted(FAMILIES)
    ],
)
def test_quantization_int8_kernels_compute_the_dequantized_float_model(family):
    model, twin, float_logits = quantized_with_twin(FAMILIES[family])
    assert model.quantization_mode == "int8"
    found, float_bytes, int8_bytes = set(), 0, 0
    for layer, float_layer in zip(layers_of(model), layers_of(twin)):
        assert type(layer) is type(float_layer)
        kernels = int8_weights(layer)
        if kernels:
            assert layer.quantization_mode == "int8", layer.name
        for name, scale_name, axes, divides in kernels:
            found.add((type(layer).__name__, name))
            q = ops.convert_to_numpy(getattr(layer, name))
            scale = ops.convert_to_numpy(getattr(layer, scale_name))
            w = ops.convert_to_numpy(getattr(float_layer, name))
            assert q.dtype == np.int8 and q.shape == w.shape, (layer.name, name)
            channels = tuple(n for axis, n in enumerate(w.shape) if axis not in axes)
            assert scale.dtype == np.float32 and scale.shape == channels, (layer.name, name)
            want_q, want_scale = reference_int8(w, axes)
            step = scale.reshape(want_scale.shape)
            if divides:  # Keras: scale = 127 / (amax + epsilon)
                step = 1 / step
            np.testing.assert_allclose(step, want_scale, rtol=1e-5)
            # Keras rounds w * (127 / amax): at most one step off a tie.
            assert np.abs(q - want_q).max() <= (1 if divides else 0), (layer.name, name)
            dequantized = q.astype(np.float32) * step
            assert np.abs(dequantized - w).max() <= 0.5 * step.max() + 1e-7
            getattr(float_layer, name).assign(dequantized)
            float_bytes += w.size * 4
            int8_bytes += q.size + scale.size * 4
    assert found == expected(family)
    logits = ops.convert_to_numpy(model((SOURCE, TARGET_IN)))
    reference = ops.convert_to_numpy(twin((SOURCE, TARGET_IN)))
    np.testing.assert_allclose(logits, reference, rtol=1e-5, atol=1e-5)
    # Close to the float model: int8 steps are 1/254 of each channel's range.
    error = np.abs(logits - float_logits).max()
    assert 0 < error < 0.05 * np.abs(float_logits).max()
    # (c) the quantized kernels: int8 bytes are a quarter of float32's, plus
    # one float32 scale per output channel (3.2x smaller at width 16, 4x at
    # real widths).
    assert float_bytes / int8_bytes > 3.1


@pytest.mark.parametrize(  # the Transformer's in `make test`, the others large
    "family",
    [
        "transformer-relative-tied",
        pytest.param("convs2s", marks=pytest.mark.large),
        pytest.param("rnn-additive", marks=pytest.mark.large),
    ],
)
def test_quantization_search_runs_and_the_keras_file_round_trips(family, tmp_path):
    model = FAMILIES[family]()
    model((SOURCE, TARGET_IN))
    model.quantize("int8")
    logits = ops.convert_to_numpy(model((SOURCE, TARGET_IN)))
    greedy = model.generate(SOURCE, search="greedy")
    beam = model.generate(SOURCE, search=get_search("beam", beam_width=3, max_length=6))
    assert tuple(greedy["tokens"].shape)[0] == 2
    assert len(beam["tokens"].shape) == 3 and beam["tokens"].shape[0] == 2
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.quantization_mode == "int8"
    assert loaded.get_config()["quantization"] == "int8"
    dtypes = sorted(str(v.dtype) for v in loaded.weights)
    assert dtypes == sorted(str(v.dtype) for v in model.weights)
    assert "int8" in dtypes
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded((SOURCE, TARGET_IN))), logits)
    again = loaded.generate(SOURCE, search="greedy")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(again["tokens"]), ops.convert_to_numpy(greedy["tokens"])
    )


def searched(model):
    """Greedy and beam-3 results of `model` on SOURCE, as NumPy."""
    results = {
        "greedy": model.generate(SOURCE, search="greedy"),
        "beam": model.generate(SOURCE, search=get_search("beam", beam_width=3, max_length=6)),
    }
    return {
        (search, key): ops.convert_to_numpy(result[key])
        for search, result in results.items()
        for key in ("tokens", "scores")
    }


@pytest.mark.parametrize(  # the first in `make test`, the others large
    "family",
    [
        "transformer-learned-tied",
        *(
            pytest.param(family, marks=pytest.mark.large)
            for family in ("transformer-rope", "convs2s-shared", "rnn-additive")
        ),
    ],
)
def test_quantization_dequantized_once_searches_as_the_per_step_kernels(family, monkeypatch):
    """The searches dequantize the kernels once per call (`dequantized`):
    the same tokens and scores as casting the int8 kernels at every step,
    and inside the scope the model computes what it computes outside."""
    model = FAMILIES[family]()
    model((SOURCE, TARGET_IN))
    model.quantize("int8")
    once = searched(model)
    per_step = ops.convert_to_numpy(model((SOURCE, TARGET_IN)))
    with dequantized(model):
        inside = ops.convert_to_numpy(model((SOURCE, TARGET_IN)))
    np.testing.assert_allclose(inside, per_step, rtol=1e-5, atol=1e-5)
    assert not any("_int8_call" in vars(layer) for layer in layers_of(model))  # all put back
    monkeypatch.setattr(quantization, "dequantized", lambda model: contextlib.nullcontext())
    for key, value in searched(model).items():
        if key[1] == "tokens":
            np.testing.assert_array_equal(once[key], value, err_msg=str(key))
        else:
            np.testing.assert_allclose(once[key], value, atol=1e-5, err_msg=str(key))


def test_quantization_dequantized_kernels_are_the_float_values():
    """`dequantized` turns each int8 kernel into `q · s` (Keras's `Dense`:
    `q / s`), and a float model or a plain object gives an empty scope."""
    model = FAMILIES["rnn-general"]()
    model((SOURCE, TARGET_IN))
    float_model = FAMILIES["rnn-general"]()
    float_model((SOURCE, TARGET_IN))
    float_model.set_weights(model.get_weights())
    model.quantize("int8")
    general = next(layer for layer in layers_of(model) if isinstance(layer, GeneralAttention))
    dense = next(layer for layer in layers_of(model) if isinstance(layer, keras.layers.Dense))
    with dequantized(model):
        weight, scale = quantization.kernel(general, "kernel", "float32")
        assert scale is None
        q = ops.convert_to_numpy(general.kernel).astype("float32")
        want = q * ops.convert_to_numpy(general.kernel_scale)
        np.testing.assert_allclose(ops.convert_to_numpy(weight), want, rtol=1e-6)
        want = ops.convert_to_numpy(dense._kernel) / ops.convert_to_numpy(dense.kernel_scale)
        np.testing.assert_allclose(
            ops.convert_to_numpy(quantization._scoped(dense, "kernel")), want, rtol=1e-6
        )
    assert quantization._scoped(dense, "kernel") is None  # closed
    for root in (float_model, object()):
        with dequantized(root):
            assert quantization._scopes() == []


def test_quantization_a_custom_keras_config_is_kept_through_the_keras_file(tmp_path):
    # Keras's default int8 (inputs quantized too) for the Dense layers, by choice.
    config = keras.quantizers.Int8QuantizationConfig()
    model = FAMILIES["transformer-sinusoidal"]()
    model((SOURCE, TARGET_IN))
    model.quantize(config=config)
    dense = [layer for layer in layers_of(model) if isinstance(layer, keras.layers.Dense)]
    assert all(layer.inputs_quantizer is not None for layer in dense)
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    dense = [layer for layer in layers_of(loaded) if isinstance(layer, keras.layers.Dense)]
    assert dense and all(layer.inputs_quantizer is not None for layer in dense)
    np.testing.assert_array_equal(
        ops.convert_to_numpy(loaded((SOURCE, TARGET_IN))),
        ops.convert_to_numpy(model((SOURCE, TARGET_IN))),
    )


def test_quantization_default_keeps_keras_layers_inputs_float():
    model = FAMILIES["rnn-general"]()
    model((SOURCE, TARGET_IN))
    model.quantize("int8")
    dense = [layer for layer in layers_of(model) if isinstance(layer, keras.layers.Dense)]
    assert dense and all(layer.inputs_quantizer is None for layer in dense)


def test_quantization_refusals():
    model = FAMILIES["transformer-sinusoidal"]()
    with pytest.raises(ValueError, match="TransformerSeq2Seq.quantize: the model is not built"):
        model.quantize("int8")
    model((SOURCE, TARGET_IN))
    with pytest.raises(ValueError, match=r"`mode` of TransformerSeq2Seq.quantize .*mode='int4'"):
        model.quantize("int4")
    with pytest.raises(ValueError, match=r"`mode` .*received mode='float8'"):
        model.quantize("float8")
    int4 = keras.quantizers.Int4QuantizationConfig()
    with pytest.raises(ValueError, match=r"`mode` .*a config of mode 'int4'"):
        model.quantize(config=int4)
    with pytest.raises(ValueError, match=r"`mode` .*mode='int8' and a config of mode 'int4'"):
        model.quantize("int8", config=int4)
    with pytest.raises(TypeError, match="`config` of TransformerSeq2Seq.quantize"):
        model.quantize("int8", config="int8")
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        model.quantize("int8", filters="dense")
    assert model.quantization_mode is None  # nothing was changed
    assert all(str(v.dtype) == "float32" for v in model.weights)
    model.quantize()
    with pytest.raises(ValueError, match="already quantized"):
        model.quantize("int8")
    with pytest.raises(ValueError, match="`quantization` of RecurrentSeq2Seq"):
        RecurrentSeq2Seq(VOCAB, VOCAB, quantization="int4")


LAYERS = {
    "multi_head": (lambda: MultiHead(2, position_encoding="relative"), 2),
    "glu_conv": (lambda: GLUConv1D(12, 3, causal=True), 1),
    "additive": (lambda: AdditiveAttention(units=6), 2),
    "general": (lambda: GeneralAttention(), 2),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_quantization_a_layer_quantized_alone_round_trips_in_a_functional_model(name, tmp_path):
    make, arguments = LAYERS[name]
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer = make()
    inputs = keras.Input((5, 8))
    model = keras.Model(inputs, layer(*[inputs] * arguments))
    twin = keras.Model.from_config(model.get_config())
    twin.set_weights(model.get_weights())
    layer.quantize("int8")
    assert layer.quantization_mode == "int8"
    assert {str(v.dtype) for v in layer.weights} >= {"int8", "float32"}
    for kernel, _, axes, _ in int8_weights(layer):  # the float twin, dequantized
        float_kernel = getattr(twin.layers[-1], kernel)
        q, step = reference_int8(ops.convert_to_numpy(float_kernel), axes)
        float_kernel.assign(q * step)
    out = ops.convert_to_numpy(model(x))
    np.testing.assert_allclose(out, ops.convert_to_numpy(twin(x)), rtol=1e-5, atol=1e-6)
    path = str(tmp_path / "layer.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.layers[-1].quantization_mode == "int8"
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded(x)), out)


def test_quantization_multi_step_attention_and_embedding_match_numpy():
    rng = np.random.default_rng(0)
    h, g = rng.normal(size=(2, 3, 10)), rng.normal(size=(2, 3, 6))
    z = rng.normal(size=(2, 4, 6))
    layer = MultiStepAttention()
    layer(h, g, z, z)
    wd = ops.convert_to_numpy(layer.state_kernel)
    wc = ops.convert_to_numpy(layer.context_kernel)
    twin = MultiStepAttention()
    twin(h, g, z, z)
    twin.set_weights(layer.get_weights())
    layer.quantize("int8")
    for name, w in (("state_kernel", wd), ("context_kernel", wc)):
        q, step = reference_int8(w, (0,))
        getattr(twin, name).assign(q * step)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(h, g, z, z)),
        ops.convert_to_numpy(twin(h, g, z, z)),
        rtol=1e-5,
        atol=1e-6,
    )
    embedding = TokenAndPositionEmbedding(VOCAB, 8, 16, position="learned")
    tokens = np.array([[3, 4, 23], [0, 1, 2]])
    embedding(tokens)
    table = ops.convert_to_numpy(embedding.embeddings)
    positions = ops.convert_to_numpy(embedding.position_embedding.position_embeddings)
    embedding.quantize("int8")
    q, step = reference_int8(table, (1,))  # one scale per token
    want = (q * step)[tokens] + positions[:3]
    np.testing.assert_allclose(ops.convert_to_numpy(embedding(tokens)), want, atol=1e-6)
    assert embedding.position_embedding.quantization_mode is None  # float fallback


def test_quantization_quantize_array_keeps_each_channel_within_half_a_step():
    w = np.random.default_rng(0).normal(size=(5, 3, 4)).astype("float32")
    w[:, 0, 1] = 0.0  # an all-zero channel
    q, scale = quantize_array(w, axes=0)
    assert q.dtype == np.int8 and scale.shape == (3, 4)
    assert scale[0, 1] == 1.0 and not q[:, 0, 1].any()
    assert (np.abs(q).max(axis=0)[scale != 1.0] == 127).all()
    assert np.abs(q * scale - w).max() <= 0.5 * scale.max()


@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("family", ["transformer-relative-tied", "convs2s-shared"])
def test_a_search_scope_reads_a_tied_table_once_and_steps_as_outside(family, int8):
    """Inside `dequantized` a tied output projection reads the token table
    laid out on entering (`loop_kernels`: `TIED_OUTPUT_KERNEL`, the float
    values `q · s` for int8), and a decoding step's logits are those
    outside the scope."""
    model = FAMILIES[family]()
    model((SOURCE, TARGET_IN))
    if int8:
        model.quantize("int8")
    state = model.encode(SOURCE, max_length=4)
    tokens = np.array([1, 1])
    outside = ops.convert_to_numpy(model.decode_step(tokens, state)[0])
    laid_out_by = model if family.startswith("transformer") else model.decoder
    with quantization.dequantized(model):
        table = quantization.prepared(laid_out_by, quantization.TIED_OUTPUT_KERNEL)
        assert table is not None
        inside = ops.convert_to_numpy(model.decode_step(tokens, state)[0])
    np.testing.assert_allclose(inside, outside, rtol=1e-5, atol=1e-6)
    width = 32 if family.startswith("transformer") else 16
    assert tuple(table.shape) == (width, VOCAB)  # Eᵀ (D, V): transposed once
    assert quantization.prepared(laid_out_by, quantization.TIED_OUTPUT_KERNEL) is None
