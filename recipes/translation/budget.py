"""`train --time-budget MINUTES`: training planned against the wall clock.

The budget is the time of `model.fit` from its first step to the end of its
last epoch (validation, BLEU monitoring and the backup included; the data,
the vocabularies, averaging and the final save are not). `--epochs` becomes
a ceiling (none when not given). The budget is spent by steps:

- training ends at the step after which one more step and the epoch's
  end (validation and the callbacks, as long as the last epoch's end
  took) would overrun the budget: inside an epoch when that is where the
  budget ends, so a run finishes within about one step of its budget
  whatever its epochs' length. The epoch so cut short still validates,
  and `--average-last` keeps its weights as a step checkpoint
  (`averaging.KeepLastEpochs`);
- the learning rate: with `--decay cosine` the cosine ends at the planned
  last step, planned after the first epoch (the steps that fit in the time
  left, less an epoch end for each epoch they start, within `--epochs`)
  and again after each epoch, so that a slower or faster machine still
  reaches the end of its cosine; the rsqrt decay has no end to plan;
- averaging and early stopping: `--average-last N` averages the last N
  checkpoints (epochs, and the step checkpoint of an epoch cut short), but
  at most the second half of the epochs that ran (`epochs_to_average`),
  `--patience` may end the run earlier still.

The epochs' durations (and their losses and validation BLEU: a curve
against the clock, `bench/bleu_minutes.py`), a step's seconds and an
epoch end's are kept in `<run>/budget.json` beside the backup, so an
interrupted run resumes with the time its completed epochs took (an epoch
whose entry a kill lost counts as long as the one before) and trains no
more if no step fits. A run backed up every N steps (`--save-every`) also
records, at each such backup, the steps and seconds of the epoch under way
(`partial`): resumed mid-epoch, it counts them. Otherwise the interrupted
epoch's time is lost. The run record (`config.json`) says what fit:
epochs, steps (of `epoch_steps` an epoch), seconds, and what ended it.
"""

import collections
import json
import os
import statistics
import time

import keras

from keras_attention.seq2seq import PerUpdateSchedule, PlannedCosineDecay

from .. import run_files

RECORD = "budget.json"
# What `budget.json` keeps of the clock beside the epochs: the seconds of a
# training step and of an epoch's end (validation and the callbacks).
RATES = ("step_seconds", "end_seconds")
STEPS_MEASURED = 15  # the steps whose median is a step's seconds


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
        rates = {key: float(record[key]) for key in RATES if record.get(key) is not None}
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
    empty.update(rates)
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
        max_epochs: `--epochs`, the ceiling.
        work: the run's folder for `budget.json`.
        spent: what the epochs done before a resume recorded (`spent`).
        schedule: a `PlannedCosineDecay` to plan, or None.
        log: where the plan is reported (None: nowhere).
        update_freq: the batches of an optimizer update (`--update-freq`):
            the schedule's steps are updates.
        validation_steps: the validation batches of an epoch's end, for
            the guess of its seconds before the first epoch end measures
            them (a validation batch taken as long as a training step).
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
        validation_steps=0,
    ):
        super().__init__()
        self.update_freq = update_freq
        self.seconds, self.steps_per_epoch, self.max_epochs = seconds, steps_per_epoch, max_epochs
        self.work, self.schedule, self.log = work, schedule, log
        self.validation_steps = validation_steps
        spent = spent or {"epoch_seconds": [], "epochs": []}
        self.epoch_seconds, self.epochs = list(spent["epoch_seconds"]), list(spent["epochs"])
        partial = spent.get("partial") or {"steps": 0, "seconds": 0.0}
        # the epoch under way: its steps and seconds before a resume
        self.partial_seconds = float(partial["seconds"])
        self.steps = len(self.epoch_seconds) * steps_per_epoch + int(partial["steps"])
        # a record from before the rates were kept: its last epoch's mean step
        last = self.epoch_seconds[-1] / steps_per_epoch if self.epoch_seconds else None
        self.step_seconds = spent.get("step_seconds", last)
        self.end_seconds = spent.get("end_seconds", 0.0 if last else None)
        self.stopped_by = None
        # the last steps' seconds, an epoch's first left out (it may wait for
        # the data): their median is the step's, whatever a trace of a new
        # batch shape (the first epoch's) costs
        self._durations = collections.deque(maxlen=STEPS_MEASURED)
        self._epoch_steps, self._step_end = 0, None

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
        rates = {key: getattr(self, key) for key in RATES if getattr(self, key) is not None}
        run_files.write_json_atomically(
            os.path.join(self.work, RECORD),
            {
                "epoch_seconds": self.epoch_seconds,
                "epochs": self.epochs,
                **{key: round(value, 4) for key, value in rates.items()},
                **({"partial": partial} if partial else {}),
            },
        )

    def _end_guess(self):
        """An epoch end's seconds: the last one's, or before any was
        measured a training step's for each validation batch."""
        if self.end_seconds is not None:
            return self.end_seconds
        return self.validation_steps * (self.step_seconds or 0.0)

    def planned_steps(self):
        """The run's steps that fit: those done, and as many more as the
        time left has room for, each epoch they start with its end
        (`_end_guess`), within `max_epochs`."""
        ceiling = self.max_epochs * self.steps_per_epoch
        if not self.step_seconds:
            return ceiling
        left, end, step = self.seconds - self.elapsed(), self._end_guess(), self.step_seconds
        more, into = 0, self.steps % self.steps_per_epoch
        if into:  # the rest of the epoch under way, then its end
            rest = self.steps_per_epoch - into
            if left < rest * step + end:
                return min(ceiling, self.steps + max(0, int((left - end) // step)))
            more, left = rest, left - rest * step - end
        whole = int(left // (self.steps_per_epoch * step + end))  # whole epochs and their ends
        more += whole * self.steps_per_epoch
        left -= whole * (self.steps_per_epoch * step + end)
        more += max(0, int((left - end) // step))  # an epoch cut short, and its end
        return min(ceiling, self.steps + more)

    def no_step_fits(self):
        """True when one more step and its epoch's end would overrun the
        budget."""
        return self.elapsed() + (self.step_seconds or 0.0) + self._end_guess() > self.seconds

    def exhausted(self):
        """True when the epochs done (before a resume) leave no time for
        another step: the resumed run trains no more."""
        if not self.epoch_seconds:
            return False
        self._mark = time.perf_counter()
        return self.no_step_fits() or len(self.epoch_seconds) >= self.max_epochs

    def on_train_begin(self, logs=None):
        self._mark, self._reported = time.perf_counter(), False
        if self.epoch_seconds and self.schedule is not None:  # resumed: the plan as it was
            self.schedule.total_steps.assign(self.updates(self.planned_steps()))

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_steps, self._step_end = 0, None

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps += 1
        self._epoch_steps += 1
        if self._step_end is not None:
            self._durations.append(now - self._step_end)
            self.step_seconds = statistics.median(self._durations)
        self._step_end = now
        if self._epoch_steps >= self.steps_per_epoch:
            return  # the epoch's end decides
        if self.step_seconds is None:  # no step measured yet: only an overrun stops
            overrun = self.elapsed() > self.seconds
        else:
            overrun = self.no_step_fits()
        if overrun:
            self.model.stop_training = True  # the budget ends inside this epoch: here
            self.stopped_by = "time budget (mid-epoch)"

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        if self._step_end is not None:
            self.end_seconds = now - self._step_end
        self.epoch_seconds.append(now - self._mark + self.partial_seconds)
        self.partial_seconds = 0.0
        logs = logs or {}
        self.epochs.append(
            {key: float(logs[key]) for key in ("loss", "val_loss", "val_bleu") if key in logs}
        )
        self._mark = now
        planned = self.planned_steps()
        if self.schedule is not None:
            self.schedule.total_steps.assign(self.updates(planned))
        if self.log is not None and not self._reported:
            self._reported = True
            last = self.epoch_seconds[-1]
            capped = planned == self.max_epochs * self.steps_per_epoch
            self.log(
                f"time budget {self.seconds / 60:.1f} min: an epoch takes {last:.0f}s "
                f"({self.end_seconds:.0f}s of it validating), so "
                f"{planned / self.steps_per_epoch:.1f} epochs ({planned} steps) fit"
                + (f", --epochs {self.max_epochs} at most" if capped else "")
            )
        done = len(self.epoch_seconds)
        if self.no_step_fits() and done < self.max_epochs and not self.model.stop_training:
            self.model.stop_training = True
            self.stopped_by = "time budget"
        self._write()

    def updates(self, steps):
        """The optimizer updates of `steps` training steps: the cosine's last step."""
        return float(steps // self.update_freq)

    def epochs_to_average(self, count):
        """How many of the last checkpoints `--average-last count` averages:
        at most half of the epochs that ran (one cut short counted),
        rounded down. A slow machine fits few epochs, and the mean of all
        of them, the first included, is far worse than the last alone:
        4.76 against 4.23 validation loss for 4 epochs of the translator's
        model, 2.6 BLEU for their ensemble against 8.4 (RESULTS.md); its
        second half is where the weights have settled. Fewer than 2:
        nothing is averaged."""
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
