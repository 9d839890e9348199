"""The training loss of the encoder-decoders: token cross-entropy that
ignores padding, with optional label smoothing."""

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
    `keras_attention.serving.distribute.adapt_for_distribution` on
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
        check_rate("label_smoothing", label_smoothing, "MaskedCrossEntropy")
        self.padding_id = padding_id
        self.label_smoothing = label_smoothing
        self.global_count = None  # replica token count -> global batch count

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        logits = ops.cast(y_pred, "float32")  # (B, T, V)
        if self.label_smoothing:
            # -Σ_v q(v) log p(v) = (1 - ε)(-log p(y)) + ε · mean_v(-log p(v)),
            # without the (B, T, V) one-hot q.
            smoothing = self.label_smoothing
            log_probs = ops.log_softmax(logits, axis=-1)  # (B, T, V)
            picked = ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1)
            token_loss = -(1.0 - smoothing) * picked[..., 0] - smoothing * ops.mean(
                log_probs, axis=-1
            )  # (B, T)
        else:
            # One fused op on TensorFlow (softmax, loss and its gradient).
            token_loss = ops.sparse_categorical_crossentropy(y_true, logits, from_logits=True)
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
