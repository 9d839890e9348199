"""The training loss of the encoder-decoders (token cross-entropy that
ignores padding, with optional label smoothing) and the metrics reported
beside it: token accuracy and perplexity, padding excluded."""

import keras
from keras import ops

from keras_attention.validation import check_rate


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedCrossEntropy(keras.losses.Loss):
    """Token cross-entropy that ignores padding, with optional label smoothing.

        L = -(1/N) Σ_{t: y_t ≠ pad} Σ_v q_t(v) log p_t(v)
        q_t = (1 - ε) onehot(y_t) + ε / V

    averaged over the N non-padding target tokens of the batch (so a batch
    of long sentences and one of short ones weigh each token alike).

    Under data parallelism N must be the token count of the *global* batch:
    each replica then returns its share, Keras sums the replicas' gradients
    into exactly the global-batch gradient, and the logged loss is the
    global mean. `global_count` (set by
    `keras_attention.training.distribute.adapt_for_distribution` on
    TensorFlow) maps the replica's count to the global one; without it,
    each of R replicas would return its own mean and Keras, which expects
    losses already divided by R, would train and log R times the loss.

    Args:
        padding_id: target id that is ignored.
        label_smoothing: ε in [0, 1).
        name: loss name.

    Call arguments:
        y_true: int `(B, T)` target ids (`target_out`).
        y_pred: `(B, T, V)` logits.

    Returns:
        A float32 scalar.

    Example:

    >>> loss = MaskedCrossEntropy()
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    >>> round(float(loss(np.array([[1, 0]]), logits)), 4)  # only the first token counts
    1.3863

    References:
        Szegedy et al., "Rethinking the Inception Architecture for Computer
        Vision" (2016), Sec. 7 (label smoothing).
    """

    def __init__(self, padding_id=0, label_smoothing=0.0, name="masked_cross_entropy", **kwargs):
        # The mean over real tokens is done in `call`; Keras's own reduction
        # must then only sum the scalar.
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)
        label_smoothing = check_rate("label_smoothing", label_smoothing, "MaskedCrossEntropy")
        self.padding_id = padding_id
        self.label_smoothing = label_smoothing
        self.global_count = None  # replica token count -> global batch count

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")  # (B, T, V)
        # -log p(v) = logsumexp(z) - z_v, so with q = (1 - ε) onehot(y) + ε / V
        #   -Σ_v q(v) log p(v) = logsumexp(z) - (1 - ε) z_y - ε mean_v(z).
        # z_y is taken as Σ_v [v = y] z_v: its gradient is a select, where
        # a gather's would be a segment sum over all (B, T, V) entries, and
        # no (B, T, V) log-probabilities are kept (both weigh on a CPU
        # training step, and TensorFlow's fused sparse cross-entropy weighs
        # more: BENCHMARKS.md, "Where the demo's training time goes").
        vocab = ops.shape(logits)[-1]
        is_target = ops.equal(ops.arange(vocab, dtype="int32"), y_true[..., None])  # (B, T, V)
        target = ops.sum(ops.where(is_target, logits, 0.0), axis=-1)  # finite for -inf logits
        token_loss = ops.logsumexp(logits, axis=-1) - (1.0 - self.label_smoothing) * target
        if self.label_smoothing:
            token_loss = token_loss - self.label_smoothing * ops.mean(logits, axis=-1)  # (B, T)
        mask = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")
        count = ops.sum(mask)
        if self.global_count is not None:
            count = self.global_count(count)
        return ops.sum(token_loss * mask) / ops.maximum(count, 1.0)

    def get_config(self):
        return {
            "name": self.name,
            "padding_id": self.padding_id,
            "label_smoothing": self.label_smoothing,
        }


class _MaskedTokenMetric(keras.metrics.Metric):
    """A ratio `total / count` accumulated over every batch since the last
    reset, where each non-padding target token adds its value to `total`
    and its weight to `count` (so an epoch's result weighs every token
    alike, whatever the batch lengths). Subclasses give `token_values`."""

    def __init__(self, padding_id=0, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.padding_id = padding_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def token_values(self, y_true, logits):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.cast(y_true, "int32")
        values = self.token_values(y_true, ops.cast(y_pred, "float32"))  # (B, T)
        weights = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")  # (B, T)
        if sample_weight is not None:
            sample_weight = ops.cast(sample_weight, "float32")
            if len(ops.shape(sample_weight)) == 1:
                sample_weight = sample_weight[:, None]  # (B, 1): one weight per sentence
            weights = weights * sample_weight
        self.total.assign_add(ops.cast(ops.sum(values * weights), self.dtype))
        self.count.assign_add(ops.cast(ops.sum(weights), self.dtype))

    def mean(self):
        return self.total / ops.maximum(self.count, 1.0)

    def result(self):
        return self.mean()

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype, "padding_id": self.padding_id}


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedAccuracy(_MaskedTokenMetric):
    """The share of non-padding target tokens the model ranks first.

        accuracy = Σ_{t: y_t ≠ pad} [argmax_v z_t(v) = y_t] / N

    over the N non-padding tokens of every batch since the last reset
    (teacher-forced: each step sees the reference prefix).

    Args:
        padding_id: target id that is ignored.
        name: metric name (`token_accuracy`: Keras's own `accuracy`
            would count padding).
        dtype: the accumulators' dtype.

    Call arguments:
        y_true: int `(B, T)` target ids (`target_out`).
        y_pred: `(B, T, V)` logits.
        sample_weight: optional `(B,)` or `(B, T)` weights multiplying
            each token's share.

    Example:

    >>> metric = MaskedAccuracy()
    >>> logits = np.log(np.array([[[0.1, 0.8, 0.1], [0.6, 0.2, 0.2], [0.5, 0.1, 0.4]]]))
    >>> metric.update_state(np.array([[1, 2, 0]]), logits)  # right, wrong, padding
    >>> float(metric.result())
    0.5
    """

    def __init__(self, padding_id=0, name="token_accuracy", dtype=None):
        super().__init__(padding_id=padding_id, name=name, dtype=dtype)

    def token_values(self, y_true, logits):
        predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")  # (B, T)
        return ops.cast(ops.equal(predicted, y_true), "float32")


@keras.saving.register_keras_serializable(package="keras_attention")
class MaskedPerplexity(_MaskedTokenMetric):
    """Perplexity of the non-padding target tokens: the exponential of
    their mean cross-entropy, *without* label smoothing.

        perplexity = exp( -(1/N) Σ_{t: y_t ≠ pad} log p_t(y_t) )

    over the N non-padding tokens of every batch since the last reset. A
    label-smoothed training loss is not a log-likelihood (it adds ε times
    the cross-entropy against the uniform distribution), so its exponential
    is not the perplexity: this metric computes the plain cross-entropy
    itself.

    Args:
        padding_id: target id that is ignored.
        name: metric name.
        dtype: the accumulators' dtype.

    Call arguments:
        y_true: int `(B, T)` target ids (`target_out`).
        y_pred: `(B, T, V)` logits.
        sample_weight: optional `(B,)` or `(B, T)` weights multiplying
            each token's share.

    Example:

    >>> metric = MaskedPerplexity()
    >>> logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    >>> metric.update_state(np.array([[1, 0]]), logits)  # one token, p = 1/4
    >>> round(float(metric.result()), 4)
    4.0
    """

    def __init__(self, padding_id=0, name="perplexity", dtype=None):
        super().__init__(padding_id=padding_id, name=name, dtype=dtype)

    def token_values(self, y_true, logits):
        # -log p(y) = logsumexp(z) - z_y: a gather (no gradient is taken of
        # a metric), and no (B, T, V) log-probabilities.
        target = ops.take_along_axis(logits, y_true[..., None], axis=-1)[..., 0]
        return ops.logsumexp(logits, axis=-1) - target  # (B, T)

    def result(self):
        return ops.exp(self.mean())
