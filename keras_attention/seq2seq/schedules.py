"""Learning-rate schedules of the encoder-decoders."""

import math

import keras
from keras import ops

from keras_attention.validation import check_finite, check_positive_int, is_integer


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


@keras.saving.register_keras_serializable(package="keras_attention")
class PlannedCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then half a cosine to 0 at a last step that can move.

        lr(s) = peak · s / w                                    s < w
        lr(s) = peak · (1 + cos(π · min(1, (s - w) / (S - w)))) / 2    s >= w

    Keras's `CosineDecay` with `warmup_steps=w` and `decay_steps=S - w`,
    except that S, `total_steps`, is a variable: a training run that learns
    only as it goes how many steps it has (a time budget, see the recipe's
    `train --time-budget`) assigns it, and the rest of the cosine follows.
    The rate of steps already taken is not recomputed. Saved with the value
    S has at the time.

    >>> schedule = PlannedCosineDecay(1e-3, warmup_steps=10, total_steps=110)
    >>> [round(float(schedule(s)), 6) for s in (5, 10, 60, 110)]
    [0.0005, 0.001, 0.0005, 0.0]
    >>> _ = schedule.total_steps.assign(60.0)  # fewer steps fit than planned
    >>> round(float(schedule(35)), 6)
    0.0005
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps):
        owner = "PlannedCosineDecay"
        self.peak_learning_rate = check_finite(
            "peak_learning_rate", peak_learning_rate, owner, low=0.0, expected="a number > 0"
        )
        if not is_integer(warmup_steps) or warmup_steps < 0:
            raise ValueError(
                f"`warmup_steps` of {owner} must be an integer >= 0; received "
                f"warmup_steps={warmup_steps!r}."
            )
        self.warmup_steps = int(warmup_steps)
        total = check_finite("total_steps", total_steps, owner, low=0.0, expected="a number > 0")
        self.total_steps = keras.Variable(
            total, dtype="float32", trainable=False, name="planned_total_steps"
        )

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = float(self.warmup_steps)
        rising = self.peak_learning_rate * step / max(warmup, 1.0)
        span = ops.maximum(self.total_steps - warmup, 1.0)
        progress = ops.clip((step - warmup) / span, 0.0, 1.0)
        falling = 0.5 * self.peak_learning_rate * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < warmup, rising, falling)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": float(ops.convert_to_numpy(self.total_steps)),
        }


@keras.saving.register_keras_serializable(package="keras_attention")
class PerUpdateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A schedule of optimizer updates for an optimizer that accumulates
    gradients over K batches.

        lr(step) = schedule(floor(step / K))

    A Keras optimizer with `gradient_accumulation_steps=K` updates the
    weights every K batches but calls its schedule with the batches seen
    (its `_iterations`), while its `iterations`, and Adam's bias correction,
    count updates. Wrapped, the schedule counts updates too: its warm-up
    and decay steps are updates, and every update reads the rate a run
    without accumulation reads at that update (fairseq's `--update-freq`).

    Args:
        schedule: a `LearningRateSchedule` (or its config) counting updates.
        update_freq: int K >= 1, the batches of one update.

    >>> schedule = PerUpdateSchedule(InverseSquareRootSchedule(1e-3, 100), update_freq=4)
    >>> [round(float(schedule(s)), 6) for s in (0, 3, 4, 399)]
    [1e-05, 1e-05, 2e-05, 0.001]
    """

    def __init__(self, schedule, update_freq):
        if isinstance(schedule, dict):
            schedule = keras.saving.deserialize_keras_object(schedule)
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError(
                "`schedule` of PerUpdateSchedule must be a LearningRateSchedule; received "
                f"schedule={schedule!r}."
            )
        self.schedule = schedule
        self.update_freq = check_positive_int("update_freq", update_freq, "PerUpdateSchedule")

    def __call__(self, step):
        return self.schedule(ops.floor_divide(step, self.update_freq))

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "update_freq": self.update_freq,
        }
