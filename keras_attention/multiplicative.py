"""Multiplicative scores: dot, scaled dot and general (bilinear) attention."""

import math

import keras
from keras import ops

from keras_attention import quantization, registry
from keras_attention.base import ScoreAttention
from keras_attention.masking import score_product
from keras_attention.validation import check_equal_dim

register = keras.saving.register_keras_serializable(package="keras_attention")


# Decorators apply bottom-up: "dot" registers first.
@registry.register("scaled_dot", scale=True)
@registry.register("dot")
@register
class DotProductAttention(ScoreAttention):
    """Dot-product attention (Luong "dot"), optionally scaled.

        e_ij = q_i · k_j                 (scale=False)
        e_ij = q_i · k_j / sqrt(d_k)     (scale=True, scaled dot-product)
        a_ij = softmax_j(e_ij),   o_i = sum_j a_ij v_j

    In the seeds' notation, with keys/values `A¹(T)` and query `a²(t-1)`:
    `n⁴(t) = [A¹(T)]ᵀ a²(t-1)`, `a⁴(t) = softmax(n⁴(t))`, `a⁵(t) = A¹(T) a⁴(t)`.
    Query and key must have the same width (`Dq == Dk`).

    Args:
        scale: bool, divide the scores by `sqrt(Dk)`.
        dropout: float in [0, 1), dropout on the attention weights.
        seed: optional int, dropout seed.

    Call arguments and returns: see `ScoreAttention`.

    Example:

    >>> layer = DotProductAttention(scale=True)
    >>> out, scores = layer(np.ones((2, 3, 4)), np.ones((2, 5, 4)),
    ...                     return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 3, 4), (2, 3, 5))

    References:
        Luong et al., "Effective Approaches to Attention-based Neural Machine
        Translation" (2015); Vaswani et al., "Attention Is All You Need" (2017).
    """

    def __init__(self, scale=False, dropout=0.0, seed=None, **kwargs):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        if not isinstance(scale, bool):
            raise ValueError(
                f"`scale` of DotProductAttention must be a bool; received scale={scale!r}."
            )
        self.scale = scale

    def build_score(self, query_shape, key_shape):
        check_equal_dim(
            "Dq (last dimension of query)",
            query_shape[-1],
            "Dk (last dimension of key)",
            key_shape[-1],
            "DotProductAttention",
            "the score q·k needs query and key of the same width "
            "(use GeneralAttention for different widths)",
        )

    def score(self, query, key):
        if self.scale:
            query = query * ops.cast(1.0 / math.sqrt(key.shape[-1]), query.dtype)
        return score_product(query, ops.swapaxes(key, -1, -2))  # (B, Tq, Tv)

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


@registry.register("general")
@register
class GeneralAttention(quantization.Int8Kernels, ScoreAttention):
    """General (bilinear) attention, Luong's "general" score.

        e_ij = q_iᵀ W k_j,     W ∈ R^{Dq×Dk} learned

    The seeds write it as the weighted dot product `[A¹(T)]ᵀ W_a a²(t-1)`
    (keys on the left), which is this layer with `W = W_aᵀ`. Query and key
    widths may differ.

    Args:
        kernel_initializer: initializer of `W` (default glorot_uniform).
        kernel_regularizer, kernel_constraint: for `W`.
        dropout: float in [0, 1), dropout on the attention weights.
        seed: optional int, dropout seed.

    Call arguments and returns: see `ScoreAttention`.

    Example:

    >>> layer = GeneralAttention()
    >>> tuple(layer(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 6)

    References:
        Luong et al., "Effective Approaches to Attention-based Neural Machine
        Translation" (2015).
    """

    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build_score(self, query_shape, key_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(query_shape[-1], key_shape[-1]),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.build_int8()

    def int8_kernels(self):
        return {"kernel": (0,)}  # per output channel: the Dk of W

    def score(self, query, key):
        weight, scale = quantization.kernel(self, "kernel", query.dtype)
        query = quantization.rescale(score_product(query, weight), scale)  # (B, Tq, Dk)
        return score_product(query, ops.swapaxes(key, -1, -2))  # (B, Tq, Tv)

    def get_config(self):
        return {
            **super().get_config(),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
        }
