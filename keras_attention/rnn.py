"""The attention-equipped recurrent decoder, in both formulations of the
seeds:

- Bahdanau: the query is the previous decoder state s_{t-1};
  c_t = Attention(s_{t-1}, H); s_t = RNN([y_{t-1}; c_t], s_{t-1});
  logits_t = W_o [s_t; c_t] + b_o.
- Luong: s_t = RNN([y_{t-1}; h̃_{t-1}], s_{t-1}) (h̃ only with input feeding);
  a_t = Attention(s_t, H); h̃_t = [s_t; a_t]; logits_t = W_o h̃_t + b_o.

and the bottleneck baseline without attention, logits_t = W_o s_t + b_o.
The encoder whose states H it reads is `rnn_encoder.RecurrentEncoder`, and
the cells' step `rnn_cells.cell_update`.
"""

import itertools

import keras
from keras import ops

from keras_attention import compat, masking, registry
from keras_attention.base import ScoreAttention
from keras_attention.rnn_cells import CELLS, cell_update, cell_weights
from keras_attention.validation import (
    check_choice,
    check_positive_int,
    check_rate,
    check_same_batch,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


@register
class AttentionDecoder(keras.layers.Layer):
    """A recurrent decoder that attends to the encoder's states at every step.

    Bahdanau style (the query is the previous state s_{t-1}):

        c_t = Attention(s_{t-1}, H)
        s_t = RNN([y_{t-1}; c_t], s_{t-1})
        logits_t = W_o [s_t; c_t] + b_o

    Luong style (the query is the new state s_t; h̃_{t-1} is fed back only
    with input feeding):

        s_t = RNN([y_{t-1}; h̃_{t-1}], s_{t-1})
        a_t = Attention(s_t, H),   h̃_t = [s_t; a_t]
        logits_t = W_o h̃_t + b_o

    Without attention (the bottleneck baseline), `logits_t = W_o s_t + b_o`.
    The encoder's final state initialises the decoder state, through a
    learned projection (the bridge) when the widths differ. With
    `context_input=True` that final encoder state (the seeds' "context") is
    also fed as a constant input at every step. The attention is called
    with `query_positions=t`, so position-based mechanisms (local-m) work
    like every other.

    Teacher-forced `call` computes the same equations as `step` (so
    incremental decoding equals it), arranged for speed: the embeddings'
    share of the cell's gates for all steps in one matmul, the memory's
    share of the score (`prepare_key`) once, the output layer once after
    the loop; and, when the recurrence does not read the attention (Luong
    without input feeding, or no attention), each layer's recurrence over
    the whole target first and attention for every step at once after.
    Without input feeding, training is therefore faster (see
    BENCHMARKS.md), and the model is Luong et al.'s without their
    input-feeding approach.

    Args:
        vocab_size: int, target vocabulary.
        embed_dim: int.
        units: int, decoder RNN width.
        attention: an attention layer, a name or config that
            `keras_attention.get` resolves, or None (no attention).
        style: "bahdanau" or "luong".
        input_feeding: bool (Luong): feed h̃_{t-1} with the next input.
        context_input: bool: feed the final encoder state at every step.
        num_layers: int, stacked cells (attention reads the top one).
        cell: "lstm" or "gru".
        dropout: float, on the cell inputs.

    Call arguments:
        target_tokens: int `(B, T)`, the target shifted right.
        memory: `(B, S, Dm)`, the encoder's states (the attention memory).
        encoder_state: list of `(B, Ue)` tensors, the encoder's final state
            (`[h, c]` for LSTM, `[h]` for GRU).
        memory_mask: optional boolean `(B, S)`, False at source padding.
        training: bool.
        (0.1.0's `decoder(target_tokens, state)`, with the dict that
        `init_cache` returns, still works.)

    Returns:
        `(logits (B, T, V), weights (B, T, S))`; the weights are averaged
        over heads for multi-head attention, and zero without attention.

    Example:

    >>> from keras_attention.rnn_encoder import RecurrentEncoder
    >>> encoder = RecurrentEncoder(vocab_size=20, embed_dim=8, units=16)
    >>> decoder = AttentionDecoder(20, 8, 16, attention="additive")
    >>> source = np.array([[3, 4, 5, 0]])
    >>> memory, final_state = encoder(source)
    >>> mask = encoder.source_mask(source)
    >>> logits, weights = decoder(np.array([[1, 6]]), memory, final_state, mask)
    >>> tuple(logits.shape), tuple(weights.shape)
    ((1, 2, 20), (1, 2, 4))

    References:
        Bahdanau et al., "Neural Machine Translation by Jointly Learning to
        Align and Translate" (2015); Luong et al., "Effective Approaches to
        Attention-based Neural Machine Translation" (2015).
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        units,
        attention=None,
        style="bahdanau",
        input_feeding=True,
        context_input=False,
        num_layers=1,
        cell="lstm",
        dropout=0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "AttentionDecoder"
        vocab_size, embed_dim, units, num_layers = (
            check_positive_int(name, value, owner)
            for name, value in (
                ("vocab_size", vocab_size),
                ("embed_dim", embed_dim),
                ("units", units),
                ("num_layers", num_layers),
            )
        )
        check_choice("style", style, ("bahdanau", "luong"), owner)
        check_choice("cell", cell, tuple(CELLS), owner)
        dropout = check_rate("dropout", dropout, owner)
        self.vocab_size, self.embed_dim, self.units = vocab_size, embed_dim, units
        self.attention = None if attention is None else registry.get(attention)
        self.style, self.input_feeding, self.context_input = (
            style,
            bool(input_feeding),
            bool(context_input),
        )
        self.num_layers, self.cell, self.dropout = num_layers, cell, dropout

    # -- sizes -------------------------------------------------------------
    def _feed_width(self):
        """Width of the extra cell input that carries attention forward."""
        if self.attention is None:
            return 0
        if self.style == "bahdanau":
            return self.context_width  # c_t
        return self.units + self.context_width if self.input_feeding else 0  # h̃_{t-1} = [s; a]

    def build(
        self,
        target_tokens_shape=None,
        memory_shape=None,
        encoder_state_shape=None,
        memory_mask_shape=None,
    ):
        """Needs `memory_shape` `(B, S, Dm)` and `encoder_state_shape`, a list
        of `(B, Ue)` (the names `call`'s arguments give Keras)."""
        encoder_state_shapes = encoder_state_shape
        policy = self.dtype_policy
        query_shape = (memory_shape[0], self.units)
        if self.attention is not None and not self.attention.built:
            self.attention.build(query_shape, tuple(memory_shape))
        # The context is whatever the attention outputs: the memory width
        # for score layers, `output_dim` for multi-head attention.
        self.context_width = 0
        if self.attention is not None:
            self.context_width = self.attention.compute_output_shape(query_shape, memory_shape)[-1]
        self.embedding = keras.layers.Embedding(
            self.vocab_size, self.embed_dim, dtype=policy, name="embedding"
        )
        self.embedding.build((None, None))
        context_width = encoder_state_shapes[0][-1] if self.context_input else 0
        input_width = self.embed_dim + self._feed_width() + context_width
        self.cells = []
        for index in range(self.num_layers):
            cell = CELLS[self.cell](self.units, dtype=policy, name=f"{self.cell}_cell_{index}")
            cell.build((None, input_width if index == 0 else self.units))
            self.cells.append(cell)
        self.bridges = []
        for index, shape in enumerate(encoder_state_shapes):
            bridge = None
            if shape[-1] != self.units:
                bridge = keras.layers.Dense(
                    self.units, activation="tanh", dtype=policy, name=f"bridge_{index}"
                )
                bridge.build((None, shape[-1]))
            self.bridges.append(bridge)
        self.input_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        output_width = self.units + self.context_width
        self.output_projection = keras.layers.Dense(
            self.vocab_size, dtype=policy, name="output_projection"
        )
        self.output_projection.build((None, output_width))
        self.built = True

    # -- one step ----------------------------------------------------------
    def _attend(self, query, memory, memory_mask, positions, keys=None):
        """`query (B, U)` -> `(context (B, Dv), weights (B, S))`, or every
        step at once, `(B, T, U)` -> `(B, T, Dv), (B, T, S)`. `keys` is
        what the attention's `prepare_key` made of the memory, if anything."""
        extra = {} if keys is None else {"prepared_key": keys}
        context, weights = self.attention(
            query,
            memory,
            value_mask=memory_mask,
            query_positions=positions,
            return_attention_scores=True,
            **extra,
        )
        if len(weights.shape) > len(query.shape):  # (B, H, [T,] S): averaged over heads
            weights = ops.mean(weights, axis=1)
        return context, weights

    def _prepares_key(self):
        return isinstance(self.attention, ScoreAttention) and self.attention.prepares_key()

    def init_cache(self, memory, encoder_state, memory_mask=None):
        """The decoding cache at t = 0, everything `step` needs: a dict of
        batch-major tensors (`MultiHead`, `TransformerDecoderLayer` and
        `ConvS2SDecoder` name theirs the same way)."""
        if not self.built:
            self.build(
                memory_shape=memory.shape, encoder_state_shape=[s.shape for s in encoder_state]
            )
        dtype = self.compute_dtype
        encoder_state = [ops.cast(s, dtype) for s in encoder_state]
        bridged = [
            s if bridge is None else bridge(s) for s, bridge in zip(encoder_state, self.bridges)
        ]
        batch = ops.shape(memory)[0]
        if memory_mask is None:
            memory_mask = ops.ones(ops.shape(memory)[:2], "bool")
        state = {
            "cells": [list(bridged) for _ in self.cells],
            "memory": ops.cast(memory, dtype),
            "memory_mask": masking.as_boolean(memory_mask, "memory_mask", type(self).__name__),
            "step": ops.zeros((batch,), "int32"),
        }
        if self._prepares_key():
            # The memory's share of the score (Bahdanau's W_k h_j + b), once
            # for every step.
            state["keys"] = self.attention.prepare_key(state["memory"])
        feed = self._feed_width()
        if feed:
            state["feed"] = ops.zeros((batch, feed), dtype)
        if self.context_input:
            state["context"] = encoder_state[0]
        return state

    def _step_weights(self):
        """`cell_weights` of every cell, the first cell's kernel also cut
        into the rows that each piece of its input meets: `embedding`
        (E y_{t-1}), `fed` (c_t or h̃_{t-1}) and `context`. The
        teacher-forced loop closes over these: cut inside it, the backward
        pass would build a kernel-sized gradient for each cut at each step."""
        weights = [cell_weights(cell, self.compute_dtype) for cell in self.cells]
        kernel = weights[0]["kernel"]
        start = 0
        for name, width in (
            ("embedding", self.embed_dim),
            ("fed", self._feed_width()),
            ("context", kernel.shape[0] - self.embed_dim - self._feed_width()),
        ):
            weights[0][name] = kernel[start : start + width]
            start += width
        return weights

    def _embedding_gates(self, tokens, weights, training):
        """y_{t-1}'s share of the first cell's gate pre-activations, with its
        input bias: `dropout(E y) K_E + b_x`, for one step `(B,)` -> `(B, G·U)`
        or for all of them, time-major, `(T, B)` -> `(T, B, G·U)` (one matmul)."""
        embedded = self.input_dropout(self.embedding(tokens), training=training)
        return ops.matmul(embedded, weights[0]["embedding"]) + weights[0]["input_bias"]

    initial_state = compat.renamed_method("initial_state", "init_cache", "AttentionDecoder")

    @compat.renamed_arguments("AttentionDecoder.step", state="cache")
    def step(self, tokens, cache, training=None):
        """Decode one position: `tokens (B,)` are y_{t-1}, `cache` the dict
        from `init_cache` or the previous step. Returns `(logits (B, V),
        weights (B, S), cache)`, the weights a_t of this step (zeros without
        attention). (`state=`, the argument's old name, still works.)"""
        state = cache
        weights = self._step_weights()
        gates = self._embedding_gates(tokens, weights, training)
        output, attention_weights, state = self._step_output(gates, state, weights, training)
        return self.output_projection(output), attention_weights, state

    def _step_output(self, gates, state, weights, training, masks=None):
        """One step up to the output layer's input ([s_t; c_t], or s_t),
        given y_{t-1}'s share of the first cell's gates (`_embedding_gates`)
        and `_step_weights()`: returns `(output, weights (B, S), state)`.
        `masks`: this step's dropout masks of `fed` and `context`, drawn
        before a loop over the steps (`_dropout_masks`); else the dropout
        layer draws them.

        The first cell's input `[E y_{t-1}; c_t or h̃_{t-1}; context]` is
        never concatenated: each piece adds its share `x K_x` of the gates."""
        masks = masks or {}

        def dropped(name, x):
            if name in masks:
                return x * masks[name]
            return self.input_dropout(x, training=training)

        memory, memory_mask, keys = state["memory"], state["memory_mask"], state.get("keys")
        context = attention_weights = fed = None
        if self.attention is not None and self.style == "bahdanau":
            query = state["cells"][-1][0]  # s_{t-1}
            context, attention_weights = self._attend(
                query, memory, memory_mask, state["step"], keys
            )
            fed = context
        elif "feed" in state:
            fed = state["feed"]  # h̃_{t-1}
        if fed is not None:
            gates = gates + ops.matmul(dropped("fed", fed), weights[0]["fed"])
        if self.context_input:
            encoded = dropped("context", state["context"])
            gates = gates + ops.matmul(encoded, weights[0]["context"])
        new_cells, x = [], None
        for index, (cell, cell_state) in enumerate(zip(self.cells, state["cells"])):
            if index:
                gates = ops.matmul(x, weights[index]["kernel"]) + weights[index]["input_bias"]
            x, cell_state = cell_update(cell, weights[index], gates, cell_state)
            new_cells.append(cell_state)
        new_state = dict(state, cells=new_cells, step=state["step"] + 1)
        if self.attention is None:
            output = x  # W_o s_t
            attention_weights = ops.zeros(ops.shape(memory)[:2], self.compute_dtype)
        elif self.style == "bahdanau":
            output = ops.concatenate([x, context], axis=-1)  # W_o [s_t; c_t]
            new_state["feed"] = context
        else:
            context, attention_weights = self._attend(
                x, memory, memory_mask, state["step"], keys
            )  # query s_t
            output = ops.concatenate([x, context], axis=-1)  # h̃_t = [s_t; a_t]
            if "feed" in state:
                new_state["feed"] = output
        return output, ops.cast(attention_weights, self.compute_dtype), new_state

    # -- every step (teacher forcing) ----------------------------------------
    def call(self, target_tokens, memory, encoder_state=None, memory_mask=None, training=None):
        """Teacher forcing: logits `(B, T, V)` and attention weights `(B, T, S)`.

        The same equations as `step`, arranged for a whole target: the
        embeddings' share of the first cell's gates is one matmul over all
        steps, the memory's share of the score is prepared once, and the
        output layer runs once over all steps afterwards. When the
        recurrence does not read the attention (Luong without input
        feeding, or no attention) each layer's recurrence runs over the
        whole target and attention then reads every s_t at once; otherwise
        `_step_output` runs over time with `ops.scan`."""
        if not isinstance(memory, dict):
            check_same_batch(
                "AttentionDecoder",
                target_tokens=target_tokens,
                memory=memory,
                memory_mask=None if memory_mask is None else ops.convert_to_tensor(memory_mask),
            )
        outputs, weights = self._features(
            target_tokens, memory, encoder_state, memory_mask, training
        )
        return self.output_projection(outputs), weights

    def _features(self, target_tokens, memory, encoder_state=None, memory_mask=None, training=None):
        """`call` up to the output layer: `(outputs (B, T, U [+ Dv]), weights)`."""
        state = (
            memory
            if isinstance(memory, dict)
            else self.init_cache(memory, list(encoder_state), memory_mask)
        )
        weights = self._step_weights()
        # Time-major from the token ids on: (T, B, G·U).
        gates = self._embedding_gates(ops.transpose(target_tokens), weights, training)
        if self.attention is None or (self.style == "luong" and "feed" not in state):
            return self._parallel_features(gates, state, weights, training)
        # The encoder memory is constant, so the step closes over it, and
        # the scanned carry holds only what changes (Keras's scan stacks a
        # copy of the carry per step, so the step's output and weights ride
        # in the carry too).
        constant_keys = ("memory", "memory_mask", "context", "keys")
        constants = {k: v for k, v in state.items() if k in constant_keys}
        carry = {k: v for k, v in state.items() if k not in constant_keys}
        batch = ops.shape(target_tokens)[0]
        carry["output"] = ops.zeros((batch, self.units + self.context_width), self.compute_dtype)
        carry["weights"] = ops.zeros(ops.shape(state["memory"])[:2], self.compute_dtype)

        # The dropout masks ride beside the gates in one scanned tensor
        # (Keras's scan on TensorFlow takes one input of unknown length).
        masks = self._dropout_masks(gates, state, training)
        cuts = list(itertools.accumulate(m.shape[-1] for m in [gates, *masks.values()]))[:-1]

        def scan_step(carry, inputs):
            step_masks = {}
            if masks:
                inputs, *parts = ops.split(inputs, cuts, axis=-1)
                step_masks = dict(zip(masks, parts))
            output, attention_weights, new_state = self._step_output(
                inputs, {**constants, **carry}, weights, training, step_masks
            )
            new_carry = {k: new_state[k] for k in carry if k not in ("output", "weights")}
            new_carry.update(output=output, weights=attention_weights)
            return new_carry, new_carry

        scanned = ops.concatenate([gates, *masks.values()], axis=-1) if masks else gates
        _, per_step = ops.scan(scan_step, carry, scanned)
        outputs = ops.transpose(per_step["output"], (1, 0, 2))  # (B, T, U [+ Dv])
        attention_weights = ops.transpose(per_step["weights"], (1, 0, 2))  # (B, T, S)
        return outputs, attention_weights

    def _dropout_masks(self, gates, state, training):
        """The dropout masks of every step's `fed` and `context` inputs,
        time-major `(T, B, width)`, scaled by 1 / (1 - rate): drawn at once
        before the loop over the steps, since a loop body (JAX's scan
        under `jit`) cannot advance the layer's seed. Each step's masks are
        its own, as when the step draws them. Empty when not training."""
        if not training or not self.dropout:
            return {}
        steps, batch = ops.shape(gates)[0], ops.shape(gates)[1]
        widths = {"fed": self._feed_width()}
        if self.context_input:
            widths["context"] = state["context"].shape[-1]
        return {
            name: self.input_dropout(
                ops.ones((steps, batch, width), self.compute_dtype), training=training
            )
            for name, width in widths.items()
            if width
        }

    def _parallel_features(self, gates, state, weights, training):
        """Teacher forcing when the recurrence does not read the attention:
        each layer runs over the whole target (only `h U` inside its loop),
        then attention reads every s_t at once. `gates` are time-major."""
        memory = state["memory"]
        if self.context_input:
            encoded = ops.expand_dims(state["context"], 0)  # (1, B, Ue)
            encoded = ops.broadcast_to(encoded, ops.shape(gates)[:2] + (encoded.shape[-1],))
            encoded = self.input_dropout(encoded, training=training)  # (T, B, Ue)
            gates = gates + ops.matmul(encoded, weights[0]["context"])
        sequence = None
        for index, (cell, cell_state) in enumerate(zip(self.cells, state["cells"])):
            if index:
                gates = ops.matmul(sequence, weights[index]["kernel"])
                gates = gates + weights[index]["input_bias"]

            def scan_step(carry, gates, cell=cell, cell_weights=weights[index]):
                _, new = cell_update(cell, cell_weights, gates, carry)
                return new, new

            _, per_step = ops.scan(scan_step, list(cell_state), gates)
            sequence = per_step[0]  # h: (T, B, U)
        sequence = ops.transpose(sequence, (1, 0, 2))  # (B, T, U)
        if self.attention is None:
            attention_weights = ops.zeros(
                ops.shape(sequence)[:2] + ops.shape(memory)[1:2], sequence.dtype
            )
            return sequence, attention_weights  # W_o s_t
        steps = ops.arange(ops.shape(sequence)[1], dtype="int32")
        positions = ops.expand_dims(state["step"], 1) + ops.expand_dims(steps, 0)  # (B, T)
        context, attention_weights = self._attend(
            sequence, memory, state["memory_mask"], positions, state.get("keys")
        )
        output = ops.concatenate([sequence, context], axis=-1)  # h̃_t = [s_t; a_t]
        return output, ops.cast(attention_weights, self.compute_dtype)

    def compute_output_shape(
        self, target_tokens_shape, memory_shape, encoder_state_shape=None, memory_mask_shape=None
    ):
        batch_time = tuple(target_tokens_shape)
        return batch_time + (self.vocab_size,), batch_time + (memory_shape[1],)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "units": self.units,
            "attention": None
            if self.attention is None
            else keras.saving.serialize_keras_object(self.attention),
            "style": self.style,
            "input_feeding": self.input_feeding,
            "context_input": self.context_input,
            "num_layers": self.num_layers,
            "cell": self.cell,
            "dropout": self.dropout,
        }
