"""`train --time-budget MINUTES`: training planned against the wall clock.

The budget is the time of `model.fit` from its first step to the end of its
last epoch (validation, BLEU monitoring and the backup included; the data,
the vocabularies, averaging and the final save are not). `--epochs` becomes
a ceiling. Three things follow the clock:

- the epochs: training ends at the first epoch end from which one more
  epoch (as long as the last one took) would overrun the budget; an epoch
  that overruns it anyway (a first epoch longer than the whole budget, a
  machine slowed down) ends at the step that does, and its validation
  still runs;
- the learning rate: with `--decay cosine` the cosine ends at the planned
  last step, planned after the first epoch (the number of epochs of its
  length that fit, within `--epochs`) and again after each epoch, so that a
  slower or faster machine still reaches the end of its cosine; the rsqrt
  decay has no end to plan;
- averaging and early stopping: `--average-last N` averages the last N
  epochs that ran, `--patience` may end the run earlier still.

The epochs' durations (and their losses and validation BLEU: a curve
against the clock, `bench/bleu_minutes.py`) are kept in
`<run>/budget.json` beside the backup, so an interrupted run resumes with
what it had spent. The run record
(`config.json`) says what fit: epochs, steps, seconds, and what ended it.
"""

import json
import math
import os
import time

import keras

from .. import runs

RECORD = "budget.json"


@keras.saving.register_keras_serializable(package="keras_attention_recipes")
class PlannedCosineDecay(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up to `peak` over `warmup` steps, then a cosine to 0 at
    `total_steps`, where `total_steps` is a variable the time budget moves
    as it learns how many steps fit (the rate of a step before a move is
    never recomputed). Saved with the value it has at the time."""

    def __init__(self, peak, warmup, total_steps):
        self.peak, self.warmup = float(peak), int(warmup)
        self.total_steps = keras.Variable(
            float(total_steps), dtype="float32", trainable=False, name="planned_total_steps"
        )

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = float(max(self.warmup, 1))
        rising = self.peak * step / warmup
        span = keras.ops.maximum(self.total_steps - self.warmup, 1.0)
        progress = keras.ops.clip((step - self.warmup) / span, 0.0, 1.0)
        falling = 0.5 * self.peak * (1.0 + keras.ops.cos(math.pi * progress))
        return keras.ops.where(step < self.warmup, rising, falling)

    def get_config(self):
        total = float(keras.ops.convert_to_numpy(self.total_steps))
        return {"peak": self.peak, "warmup": self.warmup, "total_steps": total}


def planned_schedule(model):
    """The model's `PlannedCosineDecay`, if its optimizer runs one."""
    schedule = getattr(model.optimizer, "_learning_rate", None)  # Keras keeps the schedule here
    return schedule if isinstance(schedule, PlannedCosineDecay) else None


def spent(work, epochs_done):
    """What the first `epochs_done` epochs of an interrupted run recorded
    (its `budget.json`: `epoch_seconds`, and each epoch's validation loss
    and BLEU in `epochs`), or empty lists for a new run."""
    path = os.path.join(work, RECORD)
    empty = {"epoch_seconds": [], "epochs": []}
    if not epochs_done or not os.path.exists(path):
        return empty
    try:
        with open(path) as handle:
            record = json.load(handle)
        seconds = [float(s) for s in record["epoch_seconds"][:epochs_done]]
        epochs = list(record.get("epochs", []))[:epochs_done]
    except (OSError, ValueError, KeyError, TypeError):
        return empty  # a damaged record: the budget starts again
    return {"epoch_seconds": seconds, "epochs": epochs + [{}] * (len(seconds) - len(epochs))}


class TimeBudget(keras.callbacks.Callback):
    """Ends `fit` within `seconds` (see the module docstring). Put it last
    among the callbacks, so that an epoch's time includes theirs.

    Args:
        seconds: the budget.
        steps_per_epoch: the training batches of an epoch.
        max_epochs: `--epochs`, the ceiling.
        work: the run's folder for `budget.json`.
        spent: what the epochs done before a resume recorded (`spent`).
        schedule: a `PlannedCosineDecay` to plan, or None.
        log: where the plan is reported (None: nowhere).
    """

    def __init__(
        self, seconds, steps_per_epoch, max_epochs, work, spent=None, schedule=None, log=None
    ):
        super().__init__()
        self.seconds, self.steps_per_epoch, self.max_epochs = seconds, steps_per_epoch, max_epochs
        self.work, self.schedule, self.log = work, schedule, log
        spent = spent or {"epoch_seconds": [], "epochs": []}
        self.epoch_seconds, self.epochs = list(spent["epoch_seconds"]), list(spent["epochs"])
        self.steps = len(self.epoch_seconds) * steps_per_epoch
        self.stopped_by = None

    def elapsed(self):
        return sum(self.epoch_seconds) + time.perf_counter() - self._mark

    def on_train_begin(self, logs=None):
        self._mark, self._reported = time.perf_counter(), False

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.elapsed() > self.seconds:  # this epoch overran: end it here
            self.model.stop_training = True
            self.stopped_by = "time budget (mid-epoch)"

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.epoch_seconds.append(now - self._mark)
        logs = logs or {}
        self.epochs.append(
            {key: float(logs[key]) for key in ("loss", "val_loss", "val_bleu") if key in logs}
        )
        self._mark = now
        spent, last = sum(self.epoch_seconds), self.epoch_seconds[-1]
        done = len(self.epoch_seconds)
        fit = min(self.max_epochs, done + max(0, int((self.seconds - spent) // last)))
        if self.schedule is not None:
            self.schedule.total_steps.assign(float(fit * self.steps_per_epoch))
        if self.log is not None and not self._reported:
            self._reported = True
            self.log(
                f"time budget {self.seconds / 60:.1f} min: an epoch takes {last:.0f}s, "
                f"so {fit} of at most {self.max_epochs} epochs fit"
            )
        if fit <= done and done < self.max_epochs and not self.model.stop_training:
            self.model.stop_training = True
            self.stopped_by = "time budget"
        runs.write_json_atomically(
            os.path.join(self.work, RECORD),
            {"epoch_seconds": self.epoch_seconds, "epochs": self.epochs},
        )

    def record(self, minutes):
        """What fit, for the run record."""
        return {
            "minutes": minutes,
            "epochs": len(self.epoch_seconds),
            "steps": self.steps,
            "seconds": round(sum(self.epoch_seconds), 1),
            "ended_by": self.stopped_by
            or ("--patience" if len(self.epoch_seconds) < self.max_epochs else "--epochs"),
        }
