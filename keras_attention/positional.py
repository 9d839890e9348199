"""Absolute positional embeddings: fixed sinusoids or learned positions,
alone or with the token embedding they are added to."""

import math

import keras
from keras import ops

from keras_attention import compat, quantization
from keras_attention.validation import (
    assert_at_run_time,
    check_choice,
    check_float_input,
    check_positive_int,
    check_rank,
    check_rate,
    check_token_id,
    is_integer,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


def sinusoids(positions, width):
    """`PE(pos, 2i) = sin(pos / 10000^(2i/d))`, `PE(pos, 2i+1) = cos(...)`.

    `positions`: float `(T,)`; returns float32 `(T, width)`, sine and cosine
    interleaved on the feature axis exactly as the equation indexes them.
    """
    dims = ops.arange(width)
    even_dims = ops.cast(dims - dims % 2, "float32")  # 2i for both 2i and 2i+1
    inverse_frequency = ops.power(10000.0, -even_dims / float(width))  # (D,)
    angles = ops.cast(positions, "float32")[:, None] * inverse_frequency[None, :]  # (T, D)
    return ops.where(dims % 2 == 0, ops.sin(angles), ops.cos(angles))


@register
class PositionalEmbedding(keras.layers.Layer):
    """Adds an absolute position embedding to token embeddings: `e = w + p`.

    - `mode="sinusoidal"` (Transformer): `p_pos = PE(pos)` with
      `PE(pos, 2i) = sin(pos / 10000^(2i/d))` and
      `PE(pos, 2i+1) = cos(pos / 10000^(2i/d))`; no weights. With an int
      `start_index` any position works. With a tensor one (incremental
      decoding) the rows are gathered from the table of positions
      `0 .. max_length - 1`, which compilers fold into a constant: XLA
      fuses an elementwise producer into each of its consumers, so the
      formula itself would be evaluated again in every kernel that reads
      the embedding, about half of a small model's greedy step. Positions
      past the table are then an error, as in the learned mode.
    - `mode="learned"` (ConvS2S): `p_pos` is row `pos` of a learned
      `(max_length, d)` matrix; positions `>= max_length` are an error
      (a `ValueError` when the length is static, a run-time error or, where
      nothing can raise, as under XLA, NaN outputs: see `check_range`).

    The padding mask of the input (e.g. from `Embedding(mask_zero=True)`)
    is propagated unchanged.

    Args:
        max_length: int, number of positions.
        mode: "sinusoidal" or "learned".
        embeddings_initializer: initializer of the learned table.

    Call arguments:
        inputs: `(B, T, D)` token embeddings.
        start_index: int (or int scalar tensor) position of `inputs[:, 0]`,
            for incremental decoding; default 0.

    Returns:
        `(B, T, D)`: `inputs + p[start_index : start_index + T]`, the sum
        (KerasHub's `SinePositionEncoding` returns the encoding `p` alone,
        to be added by the caller).

    Example:

    >>> layer = PositionalEmbedding(max_length=16)
    >>> tuple(layer(np.zeros((2, 5, 8))).shape)
    (2, 5, 8)

    References:
        Vaswani et al., "Attention Is All You Need" (2017); Gehring et al.,
        "Convolutional Sequence to Sequence Learning" (2017).
    """

    def __init__(
        self,
        max_length,
        mode="sinusoidal",
        embeddings_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        max_length = check_positive_int("max_length", max_length, "PositionalEmbedding")
        check_choice("mode", mode, ("sinusoidal", "learned"), "PositionalEmbedding")
        self.max_length = max_length
        self.mode = mode
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,), "PositionalEmbedding", "(B, T, D)")
        self.width = inputs_shape[-1]
        if self.mode == "learned":
            self.position_embeddings = self.add_weight(
                name="position_embeddings",
                shape=(self.max_length, self.width),
                initializer=self.embeddings_initializer,
            )
        self.built = True

    def check_range(self, length, start_index):
        """Raise `ValueError` if positions `start_index .. start_index +
        length - 1` are read from the table (learned, or sinusoidal with a
        tensor `start_index`) and it has no row for them.

        The check runs at trace time whenever the static `length` is known:
        with an int `start_index` it checks the whole range, with a tensor
        one `length <= max_length`. On JAX shapes are always static, so it
        always runs. When `length` is `None` at trace time (a TensorFlow
        graph traced with an unknown length), `position_embedding` checks at
        run time through `validation.assert_at_run_time`: on TensorFlow a
        graph `Assert` raising `InvalidArgumentError`. Under XLA
        (`jit_compile=True`) with an unknown length it does not hold: XLA
        drops asserts. There, and on every path no check stops (JAX with a
        traced `start_index`), a position outside `0 .. max_length - 1` gets an
        embedding of NaN (the sentinel), never a clamped row: the output is
        NaN at those positions, so a loss turns NaN and
        `keras.callbacks.TerminateOnNaN` (the recipes use it) stops training,
        and decoding scores are NaN. Give XLA functions a static length
        (an `input_signature` with the length) to get the `ValueError` at
        trace time instead.
        """
        known_start = is_integer(start_index)
        if length is None or (self.mode == "sinusoidal" and known_start):
            return
        first = start_index if known_start else 0
        if first < 0 or first + length > self.max_length:
            where = f"start_index={start_index}" if known_start else "start_index >= 0"
            raise ValueError(
                f"PositionalEmbedding(mode={self.mode!r}, max_length={self.max_length}) "
                f"has positions 0..{self.max_length - 1}; received positions "
                f"{first}..{first + length - 1} or later ({where}, "
                f"sequence length {length}). Raise `max_length` or shorten the input."
            )

    def position_embedding(self, length, start_index=0):
        """`p[start_index : start_index + length]`, `(length, D)`."""
        positions = ops.arange(length) + start_index  # (T,)
        if self.mode == "sinusoidal" and is_integer(start_index):
            return sinusoids(positions, self.width)
        if self.mode == "sinusoidal":  # a traced start: rows of the folded table
            table = sinusoids(ops.arange(self.max_length), self.width)
        else:
            table = self.position_embeddings
        in_range = ops.logical_and(
            ops.greater_equal(start_index, 0),
            ops.less_equal(start_index + length, self.max_length),
        )
        positions = assert_at_run_time(
            in_range,
            f"PositionalEmbedding(mode={self.mode!r}, max_length={self.max_length}) has "
            f"positions 0..{self.max_length - 1}; the input reaches past them. Raise "
            "`max_length` or shorten the input.",
            positions,
        )
        # Where no check can stop the call (XLA drops asserts, and gathers
        # clamp there, on JAX and on GPUs), a position with no row gets NaN,
        # never another position's row: the NaN sentinel (see `check_range`).
        exists = ops.logical_and(
            ops.greater_equal(positions, 0), ops.less(positions, self.max_length)
        )
        rows = ops.take(table, ops.clip(positions, 0, self.max_length - 1), axis=0)
        return ops.where(exists[:, None], rows, ops.cast(float("nan"), rows.dtype))

    def call(self, inputs, start_index=0):
        check_float_input("inputs", inputs, "PositionalEmbedding")
        self.check_range(inputs.shape[1], start_index)
        embedding = self.position_embedding(ops.shape(inputs)[1], start_index)
        return inputs + ops.cast(embedding, inputs.dtype)[None]  # (B, T, D)

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "mode": self.mode,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }


@compat.reads_0_1_0(weights="token_table")
@register
class TokenAndPositionEmbedding(quantization.Int8Kernels, keras.layers.Layer):
    """Token embedding plus absolute position embedding, then dropout.

        e_t = s · W_x[x_t] + p_{t + start_index}

    with `s = sqrt(D)` when `scale_embeddings=True` (Vaswani et al., Sec.
    3.4; the Transformer) and `s = 1` otherwise (ConvS2S), and `p` a
    `PositionalEmbedding` (sinusoidal or learned).

    Args:
        vocab_size: int.
        embed_dim: int, `D`.
        max_length: int, number of positions (see `PositionalEmbedding`).
        position: "sinusoidal", "learned", or None: no position embedding,
            for models whose attention places tokens itself (RoPE, ALiBi,
            relative positions; see `MultiHead`).
        scale_embeddings: bool, multiply token embeddings by `sqrt(D)`.
        embeddings_initializer: of the token table (and learned positions).
        dropout: float in [0, 1), on the sum.
        mask_zero: bool; if True the output carries a Keras padding mask
            (False where the token is `padding_id`), as
            `keras.layers.Embedding(mask_zero=True)` does.
        padding_id: the padding token id of `mask_zero`.

    `share_token_table(owner)`, before `build`, makes the layer read
    another one's token table instead of its own (a shared source and
    target vocabulary); its positions stay its own.

    Call arguments:
        tokens: int `(B, T)`.
        start_index: int (or int scalar tensor), the position of
            `tokens[:, 0]` (incremental decoding); default 0.
        training: bool.

    Returns:
        `(B, T, D)`.

    Example:

    >>> layer = TokenAndPositionEmbedding(vocab_size=10, embed_dim=4, max_length=8)
    >>> tuple(layer(np.array([[1, 2, 3]])).shape)
    (1, 3, 4)
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        max_length,
        position="sinusoidal",
        scale_embeddings=False,
        embeddings_initializer="uniform",
        dropout=0.0,
        mask_zero=False,
        padding_id=0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = "TokenAndPositionEmbedding"
        vocab_size = check_positive_int("vocab_size", vocab_size, owner)
        embed_dim = check_positive_int("embed_dim", embed_dim, owner)
        dropout = check_rate("dropout", dropout, owner)
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.max_length = max_length
        self.position = position
        self.scale_embeddings = bool(scale_embeddings)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.dropout = dropout
        self.mask_zero = bool(mask_zero)
        self.padding_id = check_token_id("padding_id", padding_id, vocab_size, owner)
        self._table_owner = None  # a function returning the layer whose table is read
        self.position_embedding = None
        if position is not None:
            self.position_embedding = PositionalEmbedding(
                max_length,
                mode=position,
                embeddings_initializer=self.embeddings_initializer,
                dtype=quantization.float_policy(self.dtype_policy),
                name="position_embedding",
            )
        self.embedding_dropout = keras.layers.Dropout(
            dropout, dtype=quantization.float_policy(self.dtype_policy)
        )

    def share_token_table(self, owner):
        """Read `owner`'s token table (a `TokenAndPositionEmbedding` of the
        same `vocab_size` and `embed_dim`) instead of having one: the tied
        source and target embeddings of a shared vocabulary (Press & Wolf,
        2017; fairseq's `--share-all-embeddings`). Call it before `build`;
        the model that holds both layers calls it (it is not in the config).
        The table is then `owner`'s weight alone, quantized with it."""
        owner_name = "TokenAndPositionEmbedding.share_token_table"
        if not isinstance(owner, TokenAndPositionEmbedding):
            raise ValueError(
                f"{owner_name}: `owner` must be a TokenAndPositionEmbedding; "
                f"received {type(owner).__name__}."
            )
        if (owner.vocab_size, owner.embed_dim) != (self.vocab_size, self.embed_dim):
            raise ValueError(
                f"{owner_name}: `owner` must have this layer's vocab_size and embed_dim "
                f"{(self.vocab_size, self.embed_dim)}; received "
                f"{(owner.vocab_size, owner.embed_dim)}."
            )
        if self.built:
            raise ValueError(f"{owner_name}: call it before the layer is built.")
        self._table_owner = lambda: owner  # a function: Keras does not track it as a sublayer

    def table_layer(self):
        """The layer whose token table (`embeddings`, and its int8 scale)
        this one reads: itself, or the owner given to `share_token_table`.
        (A method: Keras's saving walks properties, and this one can be
        the layer itself.)"""
        return self if self._table_owner is None else self._table_owner()

    def build(self, tokens_shape):
        check_rank("tokens", tokens_shape, (2,), "TokenAndPositionEmbedding", "(B, T)")
        # The token table is this layer's own weight, at the place a
        # keras.layers.Embedding of 0.1.0's models kept it, so their .keras
        # files load.
        if self._table_owner is None:
            self.embeddings = self.add_weight(
                name="embeddings",
                shape=(self.vocab_size, self.embed_dim),
                initializer=self.embeddings_initializer,
            )
        if self.position_embedding is not None:
            self.position_embedding.build(tuple(tokens_shape) + (self.embed_dim,))
        self.build_int8()
        self.built = True

    def int8_kernels(self):
        # One scale per token (row): the scale of a looked-up row, and of
        # that token's logit when a tied output projection reads the table.
        return {} if self._table_owner is not None else {"embeddings": (1,)}

    def call(self, tokens, start_index=0, training=None):
        tokens = ops.cast(tokens, "int32")
        table = self.table_layer()
        # Rows first, then the cast (and, int8, each row's scale): never the whole table.
        x = ops.cast(ops.take(table.embeddings, tokens, axis=0), self.compute_dtype)  # (B, T, D)
        scale = getattr(table, "embeddings_scale", None)
        if scale is not None:
            x = x * ops.cast(ops.take(scale, tokens, axis=0), x.dtype)[..., None]
        if self.scale_embeddings:
            x = x * ops.cast(math.sqrt(self.embed_dim), x.dtype)
        if self.position_embedding is not None:
            x = self.position_embedding(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def compute_mask(self, tokens, previous_mask=None):
        return ops.not_equal(tokens, self.padding_id) if self.mask_zero else None

    def compute_output_shape(self, tokens_shape):
        return tuple(tokens_shape) + (self.embed_dim,)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "max_length": self.max_length,
            "position": self.position,
            "scale_embeddings": self.scale_embeddings,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "dropout": self.dropout,
            "mask_zero": self.mask_zero,
            "padding_id": self.padding_id,
        }
