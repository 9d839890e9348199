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
4. The logged loss is a mean over steps weighted by each replica's own
   batch size, of the replica's share times the replica count: right
   only when every replica holds as many examples. A batch the replicas
   split unevenly (bucketed batches of any size; a last, smaller batch)
   logged another loss than one replica did. `adapt_for_distribution`
   weights every replica's update by the global batch size, so that the
   logged loss is the one replica's, whatever the split.

Apart from these, `fit` makes a new distributed iterator over its
training data at each epoch's end, where `MultiWorkerMirroredStrategy`
workers can wait far longer than a training step;
`repeated_for_fit` gives `fit` a dataset that one iterator serves for
every epoch.
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


def _weigh_by_global_batch(tracker):
    """Make the loss tracker (a `Mean`) weigh each replica's update by the
    global batch size (the sum of the replicas' weights) instead of the
    replica's own: the weighted sum of the replicas' shares, each times
    the replica count, over that count, is then the global batch's loss."""
    import tensorflow as tf

    update = tracker.update_state

    def update_state(values, sample_weight=None):
        if sample_weight is not None:
            sample_weight = _global_token_count(tf.cast(sample_weight, "float32"))
        return update(values, sample_weight=sample_weight)

    object.__setattr__(tracker, "update_state", update_state)  # this tracker only


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
        if getattr(model, "_loss_tracker", None) is not None:
            _weigh_by_global_batch(model._loss_tracker)
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


def repeated_for_fit(model, dataset):
    """`(data, steps_per_epoch)` for `model.fit`: under several workers,
    `dataset` repeated, with its length in batches as an epoch's steps,
    so that `fit` keeps one iterator for all epochs (each pass over the
    repeated dataset is a new iteration of `dataset`: a shuffle with
    `reshuffle_each_iteration` draws a new order, as for a new iterator);
    otherwise, or when the length is unknown, `(dataset, None)`."""
    if keras.backend.backend() != "tensorflow":
        return dataset, None
    strategy = model.distribute_strategy
    if not strategy.extended._in_multi_worker_mode():
        return dataset, None
    batches = int(dataset.cardinality())
    if batches <= 0:  # unknown, infinite or empty: as given
        return dataset, None
    return dataset.repeat(), batches
