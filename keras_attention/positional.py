"""Absolute positional embeddings: fixed sinusoids or learned positions."""

import keras
from keras import ops

from keras_attention.validation import check_choice, check_positive_int, check_rank

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
      `PE(pos, 2i+1) = cos(pos / 10000^(2i/d))`; no weights, and any position
      works (`max_length` only documents the intended range).
    - `mode="learned"` (ConvS2S): `p_pos` is row `pos` of a learned
      `(max_length, d)` matrix; positions `>= max_length` are an error.

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
        `(B, T, D)`: `inputs + p[start_index : start_index + T]`.

    Example:

    >>> layer = PositionalEmbedding(max_length=16)
    >>> layer(np.zeros((2, 5, 8))).shape
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
        check_positive_int("max_length", max_length, "PositionalEmbedding")
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
                name="position_embeddings", shape=(self.max_length, self.width),
                initializer=self.embeddings_initializer,
            )
        self.built = True

    def _check_range(self, length, start_index):
        if self.mode != "learned" or not isinstance(start_index, int) or length is None:
            return
        if start_index < 0 or start_index + length > self.max_length:
            raise ValueError(
                f"PositionalEmbedding(mode='learned', max_length={self.max_length}) "
                f"has positions 0..{self.max_length - 1}; received positions "
                f"{start_index}..{start_index + length - 1} (start_index={start_index}, "
                f"sequence length {length}). Raise `max_length` or shorten the input."
            )

    def position_embedding(self, length, start_index=0):
        """`p[start_index : start_index + length]`, `(length, D)`."""
        positions = ops.arange(length) + start_index  # (T,)
        if self.mode == "sinusoidal":
            return sinusoids(positions, self.width)
        return ops.take(self.position_embeddings, positions, axis=0)

    def call(self, inputs, start_index=0):
        self._check_range(inputs.shape[1], start_index)
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
