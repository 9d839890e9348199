"""Convolutional sequence to sequence learning (ConvS2S, Gehring et al. 2017):
gated convolutions, multi-step attention, encoder and decoder with
incremental decoding."""

import math

import keras
from keras import ops

from keras_attention import compat, masking, quantization, validation
from keras_attention.positional import TokenAndPositionEmbedding
from keras_attention.validation import (
    check_float_input,
    check_positive_int,
    check_rank,
    check_rate,
    check_token_id,
)

register = keras.saving.register_keras_serializable(package="keras_attention")

# Gehring et al. (2017), Sec. 3.4: the sum of a residual block's input and
# output is scaled by sqrt(0.5) to halve its variance.
SQRT_HALF = math.sqrt(0.5)

# Named architectures, as (width, kernel size) per layer (fairseq's presets).
PRESETS = {
    "fconv_iwslt_de_en": {"embed_dim": 256, "encoder": ((256, 3),) * 4, "decoder": ((256, 3),) * 3},
    "fconv_wmt_en_ro": {"embed_dim": 512, "encoder": ((512, 3),) * 20, "decoder": ((512, 3),) * 20},
    "tiny": {"embed_dim": 32, "encoder": ((32, 3),) * 2, "decoder": ((32, 3),) * 2},
}


def _normal(std):
    return keras.initializers.RandomNormal(stddev=std)


def _check_convolutions(convolutions, owner):
    if not convolutions:
        raise ValueError(
            f"`convolutions` of {owner} must be a non-empty list of (width, kernel_size) "
            f"pairs, e.g. [(256, 3)] * 4; received convolutions={convolutions!r}."
        )
    for pair in convolutions:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(
                f"`convolutions` of {owner} must hold (width, kernel_size) pairs; "
                f"received {pair!r}."
            )
    return tuple(
        (
            check_positive_int("convolutions width", pair[0], owner),
            check_positive_int("convolutions kernel_size", pair[1], owner),
        )
        for pair in convolutions
    )


@register
class GLUConv1D(quantization.Int8Kernels, keras.layers.Layer):
    """A gated convolutional block of ConvS2S.

        [A B] = W [h_{i-k/2}, ..., h_{i+k/2}] + b_w      W ∈ R^{2d×kd}, [A B] ∈ R^{2d}
        v([A B]) = A ⊗ σ(B)                               (gated linear unit)
        h_i^l = (v(...) + h_i^{l-1}) · sqrt(0.5)          (residual; residual=True)

    When the input width differs from `filters`, the residual goes through a
    learned linear projection. `causal=True` pads `k-1` positions on the
    left only (position i sees no later position; the decoder); otherwise
    the window is centred: `(k-1)//2` on the left and `k//2` on the right,
    so an even `k` looks one position further right than left (fairseq's
    convention). Padded positions (`mask`) are zeroed before the convolution
    so padding never leaks into real positions. Dropout applies to the
    input of the convolution.

    Initialisation (Gehring et al., Sec. 3.5): convolution weights from
    `N(0, sqrt(4 (1 - p) / (k · d_in)))` (the GLU halves the variance, and
    dropout with rate p scales it by 1 - p), the residual projection from
    `N(0, sqrt(1 / d_in))`, biases zero.

    Incremental decoding (causal only): `buffer = layer.init_buffer(B)`,
    then `output, buffer = layer.step(x_t, buffer)`; the buffer keeps the
    last `k-1` inputs, so each step costs O(k · d²) whatever the prefix.

    Args:
        filters: int, output width d.
        kernel_size: int, k.
        causal: bool.
        dropout: float in [0, 1), dropout on the input.
        residual: bool, add the (projected) input, scaled by sqrt(0.5).

    Call arguments:
        inputs: `(B, T, d_in)`.
        mask: optional boolean `(B, T)`; defaults to the Keras mask.
        training: bool.

    Returns:
        `(B, T, filters)`.

    References:
        Gehring et al., "Convolutional Sequence to Sequence Learning" (2017);
        Dauphin et al., "Language Modeling with Gated Convolutional Networks"
        (2017).
    """

    def __init__(self, filters, kernel_size, causal=False, dropout=0.0, residual=True, **kwargs):
        super().__init__(**kwargs)
        filters = check_positive_int("filters", filters, "GLUConv1D")
        kernel_size = check_positive_int("kernel_size", kernel_size, "GLUConv1D")
        dropout = check_rate("dropout", dropout, "GLUConv1D")
        self.filters = filters
        self.kernel_size = kernel_size
        self.causal = bool(causal)
        self.dropout = dropout
        self.residual = bool(residual)
        self.supports_masking = True
        self._dropout_layer = keras.layers.Dropout(
            dropout, dtype=quantization.float_policy(self.dtype_policy)
        )

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (3,), "GLUConv1D", "(B, T, d_in)")
        d_in = inputs_shape[-1]
        self.input_width = d_in
        std = math.sqrt(4.0 * (1.0 - self.dropout) / (self.kernel_size * d_in))
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.kernel_size, d_in, 2 * self.filters),
            initializer=_normal(std),
        )
        self.bias = self.add_weight(name="bias", shape=(2 * self.filters,), initializer="zeros")
        self.residual_kernel = None
        if self.residual and d_in != self.filters:
            self.residual_kernel = self.add_weight(
                name="residual_kernel",
                shape=(d_in, self.filters),
                initializer=_normal(math.sqrt(1.0 / d_in)),
            )
            self.residual_bias = self.add_weight(
                name="residual_bias", shape=(self.filters,), initializer="zeros"
            )
        self.build_int8()
        self.built = True

    def int8_kernels(self):
        # Per output channel: the 2d of W (over window and input), d of W_r.
        return {"kernel": (0, 1), "residual_kernel": (0,)}

    @property
    def padding(self):
        """(left, right) zero padding of the time axis."""
        if self.causal:
            return self.kernel_size - 1, 0
        return (self.kernel_size - 1) // 2, self.kernel_size // 2

    def _gate_and_residual(self, conv, inputs):
        a, b = ops.split(conv, 2, axis=-1)  # (B, T, d) each
        gated = a * ops.sigmoid(b)  # v([A B]) = A ⊗ σ(B)
        if not self.residual:
            return gated
        residual = inputs
        if self.residual_kernel is not None:
            weight, scale = quantization.kernel(self, "residual_kernel", inputs.dtype)
            residual = quantization.rescale(ops.matmul(inputs, weight), scale)
            residual = residual + ops.cast(self.residual_bias, inputs.dtype)
        return (gated + residual) * ops.cast(SQRT_HALF, gated.dtype)

    def call(self, inputs, mask=None, training=None):
        check_float_input("inputs", inputs, "GLUConv1D")
        if inputs.shape[1] == 0:
            raise ValueError(
                "`inputs` of GLUConv1D must have at least one time step; received inputs "
                f"with shape {tuple(inputs.shape)} (B, T=0, d_in)."
            )
        if mask is not None:
            mask = masking.as_boolean(mask, "mask", "GLUConv1D")
            inputs = inputs * ops.cast(mask, inputs.dtype)[..., None]
        left, right = self.padding
        x = ops.pad(self._dropout_layer(inputs, training=training), ((0, 0), (left, right), (0, 0)))
        weight, scale = quantization.kernel(self, "kernel", x.dtype)
        conv = quantization.rescale(ops.conv(x, weight, padding="valid"), scale)  # (B, T, 2d)
        conv = conv + ops.cast(self.bias, conv.dtype)
        return self._gate_and_residual(conv, inputs)

    def init_buffer(self, batch_size, dtype=None):
        """The last `k-1` inputs, zeros at the start: `(B, k-1, d_in)`."""
        return ops.zeros(
            (batch_size, self.kernel_size - 1, self.input_width), dtype or self.compute_dtype
        )

    def step(self, inputs, buffer, training=None):
        """One causal step: `inputs (B, 1, d_in)`, returns `(output (B, 1, d),
        buffer)`; equal to `call` at that position of the whole sequence."""
        if not self.causal:
            raise ValueError(
                "GLUConv1D.step() decodes one position at a time and needs causal=True; "
                "this layer was built with causal=False."
            )
        inputs = ops.cast(inputs, self.compute_dtype)
        window = ops.concatenate(
            [buffer, self._dropout_layer(inputs, training=training)], axis=1
        )  # (B, k, d_in)
        weight, scale = quantization.kernel(self, "kernel", window.dtype)
        conv = quantization.rescale(ops.einsum("bkd,kdf->bf", window, weight), scale)
        conv = conv + ops.cast(self.bias, window.dtype)
        output = self._gate_and_residual(conv[:, None, :], inputs)  # (B, 1, d)
        return output, window[:, 1:]

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape[:-1]) + (self.filters,)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "causal": self.causal,
            "dropout": self.dropout,
            "residual": self.residual,
        }


@register
class MultiStepAttention(quantization.Int8Kernels, keras.layers.Layer):
    """The attention of one ConvS2S decoder layer.

        d_i = W_d h_i + b_d + g_i                      (decoder state summary)
        a_ij = softmax_j(d_i · z_j)                    (over unpadded source j)
        c_i = (sum_j a_ij (z_j + e_j)) · m sqrt(1/m)   (conditional input)
        output_i = (h_i + W_c c_i + b_c) · sqrt(0.5)

    `h` is the decoder layer's output, `g` the embedding of the previous
    target element, `z` the encoder output (keys) and `z + e` the encoder
    output plus the source embedding (values). `m` is the number of unpadded
    source positions: the paper scales the conditional input by
    `m sqrt(1/m)` to undo the change in variance of a weighted sum of m
    vectors. `W_c, b_c` map the embedding width back to the decoder width
    when the two differ (otherwise `c_i` is added as it is); the sum is the
    residual connection, scaled by sqrt(0.5).

    With `fairseq_compatible=True` it is fairseq's `fconv` `AttentionLayer`:
    the query is scaled, `d_i = (W_d h_i + b_d + g_i) · sqrt(0.5)`, and
    `W_c, b_c` always exist (even when C = E). fairseq also scales the
    values, `(z + e) · sqrt(0.5)`: `ConvS2SEncoder(fairseq_compatible=True)`
    does that, so pass its values unchanged.

    Args:
        fairseq_compatible: bool, follow fairseq (above); default False,
            the paper's equations as written.
        **kwargs: base `keras.layers.Layer` arguments (`name`, `dtype`, ...);
            the widths come from the inputs at build time.

    Call arguments:
        decoder_state: `(B, T, C)`, h.
        target_embedding: `(B, T, E)`, g.
        encoder_keys: `(B, S, E)`, z.
        encoder_values: `(B, S, E)`, z + e.
        source_mask: optional boolean `(B, S)`.
        return_attention_scores: also return a `(B, T, S)`.

    Returns:
        `(B, T, C)`, or `(output, scores)`.

    Example:

    >>> layer = MultiStepAttention()
    >>> h, g, z = np.ones((2, 3, 6)), np.ones((2, 3, 4)), np.ones((2, 5, 4))
    >>> out, scores = layer(h, g, z, z, return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 3, 6), (2, 3, 5))

    References:
        Gehring et al., "Convolutional Sequence to Sequence Learning" (2017),
        Sec. 3.3.
    """

    def __init__(self, fairseq_compatible=False, **kwargs):
        super().__init__(**kwargs)
        self.fairseq_compatible = bool(fairseq_compatible)
        self.supports_masking = True

    def build(
        self,
        decoder_state_shape,
        target_embedding_shape,
        encoder_keys_shape,
        encoder_values_shape=None,
    ):
        owner = "MultiStepAttention"
        check_rank("decoder_state", decoder_state_shape, (3,), owner, "(B, T, C)")
        check_rank("target_embedding", target_embedding_shape, (3,), owner, "(B, T, E)")
        check_rank("encoder_keys", encoder_keys_shape, (3,), owner, "(B, S, E)")
        width, embed = decoder_state_shape[-1], encoder_keys_shape[-1]
        for name, shape in (
            ("target_embedding", target_embedding_shape),
            ("encoder_values", encoder_values_shape or encoder_keys_shape),
        ):
            if shape[-1] != embed:
                raise ValueError(
                    f"{owner}: `{name}` must have the width of `encoder_keys` (E = {embed}), "
                    f"since d_i = W_d h_i + b_d + g_i is dotted with z_j and added to z_j + e_j; "
                    f"received {name} width {shape[-1]} and encoder_keys width {embed}."
                )
        self.state_kernel = self.add_weight(
            name="state_kernel", shape=(width, embed), initializer=_normal(math.sqrt(1.0 / width))
        )
        self.state_bias = self.add_weight(name="state_bias", shape=(embed,), initializer="zeros")
        self.context_kernel = None
        if width != embed or self.fairseq_compatible:
            self.context_kernel = self.add_weight(
                name="context_kernel",
                shape=(embed, width),
                initializer=_normal(math.sqrt(1.0 / embed)),
            )
            self.context_bias = self.add_weight(
                name="context_bias", shape=(width,), initializer="zeros"
            )
        self.build_int8()
        self.built = True

    def int8_kernels(self):
        # Per output channel: E of W_d, C of W_c.
        return {"state_kernel": (0,), "context_kernel": (0,)}

    def call(
        self,
        decoder_state,
        target_embedding,
        encoder_keys,
        encoder_values,
        source_mask=None,
        return_attention_scores=False,
    ):
        for name, tensor in (
            ("decoder_state", decoder_state),
            ("target_embedding", target_embedding),
            ("encoder_keys", encoder_keys),
            ("encoder_values", encoder_values),
        ):
            check_float_input(name, tensor, "MultiStepAttention")
        h = decoder_state
        dtype = h.dtype
        weight, scale = quantization.kernel(self, "state_kernel", dtype)
        d = quantization.rescale(ops.matmul(h, weight), scale) + ops.cast(self.state_bias, dtype)
        d = d + ops.cast(target_embedding, dtype)  # (B, T, E)
        if self.fairseq_compatible:
            d = d * ops.cast(SQRT_HALF, dtype)
        keys = ops.swapaxes(ops.cast(encoder_keys, dtype), 1, 2)  # (B, E, S)
        scores = masking.score_product(d, keys)  # (B, T, S)
        mask = None
        if source_mask is not None:
            source_mask = masking.as_boolean(source_mask, "source_mask", "MultiStepAttention")
            validation.check_mask_shape(
                "source_mask",
                source_mask,
                (encoder_keys.shape[0], encoder_keys.shape[1]),
                "MultiStepAttention",
                "(B, S)",
            )
            mask = ops.expand_dims(source_mask, 1)  # (B, 1, S)
        weights = ops.cast(masking.masked_softmax(scores, mask), dtype)  # (B, T, S)
        values = masking.zero_unattended(ops.cast(encoder_values, dtype), mask)  # no 0 * NaN
        context = ops.matmul(weights, values)  # (B, T, E)
        if source_mask is None:
            length = ops.cast(ops.shape(encoder_keys)[1], "float32") * ops.ones((1, 1, 1))
        else:
            length = ops.sum(ops.cast(source_mask, "float32"), axis=1)[:, None, None]  # (B, 1, 1)
        length = ops.maximum(length, 1.0)
        context = context * ops.cast(length * ops.sqrt(1.0 / length), dtype)  # m sqrt(1/m)
        if self.context_kernel is not None:
            weight, scale = quantization.kernel(self, "context_kernel", dtype)
            context = quantization.rescale(ops.matmul(context, weight), scale)
            context = context + ops.cast(self.context_bias, dtype)
        output = (h + context) * ops.cast(SQRT_HALF, dtype)
        return (output, weights) if return_attention_scores else output

    def compute_mask(self, decoder_state, previous_mask=None):
        return previous_mask

    def compute_output_shape(
        self,
        decoder_state_shape,
        target_embedding_shape,
        encoder_keys_shape,
        encoder_values_shape=None,
    ):
        return tuple(decoder_state_shape)

    def compute_output_spec(
        self,
        decoder_state,
        target_embedding,
        encoder_keys,
        encoder_values=None,
        return_attention_scores=False,
        **kwargs,
    ):
        output = keras.KerasTensor(decoder_state.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        b, t, s = decoder_state.shape[0], decoder_state.shape[1], encoder_keys.shape[1]
        return output, keras.KerasTensor((b, t, s), dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "fairseq_compatible": self.fairseq_compatible}


class _ConvS2SStack(keras.layers.Layer):
    """What the encoder and decoder share: arguments, config, the embedding
    `e = w + p` (token + learned position) and the paper's linear layers."""

    def __init__(
        self,
        vocab_size,
        embed_dim,
        convolutions,
        max_length,
        dropout,
        padding_id,
        fairseq_compatible=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.fairseq_compatible = bool(fairseq_compatible)
        owner = type(self).__name__
        vocab_size = check_positive_int("vocab_size", vocab_size, owner)
        embed_dim = check_positive_int("embed_dim", embed_dim, owner)
        max_length = check_positive_int("max_length", max_length, owner)
        dropout = check_rate("dropout", dropout, owner)
        self.vocab_size = vocab_size
        self.embed_dim = embed_dim
        self.convolutions = _check_convolutions(convolutions, owner)
        self.max_length = max_length
        self.dropout = dropout
        self.padding_id = check_token_id("padding_id", padding_id, vocab_size, owner)
        self._table_stack = None  # a function returning the stack whose token table is read

    def share_token_table(self, other):
        """Read the token table of `other` (the decoder, for an encoder of a
        shared vocabulary) instead of learning one; positions stay apart.
        Call it before `build`, and build `other` first."""
        if not isinstance(other, _ConvS2SStack):
            raise ValueError(
                f"{type(self).__name__}.share_token_table: `other` must be a ConvS2S encoder "
                f"or decoder; received {type(other).__name__}."
            )
        if self.built:
            raise ValueError(
                f"{type(self).__name__}.share_token_table: call it before the stack is built."
            )
        self._table_stack = lambda: other  # a function: not tracked as a sublayer

    def _build_embedding(self, tokens_shape):
        # Attribute names are the weight paths in .keras files: the token
        # table stays at `token_embedding` and the learned positions at
        # `position_embedding` (an alias, visited first), where 0.1.0 kept them.
        self.token_embedding = TokenAndPositionEmbedding(
            self.vocab_size,
            self.embed_dim,
            self.max_length,
            position="learned",
            embeddings_initializer=_normal(0.1),
            dropout=self.dropout,
            padding_id=self.padding_id,
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        if self._table_stack is not None:
            other = self._table_stack()
            if not other.built:
                raise ValueError(
                    f"{type(self).__name__} shares the token table of {other.name}: "
                    f"build {other.name} first."
                )
            self.token_embedding.share_token_table(other.token_embedding)
        self.token_embedding.build(tokens_shape)
        self.position_embedding = self.token_embedding.position_embedding

    def _linear(self, name, width):
        return keras.layers.Dense(
            width,
            kernel_initializer=_normal(math.sqrt((1.0 - self.dropout) / self.embed_dim)),
            dtype=self.dtype_policy,
            name=name,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embed_dim": self.embed_dim,
            "convolutions": [list(pair) for pair in self.convolutions],
            "max_length": self.max_length,
            "dropout": self.dropout,
            "padding_id": self.padding_id,
            "fairseq_compatible": self.fairseq_compatible,
        }


@register
class ConvS2SEncoder(_ConvS2SStack):
    """The ConvS2S encoder.

        e_j = w_j + p_j                            (token + learned position)
        x = W_in e + b_in
        x = GLUConv1D_l(x), l = 1..L               (centred windows)
        z_j = W_out x_j + b_out                    (back to the embedding width)

    Returns the keys `z` and the values `z + e` of multi-step attention.
    With `fairseq_compatible=True` (fairseq's `FConvEncoder`) the values are
    `(z + e) · sqrt(0.5)` and `z` is zero at padded positions (the forward
    pass only: fairseq's `GradMultiply` rescales the encoder's gradient by
    1 / (2 · attention layers), which is not reproduced).

    Args:
        vocab_size: int.
        embed_dim: int, E.
        convolutions: list of (width, kernel_size) per layer.
        max_length: int, number of learned positions.
        dropout: float, on embeddings and convolution inputs.
        padding_id: token id of padding (masked).
        fairseq_compatible: bool (above), default False.

    Call arguments:
        source_tokens: int `(B, S)`.
        training: bool.

    Returns:
        `(keys (B, S, E), values (B, S, E))`, each carrying the source mask.
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        convolutions=((256, 3),) * 4,
        max_length=1024,
        dropout=0.1,
        padding_id=0,
        fairseq_compatible=False,
        **kwargs,
    ):
        super().__init__(
            vocab_size,
            embed_dim,
            convolutions,
            max_length,
            dropout,
            padding_id,
            fairseq_compatible,
            **kwargs,
        )

    def build(self, source_tokens_shape):
        check_rank("source_tokens", source_tokens_shape, (2,), "ConvS2SEncoder", "(B, S)")
        self._build_embedding(source_tokens_shape)
        shape = tuple(source_tokens_shape) + (self.embed_dim,)
        self.in_projection = self._linear("in_projection", self.convolutions[0][0])
        self.in_projection.build(shape)
        self.convolution_layers = []
        width = self.convolutions[0][0]
        for index, (filters, kernel_size) in enumerate(self.convolutions):
            layer = GLUConv1D(
                filters,
                kernel_size,
                causal=False,
                dropout=self.dropout,
                dtype=self.dtype_policy,
                name=f"convolution_{index}",
            )
            layer.build(tuple(source_tokens_shape) + (width,))
            self.convolution_layers.append(layer)
            width = filters
        self.out_projection = self._linear("out_projection", self.embed_dim)
        self.out_projection.build(tuple(source_tokens_shape) + (width,))
        self.built = True

    def source_mask(self, source_tokens):
        return ops.not_equal(source_tokens, self.padding_id)

    def call(self, source_tokens, training=None):
        mask = self.source_mask(source_tokens)
        e = self.token_embedding(source_tokens, training=training)  # (B, S, E)
        x = self.in_projection(e)
        for layer in self.convolution_layers:
            x = layer(x, mask=mask, training=training)
        z = self.out_projection(x)  # (B, S, E)
        if not self.fairseq_compatible:
            return z, z + e
        z = z * ops.cast(mask, z.dtype)[..., None]
        return z, (z + e) * ops.cast(SQRT_HALF, z.dtype)

    def compute_mask(self, source_tokens, previous_mask=None):
        mask = self.source_mask(source_tokens)
        return mask, mask

    def compute_output_shape(self, source_tokens_shape):
        shape = tuple(source_tokens_shape) + (self.embed_dim,)
        return shape, shape


@register
class ConvS2SDecoder(_ConvS2SStack):
    """The ConvS2S decoder with one multi-step attention per layer.

        g_i = w_i + p_i                                   (previous target element)
        h^0 = W_in g + b_in
        h^l = MultiStepAttention_l(GLUConv1D_l(h^{l-1}), g, z, z + e)   (causal)
        p(y_{i+1} | y_1..y_i, x) = softmax(W_o h_i^L + b_o)

    Incremental decoding: `cache = decoder.init_cache(keys, values,
    source_mask)`, then `logits, scores, cache = decoder.step(tokens, cache,
    cache_index)` for `cache_index = 0, 1, ...`; each step costs
    O(layers · k · d²) whatever the prefix (every convolution keeps only
    its last k-1 inputs), and equals the full pass. The cache is a dict of
    batch-major tensors: `keras.tree.map_structure(lambda t: ops.take(t,
    order, axis=0), cache)` reorders it (beam search).

    `fairseq_compatible=True` follows fairseq's `FConvDecoder` exactly (use
    it with `ConvS2SEncoder(fairseq_compatible=True)`):

        r^l = h^{l-1}, or W_r h^{l-1} + b_r when the width changes
        a^l = GLU(conv_l(h^{l-1}))                          (no residual yet)
        h^l = (MultiStepAttention_l(a^l, g, z, (z + e)·sqrt(0.5)) + r^l) · sqrt(0.5)
        p(y_{i+1} | ...) = softmax(W_o (W_h h_i^L + b_h) + b_o)

    so attention reads the gated output before the residual, its query is
    scaled by sqrt(0.5) and it always projects back (`W_c`), and the output
    goes through a hidden projection of width `output_embed_dim` (fairseq's
    `fc2`, then dropout, then `fc3`).

    Porting fconv weights. fairseq trains with weight normalisation
    (`w = g · v / ‖v‖`); it is not implemented here, as it changes only the
    training dynamics: fold each layer once, `w = g · v / ‖v‖` with the
    norm over every axis but the output one (what
    `torch.nn.utils.remove_weight_norm` does), and load `w` as a plain
    kernel. Layouts: `nn.Linear` weights `(out, in)` → our `(in, out)`
    (transpose); the `ConvTBC` weights of both stacks (the decoder's
    `LinearizedConvolution` is one) are `(k, in, 2d)`, our `(k, d_in, 2d)`
    as they are. `F.glu` gates with the second half as we do. fairseq's
    learned positions start at `padding_idx + 1`: load rows
    `padding_idx + 1 ...` of its table as our positions 0 ... .
    GradMultiply (backward only) is not reproduced.

    With `tie_embeddings=True` the output projection is the token table
    itself, `W_o = W_xᵀ` (Press & Wolf, 2017; fairseq's
    `--share-input-output-embed`), with its own bias `b_o`: the last
    convolution's width (or `output_embed_dim`) must be `embed_dim`.

    Args: as `ConvS2SEncoder`, and `output_embed_dim` (fairseq's
    `decoder_out_embed_dim`; default `embed_dim`), used only when
    `fairseq_compatible=True`; `tie_embeddings` (above), default False.

    Call arguments:
        target_tokens: int `(B, T)`, the target shifted right (`<sos>` first).
        encoder_keys, encoder_values: the encoder's outputs.
        source_mask: optional boolean `(B, S)` (default: the Keras mask of
            `encoder_keys`).
        return_attention_scores: also return a list, one `(B, T, S)` per layer.
        training: bool.

    Returns:
        logits `(B, T, vocab_size)`, or `(logits, [scores per layer])`.
    """

    def __init__(
        self,
        vocab_size,
        embed_dim,
        convolutions=((256, 3),) * 3,
        max_length=1024,
        dropout=0.1,
        padding_id=0,
        fairseq_compatible=False,
        output_embed_dim=None,
        tie_embeddings=False,
        **kwargs,
    ):
        super().__init__(
            vocab_size,
            embed_dim,
            convolutions,
            max_length,
            dropout,
            padding_id,
            fairseq_compatible,
            **kwargs,
        )
        if output_embed_dim is not None:
            output_embed_dim = check_positive_int(
                "output_embed_dim", output_embed_dim, "ConvS2SDecoder"
            )
        self.output_embed_dim = output_embed_dim
        self.tie_embeddings = bool(tie_embeddings)
        output_width = self.convolutions[-1][0]
        if self.fairseq_compatible:
            output_width = output_embed_dim or embed_dim
        if self.tie_embeddings and output_width != embed_dim:
            raise ValueError(
                "ConvS2SDecoder: `tie_embeddings=True` reads the token table as the output "
                f"projection, so the decoder's output width must be embed_dim = {embed_dim}; "
                f"received output width {output_width} (the last convolution's, or "
                "output_embed_dim with fairseq_compatible)."
            )

    def build(self, target_tokens_shape, encoder_keys_shape, encoder_values_shape=None):
        owner = "ConvS2SDecoder"
        check_rank("target_tokens", target_tokens_shape, (2,), owner, "(B, T)")
        check_rank("encoder_keys", encoder_keys_shape, (3,), owner, "(B, S, E)")
        if encoder_keys_shape[-1] != self.embed_dim:
            raise ValueError(
                f"{owner}: `encoder_keys` must have the decoder's embed_dim = {self.embed_dim} "
                f"(d_i · z_j needs equal widths); received encoder width {encoder_keys_shape[-1]}."
            )
        self._build_embedding(target_tokens_shape)
        batch_time = tuple(target_tokens_shape)
        embed_shape = batch_time + (self.embed_dim,)
        self.in_projection = self._linear("in_projection", self.convolutions[0][0])
        self.in_projection.build(embed_shape)
        self.convolution_layers, self.attention_layers = [], []
        self.residual_projections = []  # fairseq_compatible only: None or W_r per layer
        fairseq = self.fairseq_compatible
        width = self.convolutions[0][0]
        for index, (filters, kernel_size) in enumerate(self.convolutions):
            conv = GLUConv1D(
                filters,
                kernel_size,
                causal=True,
                dropout=self.dropout,
                residual=not fairseq,  # fairseq adds the residual after attention
                dtype=self.dtype_policy,
                name=f"convolution_{index}",
            )
            conv.build(batch_time + (width,))
            attention = MultiStepAttention(
                fairseq_compatible=fairseq, dtype=self.dtype_policy, name=f"attention_{index}"
            )
            attention.build(
                batch_time + (filters,), embed_shape, encoder_keys_shape, encoder_keys_shape
            )
            if fairseq:
                projection = None
                if width != filters:
                    projection = keras.layers.Dense(
                        filters,
                        kernel_initializer=_normal(math.sqrt(1.0 / width)),
                        dtype=self.dtype_policy,
                        name=f"residual_projection_{index}",
                    )
                    projection.build(batch_time + (width,))
                self.residual_projections.append(projection)
            self.convolution_layers.append(conv)
            self.attention_layers.append(attention)
            width = filters
        self.hidden_projection = None
        if fairseq:
            self.hidden_projection = keras.layers.Dense(
                self.output_embed_dim or self.embed_dim,
                kernel_initializer=_normal(math.sqrt(1.0 / width)),
                dtype=self.dtype_policy,
                name="hidden_projection",
            )  # fairseq's fc2
            self.hidden_projection.build(batch_time + (width,))
            width = self.output_embed_dim or self.embed_dim
        self.output_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        if self.tie_embeddings:
            self.output_projection = None
            self.output_bias = self.add_weight(
                name="output_bias", shape=(self.vocab_size,), initializer="zeros"
            )
        else:
            self.output_projection = keras.layers.Dense(
                self.vocab_size,
                kernel_initializer=_normal(math.sqrt((1.0 - self.dropout) / width)),
                dtype=self.dtype_policy,
                name="output_projection",
            )
            self.output_projection.build(batch_time + (width,))
        self.built = True

    def _logits(self, x):
        """`W_o x + b_o`, with `W_o = W_xᵀ` when the embeddings are tied."""
        if not self.tie_embeddings:
            return self.output_projection(x)
        logits = quantization.tied_logits(self, self.token_embedding.table_layer(), x)
        return logits + ops.cast(self.output_bias, x.dtype)

    def loop_kernels(self, kernel):
        """The tied output projection's table, transposed once before a
        search's loop (`quantization.dequantized` calls this)."""
        if not self.tie_embeddings:
            return {}
        return quantization.tied_loop_kernels(
            self.token_embedding.table_layer(), self.compute_dtype
        )

    def output_columns(self, columns):
        """`_logits` onto the target ids `columns (K,)` only, `features
        (B, D) -> (B, K)`, its weights gathered once: a vocabulary shortlist."""
        if not self.tie_embeddings:
            return quantization.column_projection(
                columns, self.compute_dtype, dense=self.output_projection
            )
        return quantization.column_projection(
            columns,
            self.compute_dtype,
            table_layer=self.token_embedding.table_layer(),
            bias=self.output_bias,
        )

    def _stack(self, x, g, keys, values, source_mask, training, step=None, project=True):
        """The stack: `step=(buffers, new_buffers)` decodes one position;
        `project=False` stops before the output projection (`_logits`)."""
        scores = []
        for index, (conv, attention) in enumerate(
            zip(self.convolution_layers, self.attention_layers)
        ):
            residual = x
            if self.fairseq_compatible and self.residual_projections[index] is not None:
                residual = self.residual_projections[index](x)
            if step is None:
                x = conv(x, training=training)
            else:
                buffers, new_buffers = step
                x, buffer = conv.step(x, buffers[index], training=training)
                new_buffers.append(buffer)
            x, weights = attention(
                x, g, keys, values, source_mask=source_mask, return_attention_scores=True
            )
            if self.fairseq_compatible:
                x = (x + residual) * ops.cast(SQRT_HALF, x.dtype)
            scores.append(weights)
        if self.hidden_projection is not None:
            x = self.hidden_projection(x)
        x = self.output_dropout(x, training=training)
        return (self._logits(x) if project else x), scores

    def call(
        self,
        target_tokens,
        encoder_keys,
        encoder_values,
        source_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        if source_mask is None:
            source_mask = masking.keras_mask(encoder_keys)
        g = self.token_embedding(target_tokens, training=training)  # (B, T, E)
        x = self.in_projection(g)
        logits, scores = self._stack(x, g, encoder_keys, encoder_values, source_mask, training)
        return (logits, scores) if return_attention_scores else logits

    def init_cache(self, encoder_keys, encoder_values, source_mask=None):
        """Everything `step` needs: the encoder outputs, the source mask and
        one empty convolution buffer per layer. Builds the decoder if needed."""
        if not self.built:
            self.build((encoder_keys.shape[0], None), encoder_keys.shape, encoder_values.shape)
        batch = ops.shape(encoder_keys)[0]
        if source_mask is None:
            source_mask = masking.keras_mask(encoder_keys)
        if source_mask is None:
            source_mask = ops.ones(ops.shape(encoder_keys)[:2], "bool")
        return {
            "encoder_keys": ops.cast(encoder_keys, self.compute_dtype),
            "encoder_values": ops.cast(encoder_values, self.compute_dtype),
            "source_mask": masking.as_boolean(source_mask, "source_mask", "ConvS2SDecoder"),
            "buffers": [conv.init_buffer(batch) for conv in self.convolution_layers],
        }

    @compat.renamed_arguments("ConvS2SDecoder.step", index="cache_index")
    def step(self, tokens, cache, cache_index, training=None, project=True):
        """Decode position `cache_index` given `tokens (B,)`, the target
        element at that position (`<sos>` at 0). Returns `(logits (B, V),
        [scores (B, S) per layer], cache)`; with `project=False` the
        features `(B, D)` the logits are projected from (`output_columns`)
        instead of the logits. (`index=`, the argument's old name, still
        works.)"""
        g = self.token_embedding(
            ops.expand_dims(tokens, 1), start_index=cache_index, training=training
        )  # (B, 1, E)
        x = self.in_projection(g)
        new_buffers = []
        logits, scores = self._stack(
            x,
            g,
            cache["encoder_keys"],
            cache["encoder_values"],
            cache["source_mask"],
            training,
            step=(cache["buffers"], new_buffers),
            project=project,
        )
        new_cache = dict(cache, buffers=new_buffers)
        return logits[:, 0], [s[:, 0] for s in scores], new_cache

    def compute_output_shape(
        self, target_tokens_shape, encoder_keys_shape, encoder_values_shape=None
    ):
        return tuple(target_tokens_shape) + (self.vocab_size,)

    def get_config(self):
        return {
            **super().get_config(),
            "output_embed_dim": self.output_embed_dim,
            "tie_embeddings": self.tie_embeddings,
        }

    def compute_output_spec(
        self,
        target_tokens,
        encoder_keys,
        encoder_values=None,
        return_attention_scores=False,
        **kwargs,
    ):
        logits = keras.KerasTensor(
            tuple(target_tokens.shape) + (self.vocab_size,), dtype=self.compute_dtype
        )
        if not return_attention_scores:
            return logits
        b, t, s = target_tokens.shape[0], target_tokens.shape[1], encoder_keys.shape[1]
        return logits, [
            keras.KerasTensor((b, t, s), dtype=self.compute_dtype) for _ in self.convolutions
        ]
