"""Local attention: attention confined to a window of source positions."""

import keras
from keras import ops

from keras_attention import compat, registry
from keras_attention.base import ScoreAttention
from keras_attention.validation import check_choice, check_positive_int

register = keras.saving.register_keras_serializable(package="keras_attention")

MODES = ("last", "monotonic", "predictive")


# Luong et al.'s local-p with a general score, the size the seq2seq models use.
@registry.register("local", score="general", window=4, mode="predictive")
@compat.reads_0_1_0(arguments="window_first")
@register
class LocalAttention(ScoreAttention):
    """Attention restricted to a window `W_i` of source positions.

        a_ij = softmax_{j ∈ W_i}(score(q_i, k_j) + g_ij)

    `mode` chooses the window (`S` the unpadded source length, `D = window`):

    - `"last"`: the last D encoder states, the seeds' tapped delay line
      `A¹(T) = [a¹(T), a¹(T-1), ..., a¹(T-D+1)]`: `W_i = {S-D, ..., S-1}`.
    - `"monotonic"` (Luong local-m): `p_i = i` (or `query_positions`),
      `W_i = {j : |j - p_i| <= D}`.
    - `"predictive"` (Luong local-p): a learned centre
      `p_i = S · sigmoid(v_pᵀ tanh(W_p q_i))`, `W_i = {j : |j - p_i| <= D}`,
      and a Gaussian `g_ij = -(j - p_i)² / (2σ²)`, `σ = D/2`, added to the
      scores. Luong et al. multiply the window's softmax by
      `exp(-(j-p_i)²/2σ²)` without renormalising; adding the log-Gaussian
      before the softmax is the same up to a per-query factor, and keeps
      the weights of every layer summing to 1.

    `g_ij = 0` in the other modes. The score is any score layer of this
    library (`ScoreAttention`: dot, scaled dot, general, additive, concat);
    `LocalAttention` adds only the window and, in local-p, the Gaussian.

    Args:
        score: the score layer: an instance, a name that
            `keras_attention.get` resolves ("dot", "scaled_dot", "general",
            "additive", "concat"), or a serialized layer; default "dot".
        window: int >= 1, the `D` above.
        mode: one of "last", "monotonic", "predictive".
        units: hidden width of `W_p` in local-p (default: the query width);
            with `score="additive"` given by name, also that score's width.
        dropout: float in [0, 1), dropout on the attention weights.
        seed: optional int, dropout seed.

    Call arguments:
        As `ScoreAttention`. `query_positions` is the centre `p_i` of
        `mode="monotonic"`; default `p_i = i`. A rank-2 query in that mode
        must give it.

    Returns:
        As `ScoreAttention`.

    Example:

    >>> layer = LocalAttention(GeneralAttention(), window=2, mode="predictive")
    >>> tuple(layer(np.ones((2, 4)), np.ones((2, 7, 6))).shape)
    (2, 6)
    >>> tuple(LocalAttention(window=2, mode="last")(np.ones((2, 4)), np.ones((2, 7, 4))).shape)
    (2, 4)

    References:
        Luong et al., "Effective Approaches to Attention-based Neural Machine
        Translation" (2015), Sec. 3.2.
    """

    def __init__(
        self,
        score=None,
        window=None,
        mode="last",
        units=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        window = check_positive_int("window", window, "LocalAttention")
        check_choice("mode", mode, MODES, "LocalAttention")
        if units is not None:
            units = check_positive_int("units", units, "LocalAttention")
        self.window = window
        self.mode = mode
        self.units = units
        self.scorer = self._resolve_score("dot" if score is None else score, units)

    def _resolve_score(self, score, units):
        if isinstance(score, str):
            allowed = ("dot", "scaled_dot", "general", "additive", "concat")
            check_choice("score", score, allowed, "LocalAttention")
            extra = {"units": units} if score == "additive" else {}
            return registry.get(score, dtype=self.dtype_policy, name="scorer", **extra)
        layer = registry.get(score)
        if not isinstance(layer, ScoreAttention) or isinstance(layer, LocalAttention):
            raise ValueError(
                "`score` of LocalAttention must be a score layer (DotProductAttention, "
                "GeneralAttention, AdditiveAttention, ConcatAttention) or its name; received "
                f"{layer!r}."
            )
        return layer

    def build_score(self, query_shape, key_shape):
        if not self.scorer.built:
            self.scorer.build(query_shape, key_shape)
        if self.mode == "predictive":
            units = self.units or query_shape[-1]
            self.position_kernel = self.add_weight(
                name="position_kernel",
                shape=(query_shape[-1], units),
                initializer="glorot_uniform",
            )
            self.position_vector = self.add_weight(
                name="position_vector", shape=(units,), initializer="glorot_uniform"
            )

    def score(self, query, key):
        return self.scorer.score(query, key)

    def prepare_key(self, key):
        return self.scorer.prepare_key(key)

    def score_prepared(self, query, prepared_key):
        return self.scorer.score_prepared(query, prepared_key)

    def prepares_key(self):
        return self.scorer.prepares_key()

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_positions=None,
        prepared_key=None,
    ):
        if self.mode == "monotonic" and query_positions is None and len(query.shape) == 2:
            raise ValueError(
                "LocalAttention(mode='monotonic') with a single-step query of shape "
                f"{tuple(query.shape)} needs `query_positions` of shape (B,): the "
                "source position each query is aligned to."
            )
        return super().call(
            query,
            value,
            key,
            query_mask,
            value_mask,
            attention_mask,
            use_causal_mask,
            return_attention_scores,
            training,
            query_positions,
            prepared_key,
        )

    def predicted_positions(self, query, source_length):
        """Luong local-p centre `p_i = S · sigmoid(v_pᵀ tanh(W_p q_i))`."""
        hidden = ops.tanh(ops.matmul(query, ops.cast(self.position_kernel, query.dtype)))
        logits = ops.matmul(hidden, ops.cast(self.position_vector, query.dtype))  # (B, Tq)
        return ops.cast(source_length, "float32") * ops.sigmoid(ops.cast(logits, "float32"))

    def restrict(self, scores, query, key, mask, value_mask, query_positions=None):
        key_length = ops.shape(key)[1]
        positions = ops.cast(ops.arange(key_length), "float32")[None, None, :]  # (1, 1, Tv)
        if value_mask is None:
            lengths = ops.cast(key_length, "float32") * ops.ones((1, 1, 1))
        else:
            lengths = ops.sum(ops.cast(value_mask, "float32"), axis=1)[:, None, None]  # (B, 1, 1)
        if self.mode == "last":
            window = ops.greater_equal(positions, lengths - self.window)  # (B, 1, Tv)
        else:
            if self.mode == "predictive":
                centres = self.predicted_positions(query, lengths[:, :, 0])  # (B, Tq)
            elif query_positions is None:
                centres = ops.cast(ops.arange(ops.shape(query)[1]), "float32")[None, :]
            else:
                centres = ops.cast(query_positions, "float32")
            distance = positions - ops.expand_dims(centres, -1)  # (B, Tq, Tv)
            window = ops.less_equal(ops.abs(distance), float(self.window))
            if self.mode == "predictive":
                sigma = self.window / 2.0
                scores = ops.cast(scores, "float32") - ops.square(distance) / (2.0 * sigma**2)
        mask = window if mask is None else ops.logical_and(mask, window)
        return scores, mask

    def get_config(self):
        return {
            **super().get_config(),
            "window": self.window,
            "mode": self.mode,
            "score": keras.saving.serialize_keras_object(self.scorer),
            "units": self.units,
        }
