"""The key/value cache of `MultiHead`'s causal self-attention, for
incremental decoding: `init_cache` makes an empty one, `step` attends `Tx`
new positions over it and writes their keys and values.

At step positions `t = i .. i + Tx - 1` (`i` the `cache_index`), with the
cache's keys `K` and values `V` at positions `0 .. S - 1`:

    K[i + j] = x[j] W_K,   V[i + j] = x[j] W_V,
    out[t] = softmax(q[t] K^T / sqrt(d_k) + m[t]) V,   m[t, s] = 0 if s <= t else -inf

so a decoder that feeds one position at a time gets what a full causal
pass over the prefix gives.
"""

from keras import ops

from keras_attention import heads, masking
from keras_attention.relative_position import rotary
from keras_attention.validation import (
    assert_at_run_time,
    check_built,
    check_positive_int,
    is_integer,
)


class SelfAttentionCache:
    """`MultiHead`'s incremental decoding (a mixin of the layer: it uses
    its kernels, `attend` and the head sizes)."""

    def loop_kernels(self, kernel):
        """The flat kernels of a decoding step's products, laid out once
        before a search's loop (`quantization.dequantized` calls this on
        entering; `kernel(name)` is a kernel's float value): `{"query+key+
        value": [W^Q | W^K | W^V], "query": W^Q}`, each `(D, ...)`. A layer
        whose query and key/value inputs differ in width (cross-attention
        over a wider encoder) never steps, and gets W^Q only."""
        widths = {
            name: getattr(self, f"{name}_kernel").shape[0] for name in ("query", "key", "value")
        }
        return {
            heads.product_name(names): heads.flat_kernels(kernel, names)
            for names in heads.STEP_PRODUCTS
            if len({widths[name] for name in names}) == 1
        }

    def init_cache(self, batch_size, max_length, dtype=None):
        """An empty self-attention cache for `max_length` positions:
        `(key_cache (B, G, S, d_k), value_cache (B, G, S, d_v))`, `G` the
        key/value heads."""
        if is_integer(max_length) or isinstance(max_length, bool):
            max_length = check_positive_int("max_length", max_length, "MultiHead.init_cache")
        if (is_integer(batch_size) and batch_size < 0) or isinstance(batch_size, bool):
            raise ValueError(
                "`batch_size` of MultiHead.init_cache must be an integer >= 0; "
                f"received batch_size={batch_size!r}."
            )
        dtype = dtype or self.compute_dtype
        heads = self.num_key_value_heads or self.num_heads
        return (
            ops.zeros((batch_size, heads, max_length, self.key_dim), dtype),
            ops.zeros((batch_size, heads, max_length, self.value_dim), dtype),
        )

    def step(self, inputs, cache, cache_index, query_mask=None, training=None, return_weights=True):
        """Causal self-attention of `Tx` new positions over a cache.

        Args:
            inputs: `(B, Tx, D)`, the states at positions
                `cache_index .. cache_index + Tx - 1`.
            cache: `(key_cache, value_cache)` from `init_cache` or a
                previous `step`.
            cache_index: int scalar (a tensor inside a loop), where the new
                positions start.
            query_mask: optional `(B, Tx)` padding mask of the new positions.
            return_weights: False returns None for the weights, and lets
                the fused path run (see the class docstring).

        Returns:
            `(output (B, Tx, Do), weights (B, H, Tx, S) or None, cache)`: the new
            cache holds the new positions' keys and values; position j of
            the cache is attended to iff `j <= cache_index + i`.

        Positions past the cache size `S` are a `ValueError` when
        `cache_index` is an int and the sizes are static, else a run-time
        check (`validation.assert_at_run_time`).
        """
        check_built(self, "step")
        key_cache, value_cache = cache
        cache_index = self._checked_cache_index(inputs, key_cache, cache_index)
        steps = ops.arange(ops.shape(inputs)[1]) + cache_index  # (Tx,)
        positions = ops.arange(ops.shape(key_cache)[2])  # (S,)
        # The query, key and value of the new positions in one product.
        q, new_key, new_value = heads.project_heads(
            self, ops.cast(inputs, self.compute_dtype), "query", "key", "value"
        )  # (B, H, Tx, d_k), (B, G, Tx, d)
        if self.position_encoding == "rope":  # keys are rotated at their positions as written
            new_key = rotary(new_key, steps, self.rope_max_wavelength)
        key_cache = masking.write_at(key_cache, new_key, cache_index, axis=2)
        value_cache = masking.write_at(value_cache, new_value, cache_index, axis=2)
        mask = ops.expand_dims(ops.less_equal(positions[None, :], steps[:, None]), 0)  # (1, Tx, S)
        if query_mask is not None:
            query_mask = masking.as_boolean(query_mask, "query_mask", "MultiHead.step")
            mask = ops.logical_and(mask, ops.expand_dims(query_mask, -1))
        output, weights = self.attend(
            q,
            key_cache,
            value_cache,
            mask,
            training,
            steps,
            positions,
            return_weights,
            projected=True,
        )
        return output, weights, (key_cache, value_cache)

    def _checked_cache_index(self, inputs, key_cache, cache_index):
        """`cache_index`, checked to leave room for the `Tx` new positions."""
        new, size = inputs.shape[1], key_cache.shape[2]
        if is_integer(cache_index) and new is not None and size is not None:
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
