"""Multi-head scaled dot-product attention with a key/value cache."""

import math

import keras
from keras import ops

from keras_attention import masking
from keras_attention.validation import (
    assert_at_run_time,
    check_built,
    check_equal_dim,
    check_not_a_list_call,
    check_positive_int,
    check_rank,
    check_rate,
    check_same_batch,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


@register
class MultiHead(keras.layers.Layer):
    """Multi-head attention of the Transformer.

        MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O
        head_h = Attention(Q W_h^Q, K W_h^K, V W_h^V)
        Attention(Q, K, V) = softmax(Q Kᵀ / sqrt(d_k)) V

    `W_h^Q ∈ R^{Dq×d_k}`, `W_h^K ∈ R^{Dk×d_k}`, `W_h^V ∈ R^{Dv×d_v}`,
    `W^O ∈ R^{H·d_v×Do}` (stored as `(D, H, d)` and `(H, d_v, Do)` kernels),
    each with a bias when `use_bias=True`. Self-attention is
    `layer(x, x)`; cross-attention `layer(decoder_states, encoder_states)`.

    Masks follow `ScoreAttention`: a masked key gets weight exactly 0, a
    query with no allowed key outputs `W^O`'s bias only (its heads are 0).

    Incremental decoding: `init_cache(batch_size, max_length)` returns an
    empty `(key_cache, value_cache)`, and `step(x, cache, index)` attends
    `Tx` new positions `index .. index+Tx-1` causally over the cache; the
    outputs equal one causal pass over the whole sequence. For
    cross-attention, `project_key_value(encoder_states)` once and
    `attend(query, key, value, mask)` each step.

    Args:
        num_heads: int, number of heads `H`.
        key_dim: int, width `d_k` of each query/key head (default: the
            query width divided by `num_heads`, which must divide it).
        value_dim: int, width `d_v` of each value head (default `key_dim`).
        output_dim: int, width `Do` of the output (default: query width).
        dropout: float in [0, 1), dropout on the attention weights.
        use_bias: bool, biases on the four projections.
        kernel_initializer, bias_initializer: of the projections.
        seed: optional int, dropout seed.

    Call arguments:
        query: `(B, Tq, Dq)`, or `(B, Dq)` for one decoder step (the output
            is then `(B, Do)` and the weights `(B, H, Tv)`).
        value: `(B, Tv, Dv)`.
        key: optional `(B, Tv, Dk)`, defaults to `value`.
        query_mask, value_mask, attention_mask, use_causal_mask, training:
            as in `ScoreAttention`.
        return_attention_scores: also return the weights `(B, H, Tq, Tv)`,
            one map per head (as Keras; PyTorch's `nn.MultiheadAttention`
            averages over heads by default: `ops.mean(scores, axis=1)`).

    Returns:
        `output` `(B, Tq, Do)`, or `(output, scores)`.

    Example:

    >>> layer = MultiHead(num_heads=2, key_dim=4)
    >>> x = np.ones((2, 5, 8))
    >>> out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 5, 8), (2, 2, 5, 5))

    References:
        Vaswani et al., "Attention Is All You Need" (2017).
    """

    def __init__(
        self,
        num_heads,
        key_dim=None,
        value_dim=None,
        output_dim=None,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads, "MultiHead")
        if key_dim is not None:
            check_positive_int("key_dim", key_dim, "MultiHead")
        if value_dim is not None:
            check_positive_int("value_dim", value_dim, "MultiHead")
        if output_dim is not None:
            check_positive_int("output_dim", output_dim, "MultiHead")
        check_rate("dropout", dropout, "MultiHead")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(dropout, seed=seed, dtype=self.dtype_policy)

    def __call__(self, *args, **kwargs):
        check_not_a_list_call("MultiHead", args, kwargs)
        return super().__call__(*args, **kwargs)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        check_rank("query", query_shape, (2, 3), "MultiHead", "(B, Tq, Dq) or (B, Dq)")
        check_rank("value", value_shape, (3,), "MultiHead", "(B, Tv, Dv)")
        check_rank("key", key_shape, (3,), "MultiHead", "(B, Tv, Dk)")
        check_equal_dim(
            "Tv of value",
            value_shape[1],
            "Tv of key",
            key_shape[1],
            "MultiHead",
            "key and value must have one entry per source position",
        )
        heads = self.num_heads
        self.query_width = query_shape[-1]
        if self.key_dim is None:
            if self.query_width % heads:
                raise ValueError(
                    f"MultiHead: `num_heads` must divide the query width when `key_dim` is not "
                    f"given; received num_heads={heads} for query width {self.query_width}. "
                    "Pass `key_dim` to choose the head width yourself."
                )
            self.key_dim = self.query_width // heads
        self.value_dim = self.value_dim or self.key_dim
        output_dim = self.output_dim or self.query_width

        def projection(name, fan_in, width):
            kernel = self.add_weight(
                name=f"{name}_kernel",
                shape=(fan_in, heads, width),
                initializer=self.kernel_initializer,
            )
            bias = None
            if self.use_bias:
                bias = self.add_weight(
                    name=f"{name}_bias", shape=(heads, width), initializer=self.bias_initializer
                )
            return kernel, bias

        self.query_kernel, self.query_bias = projection("query", query_shape[-1], self.key_dim)
        self.key_kernel, self.key_bias = projection("key", key_shape[-1], self.key_dim)
        self.value_kernel, self.value_bias = projection("value", value_shape[-1], self.value_dim)
        self.output_kernel = self.add_weight(
            name="output_kernel",
            shape=(heads, self.value_dim, output_dim),
            initializer=self.kernel_initializer,
        )
        self.output_bias = None
        if self.use_bias:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(output_dim,), initializer=self.bias_initializer
            )
        self.built = True

    # -- building blocks ---------------------------------------------------
    def _split_heads(self, x, kernel, bias):
        """`(B, T, D) -> (B, H, T, d)`: x W_h (+ b_h) for every head h."""
        d_in, heads, width = kernel.shape
        x = ops.matmul(x, ops.reshape(ops.cast(kernel, x.dtype), (d_in, heads * width)))
        if bias is not None:
            x = x + ops.reshape(ops.cast(bias, x.dtype), (heads * width,))
        shape = ops.shape(x)
        x = ops.reshape(x, (shape[0], shape[1], heads, width))  # (B, T, H, d)
        return ops.transpose(x, (0, 2, 1, 3))  # (B, H, T, d)

    def project_key_value(self, value, key=None):
        """Project the source once: returns `(K, V)`, `(B, H, Tv, d_k)` and
        `(B, H, Tv, d_v)`, for `attend` (cross-attention while decoding)."""
        check_built(self, "project_key_value")
        key = value if key is None else key
        value = ops.cast(value, self.compute_dtype)
        key = ops.cast(key, self.compute_dtype)
        return (
            self._split_heads(key, self.key_kernel, self.key_bias),
            self._split_heads(value, self.value_kernel, self.value_bias),
        )

    def attend(self, query, key, value, attention_mask=None, training=None):
        """Attention of raw `query` `(B, Tq, Dq)` over projected `key`/`value`
        `(B, H, Tv, d)`; `attention_mask` broadcastable to `(B, Tq, Tv)`.
        Returns `(output (B, Tq, Do), weights (B, H, Tq, Tv))`."""
        query = ops.cast(query, self.compute_dtype)
        q = self._split_heads(query, self.query_kernel, self.query_bias)  # (B, H, Tq, d_k)
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        scores = masking.score_product(q, ops.swapaxes(key, -1, -2))  # (B, H, Tq, Tv)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, 1)
        weights = masking.masked_softmax(scores, mask)  # (B, H, Tq, Tv)
        weights = ops.cast(weights, value.dtype)
        heads = ops.matmul(
            self._dropout_layer(weights, training=training), value
        )  # (B, H, Tq, d_v)
        heads = ops.transpose(heads, (0, 2, 1, 3))  # (B, Tq, H, d_v)
        shape = ops.shape(heads)
        heads = ops.reshape(heads, (shape[0], shape[1], self.num_heads * self.value_dim))
        kernel = ops.cast(self.output_kernel, heads.dtype)
        output = ops.matmul(heads, ops.reshape(kernel, (self.num_heads * self.value_dim, -1)))
        if self.output_bias is not None:
            output = output + ops.cast(self.output_bias, output.dtype)
        return output, weights  # (B, Tq, Do), (B, H, Tq, Tv)

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
    ):
        # query_positions: accepted as by every attention layer of the
        # library (see ScoreAttention); content-based heads do not use it.
        key = value if key is None else key
        check_same_batch("MultiHead", query=query, value=value, key=key)
        single_step = len(query.shape) == 2
        if single_step:
            query, query_mask, attention_mask = masking.as_one_step_sequence(
                query, use_causal_mask, "MultiHead", query_mask, attention_mask
            )
        mask = masking.merge_masks(
            query, key, query_mask, value_mask, attention_mask, use_causal_mask, "MultiHead"
        )
        projected_key, projected_value = self.project_key_value(value, key)
        output, weights = self.attend(query, projected_key, projected_value, mask, training)
        if single_step:
            output, weights = output[:, 0], weights[:, :, 0]  # (B, Do), (B, H, Tv)
        if return_attention_scores:
            return output, weights
        return output

    # -- incremental decoding ----------------------------------------------
    def init_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache for `max_length` positions:
        `(key_cache (B, H, S, d_k), value_cache (B, H, S, d_v))`."""
        dtype = dtype or self.compute_dtype
        return (
            ops.zeros((batch_size, self.num_heads, max_length, self.key_dim), dtype),
            ops.zeros((batch_size, self.num_heads, max_length, self.value_dim), dtype),
        )

    def step(self, inputs, cache, cache_index, query_mask=None, training=None):
        """Causal self-attention of `Tx` new positions over a cache.

        Args:
            inputs: `(B, Tx, D)`, the states at positions
                `cache_index .. cache_index + Tx - 1`.
            cache: `(key_cache, value_cache)` from `init_cache` or a
                previous `step`.
            cache_index: int scalar (a tensor inside a loop), where the new
                positions start.
            query_mask: optional `(B, Tx)` padding mask of the new positions.

        Returns:
            `(output (B, Tx, Do), weights (B, H, Tx, S), cache)`: the new
            cache holds the new positions' keys and values; position j of
            the cache is attended to iff `j <= cache_index + i`.

        Positions past the cache size `S` are a `ValueError` when
        `cache_index` is an int and the sizes are static, else a run-time
        check (`validation.assert_at_run_time`).
        """
        check_built(self, "step")
        key_cache, value_cache = cache
        cache_index = self._checked_cache_index(inputs, key_cache, cache_index)
        new_key, new_value = self.project_key_value(inputs)  # (B, H, Tx, d)
        key_cache = masking.write_at(key_cache, new_key, cache_index, axis=2)
        value_cache = masking.write_at(value_cache, new_value, cache_index, axis=2)
        steps = ops.arange(ops.shape(inputs)[1]) + cache_index  # (Tx,)
        positions = ops.arange(ops.shape(key_cache)[2])  # (S,)
        mask = ops.expand_dims(ops.less_equal(positions[None, :], steps[:, None]), 0)  # (1, Tx, S)
        if query_mask is not None:
            query_mask = masking.as_boolean(query_mask, "query_mask", "MultiHead.step")
            mask = ops.logical_and(mask, ops.expand_dims(query_mask, -1))
        output, weights = self.attend(inputs, key_cache, value_cache, mask, training)
        return output, weights, (key_cache, value_cache)

    def _checked_cache_index(self, inputs, key_cache, cache_index):
        """`cache_index`, checked to leave room for the `Tx` new positions."""
        new, size = inputs.shape[1], key_cache.shape[2]
        if isinstance(cache_index, int) and new is not None and size is not None:
            if cache_index < 0 or cache_index + new > size:
                raise ValueError(
                    f"MultiHead.step: the cache holds positions 0..{size - 1}; received "
                    f"positions {cache_index}..{cache_index + new - 1} (cache_index="
                    f"{cache_index}, {new} new). Make the cache with init_cache(batch_size, "
                    "max_length) for a larger max_length."
                )
            return cache_index
        fits = ops.less_equal(cache_index + ops.shape(inputs)[1], ops.shape(key_cache)[2])
        message = (
            "MultiHead.step: the new positions reach past the end of the cache; make the "
            "cache with init_cache(batch_size, max_length) for a larger max_length."
        )
        return assert_at_run_time(fits, message, cache_index)

    # -- Keras plumbing ------------------------------------------------------
    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def compute_output_spec(self, query, value, key=None, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(
            self.compute_output_shape(query.shape, value.shape), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return output
        scores = (query.shape[0], self.num_heads) + tuple(query.shape[1:-1]) + (value.shape[1],)
        return output, keras.KerasTensor(scores, dtype=self.compute_dtype)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "output_dim": self.output_dim,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "seed": self.seed,
        }
