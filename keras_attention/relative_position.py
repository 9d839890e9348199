"""Position schemes applied inside attention rather than added to the
embeddings: rotary embeddings (RoPE), ALiBi's linear biases, and Shaw et
al.'s relative position representations. `MultiHead(position_encoding=...)`
uses them; `RotaryEmbedding` and `RelativePositionEmbedding` are layers of
their own too."""

import math

import keras
from keras import ops

from keras_attention.validation import (
    check_finite,
    check_float_input,
    check_positive_int,
    check_rank,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


def check_wavelength(max_wavelength, owner):
    """RoPE's base, a finite number > 0 (0 or a negative base gives NaN
    rotations): returned as a float."""
    return check_finite(
        "max_wavelength", max_wavelength, owner, low=0.0, expected="a finite number > 0"
    )


def rotary(x, positions, max_wavelength=10000.0):
    """Rotate the feature pairs of `x` `(..., T, d)` by their position.

        RoPE(x, p)[i]       = x[i] cos(p θ_i) - x[i + d/2] sin(p θ_i)
        RoPE(x, p)[i + d/2] = x[i + d/2] cos(p θ_i) + x[i] sin(p θ_i)
        θ_i = max_wavelength^(-2i/d),  i = 0 .. d/2 - 1

    `positions`: int or float `(T,)`. Pairs are `(i, i + d/2)` ("rotate
    half", as KerasHub's `RotaryEmbedding` and GPT-NeoX/LLaMA pair them);
    the paper pairs neighbours `(2i, 2i+1)`. The two differ by a fixed
    permutation of the feature axis, which a learned projection absorbs, so
    they give the same family of models but not the same numbers for given
    weights.
    """
    width = x.shape[-1]
    half = width // 2
    exponent = ops.arange(half, dtype="float32") * (2.0 / width)
    inverse_frequency = ops.power(float(max_wavelength), -exponent)  # (d/2,)
    angles = ops.cast(positions, "float32")[:, None] * inverse_frequency[None, :]  # (T, d/2)
    angles = ops.concatenate([angles, angles], axis=-1)  # (T, d)
    cos, sin = ops.cast(ops.cos(angles), x.dtype), ops.cast(ops.sin(angles), x.dtype)
    first, second = x[..., :half], x[..., half:]
    rotated_half = ops.concatenate([-second, first], axis=-1)  # (..., T, d)
    return x * cos + rotated_half * sin


def alibi_slopes(num_heads):
    """ALiBi's head slopes `m_h` (Press et al., Sec. 3).

    For `H` a power of 2: the geometric sequence `m_h = 2^(-8h/H)`,
    `h = 1 .. H`. Otherwise (the paper's footnote and reference code): the
    `n = 2^⌊log₂ H⌋` slopes of `n` heads, then every other slope of `2n`
    heads (`2^(-4(2h-1)/n)`, `h = 1 .. H - n`).
    """
    num_heads = check_positive_int("num_heads", num_heads, "alibi_slopes")

    def power_of_two(n):
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest != num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return slopes


def alibi_bias(num_heads, query_positions, key_positions):
    """`-m_h · |i - j|`, float32 `(H, Tq, Tv)`, added to the scores.

    With a causal mask `j <= i` and this is the paper's bias `m_h · (j - i)`.
    Without one (an encoder) the distance is symmetric, `|i - j|`, as in
    bidirectional ALiBi variants; the paper only defines the causal case.
    KerasHub's `AlibiBias` adds `m_h · j`, which differs from the paper's
    by `m_h · i`, a constant per query row that the softmax removes, under
    a causal mask only.
    """
    slopes = ops.convert_to_tensor(alibi_slopes(num_heads), "float32")  # (H,)
    distance = ops.abs(
        ops.cast(query_positions, "float32")[:, None] - ops.cast(key_positions, "float32")[None, :]
    )  # (Tq, Tv)
    return -slopes[:, None, None] * distance[None]  # (H, Tq, Tv)


@register
class RotaryEmbedding(keras.layers.Layer):
    """Rotary position embedding (RoPE) as a layer: `RoPE(x, p)` above, with
    `p = start_index, start_index + 1, ...` along the sequence axis.

    Apply it to queries and keys (not values); then `RoPE(q, i)·RoPE(k, j)`
    depends on `i - j` only. `MultiHead(position_encoding="rope")` does so
    per head.

    Args:
        max_wavelength: float, the base of `θ_i` (10000 in the paper).

    Call arguments:
        inputs: `(B, T, d)` or `(B, H, T, d)` (sequence axis -2, unlike
            KerasHub's `sequence_axis=1`), `d` even.
        start_index: int (or int scalar tensor), the position of the first
            step; default 0.

    Returns:
        the rotated inputs, same shape.

    Example:

    >>> layer = RotaryEmbedding()
    >>> tuple(layer(np.ones((2, 5, 8))).shape)
    (2, 5, 8)

    References:
        Su et al., "RoFormer: Enhanced Transformer with Rotary Position
        Embedding" (2021).
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = check_wavelength(max_wavelength, "RotaryEmbedding")
        self.supports_masking = True

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3, 4), "RotaryEmbedding", "(B, T, d) or (B, H, T, d)")
        if inputs_shape[-1] is not None and inputs_shape[-1] % 2:
            raise ValueError(
                "RotaryEmbedding rotates feature pairs, so the last axis must be even; "
                f"received inputs of shape {tuple(inputs_shape)}."
            )
        self.built = True

    def call(self, inputs, start_index=0):
        check_float_input("inputs", inputs, "RotaryEmbedding")
        positions = ops.arange(ops.shape(inputs)[-2]) + start_index  # (T,)
        return rotary(inputs, positions, self.max_wavelength)

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}


@register
class RelativePositionEmbedding(keras.layers.Layer):
    """Shaw et al.'s learned embeddings of clipped relative distance.

        a_ij = w_{clip(j - i, -k, k)},   w_{-k}, ..., w_k ∈ R^d

    `MultiHead(position_encoding="relative")` adds `a^K_ij` to the keys in
    the score, `e_ij = q_i (k_j + a^K_ij)ᵀ / sqrt(d_k)`, and (with
    `relative_values=True`) `a^V_ij` to the values,
    `z_i = Σ_j α_ij (v_j + a^V_ij)`; one table per layer shared by the heads,
    as in the paper.

    Args:
        max_relative_position: int `k`, distances beyond it are clipped.
        width: int `d`.
        embeddings_initializer: of the `(2k + 1, d)` table.

    Call arguments:
        query_positions: int `(Tq,)`; key_positions: int `(Tv,)`.

    Returns:
        `(Tq, Tv, d)`.

    References:
        Shaw et al., "Self-Attention with Relative Position Representations"
        (2018).
    """

    def __init__(
        self, max_relative_position, width, embeddings_initializer="glorot_uniform", **kwargs
    ):
        super().__init__(**kwargs)
        max_relative_position = check_positive_int(
            "max_relative_position", max_relative_position, "RelativePositionEmbedding"
        )
        width = check_positive_int("width", width, "RelativePositionEmbedding")
        self.max_relative_position = max_relative_position
        self.width = width
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, *args, **kwargs):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(2 * self.max_relative_position + 1, self.width),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def call(self, query_positions, key_positions):
        k = self.max_relative_position
        distance = key_positions[None, :] - query_positions[:, None]  # (Tq, Tv): j - i
        index = ops.clip(distance, -k, k) + k
        return ops.take(self.embeddings, ops.cast(index, "int32"), axis=0)  # (Tq, Tv, d)

    def compute_output_shape(self, query_positions_shape, key_positions_shape):
        return (query_positions_shape[0], key_positions_shape[0], self.width)

    def get_config(self):
        return {
            **super().get_config(),
            "max_relative_position": self.max_relative_position,
            "width": self.width,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
