"""The shared base of score-based attention layers.

Every mechanism in `multiplicative.py`, `additive.py` and `local.py` is a
`ScoreAttention`: the base does validation, masking, softmax, dropout and the
weighted sum, and a mechanism implements only `score(query, key)`:

    e_ij = score(q_i, k_j)                         (B, Tq, Tv)
    a_ij = softmax_j(e_ij)  over allowed keys j    (B, Tq, Tv)
    o_i  = sum_j a_ij v_j                          (B, Tq, Dv)

A mechanism whose score transforms the keys on their own (Bahdanau's
`W_k k_j + b`) also splits `score` into `prepare_key(key)` and
`score_prepared(query, prepared)`, so that a decoder attending to the same
memory at every step prepares it once (the `prepared_key` call argument).
"""

import keras
from keras import ops

from keras_attention import masking, quantization
from keras_attention.validation import (
    check_equal_dim,
    check_float_input,
    check_not_a_list_call,
    check_rank,
    check_rate,
    check_same_batch,
)


class ScoreAttention(keras.layers.Layer):
    """Base class: attention whose weights are a softmax over `score(q, k)`.

    Subclasses override `score` (and, if they have weights, `build_score`).
    `LocalAttention` also overrides `restrict` to confine the window. A
    score with a query-independent part overrides `prepare_key` and
    `score_prepared` as well.

    Args:
        dropout: float in [0, 1), dropout rate on the attention weights.
        seed: optional int, seed of the dropout.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, Tq, Dq)` (all decoder steps) or `(B, Dq)` (one step).
        value: `(B, Tv, Dv)`.
        key: optional `(B, Tv, Dk)`; defaults to `value`.
        query_mask: optional boolean `(B, Tq)` (`(B,)` for a rank-2 query);
            a padded query gets zero weights and a zero output.
        value_mask: optional boolean `(B, Tv)`; padded keys get zero weight.
        attention_mask: optional boolean `(B, Tq, Tv)` (`(B, Tv)` for a
            rank-2 query); `True` where query i may attend to key j.
        use_causal_mask: bool; query i attends only to keys
            `j <= i + (Tv - Tq)` (see `masking.causal_mask`).
        return_attention_scores: bool; also return the weights.
        training: bool, whether dropout is active.
        query_positions: optional int/float `(B, Tq)` (`(B,)` for a rank-2
            query), the source position each query is aligned to. Every
            mechanism accepts it, so a decoder can pass it without knowing
            which one it holds; only those that restrict attention around a
            position (`LocalAttention(mode="monotonic")`) use it.
        prepared_key: optional, what `prepare_key(key)` returned for this
            key (or value): the score then starts from it instead of
            transforming the keys again. A decoder that queries one memory
            at every step prepares it once.

    Returns:
        `output` `(B, Tq, Dv)` (`(B, Dv)` for a rank-2 query), or
        `(output, scores)` with `scores` `(B, Tq, Tv)` (`(B, Tv)`) when
        `return_attention_scores=True`. The weights of each query sum to 1
        over its allowed keys, are exactly 0 on masked keys, and are all 0
        for a query with no allowed key (whose output is then 0).
    """

    def __init__(self, dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        dropout = check_rate("dropout", dropout, type(self).__name__)
        self.dropout = dropout
        self.seed = seed
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            dropout, seed=seed, dtype=quantization.float_policy(self.dtype_policy)
        )

    def __call__(self, *args, **kwargs):
        check_not_a_list_call(type(self).__name__, args, kwargs)
        return super().__call__(*args, **kwargs)

    # -- the hooks a mechanism implements -------------------------------
    def build_score(self, query_shape, key_shape):
        """Create the weights of the score function (default: none)."""

    def score(self, query, key):
        """`(B, Tq, Dq), (B, Tv, Dk) -> (B, Tq, Tv)` unnormalised scores."""
        raise NotImplementedError

    def prepare_key(self, key):
        """The part of the score that depends on the keys alone, `(B, Tv, Dk)
        -> (B, Tv, ·)`, so that `score(q, k) == score_prepared(q,
        prepare_key(k))`. Default: the keys themselves."""
        return key

    def score_prepared(self, query, prepared_key):
        """`(B, Tq, Dq)` and `prepare_key(key)` -> `(B, Tq, Tv)` scores."""
        return self.score(query, prepared_key)

    def prepares_key(self):
        """Whether `prepare_key` does any work (worth computing it once)."""
        return type(self).prepare_key is not ScoreAttention.prepare_key

    def restrict(self, scores, query, key, mask, value_mask, query_positions=None):
        """Optionally confine attention; returns `(scores, mask)`."""
        return scores, mask

    # -- the shared machinery --------------------------------------------
    def build(self, query_shape, value_shape, key_shape=None):
        owner = type(self).__name__
        key_shape = value_shape if key_shape is None else key_shape
        check_rank("query", query_shape, (2, 3), owner, "(B, Tq, Dq) or (B, Dq)")
        check_rank("value", value_shape, (3,), owner, "(B, Tv, Dv)")
        check_rank("key", key_shape, (3,), owner, "(B, Tv, Dk)")
        check_equal_dim(
            "Tv of value",
            value_shape[1],
            "Tv of key",
            key_shape[1],
            owner,
            "key and value must have one entry per source position",
        )
        if len(query_shape) == 2:
            query_shape = (query_shape[0], 1, query_shape[1])
        self.build_score(tuple(query_shape), tuple(key_shape))
        self.built = True

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
        return self._attend(
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

    def _attend(
        self,
        query,
        value,
        key,
        query_mask,
        value_mask,
        attention_mask,
        use_causal_mask,
        return_attention_scores,
        training,
        query_positions=None,
        prepared_key=None,
    ):
        owner = type(self).__name__
        key = value if key is None else key
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            check_float_input(name, tensor, owner)
        check_same_batch(owner, query=query, value=value, key=key)
        single_step = len(query.shape) == 2
        if single_step:
            query, query_mask, attention_mask, query_positions = masking.as_one_step_sequence(
                query, use_causal_mask, owner, query_mask, attention_mask, query_positions
            )
        mask = masking.merge_masks(
            query,
            key,
            query_mask,
            value_mask,
            attention_mask,
            use_causal_mask,
            owner,
        )
        value_mask = masking.as_boolean(value_mask, "value_mask", owner)  # restrict reads it
        if prepared_key is None:
            scores = self.score(query, key)  # (B, Tq, Tv)
        else:
            scores = self.score_prepared(query, prepared_key)  # (B, Tq, Tv)
        scores, mask = self.restrict(scores, query, key, mask, value_mask, query_positions)
        weights = masking.masked_softmax(scores, mask)  # (B, Tq, Tv)
        weights = ops.cast(weights, value.dtype)
        dropped = self._dropout_layer(weights, training=training)
        value = masking.zero_unattended(value, mask)  # no 0 * NaN from a masked key
        output = ops.matmul(dropped, value)  # (B, Tq, Dv)
        if single_step:
            output, weights = output[:, 0], weights[:, 0]  # (B, Dv), (B, Tv)
        if return_attention_scores:
            return output, weights
        return output

    def compute_mask(self, inputs, previous_mask=None):
        # The output has one row per query: it keeps the query's padding mask.
        if previous_mask is None or len(inputs.shape) != 3:
            return None
        return previous_mask

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return tuple(query_shape[:-1]) + (value_shape[-1],)

    def compute_output_spec(
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
        **kwargs,
    ):
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape),
            dtype=self.compute_dtype,
        )
        if not return_attention_scores:
            return output
        scores_shape = tuple(query.shape[:-1]) + (value.shape[1],)
        return output, keras.KerasTensor(scores_shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"dropout": self.dropout, "seed": self.seed})
        return config
