"""Learning-rate schedules of the encoder-decoders."""

import keras
from keras import ops

from keras_attention.validation import check_finite, check_positive_int


@keras.saving.register_keras_serializable(package="keras_attention")
class InverseSquareRootSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then decay with the inverse square root of the step.

        lr(s) = peak · min(s / w, sqrt(w / s)),   s = step + 1

    the schedule of Vaswani et al. (2017, Sec. 5.3) written with its peak
    rate: it reaches `peak_learning_rate` at step `w = warmup_steps` (their
    `d^-0.5 · w^-0.5`), rises linearly to it and falls as `s^-0.5` after.
    Small models on small data tolerate a higher peak with warm-up than a
    constant rate without it.

    >>> schedule = InverseSquareRootSchedule(1e-3, warmup_steps=100)
    >>> [round(float(schedule(s)), 6) for s in (0, 49, 99, 399)]
    [1e-05, 0.0005, 0.001, 0.0005]
    """

    def __init__(self, peak_learning_rate, warmup_steps):
        check_finite(
            "peak_learning_rate",
            peak_learning_rate,
            "InverseSquareRootSchedule",
            low=0.0,
            expected="a finite number > 0",
        )
        warmup_steps = check_positive_int("warmup_steps", warmup_steps, "InverseSquareRootSchedule")
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        return self.peak_learning_rate * ops.minimum(step / warmup, ops.sqrt(warmup / step))

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps}
