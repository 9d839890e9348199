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
  epochs that ran, but at most the second half of them
  (`epochs_to_average`), `--patience` may end the run earlier still.

The epochs' durations (and their losses and validation BLEU: a curve
against the clock, `bench/bleu_minutes.py`) are kept in
`<run>/budget.json` beside the backup, so an interrupted run resumes with
the time its completed epochs took (an epoch whose entry a kill lost
counts as long as the one before), its cosine planned as it was, and
trains no more if no epoch fits. A run backed up every N steps
(`--save-every`) also records, at each such backup, the steps and seconds
of the epoch under way (`partial`): resumed mid-epoch, it counts them, and
an epoch longer than the whole budget still ends at the step where the
budget does, however often the run was interrupted. Otherwise the
interrupted epoch's time is lost. The run record (`config.json`) says
what fit: epochs, steps (of `epoch_steps` an epoch), seconds, and what
ended it.
"""

import json
import os
import time

import keras

from keras_attention.seq2seq import PerUpdateSchedule, PlannedCosineDecay

from .. import run_files

RECORD = "budget.json"


def planned_schedule(model):
    """The model's `PlannedCosineDecay`, if its optimizer runs one (the inner
    optimizer's, under mixed float16's loss scaling; the one a
    `PerUpdateSchedule` wraps, under gradient accumulation)."""
    optimizer = getattr(model.optimizer, "inner_optimizer", model.optimizer)
    schedule = getattr(optimizer, "_learning_rate", None)  # Keras keeps the schedule here
    if isinstance(schedule, PerUpdateSchedule):
        schedule = schedule.schedule
    return schedule if isinstance(schedule, PlannedCosineDecay) else None


def spent(work, epochs_done, steps_done=0, log=print):
    """What the first `epochs_done` epochs of an interrupted run recorded
    (its `budget.json`: `epoch_seconds`, and each epoch's validation loss
    and BLEU in `epochs`), or empty lists for a new run; resumed
    `steps_done` steps into the next epoch, also `partial`: those steps
    and their seconds (as recorded at the backup, or in proportion to a
    later record's). A damaged record is said in one line to `log`, and
    the budget counts from this start."""
    path = os.path.join(work, RECORD)
    empty = {"epoch_seconds": [], "epochs": []}
    if not (epochs_done or steps_done) or not os.path.exists(path):
        return empty
    try:
        with open(path) as handle:
            record = json.load(handle)
        seconds = [float(s) for s in record["epoch_seconds"][:epochs_done]]
        epochs = list(record.get("epochs", []))[:epochs_done]
        partial = record.get("partial") or {}
        if not isinstance(partial, dict):
            raise TypeError(f"'partial' holds {json.dumps(partial)[:40]}")
        if steps_done and partial.get("epoch") == epochs_done and partial.get("steps"):
            share = min(1.0, steps_done / int(partial["steps"]))
            partial = {"steps": steps_done, "seconds": float(partial["seconds"]) * share}
        else:
            partial = {"steps": steps_done, "seconds": 0.0} if steps_done else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        if log is not None:
            log(
                f"{path} (the time budget's record) is damaged ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else 'unreadable'}): the minutes "
                "the interrupted run spent are not known, so --time-budget counts from now"
            )
        return empty
    if partial:
        empty["partial"] = partial
    if seconds and len(seconds) < epochs_done:
        # A kill between the backup and this record lost an epoch's entry:
        # count it as long as the one before.
        seconds += [seconds[-1]] * (epochs_done - len(seconds))
    return {
        **empty,
        "epoch_seconds": seconds,
        "epochs": epochs + [{}] * (len(seconds) - len(epochs)),
    }


class TimeBudget(keras.callbacks.Callback):
    """Ends `fit` within `seconds` (see the module docstring). Put it last
    among the callbacks, so that an epoch's time includes theirs.

    Args:
        seconds: the budget.
        steps_per_epoch: the training batches of an epoch.
        update_freq: the batches of an optimizer update (`--update-freq`):
            the schedule's steps are updates.
        max_epochs: `--epochs`, the ceiling.
        work: the run's folder for `budget.json`.
        spent: what the epochs done before a resume recorded (`spent`).
        schedule: a `PlannedCosineDecay` to plan, or None.
        log: where the plan is reported (None: nowhere).
    """

    def __init__(
        self,
        seconds,
        steps_per_epoch,
        max_epochs,
        work,
        spent=None,
        schedule=None,
        log=None,
        update_freq=1,
    ):
        super().__init__()
        self.update_freq = update_freq
        self.seconds, self.steps_per_epoch, self.max_epochs = seconds, steps_per_epoch, max_epochs
        self.work, self.schedule, self.log = work, schedule, log
        spent = spent or {"epoch_seconds": [], "epochs": []}
        self.epoch_seconds, self.epochs = list(spent["epoch_seconds"]), list(spent["epochs"])
        partial = spent.get("partial") or {"steps": 0, "seconds": 0.0}
        # the epoch under way: its steps and seconds before a resume
        self.partial_seconds = float(partial["seconds"])
        self.steps = len(self.epoch_seconds) * steps_per_epoch + int(partial["steps"])
        self.stopped_by = None

    def elapsed(self):
        return sum(self.epoch_seconds) + self.partial_seconds + time.perf_counter() - self._mark

    def backed_up(self, epoch, steps):
        """Record the epoch under way's steps and seconds when the backup
        is written mid-epoch (`steps` steps into `epoch`; called by the
        backup, `runs.resilient_backup`'s `saved`): a run resumed from it
        counts them."""
        if steps:
            seconds = self.partial_seconds + time.perf_counter() - self._mark
            self._write({"epoch": epoch, "steps": steps, "seconds": round(seconds, 3)})

    def _write(self, partial=None):
        run_files.write_json_atomically(
            os.path.join(self.work, RECORD),
            {
                "epoch_seconds": self.epoch_seconds,
                "epochs": self.epochs,
                **({"partial": partial} if partial else {}),
            },
        )

    def planned_epochs(self):
        """The epochs that fit: those done, and as many more of the last
        one's length as the budget has time for, within `max_epochs`."""
        done, spent = len(self.epoch_seconds), sum(self.epoch_seconds)
        last = self.epoch_seconds[-1]
        return min(self.max_epochs, done + max(0, int((self.seconds - spent) // last)))

    def exhausted(self):
        """True when the epochs done (before a resume) leave no time for
        another: the resumed run trains no more."""
        return bool(self.epoch_seconds) and self.planned_epochs() <= len(self.epoch_seconds)

    def on_train_begin(self, logs=None):
        self._mark, self._reported = time.perf_counter(), False
        if self.epoch_seconds and self.schedule is not None:  # resumed: the plan as it was
            self.schedule.total_steps.assign(self.updates(self.planned_epochs()))

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if self.elapsed() > self.seconds:  # this epoch overran: end it here
            self.model.stop_training = True
            self.stopped_by = "time budget (mid-epoch)"

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.epoch_seconds.append(now - self._mark + self.partial_seconds)
        self.partial_seconds = 0.0
        logs = logs or {}
        self.epochs.append(
            {key: float(logs[key]) for key in ("loss", "val_loss", "val_bleu") if key in logs}
        )
        self._mark = now
        last, done, fit = self.epoch_seconds[-1], len(self.epoch_seconds), self.planned_epochs()
        if self.schedule is not None:
            self.schedule.total_steps.assign(self.updates(fit))
        if self.log is not None and not self._reported:
            self._reported = True
            self.log(
                f"time budget {self.seconds / 60:.1f} min: an epoch takes {last:.0f}s, "
                f"so {fit} of at most {self.max_epochs} epochs fit"
            )
        if fit <= done and done < self.max_epochs and not self.model.stop_training:
            self.model.stop_training = True
            self.stopped_by = "time budget"
        self._write()

    def updates(self, epochs):
        """The optimizer updates of `epochs` epochs: the cosine's last step."""
        return float(epochs * self.steps_per_epoch // self.update_freq)

    def epochs_to_average(self, count):
        """How many of the last epochs `--average-last count` averages: at
        most half of those that ran, rounded down. A slow machine fits few
        epochs, and the mean of all of them, the first included, is far
        worse than the last alone: 4.76 against 4.23 validation loss for
        4 epochs of the translator's model, 2.6 BLEU for their ensemble
        against 8.4 (RESULTS.md); its second half is where the weights
        have settled. Fewer than 2: nothing is averaged."""
        return min(count, len(self.epoch_seconds) // 2)

    def record(self, minutes):
        """What fit, for the run record."""
        return {
            "minutes": minutes,
            "epochs": len(self.epoch_seconds),
            "steps": self.steps,
            "epoch_steps": self.steps_per_epoch,
            "seconds": round(sum(self.epoch_seconds), 1),
            "ended_by": self.stopped_by
            or ("--patience" if len(self.epoch_seconds) < self.max_epochs else "--epochs"),
        }
