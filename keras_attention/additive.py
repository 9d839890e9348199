"""Additive scores: Bahdanau attention and concatenation (MLP) attention."""

import keras
from keras import ops

from keras_attention import quantization, registry
from keras_attention.base import ScoreAttention
from keras_attention.validation import check_positive_int, is_integer

register = keras.saving.register_keras_serializable(package="keras_attention")


@registry.register("additive")
@register
class AdditiveAttention(quantization.Int8Kernels, ScoreAttention):
    """Additive attention of Bahdanau et al., with its learned projections.

        e_ij = vᵀ tanh(W_q q_i + W_k k_j + b)
        a_ij = softmax_j(e_ij),   o_i = sum_j a_ij v_j

    `W_q ∈ R^{Dq×U}`, `W_k ∈ R^{Dk×U}`, `b, v ∈ R^U` are learned (unlike
    `keras.layers.AdditiveAttention`, which has no projections). With
    `normalize=True`, `v` is weight-normalised as in Raffel et al.:
    `v = g · v̂ / ||v̂||` with a learned scalar `g` initialised to
    `sqrt(1/U)`.

    Args:
        units: int, width `U` of the hidden layer of the score (default:
            the query width `Dq`).
        normalize: bool, weight-normalise `v`.
        kernel_initializer: initializer of `W_q`, `W_k`, `v`.
        bias_initializer: initializer of `b`.
        dropout: float in [0, 1), dropout on the attention weights.
        seed: optional int, dropout seed.

    Call arguments and returns: see `ScoreAttention`.

    Example:

    >>> layer = AdditiveAttention(units=8)
    >>> tuple(layer(np.ones((2, 4)), np.ones((2, 5, 6))).shape)  # one decoder step
    (2, 6)

    References:
        Bahdanau et al., "Neural Machine Translation by Jointly Learning to
        Align and Translate" (2015); Raffel et al., "Online and Linear-Time
        Attention by Enforcing Monotonic Alignments" (2017).
    """

    def __init__(
        self,
        units=None,
        normalize=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        if units is not None:
            units = check_positive_int("units", units, "AdditiveAttention")
        self.units = units
        self.normalize = bool(normalize)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build_score(self, query_shape, key_shape):
        def weight(name, shape, initializer):
            return self.add_weight(name=name, shape=shape, initializer=initializer)

        units = self.units or query_shape[-1]
        self.query_kernel = weight(
            "query_kernel", (query_shape[-1], units), self.kernel_initializer
        )
        self.key_kernel = weight("key_kernel", (key_shape[-1], units), self.kernel_initializer)
        self.bias = weight("bias", (units,), self.bias_initializer)
        self.score_vector = weight("score_vector", (units,), self.kernel_initializer)
        if self.normalize:
            # Raffel et al. (2017), Sec. 2.5: g starts at sqrt(1/U).
            self.score_scale = weight(
                "score_scale", (), keras.initializers.Constant((1.0 / units) ** 0.5)
            )
        self.build_int8()

    def int8_kernels(self):
        # Per output channel (the U hidden units) of W_q and W_k; v stays float.
        return {"query_kernel": (0,), "key_kernel": (0,)}

    def effective_score_vector(self):
        """`v`, or `g · v / ||v||` when `normalize=True`."""
        v = self.score_vector
        if self.normalize:
            v = self.score_scale * v / ops.sqrt(ops.sum(ops.square(v)))
        return v

    def score(self, query, key):
        return self.score_prepared(query, self.prepare_key(key))

    def prepare_key(self, key):
        """`W_k k_j + b`, `(B, Tv, U)`."""
        dtype = key.dtype
        weight, scale = quantization.kernel(self, "key_kernel", dtype)
        return quantization.rescale(ops.matmul(key, weight), scale) + ops.cast(self.bias, dtype)

    def score_prepared(self, query, prepared_key):
        dtype = query.dtype
        weight, scale = quantization.kernel(self, "query_kernel", dtype)
        q = quantization.rescale(ops.matmul(query, weight), scale)  # (B, Tq, U)
        k = ops.cast(prepared_key, dtype)  # (B, Tv, U)
        hidden = ops.tanh(ops.expand_dims(q, 2) + ops.expand_dims(k, 1))  # (B, Tq, Tv, U)
        return ops.matmul(hidden, ops.cast(self.effective_score_vector(), dtype))  # (B, Tq, Tv)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "normalize": self.normalize,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }


@registry.register("concat")
@register
class ConcatAttention(ScoreAttention):
    """Concatenation attention: a small MLP scores each `[key; query]` pair.

        h⁰_ij = [k_j; q_i]
        hˡ_ij = f(Wˡ h^{l-1}_ij + bˡ)        l = 1..L  (hidden_units)
        e_ij  = w_oᵀ h^L_ij + b_o
        a_ij  = softmax_j(e_ij),   o_i = sum_j a_ij v_j

    The seeds' two-layer form is `hidden_units=(n,)`, `activation="tanh"`:
    `A⁴(t) = tansig(LW^{4,2} Ā^{1,2}(t) + b⁴)`, `N⁵(t) = LW^{5,4} A⁴(t) + b⁵`.
    The first kernel `W¹ ∈ R^{(Dk+Dq)×n₁}` is stored whole (key rows first),
    but applied as `W¹_k k_j + W¹_q q_i`, so the `(B, Tq, Tv, Dk+Dq)`
    concatenation is never materialised.

    Args:
        hidden_units: tuple of ints, widths of the hidden layers (>= 1
            layer); default one layer of the query width, `(Dq,)`.
        activation: activation `f` of the hidden layers.
        kernel_initializer, bias_initializer: of every layer.
        dropout: float in [0, 1), dropout on the attention weights.
        seed: optional int, dropout seed.

    Call arguments and returns: see `ScoreAttention`.

    Example:

    >>> layer = ConcatAttention(hidden_units=(16, 8))
    >>> tuple(layer(np.ones((2, 3, 4)), np.ones((2, 5, 6))).shape)
    (2, 3, 6)

    References:
        Luong et al., "Effective Approaches to Attention-based Neural Machine
        Translation" (2015), Sec. 3.1 ("concat"); Bahdanau et al., "Neural
        Machine Translation by Jointly Learning to Align and Translate"
        (2015).
    """

    def __init__(
        self,
        hidden_units=None,
        activation="tanh",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        if hidden_units is not None:
            if is_integer(hidden_units) or not hidden_units:
                raise ValueError(
                    "`hidden_units` of ConcatAttention must be a non-empty tuple of "
                    f"positive ints, e.g. (16,); received hidden_units={hidden_units!r}."
                )
            hidden_units = tuple(
                check_positive_int("hidden_units", units, "ConcatAttention")
                for units in hidden_units
            )
        self.hidden_units = hidden_units
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build_score(self, query_shape, key_shape):
        self.key_dim = key_shape[-1]
        hidden_units = self.hidden_units or (query_shape[-1],)
        widths = (key_shape[-1] + query_shape[-1],) + hidden_units + (1,)
        self.kernels, self.biases = [], []
        for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            self.kernels.append(
                self.add_weight(
                    name=f"kernel_{layer}",
                    shape=(fan_in, fan_out),
                    initializer=self.kernel_initializer,
                )
            )
            self.biases.append(
                self.add_weight(
                    name=f"bias_{layer}",
                    shape=(fan_out,),
                    initializer=self.bias_initializer,
                )
            )

    def score(self, query, key):
        return self.score_prepared(query, self.prepare_key(key))

    def prepare_key(self, key):
        """The keys' share of the first layer, `W¹_k k_j + b¹`, `(B, Tv, n1)`."""
        dtype = key.dtype
        kernel = ops.cast(self.kernels[0], dtype)[: self.key_dim]
        return ops.matmul(key, kernel) + ops.cast(self.biases[0], dtype)

    def score_prepared(self, query, prepared_key):
        dtype = query.dtype
        kernels = [ops.cast(w, dtype) for w in self.kernels]
        biases = [ops.cast(b, dtype) for b in self.biases]
        k = ops.cast(prepared_key, dtype)  # (B, Tv, n1)
        q = ops.matmul(query, kernels[0][self.key_dim :])  # (B, Tq, n1)
        hidden = self.activation(ops.expand_dims(q, 2) + ops.expand_dims(k, 1))  # (B, Tq, Tv, n1)
        for kernel, bias in zip(kernels[1:-1], biases[1:-1]):
            hidden = self.activation(ops.matmul(hidden, kernel) + bias)  # (B, Tq, Tv, nl)
        scores = ops.matmul(hidden, kernels[-1]) + biases[-1]  # (B, Tq, Tv, 1)
        return ops.squeeze(scores, -1)  # (B, Tq, Tv)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_units": None if self.hidden_units is None else list(self.hidden_units),
            "activation": keras.activations.serialize(self.activation),
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
