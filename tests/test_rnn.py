"""The recurrent layers through the shared harness, and the decoder's
equations against a plain NumPy step."""

import keras
import numpy as np
import pytest

from keras_attention import AttentionDecoder, GeneralAttention, LocalAttention, RecurrentEncoder
from keras_attention.rnn_cells import CELLS, cell_update, cell_weights
from tests import reference
from tests.harness import run_layer_test

B, S, T, V, U = 2, 5, 4, 11, 8
numpy = keras.ops.convert_to_numpy  # any backend's tensors (torch's may require grad)


def tokens(rng, length, low=3):
    ids = rng.integers(low, V, (B, length)).astype("int32")
    ids[1, length - 2 :] = 0  # padding at the end of the second row
    return ids


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab_size": V, "embed_dim": 4, "units": U},
        {
            "vocab_size": V,
            "embed_dim": 4,
            "units": U,
            "cell": "gru",
            "num_layers": 2,
            "bidirectional": True,
        },
        {"vocab_size": V, "embed_dim": 4, "units": U, "reverse_source": True},
    ],
)
def test_encoder_harness(rng, kwargs):
    source = tokens(rng, S)
    run_layer_test(
        RecurrentEncoder,
        kwargs,
        inputs={"source_tokens": source},
        masked_inputs=None,
        mixed_precision=False,
    )


@pytest.mark.large(
    reason="loads the stack 40 times, a guard for a failure that came once in 70 loads"
)
def test_bidirectional_stack_builds_apart_inside_load_model():
    """Keras copies a Bidirectional's cell through serialisation, and inside
    load_model that copy consults a table keyed by id(): a freed cell whose id
    the next one reuses made Keras hand back the previous layer's backward copy
    (CI failed on it, on JAX, about once in 70 loads). Every layer of the stack
    must get its own forward cell that runs forwards."""
    from keras.src.saving.serialization_lib import ObjectSharingScope  # what load_model enters

    for _ in range(100):
        with ObjectSharingScope():
            encoder = RecurrentEncoder(
                vocab_size=V, embed_dim=4, units=U, cell="gru", num_layers=3, bidirectional=True
            )
            encoder.build((B, S))
        forward = [layer.forward_layer for layer in encoder.rnn_layers]
        backward = [layer.backward_layer for layer in encoder.rnn_layers]
        assert len({id(cell) for cell in forward + backward}) == 6
        assert [cell.go_backwards for cell in forward] == [False] * 3
        assert [cell.go_backwards for cell in backward] == [True] * 3


@pytest.mark.parametrize(
    "attention,style",
    [
        ("general", "luong"),
        ("additive", "bahdanau"),
        ("multihead", "luong"),
        (
            {
                "class_name": "LocalAttention",
                "registered_name": "keras_attention>LocalAttention",
                "config": {"window": 2, "mode": "monotonic", "score": "dot"},
            },
            "bahdanau",
        ),
        (None, "luong"),
    ],
)
def test_decoder_harness(rng, attention, style):
    memory = rng.normal(size=(B, S, U)).astype("float32")
    state = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]
    mask = np.ones((B, S), bool)
    mask[1, 3:] = False
    run_layer_test(
        AttentionDecoder,
        {"vocab_size": V, "embed_dim": 4, "units": U, "attention": attention, "style": style},
        inputs={
            "target_tokens": tokens(rng, T, low=1),
            "memory": memory,
            "encoder_state": state,
            "memory_mask": mask,
        },
        masked_inputs={"memory": ~mask},
        mixed_precision=False,
    )


def test_decoder_takes_a_local_attention_around_any_score(rng):
    local = LocalAttention(GeneralAttention(), window=1, mode="monotonic")
    decoder = AttentionDecoder(V, 4, U, attention=local, style="luong")
    memory = rng.normal(size=(B, S, U)).astype("float32")
    state = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]
    _, weights = decoder(tokens(rng, T, low=1), memory, state)
    weights = np.asarray(weights)
    # local-m with the step as the query position: step t attends to |j - t| <= 1 only.
    for t in range(T):
        outside = [j for j in range(S) if abs(j - t) > 1]
        assert np.all(weights[:, t, outside] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_luong_step_matches_numpy(rng):
    """One Luong step by hand: s_1 = LSTM([E y_0; h̃_0], s_0), a_1 = general
    attention of s_1 over H, logits = W_o [s_1; a_1] + b_o."""
    decoder = AttentionDecoder(V, 4, U, attention="general", style="luong", input_feeding=True)
    memory = rng.normal(size=(B, S, U)).astype("float32")
    h0, c0 = (rng.normal(size=(B, U)).astype("float32") for _ in range(2))
    target = tokens(rng, 1, low=1)
    logits, weights = decoder(target, memory, [h0, c0])
    embedding = np.asarray(decoder.embedding.embeddings)
    x = np.concatenate([embedding[target[:, 0]], np.zeros((B, 2 * U), "float32")], -1)
    kernel, recurrent, bias = (np.asarray(w) for w in decoder.cells[0].weights)
    z = x @ kernel + h0 @ recurrent + bias
    i, f, g, o = np.split(z, 4, axis=-1)  # Keras's gate order
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c1 = sigmoid(f) * c0 + sigmoid(i) * np.tanh(g)
    s1 = sigmoid(o) * np.tanh(c1)
    a = reference.softmax(
        np.einsum("bd,de,bse->bs", s1, np.asarray(decoder.attention.kernel), memory)
    )
    context = np.einsum("bs,bsd->bd", a, memory)
    projection = decoder.output_projection
    expected = np.concatenate([s1, context], -1) @ np.asarray(projection.kernel) + np.asarray(
        projection.bias
    )
    np.testing.assert_allclose(np.asarray(logits)[:, 0], expected, atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights)[:, 0], a, atol=1e-6)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_cell_update_is_the_keras_cell(rng, cell):
    """`cell_update` given `x K + b_x` (what the decoder computes for many
    steps at once, or piece by piece) is one step of the Keras cell."""
    layer = CELLS[cell](U)
    layer.build((None, 6))
    for w in layer.weights:
        w.assign(rng.normal(scale=0.5, size=w.shape).astype("float32"))
    tensor = keras.ops.convert_to_tensor
    x = rng.normal(size=(B, 6)).astype("float32")
    state = [
        tensor(rng.normal(size=(B, U)).astype("float32")) for _ in range(2 if cell == "lstm" else 1)
    ]
    weights = cell_weights(layer, "float32")
    kernel = numpy(weights["kernel"])
    gates = x[:, :2] @ kernel[:2] + x[:, 2:] @ kernel[2:]  # [x_1; x_2] K in two pieces
    gates = tensor(gates + numpy(weights["input_bias"]))
    output, new_state = cell_update(layer, weights, gates, state)
    want_output, want_state = layer(x, state)
    np.testing.assert_allclose(numpy(output), numpy(want_output), atol=1e-5)
    for got, want in zip(new_state, want_state):
        np.testing.assert_allclose(numpy(got), numpy(want), atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        # No input feeding: each layer's recurrence runs over the whole target,
        # then attention reads every step at once.
        {"attention": "additive", "input_feeding": False, "cell": "gru", "num_layers": 2},
        {"attention": "additive", "input_feeding": False, "context_input": True},
        # Local-m reads the query positions: every step's own.
        {"attention": "local", "input_feeding": False},
        {"attention": None, "num_layers": 2},
    ],
)
def test_teacher_forcing_equals_stepping(rng, kwargs):
    """The whole-target `call` (one embedding projection, prepared keys, and
    the parallel path without input feeding) equals `step` after `step`."""
    if kwargs["attention"] == "local":
        kwargs = dict(
            kwargs, attention=LocalAttention(window=1, mode="monotonic", score="additive")
        )
    decoder = AttentionDecoder(V, 4, U, style="luong", **kwargs)
    memory = rng.normal(size=(B, S, U)).astype("float32")
    encoder_state = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]
    if kwargs.get("cell") == "gru":
        encoder_state = encoder_state[:1]
    mask = np.ones((B, S), bool)
    mask[1, 3:] = False
    target = tokens(rng, T, low=1)
    logits, weights = decoder(target, memory, encoder_state, mask)
    state = decoder.init_cache(memory, encoder_state, mask)
    for t in range(T):
        step_logits, step_weights, state = decoder.step(target[:, t], state)
        np.testing.assert_allclose(numpy(step_logits), numpy(logits)[:, t], atol=1e-5)
        np.testing.assert_allclose(numpy(step_weights), numpy(weights)[:, t], atol=1e-6)
