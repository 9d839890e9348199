"""What a model needs to `fit` correctly on several replicas (TensorFlow's
`MirroredStrategy` on GPUs, `MultiWorkerMirroredStrategy` across machines)
with Keras 3.15, applied to one model instance, on the TensorFlow backend
only, so the model classes stay backend-neutral.

1. A loss that averages over its own tokens (`MaskedCrossEntropy`) must
   divide by the token count of the global batch: Keras sums the
   replicas' gradients and multiplies the logged per-replica loss by the
   replica count, expecting each replica to return its share. With each
   replica's own mean, R replicas trained with R times the gradient
   (weighted per replica, not per token) and logged R times the loss.
   `adapt_for_distribution` gives the loss an all-reduce of the count.
2. Keras's TF trainer averages each step's logs across workers with
   `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars
   ("Invalid reduction dimension 0 for input with 0 dimensions",
   tensorflow#72388). Logs of shape (1,) reduce to the same mean.
3. Before the first step the trainer averages the first batch across
   replicas (its symbolic build), which fails on nested integer batches.
   A model whose weights and optimizer are built has nothing to build, so
   that step is skipped.
"""

import keras


def in_multi_worker_mode():
    """True when the current `tf.distribute` strategy spans several workers."""
    if keras.backend.backend() != "tensorflow":
        return False
    import tensorflow as tf

    return tf.distribute.get_strategy().extended._in_multi_worker_mode()


def _global_token_count(count):
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return count
    # The count only scales the loss: no gradient flows through it.
    return context.all_reduce("SUM", tf.stop_gradient(count))


def adapt_for_distribution(model):
    """Make `model.fit`/`evaluate` correct on several replicas and working
    under MultiWorkerMirroredStrategy.

    A no-op with one replica and on other backends. Call it after
    `compile`, inside the strategy's scope; returns the model.
    """
    if keras.backend.backend() != "tensorflow":
        return model
    import tensorflow as tf

    from keras_attention.seq2seq.losses import MaskedCrossEntropy

    if tf.distribute.get_strategy().num_replicas_in_sync > 1:
        for loss in keras.tree.flatten(model.loss):
            if isinstance(loss, MaskedCrossEntropy):
                loss.global_count = _global_token_count
    if not in_multi_worker_mode():
        return model

    cls = type(model)

    def as_vectors(logs):
        return {name: tf.reshape(value, (1,)) for name, value in logs.items()}

    def train_step(data):
        return as_vectors(cls.train_step(model, data))

    def test_step(data):
        return as_vectors(cls.test_step(model, data))

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if model.built and model.optimizer is not None and model.optimizer.built:
            return None
        return cls._maybe_symbolic_build(model, iterator=iterator, data_batch=data_batch)

    # Instance attributes: Keras's trainer looks these methods up on the
    # model, so only this model changes.
    object.__setattr__(model, "train_step", train_step)
    object.__setattr__(model, "test_step", test_step)
    object.__setattr__(model, "_maybe_symbolic_build", maybe_symbolic_build)
    return model
