"""The step of Keras's LSTM and GRU cells written out (`cell_update`), with
their weights as tensors (`cell_weights`), so that a decoder can compute a
cell's input projection `x K` for many steps at once, or piece by piece for
a concatenated input; and the cells and layers by name (`CELLS`, `LAYERS`).
"""

import keras
from keras import ops

CELLS = {"lstm": keras.layers.LSTMCell, "gru": keras.layers.GRUCell}
LAYERS = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}


def cell_weights(cell, dtype):
    """A built Keras `LSTMCell`/`GRUCell`'s weights cast to `dtype`: the
    input kernel `kernel (D_in, G·U)`, `recurrent_kernel (U, G·U)`, the
    input bias `input_bias` (LSTM: its only bias) and `recurrent_bias`
    (GRU's second bias; None for LSTM)."""
    bias = ops.cast(cell.bias, dtype)
    two_biases = len(bias.shape) == 2  # GRU(reset_after=True): [b_x, b_h]
    return {
        "kernel": ops.cast(cell.kernel, dtype),
        "recurrent_kernel": ops.cast(cell.recurrent_kernel, dtype),
        "input_bias": bias[0] if two_biases else bias,
        "recurrent_bias": bias[1] if two_biases else None,
    }


def cell_update(cell, weights, gates, state):
    """One step of a Keras `LSTMCell`/`GRUCell` (the options the decoder
    of `rnn.py` creates them with) after its input projection:
    `gates = x K + b_x` `(B, G·U)` is given, so a caller can compute `x K`
    for many steps at once, or add up `[x_1; x_2] K = x_1 K_1 + x_2 K_2`
    piece by piece.
    `weights` is `cell_weights(cell, dtype)`.

        LSTM:  [i f g o] = gates + h U
               c' = σ(f) c + σ(i) tanh(g),   h' = σ(o) tanh(c')
        GRU:   [x_z x_r x_h] = gates,   [h_z h_r h_h] = h U + b_h
               z = σ(x_z + h_z),  r = σ(x_r + h_r)
               h' = z h + (1 − z) tanh(x_h + r h_h)       (reset after, Keras's default)

    σ and tanh are the cell's `recurrent_activation` and `activation`.
    Returns `(h', new state)`, the state a list as the cell's (`[h, c]` or
    `[h]`): what `cell(x, state)` returns.
    """
    h = state[0]
    inner = ops.matmul(h, weights["recurrent_kernel"])  # (B, G·U)
    gate, activation = cell.recurrent_activation, cell.activation
    if len(state) == 2:  # LSTM
        i, f, g, o = ops.split(gates + inner, 4, axis=-1)
        c = gate(f) * state[1] + gate(i) * activation(g)
        h = gate(o) * activation(c)
        return h, [h, c]
    x_z, x_r, x_h = ops.split(gates, 3, axis=-1)
    h_z, h_r, h_h = ops.split(inner + weights["recurrent_bias"], 3, axis=-1)
    z = gate(x_z + h_z)
    candidate = activation(x_h + gate(x_r + h_r) * h_h)
    h = z * h + (1 - z) * candidate
    return h, [h]
