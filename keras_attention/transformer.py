"""Transformer encoder and decoder layers, post-norm (paper) or pre-norm."""

import keras
from keras import ops

from keras_attention import compat, masking
from keras_attention.multi_head import MultiHead, check_variants
from keras_attention.validation import (
    check_built,
    check_float_input,
    check_positive_int,
    check_rank,
    check_rate,
    is_number,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


@register
class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: `FFN(x) = max(0, x W₁ + b₁) W₂ + b₂`.

    Args:
        intermediate_dim: int, width of `W₁`'s output.
        activation: the nonlinearity (default "relu", the `max(0, ·)` above).
        dropout: float in [0, 1), dropout after the activation.
        kernel_initializer: of `W₁`, `W₂`.

    Call arguments:
        inputs: `(B, T, D)`; returns `(B, T, D)`.
    """

    def __init__(
        self,
        intermediate_dim,
        activation="relu",
        dropout=0.0,
        kernel_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim, "FeedForward")
        dropout = check_rate("dropout", dropout, "FeedForward")
        self.intermediate_dim = intermediate_dim
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, inputs_shape):
        policy = self.dtype_policy
        self.intermediate = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=self.kernel_initializer,
            dtype=policy,
            name="intermediate",
        )
        self.intermediate.build(inputs_shape)
        self.intermediate_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.projection = keras.layers.Dense(
            inputs_shape[-1],
            kernel_initializer=self.kernel_initializer,
            dtype=policy,
            name="projection",
        )
        self.projection.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self.built = True

    def call(self, inputs, training=None):
        check_float_input("inputs", inputs, "FeedForward")
        hidden = self.intermediate_dropout(self.intermediate(inputs), training=training)
        return self.projection(hidden)

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "intermediate_dim": self.intermediate_dim,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }


@compat.keras_sliding_window
class _TransformerLayer(keras.layers.Layer):
    """What the encoder and decoder layers share: arguments, config, and the
    residual blocks

        post-norm:  x = LayerNorm(x + Dropout(Sublayer(x)))      (the paper)
        pre-norm:   x = x + Dropout(Sublayer(LayerNorm(x)))
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim,
        key_dim=None,
        dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-5,
        num_key_value_heads=None,
        position_encoding=None,
        sliding_window=None,
        max_relative_position=16,
        **kwargs,
    ):
        super().__init__(**kwargs)
        owner = type(self).__name__
        num_heads = check_positive_int("num_heads", num_heads, owner)
        intermediate_dim = check_positive_int("intermediate_dim", intermediate_dim, owner)
        dropout = check_rate("dropout", dropout, owner)
        if not is_number(layer_norm_epsilon) or not layer_norm_epsilon > 0:
            raise ValueError(
                f"`layer_norm_epsilon` of {owner} must be a number > 0 (it keeps "
                "LayerNormalization's division finite); received "
                f"layer_norm_epsilon={layer_norm_epsilon!r}."
            )
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.key_dim = key_dim
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.num_key_value_heads = num_key_value_heads
        self.position_encoding = position_encoding
        self.sliding_window = sliding_window
        self.max_relative_position = max_relative_position
        self.supports_masking = True
        self.num_key_value_heads, self.sliding_window, self.max_relative_position = check_variants(
            owner,
            num_heads,
            num_key_value_heads,
            position_encoding,
            sliding_window,
            max_relative_position,
        )

    def _attention(self, head_dim, name, self_attention=True):
        """A MultiHead sublayer. The position encoding and the sliding window
        apply to self-attention only: decoder and encoder positions are not
        on one axis, and the papers define these schemes for self-attention,
        so cross-attention stays content-based. Grouped-query heads apply to
        both."""
        variants = {}
        if self_attention:
            variants = {
                "position_encoding": self.position_encoding,
                "sliding_window": self.sliding_window,
                "max_relative_position": self.max_relative_position,
            }
        return MultiHead(
            self.num_heads,
            head_dim,
            dropout=self.dropout,
            num_key_value_heads=self.num_key_value_heads,
            dtype=self.dtype_policy,
            name=name,
            **variants,
        )

    def _make_norm(self, name, shape):
        norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(shape)
        return norm

    def _residual(self, x, norm, sublayer, training):
        """Apply one residual block; `sublayer` maps normalised-or-raw x to
        `(y, extra)` and `extra` is passed through."""
        y, extra = sublayer(norm(x) if self.norm_first else x)
        x = x + self._dropout_layer(y, training=training)
        return (x if self.norm_first else norm(x)), extra

    @staticmethod
    def _attention_with_scores(attention, x, mask, with_scores, training):
        """`attention(x, x)` as `(y, scores)`, the scores None unless
        `with_scores`: a call that asks for none leaves `MultiHead` its
        fused path."""
        if with_scores:
            return attention(
                x, x, attention_mask=mask, return_attention_scores=True, training=training
            )
        return attention(x, x, attention_mask=mask, training=training), None

    def _head_dim(self, owner, width):
        if self.key_dim is not None:
            return self.key_dim
        if width % self.num_heads:
            raise ValueError(
                f"{owner}: `num_heads` must divide the model width so that each "
                f"head gets width/num_heads features; received num_heads="
                f"{self.num_heads} for width {width}. Pass `key_dim` to choose "
                "the head width yourself."
            )
        return width // self.num_heads

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "key_dim": self.key_dim,
            "dropout": self.dropout,
            "activation": keras.activations.serialize(self.activation),
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "num_key_value_heads": self.num_key_value_heads,
            "position_encoding": self.position_encoding,
            "sliding_window": self.sliding_window,
            "max_relative_position": self.max_relative_position,
        }


@register
class TransformerEncoderLayer(_TransformerLayer):
    """One Transformer encoder layer.

        x = LayerNorm(x + MultiHead(x, x, x))      (self-attention)
        x = LayerNorm(x + FFN(x))                  (feed-forward)

    the seeds' `Stage2_out = layer_normalization(multihead_attention(Stage1_out)
    + Stage1_out)`, `Stage3_out = layer_normalization(FFN(Stage2_out) +
    Stage2_out)`. With `norm_first=True` each block is
    `x = x + Sublayer(LayerNorm(x))` (pre-norm, easier to train deep).

    Args:
        num_heads: int, number of attention heads.
        intermediate_dim: int, hidden width of the FFN.
        key_dim: int, head width (default: model width / num_heads).
        dropout: float, dropout on attention weights and sublayer outputs.
        activation: FFN activation (default relu).
        norm_first: bool, pre-norm instead of post-norm.
        layer_norm_epsilon: float.
        num_key_value_heads, position_encoding, sliding_window, max_relative_position:
            `MultiHead`'s variants, for the self-attention (the decoder's cross-attention takes
            `num_key_value_heads` only; see `MultiHead`).

    Call arguments:
        inputs: `(B, T, D)`.
        padding_mask: optional boolean `(B, T)`; defaults to the Keras mask
            of `inputs`.
        attention_mask: optional boolean `(B, T, T)`.
        return_attention_scores: also return the weights `(B, H, T, T)`.
        training: bool.

    Returns:
        `(B, T, D)`, or `(output, scores)`.
    """

    def build(self, inputs_shape):
        owner = "TransformerEncoderLayer"
        check_rank("inputs", inputs_shape, (3,), owner, "(B, T, D)")
        policy = self.dtype_policy
        self.self_attention = self._attention(
            self._head_dim(owner, inputs_shape[-1]), "self_attention"
        )
        self.self_attention.build(inputs_shape, inputs_shape)
        self.self_attention_norm = self._make_norm("self_attention_norm", inputs_shape)
        self.feed_forward = FeedForward(
            self.intermediate_dim, self.activation, self.dropout, dtype=policy, name="feed_forward"
        )
        self.feed_forward.build(inputs_shape)
        self.feed_forward_norm = self._make_norm("feed_forward_norm", inputs_shape)
        self._dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        check_float_input("inputs", inputs, "TransformerEncoderLayer")
        if padding_mask is None:
            padding_mask = masking.keras_mask(inputs)
        mask = masking.merge_masks(
            inputs, inputs, None, padding_mask, attention_mask, False, "TransformerEncoderLayer"
        )

        def attention(x):
            return self._attention_with_scores(
                self.self_attention, x, mask, return_attention_scores, training
            )

        x, scores = self._residual(inputs, self.self_attention_norm, attention, training)
        x, _ = self._residual(
            x,
            self.feed_forward_norm,
            lambda h: (self.feed_forward(h, training=training), None),
            training,
        )
        return (x, scores) if return_attention_scores else x

    def compute_mask(self, inputs, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(self, inputs, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        b, t = inputs.shape[0], inputs.shape[1]
        return output, keras.KerasTensor((b, self.num_heads, t, t), dtype=self.compute_dtype)


@register
class TransformerDecoderLayer(_TransformerLayer):
    """One Transformer decoder layer.

        x = LayerNorm(x + MultiHead(x, x, x, causal))          (masked self-attention)
        x = LayerNorm(x + MultiHead(x, enc, enc))              (cross-attention)
        x = LayerNorm(x + FFN(x))                              (feed-forward)

    (pre-norm with `norm_first=True`). Without `encoder_sequence` the layer
    is a decoder-only block (no cross-attention).

    Incremental decoding: `cache = layer.init_cache(batch_size, max_length,
    encoder_sequence)` projects the encoder once; then
    `output, cross_scores, cache = layer.step(x, cache, cache_index,
    encoder_padding_mask)` decodes positions `cache_index .. cache_index +
    Tx - 1` and equals the full causal pass.

    Args: as `TransformerEncoderLayer`.

    Call arguments:
        decoder_sequence: `(B, T, D)`.
        encoder_sequence: optional `(B, S, De)`.
        decoder_padding_mask: optional `(B, T)` (default: Keras mask).
        encoder_padding_mask: optional `(B, S)` (default: Keras mask).
        use_causal_mask: bool, default True.
        return_attention_scores: also return a dict with
            `"self_attention"` `(B, H, T, T)` and, with an encoder,
            `"cross_attention"` `(B, H, T, S)`.
        training: bool.

    Returns:
        `(B, T, D)`, or `(output, scores_dict)`.
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        owner = "TransformerDecoderLayer"
        check_rank("decoder_sequence", decoder_sequence_shape, (3,), owner, "(B, T, D)")
        policy = self.dtype_policy
        shape = decoder_sequence_shape
        head_dim = self._head_dim(owner, shape[-1])
        self.self_attention = self._attention(head_dim, "self_attention")
        self.self_attention.build(shape, shape)
        self.self_attention_norm = self._make_norm("self_attention_norm", shape)
        self.cross_attention = None
        if encoder_sequence_shape is not None:
            check_rank("encoder_sequence", encoder_sequence_shape, (3,), owner, "(B, S, De)")
            self.cross_attention = self._attention(head_dim, "cross_attention", False)
            self.cross_attention.build(shape, encoder_sequence_shape)
            self.cross_attention_norm = self._make_norm("cross_attention_norm", shape)
        self.feed_forward = FeedForward(
            self.intermediate_dim, self.activation, self.dropout, dtype=policy, name="feed_forward"
        )
        self.feed_forward.build(shape)
        self.feed_forward_norm = self._make_norm("feed_forward_norm", shape)
        self._dropout_layer = keras.layers.Dropout(self.dropout, dtype=policy)
        self.built = True

    def _check_encoder(self, encoder_sequence):
        if (encoder_sequence is None) != (self.cross_attention is None):
            built = "with" if self.cross_attention is not None else "without"
            given = "no" if encoder_sequence is None else "an"
            raise ValueError(
                f"TransformerDecoderLayer was built {built} an encoder_sequence "
                f"(cross-attention) but was called with {given} encoder_sequence."
            )

    def _blocks(
        self, x, self_attention, encoder_kv, encoder_mask, training, with_cross_scores=True
    ):
        """The three residual blocks; `self_attention(h) -> (y, scores)`; the
        cross-attention scores are None unless `with_cross_scores`."""
        x, self_scores = self._residual(x, self.self_attention_norm, self_attention, training)
        cross_scores = None
        if self.cross_attention is not None:

            def cross(h):
                return self.cross_attention.attend(
                    h, *encoder_kv, encoder_mask, training, return_weights=with_cross_scores
                )

            x, cross_scores = self._residual(x, self.cross_attention_norm, cross, training)
        x, _ = self._residual(
            x,
            self.feed_forward_norm,
            lambda h: (self.feed_forward(h, training=training), None),
            training,
        )
        return x, self_scores, cross_scores

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
    ):
        owner = "TransformerDecoderLayer"
        check_float_input("decoder_sequence", decoder_sequence, owner)
        if encoder_sequence is not None:
            check_float_input("encoder_sequence", encoder_sequence, owner)
        self._check_encoder(encoder_sequence)
        if decoder_padding_mask is None:
            decoder_padding_mask = masking.keras_mask(decoder_sequence)
        self_mask = masking.merge_masks(
            decoder_sequence,
            decoder_sequence,
            None,
            decoder_padding_mask,
            None,
            use_causal_mask,
            owner,
        )
        encoder_kv, encoder_mask = None, None
        if encoder_sequence is not None:
            if encoder_padding_mask is None:
                encoder_padding_mask = masking.keras_mask(encoder_sequence)
            encoder_mask = masking.merge_masks(
                decoder_sequence, encoder_sequence, None, encoder_padding_mask, None, False, owner
            )
            encoder_kv = self.cross_attention.project_key_value(encoder_sequence)

        def self_attention(h):
            return self._attention_with_scores(
                self.self_attention, h, self_mask, return_attention_scores, training
            )

        x, self_scores, cross_scores = self._blocks(
            decoder_sequence,
            self_attention,
            encoder_kv,
            encoder_mask,
            training,
            return_attention_scores,
        )
        if not return_attention_scores:
            return x
        scores = {"self_attention": self_scores}
        if cross_scores is not None:
            scores["cross_attention"] = cross_scores
        return x, scores

    def init_cache(self, batch_size, max_length, encoder_sequence=None):
        """Cache for `step`: empty self-attention keys/values for
        `max_length` positions and, with an encoder, its projected keys and
        values (computed once here). A dict of tensors, batch-major, so
        `tree.map_structure(lambda t: ops.take(t, order, 0), cache)`
        reorders it along the batch (beam search)."""
        check_built(self, "init_cache")
        self._check_encoder(encoder_sequence)
        key, value = self.self_attention.init_cache(batch_size, max_length)
        cache = {"self_key": key, "self_value": value}
        if encoder_sequence is not None:
            cache["cross_key"], cache["cross_value"] = self.cross_attention.project_key_value(
                encoder_sequence
            )
        return cache

    def step(self, inputs, cache, cache_index, encoder_padding_mask=None, training=None):
        """Decode positions `cache_index .. cache_index + Tx - 1`.

        Returns `(output (B, Tx, D), cross_scores (B, H, Tx, S) or None,
        cache)`."""
        inputs = ops.cast(inputs, self.compute_dtype)
        new_cache = dict(cache)

        def self_attention(h):
            output, weights, (key, value) = self.self_attention.step(
                h,
                (cache["self_key"], cache["self_value"]),
                cache_index,
                training=training,
                return_weights=False,  # not returned by `step`: lets the fused path run
            )
            new_cache["self_key"], new_cache["self_value"] = key, value
            return output, weights

        encoder_kv, encoder_mask = None, None
        if self.cross_attention is not None:
            encoder_kv = (cache["cross_key"], cache["cross_value"])
            if encoder_padding_mask is not None:
                encoder_mask = ops.expand_dims(
                    masking.as_boolean(
                        encoder_padding_mask, "encoder_padding_mask", "TransformerDecoderLayer.step"
                    ),
                    1,
                )
        x, _, cross_scores = self._blocks(
            inputs, self_attention, encoder_kv, encoder_mask, training
        )
        return x, cross_scores, new_cache

    def compute_mask(self, decoder_sequence, previous_mask=None):
        return previous_mask

    def compute_output_shape(self, decoder_sequence_shape, encoder_sequence_shape=None):
        return tuple(decoder_sequence_shape)

    def compute_output_spec(
        self, decoder_sequence, encoder_sequence=None, return_attention_scores=False, **kwargs
    ):
        output = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        b, t = decoder_sequence.shape[0], decoder_sequence.shape[1]
        scores = {
            "self_attention": keras.KerasTensor((b, self.num_heads, t, t), dtype=self.compute_dtype)
        }
        if encoder_sequence is not None:
            s = encoder_sequence.shape[1]
            scores["cross_attention"] = keras.KerasTensor(
                (b, self.num_heads, t, s), dtype=self.compute_dtype
            )
        return output, scores
