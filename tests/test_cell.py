"""AttentionCell: a NumPy step, our AttentionDecoder with the same weights,
keras.layers.RNN, alignment history, generation through a Seq2Seq, harness."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention import AttentionCell, AttentionDecoder, GeneralAttention, RecurrentEncoder
from keras_attention.seq2seq import Seq2Seq, greedy_search
from tests import reference

B, S, T, D, U, Dm, V = 2, 5, 4, 3, 6, 6, 9


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_step(cell, x, h, c):
    kernel, recurrent, bias = (ops.convert_to_numpy(w) for w in cell.weights)
    i, f, g, o = np.split(x @ kernel + h @ recurrent + bias, 4, axis=-1)  # Keras's gate order
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    return sigmoid(o) * np.tanh(c), c


def memory_and_mask(rng):
    memory = rng.normal(size=(B, S, Dm)).astype("float32")
    mask = np.ones((B, S), bool)
    mask[1, 3:] = False
    return memory, mask


@pytest.mark.parametrize("style", ["luong", "bahdanau"])
def test_portability_cell_matches_numpy_steps(rng, style):
    memory, mask = memory_and_mask(rng)
    cell = AttentionCell(
        keras.layers.LSTMCell(U), GeneralAttention(), attention_layer_size=5, style=style
    )
    cell.setup_memory(memory, mask)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    outputs = ops.convert_to_numpy(keras.layers.RNN(cell, return_sequences=True)(inputs))
    W = ops.convert_to_numpy(cell.attention.kernel)
    Wa = ops.convert_to_numpy(cell.attention_layer.kernel)

    def attend(q):
        a = reference.softmax(np.einsum("bd,de,bse->bs", q, W, memory), mask)
        return np.einsum("bs,bsd->bd", a, memory)

    h = c = np.zeros((B, U), "float32")
    attention = np.zeros((B, 5), "float32")
    for t in range(T):
        if style == "luong":
            h, c = lstm_step(cell.cell, np.concatenate([inputs[:, t], attention], -1), h, c)
            context = attend(h)
        else:
            context = attend(h)  # s_{t-1}
            h, c = lstm_step(cell.cell, np.concatenate([inputs[:, t], context], -1), h, c)
        attention = np.concatenate([h, context], -1) @ Wa
        np.testing.assert_allclose(outputs[:, t], attention, atol=1e-5)


@pytest.mark.parametrize("style", ["luong", "bahdanau"])
def test_cell_equals_attention_decoder_with_the_same_weights(rng, style):
    memory, mask = memory_and_mask(rng)
    decoder = AttentionDecoder(V, D, U, attention="general", style=style, input_feeding=True)
    state = [rng.normal(size=(B, U)).astype("float32") for _ in range(2)]
    target = rng.integers(1, V, (B, T))
    logits, weights = decoder(target, memory, state, mask)
    # The same cell, attention and embedding, wrapped: h̃_t = [s_t; c_t].
    cell = AttentionCell(decoder.cells[0], decoder.attention, style=style, alignment_history=True)
    cell.setup_memory(memory, mask)
    initial = state + [np.zeros((B, U + Dm), "float32"), np.zeros((B, S), "float32")]
    embedded = ops.convert_to_numpy(decoder.embedding(target))
    outputs = keras.layers.RNN(cell, return_sequences=True)(embedded, initial_state=initial)
    outputs, alignments = AttentionCell.split(outputs, S)
    np.testing.assert_allclose(
        ops.convert_to_numpy(decoder.output_projection(outputs)),
        ops.convert_to_numpy(logits),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(alignments), ops.convert_to_numpy(weights), atol=1e-6
    )


class CellSeq2Seq(Seq2Seq):
    """The smallest model around an AttentionCell: the `Seq2Seq` contract
    (encode / decode_step), so greedy and beam search decode with it."""

    def __init__(self, vocab_size, units, **kwargs):
        super().__init__(**kwargs)
        self.target_vocab_size = vocab_size
        self.encoder = RecurrentEncoder(vocab_size, 4, units)
        self.embedding = keras.layers.Embedding(vocab_size, 4)
        self.cell = AttentionCell(keras.layers.LSTMCell(units), "additive")
        self.projection = keras.layers.Dense(vocab_size)

    def encode(self, source, max_length=None, training=None):
        memory, final = self.encoder(ops.convert_to_tensor(source))
        mask = self.encoder.source_mask(source)
        if not self.cell.built:
            self.cell.setup_memory(memory, mask)
            self.cell.build((None, 4))
        zeros = self.cell.get_initial_state(ops.shape(memory)[0])
        return {"states": list(final) + zeros[2:], "memory": memory, "mask": mask}

    def decode_step(self, tokens, state, training=None):
        output, states = self.cell.step(
            self.embedding(tokens), state["states"], state["memory"], state["mask"]
        )
        return self.projection(output), dict(state, states=states), states[-1]


def test_cell_in_greedy_generation(rng):
    model = CellSeq2Seq(V, U)
    source = rng.integers(3, V, (B, S))
    source[1, 3:] = 0
    result = greedy_search(model, source, max_length=4, return_attention_scores=True)
    tokens = ops.convert_to_numpy(result["tokens"])
    # Teacher-forcing the greedy output through keras.layers.RNN gives logits
    # whose argmax is that output, and the attention generation recorded.
    memory, final = model.encoder(source)
    model.cell.setup_memory(memory, model.encoder.source_mask(source))
    inputs = np.concatenate([np.full((B, 1), model.sos_id), tokens[:, :-1]], 1)
    initial = list(final) + model.cell.get_initial_state(B)[2:]
    outputs = keras.layers.RNN(model.cell, return_sequences=True)(
        model.embedding(inputs), initial_state=initial
    )
    logits = np.array(model.projection(outputs))
    logits[..., [model.sos_id, model.padding_id]] = -np.inf  # never generated
    for b in range(B):
        n = int(ops.convert_to_numpy(result["lengths"])[b])
        np.testing.assert_array_equal(logits[b, :n].argmax(-1), tokens[b, :n])
    attention = ops.convert_to_numpy(result["attention"])
    assert np.all(attention[1, :, 3:] == 0.0)  # padding never attended


def test_harness_attention_cell_config_and_weights_round_trip(rng):
    # The shared harness takes a stand-alone layer; a cell runs inside
    # keras.layers.RNN instead. Its memory is data, set on every instance.
    memory, mask = memory_and_mask(rng)
    cell = AttentionCell(
        keras.layers.GRUCell(U), "additive", attention_layer_size=4, attention_activation="tanh"
    )
    x = rng.normal(size=(B, T, D)).astype("float32")
    want = ops.convert_to_numpy(
        keras.layers.RNN(cell.setup_memory(memory, mask), return_sequences=True)(x)
    )
    assert want.shape == (B, T, 4)
    config = cell.get_config()
    clone = AttentionCell.from_config(config)
    assert clone.get_config() == config
    rnn = keras.layers.RNN(clone.setup_memory(memory, mask), return_sequences=True)
    rnn.build(x.shape)
    clone.set_weights(cell.get_weights())
    np.testing.assert_allclose(ops.convert_to_numpy(rnn(x)), want, atol=1e-6)


def test_error_cell_without_memory():
    cell = AttentionCell(keras.layers.LSTMCell(U), "dot")
    with pytest.raises(ValueError, match="setup_memory"):
        keras.layers.RNN(cell)(np.ones((B, T, D), "float32"))
    with pytest.raises(ValueError, match="`cell` of AttentionCell must be a Keras RNN cell"):
        AttentionCell(keras.layers.Dense(3), "dot")
