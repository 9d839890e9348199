"""The recurrent encoder: token embedding and stacked LSTM/GRU layers over
the source, forward, bidirectional or reading the source backwards
(`reverse_valid`). `rnn.py`'s `AttentionDecoder` attends to its states.
"""

import types

import keras
from keras import ops

from keras_attention.rnn_cells import CELLS, LAYERS
from keras_attention.validation import (
    check_choice,
    check_positive_int,
    check_rank,
    check_rate,
    check_token_id,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


def reverse_valid(x, lengths):
    """Reverse each row's first `lengths[b]` steps, leaving padding in place:
    `x (B, S, ...)`, `lengths (B,)`."""
    positions = ops.arange(ops.shape(x)[1])[None, :]  # (1, S)
    lengths = ops.cast(lengths, positions.dtype)[:, None]
    index = ops.where(positions < lengths, lengths - 1 - positions, positions)  # (B, S)
    if len(x.shape) == 3:
        index = ops.expand_dims(index, -1)
        index = ops.broadcast_to(index, ops.shape(x))
    return ops.take_along_axis(x, index, axis=1)


@register
class RecurrentEncoder(keras.layers.Layer):
    """Token embedding and one or more LSTM/GRU layers over the source.

        e_j = Embedding(x_j)
        h_j = RNN(e_j, h_{j-1})            (forward, or both ways when bidirectional)

    With `reverse_source=True` the RNN reads each source sentence backwards
    (Sutskever et al., 2014): the states are then put back in source order,
    so `outputs[:, j]` is always the state at source token j.

    Args:
        vocab_size: int.
        embed_dim: int.
        units: int, RNN width (each direction).
        num_layers: int.
        cell: "lstm" or "gru".
        bidirectional: bool; outputs and states have width 2·units.
        reverse_source: bool.
        dropout: float, between layers.
        padding_id: token id of padding.

    Call arguments:
        source_tokens: int `(B, S)`.

    Returns:
        `(outputs (B, S, U'), final_state)`: the top layer's states at every
        position (the attention memory, carrying the source mask) and its
        final state, a list (`[h, c]` for LSTM, `[h]` for GRU).
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        units,
        num_layers=1,
        cell="lstm",
        bidirectional=False,
        reverse_source=False,
        dropout=0.0,
        padding_id=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "RecurrentEncoder"
        vocab_size, embed_dim, units, num_layers = (
            check_positive_int(name, value, owner)
            for name, value in (
                ("vocab_size", vocab_size),
                ("embed_dim", embed_dim),
                ("units", units),
                ("num_layers", num_layers),
            )
        )
        check_choice("cell", cell, tuple(CELLS), owner)
        dropout = check_rate("dropout", dropout, owner)
        self.vocab_size, self.embed_dim, self.units = vocab_size, embed_dim, units
        self.num_layers, self.cell = num_layers, cell
        self.bidirectional, self.reverse_source = bool(bidirectional), bool(reverse_source)
        self.dropout = dropout
        self.padding_id = check_token_id("padding_id", padding_id, vocab_size, owner)

    @property
    def output_width(self):
        return self.units * (2 if self.bidirectional else 1)

    def build(self, source_tokens_shape):
        check_rank("source_tokens", source_tokens_shape, (2,), "RecurrentEncoder", "(B, S)")
        policy = self.dtype_policy
        self.embedding = keras.layers.Embedding(
            self.vocab_size, self.embed_dim, dtype=policy, name="embedding"
        )
        self.embedding.build(source_tokens_shape)
        self.rnn_layers = []
        # keras.layers.Bidirectional copies the cell it wraps through
        # serialisation. Inside load_model that copy consults a table keyed by
        # id(); a wrapped cell freed here could hand its id to the next one and
        # make Keras return the previous layer's backward copy as the new
        # forward layer. The wrapped cells therefore live as long as the
        # encoder, in a holder the layer tracker does not walk.
        self._wrapped_cells = types.SimpleNamespace(cells=[])
        width = self.embed_dim
        for index in range(self.num_layers):
            layer = LAYERS[self.cell](
                self.units,
                return_sequences=True,
                return_state=True,
                dropout=self.dropout if index else 0.0,
                dtype=policy,
                name=f"{self.cell}_{index}",
            )
            if self.bidirectional:
                self._wrapped_cells.cells.append(layer)
                layer = keras.layers.Bidirectional(
                    layer, dtype=policy, name=f"bidirectional_{index}"
                )
            layer.build(tuple(source_tokens_shape) + (width,))
            self.rnn_layers.append(layer)
            width = self.output_width
        self.built = True

    def source_mask(self, source_tokens):
        return ops.not_equal(source_tokens, self.padding_id)

    def call(self, source_tokens, training=None):
        mask = self.source_mask(source_tokens)
        lengths = ops.sum(ops.cast(mask, "int32"), axis=1)
        if self.reverse_source:
            source_tokens = reverse_valid(source_tokens, lengths)
        x = self.embedding(source_tokens)
        for layer in self.rnn_layers:
            x, *state = layer(x, mask=mask, training=training)
        if self.bidirectional:  # [fw h, (fw c,) bw h, (bw c)] -> concatenated per component
            half = len(state) // 2
            state = [ops.concatenate([f, b], axis=-1) for f, b in zip(state[:half], state[half:])]
        if self.reverse_source:
            x = reverse_valid(x, lengths)
        return x, list(state)

    def compute_mask(self, source_tokens, previous_mask=None):
        return self.source_mask(source_tokens), None

    def compute_output_shape(self, source_tokens_shape):
        batch = source_tokens_shape[0]
        states = 2 if self.cell == "lstm" else 1
        return (
            tuple(source_tokens_shape) + (self.output_width,),
            [(batch, self.output_width)] * states,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "units": self.units,
            "num_layers": self.num_layers,
            "cell": self.cell,
            "bidirectional": self.bidirectional,
            "reverse_source": self.reverse_source,
            "dropout": self.dropout,
            "padding_id": self.padding_id,
        }
