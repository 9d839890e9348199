"""The replicas `train` fits on (`choose_strategy`): on TensorFlow, a
`tf.distribute` strategy (multi-worker in a `TF_CONFIG` cluster, mirrored
over several local GPUs, else the default); on JAX and PyTorch, Keras's
own distribution (`KerasReplicas`: data parallel over the local devices
on JAX, one device otherwise).

Either answers what `train` asks of it: `num_replicas_in_sync` and a
`scope()` to build the model in.
"""

import contextlib

import keras

from .cluster import bounded_wait, cluster_task, worker_wait_seconds


def choose_strategy():
    """The replicas of this process: `tf.distribute`'s on TensorFlow
    (`MultiWorkerMirroredStrategy` in a `TF_CONFIG` cluster, whose creation
    waits for the other tasks at most `worker_wait_seconds`:
    `bounded_wait`; `MirroredStrategy` on several GPUs; else the default),
    `KerasReplicas` on the other backends."""
    if keras.config.backend() != "tensorflow":
        return KerasReplicas()
    import tensorflow as tf

    task = cluster_task()
    if task is not None:
        tasks = sum(len(addresses) for addresses in task.cluster.values())
        what = f"the other {tasks - 1} task(s) of the cluster to connect ({task.type} {task.index})"
        with bounded_wait(what, worker_wait_seconds()):
            return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


class KerasReplicas:
    """Data parallelism through `keras.distribution`, on JAX: with several
    local devices (GPUs; or CPU devices that XLA was told to make,
    `--xla_force_host_platform_device_count`), a `DataParallel`
    distribution over all of them is set for the process, so that each
    batch is split across the devices and the weights are replicated (one
    program: the loss and its gradient are the global batch's, with no
    per-replica correction). One device, or another backend: one replica.

    A batch's examples must divide among the devices: the training batches
    are padded with empty pairs to a multiple of `num_replicas_in_sync`
    (`ShardBatches(replicas=...)`), which the masked loss does not count.
    """

    def __init__(self, devices=None):
        if devices is None:
            devices = keras.distribution.list_devices() if keras.config.backend() == "jax" else []
        self.devices = list(devices) if len(devices) > 1 else []
        self.num_replicas_in_sync = max(1, len(self.devices))
        if self.devices:
            keras.distribution.set_distribution(
                keras.distribution.DataParallel(devices=self.devices)
            )

    def scope(self):
        """Where the model is built: the distribution is the process's."""
        return contextlib.nullcontext()
