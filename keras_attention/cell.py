"""A tfa-style attention wrapper: any Keras RNN cell plus any attention layer
of this package, as one Keras RNN cell (`tfa.seq2seq.AttentionWrapper`'s
place in Keras 3)."""

import keras
from keras import ops

from keras_attention import masking, registry
from keras_attention.validation import check_choice, check_positive_int, check_rank

register = keras.saving.register_keras_serializable(package="keras_attention")


@register
class AttentionCell(keras.layers.Layer):
    """Wraps a Keras RNN cell so that it attends to a memory at every step.

    Luong style (tfa's `AttentionWrapper`; the query is the new cell output):

        s_t = cell([x_t; h̃_{t-1}], s_{t-1})     (h̃_{t-1} only with input feeding)
        c_t, a_t = Attention(s_t, M)
        h̃_t = W_a [s_t; c_t]                    (or [s_t; c_t] without W_a)

    Bahdanau style (the query is the previous cell output):

        c_t, a_t = Attention(s_{t-1}, M)
        s_t = cell([x_t; c_t], s_{t-1})
        h̃_t = W_a [s_t; c_t]                    (or [s_t; c_t] without W_a)

    `W_a` (tfa's `attention_layer`, no bias) exists when
    `attention_layer_size` is given, with `attention_activation` (tfa: none;
    Luong et al.: "tanh"). Without it h̃_t = [s_t; c_t] — where tfa would
    use c_t alone — so that, with the same weights, the cell reproduces our
    `AttentionDecoder` step by step (`W_o h̃_t` are its logits).

    The memory. Keras 3's `keras.layers.RNN` has no `constants` argument,
    so, as in tfa (`AttentionMechanism.setup_memory`), the memory is set on
    the cell before the RNN runs: `cell.setup_memory(memory, memory_mask)`.
    Generation passes it explicitly instead: `cell.step(x_t, states,
    memory, memory_mask)` is the same step as a pure function (see
    `keras_attention.seq2seq.base` for the contract a model wraps it in).
    The memory is data, not configuration: it is neither saved nor traced
    as an input, so set it with concrete tensors (eager calls, a custom
    model's `call`), not with symbolic `keras.Input`s of a functional
    model; a cell rebuilt from its config needs `setup_memory` again.

    The state is `[*cell_state, h̃_{t-1} (B, A), a_{t-1} (B, S)]` (tfa's
    `AttentionWrapperState` fields `cell_state`, `attention`,
    `alignments`). Alignment history: Keras RNN cells emit one tensor per
    step, so with `alignment_history=True` the step output is
    `[output; a_t]` and `AttentionCell.split(outputs, S)` returns
    `(outputs, alignments (B, T, S))`. Multi-head weights are averaged over
    heads.

    Args:
        cell: a Keras RNN cell (`LSTMCell`, `GRUCell`, ... or its config).
        attention: an attention layer of this package, or a name/config
            that `keras_attention.get` resolves ("additive", "general", ...).
        attention_layer_size: optional int A, the width of `W_a`.
        attention_activation: activation of `W_a` (default None, as tfa).
        style: "luong" (default, as tfa) or "bahdanau".
        input_feeding: bool, Luong: feed h̃_{t-1} with x_t (tfa always does).
        output_attention: bool, emit h̃_t (default, as tfa) or s_t.
        alignment_history: bool, also emit a_t (see above).

    Call arguments:
        inputs: `(B, D)`, x_t.
        states: the list above.
        training: bool.

    Returns:
        `(output (B, A [+ S]), new_states)`.

    Example:

    >>> cell = AttentionCell(keras.layers.LSTMCell(8), "additive")
    >>> cell = cell.setup_memory(np.ones((2, 5, 6), "float32"))
    >>> outputs = keras.layers.RNN(cell, return_sequences=True)(np.ones((2, 3, 4)))
    >>> tuple(outputs.shape)  # h̃_t = [s_t; c_t]
    (2, 3, 14)

    References:
        Luong et al., "Effective Approaches to Attention-based Neural
        Machine Translation" (2015); Bahdanau et al., "Neural Machine
        Translation by Jointly Learning to Align and Translate" (2015).
    """

    def __init__(
        self,
        cell,
        attention,
        attention_layer_size=None,
        attention_activation=None,
        style="luong",
        input_feeding=True,
        output_attention=True,
        alignment_history=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "AttentionCell"
        if isinstance(cell, dict):
            cell = keras.saving.deserialize_keras_object(cell)
        if not hasattr(cell, "state_size"):
            raise ValueError(
                f"`cell` of {owner} must be a Keras RNN cell (with `state_size`), e.g. "
                f"keras.layers.LSTMCell(64); received {cell!r}."
            )
        if attention_layer_size is not None:
            attention_layer_size = check_positive_int(
                "attention_layer_size", attention_layer_size, owner
            )
        check_choice("style", style, ("luong", "bahdanau"), owner)
        self.cell = cell
        self.attention = registry.get(attention)
        self.attention_layer_size = attention_layer_size
        self.attention_activation = keras.activations.get(attention_activation)
        self.style = style
        self.input_feeding = bool(input_feeding)
        self.output_attention = bool(output_attention)
        self.alignment_history = bool(alignment_history)
        self.memory = self.memory_mask = None
        self._memory_shape = None

    # -- memory --------------------------------------------------------------
    def setup_memory(self, memory, memory_mask=None):
        """Sets the memory `(B, S, Dm)` (and boolean `(B, S)` mask) that the
        following `keras.layers.RNN` calls attend to; returns the cell."""
        check_rank("memory", memory.shape, (3,), "AttentionCell", "(B, S, Dm)")
        if self._memory_shape is not None and tuple(memory.shape[1:]) != self._memory_shape:
            raise ValueError(
                "`memory` of AttentionCell must keep the (S, Dm) it was built with, "
                f"{self._memory_shape}; received shape {tuple(memory.shape)}."
            )
        self._memory_shape = tuple(memory.shape[1:])
        self.memory = ops.convert_to_tensor(memory)
        if memory_mask is not None:
            memory_mask = masking.as_boolean(memory_mask, "memory_mask", "AttentionCell")
        self.memory_mask = memory_mask
        return self

    def _require_memory(self):
        if self._memory_shape is None:
            raise ValueError(
                "AttentionCell needs its memory before it is built or run: call "
                "cell.setup_memory(memory, memory_mask) first (Keras 3's RNN has no "
                "`constants`)."
            )

    # -- sizes ---------------------------------------------------------------
    @property
    def _cell_sizes(self):
        size = self.cell.state_size
        return list(size) if isinstance(size, (list, tuple)) else [size]

    @property
    def _cell_units(self):
        size = self.cell.output_size if hasattr(self.cell, "output_size") else None
        return size if size is not None else self._cell_sizes[0]

    @property
    def context_width(self):
        """The width of c_t: what the attention outputs (the memory width for
        score layers, `output_dim` for multi-head attention)."""
        self._require_memory()
        memory_shape = (None,) + self._memory_shape
        query_shape = (None, self._cell_units)
        return self.attention.compute_output_shape(query_shape, memory_shape)[-1]

    @property
    def attention_size(self):
        """A, the width of h̃_t."""
        if self.attention_layer_size is not None:
            return self.attention_layer_size
        return self._cell_units + self.context_width

    @property
    def state_size(self):
        self._require_memory()
        return self._cell_sizes + [self.attention_size, self._memory_shape[0]]

    @property
    def output_size(self):
        self._require_memory()
        width = self.attention_size if self.output_attention else self._cell_units
        return width + (self._memory_shape[0] if self.alignment_history else 0)

    def build(self, inputs_shape):
        self._require_memory()
        check_rank("inputs", inputs_shape, (2,), "AttentionCell", "(B, D)")
        memory_shape = (None,) + self._memory_shape
        query_shape = (None, self._cell_units)
        if not self.attention.built:
            self.attention.build(query_shape, memory_shape)
        feed = 0
        if self.style == "bahdanau":
            feed = self.context_width
        elif self.input_feeding:
            feed = self.attention_size
        if not self.cell.built:
            self.cell.build((None, inputs_shape[-1] + feed))
        self.attention_layer = None
        if self.attention_layer_size is not None:
            self.attention_layer = keras.layers.Dense(
                self.attention_layer_size,
                activation=self.attention_activation,
                use_bias=False,  # tfa's attention_layer
                dtype=self.dtype_policy,
                name="attention_layer",
            )
            self.attention_layer.build((None, self._cell_units + self.context_width))
        self.built = True

    def get_initial_state(self, batch_size=None):
        """Zeros for every state (the cell's own initial state first)."""
        self._require_memory()
        cell_state = None
        if hasattr(self.cell, "get_initial_state"):
            cell_state = self.cell.get_initial_state(batch_size)
        if cell_state is None:
            cell_state = [ops.zeros((batch_size, d), self.compute_dtype) for d in self._cell_sizes]
        cell_state = list(cell_state) if isinstance(cell_state, (list, tuple)) else [cell_state]
        return cell_state + [
            ops.zeros((batch_size, self.attention_size), self.compute_dtype),
            ops.zeros((batch_size, self._memory_shape[0]), self.compute_dtype),
        ]

    # -- one step --------------------------------------------------------------
    def _attend(self, query, memory, memory_mask):
        context, weights = self.attention(
            query, memory, value_mask=memory_mask, return_attention_scores=True
        )
        if len(weights.shape) == 3:  # (B, H, S): multi-head, averaged over heads
            weights = ops.mean(weights, axis=1)
        return context, ops.cast(weights, context.dtype)

    def step(self, inputs, states, memory, memory_mask=None, training=None):
        """The step with an explicit memory: `(output, new_states)`."""
        states = list(states)
        n = len(self._cell_sizes)
        cell_state, previous_attention = states[:n], states[n]
        pieces = [inputs]
        if self.style == "bahdanau":
            context, weights = self._attend(cell_state[0], memory, memory_mask)  # s_{t-1}
            pieces.append(context)
        elif self.input_feeding:
            pieces.append(previous_attention)  # h̃_{t-1}
        x = ops.concatenate([ops.cast(p, self.compute_dtype) for p in pieces], axis=-1)
        cell_state = cell_state if len(cell_state) > 1 else cell_state[0]
        s, new_cell_state = self.cell(x, cell_state, training=training)
        new_cell_state = (
            list(new_cell_state) if isinstance(new_cell_state, (list, tuple)) else [new_cell_state]
        )
        if self.style == "luong":
            context, weights = self._attend(s, memory, memory_mask)  # query s_t
        attention = ops.concatenate([s, context], axis=-1)  # [s_t; c_t]
        if self.attention_layer is not None:
            attention = self.attention_layer(attention)  # W_a [s_t; c_t]
        output = attention if self.output_attention else s
        if self.alignment_history:
            output = ops.concatenate([output, weights], axis=-1)
        return output, new_cell_state + [attention, weights]

    def call(self, inputs, states, training=None):
        self._require_memory()
        return self.step(inputs, states, self.memory, self.memory_mask, training=training)

    @staticmethod
    def split(outputs, memory_length):
        """`outputs (B, T, W + S)` of a cell with `alignment_history=True` ->
        `(outputs (B, T, W), alignments (B, T, S))`."""
        return outputs[..., :-memory_length], outputs[..., -memory_length:]

    def get_config(self):
        return {
            **super().get_config(),
            "cell": keras.saving.serialize_keras_object(self.cell),
            "attention": keras.saving.serialize_keras_object(self.attention),
            "attention_layer_size": self.attention_layer_size,
            "attention_activation": keras.activations.serialize(self.attention_activation),
            "style": self.style,
            "input_feeding": self.input_feeding,
            "output_attention": self.output_attention,
            "alignment_history": self.alignment_history,
        }
