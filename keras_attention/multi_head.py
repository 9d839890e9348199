"""Multi-head scaled dot-product attention with a key/value cache."""

import math

import keras
from keras import ops

from keras_attention import compat, masking, quantization, registry
from keras_attention.heads import project_heads
from keras_attention.multi_head_cache import SelfAttentionCache
from keras_attention.relative_position import (
    RelativePositionEmbedding,
    alibi_bias,
    check_wavelength,
    rotary,
)
from keras_attention.validation import (
    check_built,
    check_choice,
    check_equal_dim,
    check_float_input,
    check_not_a_list_call,
    check_positive_int,
    check_rank,
    check_rate,
    check_same_batch,
)

register = keras.saving.register_keras_serializable(package="keras_attention")

POSITION_ENCODINGS = (None, "rope", "alibi", "relative")


def check_variants(
    owner, num_heads, num_key_value_heads, position_encoding, sliding_window, max_relative_position
):
    """Check `MultiHead`'s variant arguments (shared with the layers that
    pass them through)."""
    if num_key_value_heads is not None:
        num_key_value_heads = check_positive_int("num_key_value_heads", num_key_value_heads, owner)
        if num_heads % num_key_value_heads:
            raise ValueError(
                f"`num_key_value_heads` of {owner} must divide `num_heads` (each key/value "
                "head serves num_heads / num_key_value_heads query heads); received "
                f"num_heads={num_heads}, num_key_value_heads={num_key_value_heads}."
            )
    check_choice("position_encoding", position_encoding, POSITION_ENCODINGS, owner)
    if sliding_window is not None:
        sliding_window = check_positive_int("sliding_window", sliding_window, owner)
    max_relative_position = check_positive_int(
        "max_relative_position", max_relative_position, owner
    )
    return num_key_value_heads, sliding_window, max_relative_position


@registry.register("multihead", num_heads=4)
@register
@compat.keras_sliding_window
class MultiHead(quantization.Int8Kernels, SelfAttentionCache, keras.layers.Layer):
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
    empty `(key_cache, value_cache)`, and `step(x, cache, cache_index)`
    attends `Tx` new positions `cache_index .. cache_index+Tx-1` causally
    over the cache; the
    outputs equal one causal pass over the whole sequence. For
    cross-attention, `project_key_value(encoder_states)` once and
    `attend(query, key, value, mask)` each step.

    Variants (each off by default, so the defaults are the paper's layer):

    - `num_key_value_heads=G` (grouped-query attention): `G` key/value
      heads, `G` dividing `H`; query head `h` uses key/value head
      `h // (H/G)`, the order of `keras.layers.GroupQueryAttention`.
      `G = H` is the layer above, `G = 1` multi-query attention. The cache
      holds the `G` heads only.
    - `sliding_window=s`: query `i` attends to keys `j` with `|i - j| < s`
      (with a causal mask: `i - s < j <= i`, `s` keys; `s = 1` is each
      position alone), as Keras's `MultiHeadAttention(sliding_window=s)`
      and `GroupQueryAttention(sliding_window=s)`. Up to keras_attention
      0.2.x it kept `|i - j| <= s`; configs saved then are read as the same
      window (`compat.keras_sliding_window`). `LocalAttention`'s half-width
      `window=D` (`|i - j| <= D`) is this `s = D + 1`.
    - `position_encoding="rope"`: queries and keys rotated by their
      positions (`relative_position.rotary`, rotate-half pairs) before the
      product; keys enter the cache already rotated.
    - `position_encoding="alibi"`: `-m_h |i - j|` added to head `h`'s
      scores, `m_h` the paper's slopes (`relative_position.alibi_bias`).
    - `position_encoding="relative"`: Shaw et al.,
      `e_ij = q_i (k_j + a^K_ij)ᵀ / sqrt(d_k)` and, with
      `relative_values=True`, `z_i = Σ_j α_ij (v_j + a^V_ij)`, `a_ij` learned
      per clipped distance `clip(j - i, -k, k)`, `k = max_relative_position`.

    Two paths compute the same heads. The fused one hands the product, the
    mask and the softmax to `keras.ops.dot_product_attention`, which on a GPU
    may run a fused cuDNN / flash kernel that never holds the `(Tq, Tv)`
    weights in memory (the backend chooses; `keras.config
    .disable_flash_attention()` rules flash kernels out). It is taken only
    where it computes exactly the layer above: no weights asked for
    (`return_attention_scores=False`), attention dropout inactive (`dropout=0`
    or not training), no score bias (`position_encoding` None or "rope"),
    `value_dim == key_dim`, and, under a float16 or bfloat16 policy, only on
    JAX, whose op keeps the logits in float32 as the plain path does;
    padding, causal and explicit masks and the sliding window go to it as
    one boolean mask, and a query with no allowed key is set to 0 after it,
    as on the plain path. Everything else (weights returned, dropout while
    training, ALiBi, Shaw relative) takes the plain path, written out below:
    scores, `masking.masked_softmax`, dropout, weighted sum.
    `use_fused_attention=False` keeps every call on the plain path.

    Positions are `0 .. Tq-1` for the queries and `0 .. Tv-1` for the keys
    in `call` (a rank-2 query is position 0), and the absolute positions of
    the cache in `step`.

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
        num_key_value_heads: int dividing `num_heads`, the key/value heads
            `G` (default `num_heads`).
        position_encoding: None, "rope", "alibi" or "relative".
        sliding_window: optional int >= 1, the `s` above (Keras's meaning).
        max_relative_position: int `k` of "relative" (default 16).
        relative_values: bool, "relative" also adds `a^V` to the values.
        rope_max_wavelength: float, RoPE's base (default 10000).
        use_fused_attention: bool (default True), take the fused path in
            the cases it computes exactly (above); False: always the plain
            path.

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
        Vaswani et al., "Attention Is All You Need" (2017); Su et al.,
        "RoFormer: Enhanced Transformer with Rotary Position Embedding"
        (2021); Press et al., "Train Short, Test Long: Attention with Linear
        Biases Enables Input Length Extrapolation" (2022); Shaw et al.,
        "Self-Attention with Relative Position Representations" (2018);
        Ainslie et al., "GQA: Training Generalized Multi-Query Transformer
        Models from Multi-Head Checkpoints" (2023).
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
        num_key_value_heads=None,
        position_encoding=None,
        sliding_window=None,
        max_relative_position=16,
        relative_values=True,
        rope_max_wavelength=10000.0,
        use_fused_attention=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        num_heads = check_positive_int("num_heads", num_heads, "MultiHead")
        num_key_value_heads, sliding_window, max_relative_position = check_variants(
            "MultiHead",
            num_heads,
            num_key_value_heads,
            position_encoding,
            sliding_window,
            max_relative_position,
        )
        if key_dim is not None:
            key_dim = check_positive_int("key_dim", key_dim, "MultiHead")
        if value_dim is not None:
            value_dim = check_positive_int("value_dim", value_dim, "MultiHead")
        if output_dim is not None:
            output_dim = check_positive_int("output_dim", output_dim, "MultiHead")
        dropout = check_rate("dropout", dropout, "MultiHead")
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim or key_dim
        self.output_dim = output_dim
        self.dropout = dropout
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = seed
        self.num_key_value_heads = num_key_value_heads
        self.position_encoding = position_encoding
        self.sliding_window = sliding_window
        self.max_relative_position = max_relative_position
        self.relative_values = bool(relative_values)
        self.rope_max_wavelength = check_wavelength(rope_max_wavelength, "MultiHead")
        if not isinstance(use_fused_attention, bool):
            raise ValueError(
                "`use_fused_attention` of MultiHead must be True or False; received "
                f"use_fused_attention={use_fused_attention!r}."
            )
        self.use_fused_attention = use_fused_attention
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            dropout, seed=seed, dtype=quantization.float_policy(self.dtype_policy)
        )

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

        if self.position_encoding == "rope" and self.key_dim % 2:
            raise ValueError(
                "MultiHead(position_encoding='rope') rotates feature pairs, so `key_dim` must be "
                f"even; received key_dim={self.key_dim}."
            )
        kv_heads = self.num_key_value_heads or heads
        projection = self._add_projection
        self.query_kernel, self.query_bias = projection("query", query_shape[-1], self.key_dim)
        self.key_kernel, self.key_bias = projection("key", key_shape[-1], self.key_dim, kv_heads)
        self.value_kernel, self.value_bias = projection(
            "value", value_shape[-1], self.value_dim, kv_heads
        )
        self._build_relative_positions()
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
        self.build_int8()
        self.built = True

    def _add_projection(self, name, fan_in, width, count=None):
        """The kernel `(fan_in, count, width)` of one per-head projection
        (`count` heads, default `num_heads`) and its bias `(count, width)`
        (None without `use_bias`)."""
        count = self.num_heads if count is None else count
        kernel = self.add_weight(
            name=f"{name}_kernel",
            shape=(fan_in, count, width),
            initializer=self.kernel_initializer,
        )
        bias = None
        if self.use_bias:
            bias = self.add_weight(
                name=f"{name}_bias", shape=(count, width), initializer=self.bias_initializer
            )
        return kernel, bias

    def _build_relative_positions(self):
        """Shaw et al.'s relative position tables: `a^K` of width `key_dim`
        and, with `relative_values`, `a^V` of width `value_dim` (each None
        when not used)."""
        self.relative_key = self.relative_value = None
        if self.position_encoding != "relative":
            return
        self.relative_key = RelativePositionEmbedding(
            self.max_relative_position,
            self.key_dim,
            dtype=quantization.float_policy(self.dtype_policy),
            name="relative_key",
        )
        self.relative_key.build()
        if self.relative_values:
            self.relative_value = RelativePositionEmbedding(
                self.max_relative_position,
                self.value_dim,
                dtype=quantization.float_policy(self.dtype_policy),
                name="relative_value",
            )
            self.relative_value.build()

    def int8_kernels(self):
        # Per output channel: (head, feature) of W^Q, W^K, W^V; Do of W^O.
        kernels = {f"{name}_kernel": (0,) for name in ("query", "key", "value")}
        return {**kernels, "output_kernel": (0, 1)}

    # -- building blocks ---------------------------------------------------
    def project_key_value(self, value, key=None, key_positions=None):
        """Project the source once: returns `(K, V)`, `(B, G, Tv, d_k)` and
        `(B, G, Tv, d_v)` (`G` the key/value heads), for `attend`
        (cross-attention while decoding). With RoPE the keys are rotated at
        `key_positions` `(Tv,)` (default `0 .. Tv-1`)."""
        check_built(self, "project_key_value")
        key = value if key is None else key
        value = ops.cast(value, self.compute_dtype)
        key = ops.cast(key, self.compute_dtype)
        key = project_heads(self, key, "key")[0]  # (B, G, Tv, d_k)
        if self.position_encoding == "rope":
            if key_positions is None:
                key_positions = ops.arange(ops.shape(key)[2])
            key = rotary(key, key_positions, self.rope_max_wavelength)
        return key, project_heads(self, value, "value")[0]

    def attend(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        query_positions=None,
        key_positions=None,
        return_weights=True,
        projected=False,
    ):
        """Attention of raw `query` `(B, Tq, Dq)` (with `projected`, its
        heads `(B, H, Tq, d_k)`, unrotated) over projected `key`/`value`
        `(B, G, Tv, d)`; `attention_mask` broadcastable to `(B, Tq, Tv)`.
        `query_positions` `(Tq,)` and `key_positions` `(Tv,)` (default
        `0 .. T-1`) place the queries and keys for the position encodings and
        the sliding window. Returns `(output (B, Tq, Do), weights (B, H, Tq,
        Tv))`; with `return_weights=False` the weights are None and the fused
        path may run (see the class docstring)."""
        q = query  # (B, H, Tq, d_k)
        if not projected:
            q = project_heads(self, ops.cast(query, self.compute_dtype), "query")[0]
        positional = self.position_encoding is not None or self.sliding_window is not None
        if positional:
            if query_positions is None:
                query_positions = ops.arange(ops.shape(q)[2])
            if key_positions is None:
                key_positions = ops.arange(ops.shape(key)[2])
            # One integer dtype, whatever the caller's index was (TF does not promote).
            query_positions = ops.cast(query_positions, "int32")
            key_positions = ops.cast(key_positions, "int32")
        if self.position_encoding == "rope":
            q = rotary(q, query_positions, self.rope_max_wavelength)
        mask = None if attention_mask is None else ops.expand_dims(attention_mask, 1)
        if self.sliding_window is not None:
            distance = ops.abs(query_positions[:, None] - key_positions[None, :])  # (Tq, Tv)
            window = ops.less(distance, self.sliding_window)[None, None]  # (1, 1, Tq, Tv)
            mask = window if mask is None else ops.logical_and(mask, window)
        if self._fused_path_applies(return_weights, training):
            heads, weights = self._fused_heads(q, key, value, mask), None  # (B, Tq, H, d_v)
        else:
            heads, weights = self._plain_heads(
                q, key, value, mask, training, query_positions, key_positions
            )  # (B, Tq, H, d_v), (B, H, Tq, Tv)
        shape = ops.shape(heads)
        heads = ops.reshape(heads, (shape[0], shape[1], self.num_heads * self.value_dim))
        weight, scale = quantization.kernel(self, "output_kernel", heads.dtype)
        output = ops.matmul(heads, ops.reshape(weight, (self.num_heads * self.value_dim, -1)))
        output = quantization.rescale(output, scale)
        if self.output_bias is not None:
            output = output + ops.cast(self.output_bias, output.dtype)
        return output, (weights if return_weights else None)  # (B, Tq, Do), (B, H, Tq, Tv)

    def _fused_path_applies(self, return_weights, training):
        """Whether `keras.ops.dot_product_attention` computes exactly this
        call: it returns no weights, has no dropout, adds no score bias
        (ALiBi, Shaw), needs values as wide as keys, and keeps the logits in
        float32 as the plain path does (`masking.score_product`)."""
        return (
            self.use_fused_attention
            and not return_weights
            and (self.dropout == 0.0 or not training)
            and self.position_encoding in (None, "rope")
            and self.value_dim == self.key_dim
            and not self._fused_logits_in_half_precision()
        )

    def _fused_logits_in_half_precision(self):
        """Whether the backend's op may compute the logits `q kᵀ` or the
        softmax in float16 or bfloat16 here. JAX's keeps both in float32
        (`preferred_element_type=float32`; cuDNN's kernels accumulate in
        float32). TensorFlow's einsums in the operands' dtype: float16 logits
        overflow past 65504 and give NaN, as in Keras's own
        `MultiHeadAttention`, and bfloat16 ones are rounded to 8 bits.
        PyTorch's CPU kernel drifts from float32 on large inputs. Under a
        half-precision policy those backends (and any other) take the plain
        path, whose logits are float32 (`masking.score_product`); on
        TensorFlow the op is the same einsums and softmax, so this costs
        nothing."""
        return keras.backend.backend() != "jax" and masking.is_half_precision(self.compute_dtype)

    def _fused_heads(self, q, key, value, mask):
        """The heads `(B, Tq, H, d_v)` by `keras.ops.dot_product_attention`:
        `q` `(B, H, Tq, d_k)` (rotated, unscaled), `key`/`value` `(B, G, Tv,
        d)`, `mask` broadcastable to `(B, 1, Tq, Tv)` or None."""
        if mask is not None:
            batch, length = ops.shape(q)[0], ops.shape(q)[2]
            # (B, 1, Tq, Tv): the shape every backend's op accepts.
            mask = ops.broadcast_to(ops.cast(mask, "bool"), (batch, 1, length, ops.shape(key)[2]))
            value = masking.zero_unattended(value, mask)  # no 0 * NaN from a masked key
        if self.num_key_value_heads == 1 and self.num_heads > 1:
            # The op groups G > 1 key/value heads itself; TF's cannot broadcast G = 1.
            key = ops.repeat(key, self.num_heads, axis=1)  # (B, H, Tv, d_k)
            value = ops.repeat(value, self.num_heads, axis=1)  # (B, H, Tv, d_v)
        # Flash kernels where the backend has them (None: its choice), unless
        # keras.config.disable_flash_attention(); never forced, since TF has none.
        flash = None if keras.config.is_flash_attention_enabled() is not False else False
        heads = ops.dot_product_attention(
            ops.transpose(q, (0, 2, 1, 3)),  # (B, Tq, H, d_k)
            ops.transpose(key, (0, 2, 1, 3)),  # (B, Tv, G, d_k)
            ops.transpose(value, (0, 2, 1, 3)),  # (B, Tv, G, d_v)
            mask=mask,
            scale=1.0 / math.sqrt(self.key_dim),
            flash_attention=flash,
        )  # (B, Tq, H, d_v)
        if mask is None:
            return heads
        # The op spreads a query with no allowed key evenly over the keys; here it gets 0.
        attends = ops.transpose(ops.any(mask, axis=-1), (0, 2, 1))[..., None]  # (B, Tq, 1, 1)
        return ops.where(attends, heads, ops.zeros_like(heads))

    def _plain_heads(self, q, key, value, mask, training, query_positions, key_positions):
        """The heads `(B, Tq, H, d_v)` and weights `(B, H, Tq, Tv)` written
        out: `q` `(B, H, Tq, d_k)` (rotated, unscaled), `key`/`value` `(B, G,
        Tv, d)`, `mask` broadcastable to `(B, 1, Tq, Tv)` or None."""
        groups = self.num_heads // (self.num_key_value_heads or self.num_heads)
        if groups > 1:  # query head h reads key/value head h // groups
            key = ops.repeat(key, groups, axis=1)  # (B, H, Tv, d_k)
            value = ops.repeat(value, groups, axis=1)  # (B, H, Tv, d_v)
        q = q * ops.cast(1.0 / math.sqrt(self.key_dim), q.dtype)
        scores = masking.score_product(q, ops.swapaxes(key, -1, -2))  # (B, H, Tq, Tv)
        if self.position_encoding == "alibi":
            bias = alibi_bias(self.num_heads, query_positions, key_positions)  # (H, Tq, Tv)
            scores = scores + ops.cast(bias, scores.dtype)[None]
        relative_value = None
        if self.position_encoding == "relative":
            relative_key = self.relative_key(query_positions, key_positions)  # (Tq, Tv, d_k)
            scores = scores + ops.einsum(
                "bhqd,qkd->bhqk", ops.cast(q, scores.dtype), ops.cast(relative_key, scores.dtype)
            )
            if self.relative_value is not None:
                relative_value = self.relative_value(query_positions, key_positions)
        weights = masking.masked_softmax(scores, mask)  # (B, H, Tq, Tv)
        weights = ops.cast(weights, value.dtype)
        dropped = self._dropout_layer(weights, training=training)
        value = masking.zero_unattended(value, mask)  # no 0 * NaN from a masked key
        heads = ops.matmul(dropped, value)  # (B, H, Tq, d_v)
        if relative_value is not None:
            heads = heads + ops.einsum(
                "bhqk,qkd->bhqd", dropped, ops.cast(relative_value, dropped.dtype)
            )
        return ops.transpose(heads, (0, 2, 1, 3)), weights  # (B, Tq, H, d_v), (B, H, Tq, Tv)

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
        # library (see ScoreAttention) and not used: the position encodings
        # and the window place queries at 0..Tq-1 here, at the cache's
        # positions in `step`.
        key = value if key is None else key
        for name, tensor in (("query", query), ("value", value), ("key", key)):
            check_float_input(name, tensor, "MultiHead")
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
        output, weights = self.attend(
            query,
            projected_key,
            projected_value,
            mask,
            training,
            return_weights=return_attention_scores,
        )
        if single_step:
            output = output[:, 0]  # (B, Do)
        if not return_attention_scores:
            return output
        if single_step:
            weights = weights[:, :, 0]  # (B, H, Tv)
        return output, weights

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
            "num_key_value_heads": self.num_key_value_heads,
            "position_encoding": self.position_encoding,
            "sliding_window": self.sliding_window,
            "max_relative_position": self.max_relative_position,
            "relative_values": self.relative_values,
            "rope_max_wavelength": self.rope_max_wavelength,
            "use_fused_attention": self.use_fused_attention,
        }
