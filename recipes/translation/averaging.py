"""Checkpoint averaging for the translation recipe: keep the weights of the
last N epochs during training, and replace the model by their mean.

    θ̄ = (1/N) Σ_{i=1..N} θ_i      for every float variable of the model

Averaging the last checkpoints of one run ("Attention Is All You Need",
Sec. 6.1, averages the last 5 or 20) smooths the noise of the final
updates and usually lowers the validation loss a little. Only the model's
variables are averaged; integer variables (counters, seeds) and the
optimizer's state (Adam's moments, the iteration count) are the last
checkpoint's: an average of moments is no optimizer state.

Checkpoints are Keras `.weights.h5` files, which hold the optimizer's
variables too; `checkpoints/epoch-0007.weights.h5` is the model after
epoch 7. A run backed up every N steps (`train --save-every`) keeps step
checkpoints instead, the backups themselves: `checkpoints/step-00001200.weights.h5`
is the model after its 1200th training step (counted over the whole run),
written every N steps of an epoch and at each epoch end (`KeepLastSteps`).
An epoch the time budget cut short is kept as a step checkpoint too, after
its run's epoch checkpoints (`KeepLastEpochs`, `in_order`).
"""

import math
import os
import re
import shutil
import warnings

import keras
import numpy as np

from .. import run_files, runs
from .corpus import check_file
from .inputs import validation_batches
from .text_io import validation_file
from .trained_run import number_protection

FOLDER = "checkpoints"
_EPOCH_FILE = re.compile(r"^epoch-(\d+)\.weights\.h5$")
_STEP_FILE = re.compile(r"^step-(\d+)\.weights\.h5$")


def epoch_path(folder, epoch):
    """The checkpoint of `epoch` (counted from 1)."""
    return os.path.join(folder, f"epoch-{epoch:04d}.weights.h5")


def step_path(folder, step):
    """The checkpoint of the run's `step`th training step (counted from 1)."""
    return os.path.join(folder, f"step-{step:08d}.weights.h5")


def kept_checkpoints(folder, steps=False):
    """`[(epoch, path)]` of the epoch checkpoints in `folder`, oldest first;
    with `steps`, `[(step, path)]` of the step checkpoints."""
    if not os.path.isdir(folder):
        return []
    pattern = _STEP_FILE if steps else _EPOCH_FILE
    found = (pattern.match(name) for name in os.listdir(folder))
    return sorted((int(m.group(1)), os.path.join(folder, m.group(0))) for m in found if m)


def in_order(folder, steps_per_epoch):
    """`[(step, path)]` of the epoch and step checkpoints in `folder`,
    ordered by the run's training step they hold (epoch e's is step
    e x `steps_per_epoch`): a run whose last epoch the time budget cut
    short has its epochs, then that epoch's step checkpoint."""
    epochs = [(epoch * steps_per_epoch, path) for epoch, path in kept_checkpoints(folder)]
    return sorted(epochs + kept_checkpoints(folder, steps=True))


def label(path):
    """A checkpoint's name in a log line: `epoch 7`, `step 1200`."""
    kind, _, number = os.path.basename(path).partition(".")[0].partition("-")
    return f"{kind} {int(number)}"


class KeepLastSteps:
    """Called by the run's backup (`runs.resilient_backup`'s `saved`) after
    each backup it writes, every N steps and at epoch ends: copies the
    backup's weights (`weights`, a file) into `folder` as the checkpoint of
    the run's step (`epoch` x `steps_per_epoch` + `steps`) and deletes all
    but the newest `keep` (and any later one, left by an earlier try of
    the run)."""

    def __init__(self, folder, keep, weights, steps_per_epoch):
        self.folder, self.keep, self.weights = folder, keep, weights
        self.steps_per_epoch = steps_per_epoch

    def __call__(self, epoch, steps):
        step = epoch * self.steps_per_epoch + steps
        os.makedirs(self.folder, exist_ok=True)
        run_files.write_atomically(
            step_path(self.folder, step), lambda temporary: shutil.copy(self.weights, temporary)
        )
        kept = kept_checkpoints(self.folder, steps=True)
        newer = [done for done, _ in kept if done <= step][-self.keep :]
        for done, path in kept:
            if done not in newer:
                os.remove(path)


class KeepLastEpochs(keras.callbacks.Callback):
    """Save the weights after every epoch into `folder` and delete all but
    the newest `keep` (the files stay after training, for `average`). A
    diverged epoch (a non-finite log) is not saved. An epoch that ended
    before its `steps_per_epoch` steps (the time budget's stop) is saved as
    the checkpoint of the run's step instead, with the `keep - 1` epochs
    before it.

    A run killed after its `BackupAndRestore` saved an epoch and before
    this callback did resumes after that epoch, whose weights it has: at
    the start of training, the epoch the backup in `backup` (a folder)
    restored is saved here when it is missing. Place this callback after
    the backup's."""

    def __init__(self, folder, keep, backup=None, steps_per_epoch=None):
        super().__init__()
        self.folder, self.keep, self.backup = folder, keep, backup
        self.steps_per_epoch, self.steps = steps_per_epoch, 0

    def on_train_begin(self, logs=None):
        metadata = os.path.join(self.backup or "", "training_metadata.json")
        if self.backup and os.path.exists(metadata):
            saved = run_files.read_json(
                metadata, "the backup's epoch", {"epoch": int, "steps": int}
            )
            restored = int(saved.get("epoch", 0))
            at_epoch_end = not saved.get("steps")  # a backup mid-epoch is no epoch's weights
            if restored and at_epoch_end and not os.path.exists(epoch_path(self.folder, restored)):
                self.save(restored)

    def on_epoch_begin(self, epoch, logs=None):
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1

    def on_epoch_end(self, epoch, logs=None):
        if not all(math.isfinite(value) for value in (logs or {}).values()):
            return
        if self.steps_per_epoch and 0 < self.steps < self.steps_per_epoch:
            self.save_cut_short(epoch * self.steps_per_epoch + self.steps)
        else:
            self.save(epoch + 1)

    def save(self, epoch):
        """Save the model as the checkpoint of `epoch` (from 1); keep `keep`."""
        os.makedirs(self.folder, exist_ok=True)
        run_files.write_atomically(epoch_path(self.folder, epoch), self.model.save_weights)
        for done, path in kept_checkpoints(self.folder):
            if done <= epoch - self.keep or done > epoch:  # older, or a stale later one
                os.remove(path)

    def save_cut_short(self, step):
        """Save the model as the checkpoint of the run's `step`, inside an
        epoch; keep it and the `keep - 1` newest epochs."""
        os.makedirs(self.folder, exist_ok=True)
        run_files.write_atomically(step_path(self.folder, step), self.model.save_weights)
        epochs = kept_checkpoints(self.folder)
        for _, path in epochs[: max(0, len(epochs) - (self.keep - 1))]:
            os.remove(path)


def load_checkpoint(model, path):
    """`model.load_weights(path)`; a file that does not fit the model, or
    does not read (damaged: `runs.DAMAGED_FILE_ERRORS`), raises `ValueError`
    naming it."""
    try:
        with warnings.catch_warnings():  # a file of another model: said in the error below
            warnings.filterwarnings("ignore", "Skipping variable loading for optimizer")
            model.load_weights(path)
    except runs.DAMAGED_FILE_ERRORS as error:
        raise ValueError(
            f"{path} does not load into the run's model ({str(error).splitlines()[0]}): it is "
            "damaged or not saved from this run's architecture; leave it out (--checkpoints "
            "names the files to average)"
        ) from None


def average_checkpoints(model, paths):
    """Load each of `paths` into `model` and leave `model` holding the
    elementwise mean of their float variables (the integer ones, and the
    optimizer's state, as the last of `paths` has them). The mean is
    summed in float64 and cast back to each variable's dtype.

    A file that does not fit the model raises `ValueError` naming it."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint; got none")
    sums = None
    for path in paths:
        load_checkpoint(model, path)
        values = [keras.ops.convert_to_numpy(variable) for variable in model.weights]
        if sums is None:
            sums = [np.zeros(value.shape, "float64") for value in values]
        for total, value in zip(sums, values):
            total += value
    for variable, total in zip(model.weights, sums):
        if np.issubdtype(np.dtype(variable.dtype), np.floating):
            variable.assign((total / len(paths)).astype(variable.dtype))
    return model


def validation_loss(model, data):
    """The model's compiled loss on `data` (its first result)."""
    result = model.evaluate(data, verbose=0)
    return float(result[0] if isinstance(result, list) else result)


def average_last_epochs(
    model, work, count, valid_data, last_loss, log=print, steps=False, steps_per_epoch=None
):
    """`train --average-last`: average the last `count` epochs kept in
    `<work>/checkpoints` into `model` (all of them when fewer were trained),
    with `steps_per_epoch`, the step checkpoint of an epoch the time budget
    cut short after them (`in_order`); with `steps`, the last `count` step
    checkpoints (`KeepLastSteps`).
    Returns what `config.json` records: the averaged epochs (and `steps`),
    the validation loss of the average (`val_loss`) and of the last
    checkpoint alone (`val_loss_last`); empty with a single checkpoint or
    a `count` under 2 (nothing to average)."""
    folder = os.path.join(work, FOLDER)
    if steps:
        found = kept_checkpoints(folder, steps=True)
    elif steps_per_epoch:
        found = in_order(folder, steps_per_epoch)
    else:
        found = kept_checkpoints(folder)
    kept = found[-count:] if count >= 2 else []
    kinds = "steps" if steps else "epochs"
    if len(kept) < 2:
        log(f"averaging: fewer than 2 {kinds} to average, the model is kept as it is")
        return {}
    paths = [path for _, path in kept]
    average_checkpoints(model, paths)
    val_loss = validation_loss(model, valid_data)
    log(
        f"averaged the weights of {label(paths[0])} to {label(paths[-1])} ({len(paths)} "
        f"checkpoints): validation loss {val_loss:.3f} ({label(paths[-1])} alone: "
        f"{last_loss:.3f}); the average is saved"
    )
    record = {}
    for path in paths:
        kind, number = label(path).split()
        record.setdefault(f"{kind}s", []).append(int(number))
    return {**record, "val_loss": val_loss, "val_loss_last": round(last_loss, 4)}


def average_run(config, loaded, log=print):
    """The `average` command: replace `model.keras` of the run in
    `config.output` by the mean of `config.checkpoints` (files) or of the
    `config.last` epochs (or step checkpoints) `train --average-last` kept,
    written atomically,
    and record it in `config.json`. `config` is a `TranslationConfig`;
    `loaded` is the run's `(model, config, source_tokenizer,
    target_tokenizer)`. Returns the validation
    losses of the average and of the last checkpoint alone."""
    model, run_config, source_tokenizer, target_tokenizer = loaded
    if config.checkpoints:
        paths = config.checkpoints
        seen = {}
        for path in paths:
            check_file(path, "--checkpoints", ValueError)
            if os.path.realpath(path) in seen:
                raise ValueError(
                    f"--checkpoints names one file twice ({seen[os.path.realpath(path)]} and "
                    f"{path}): the mean would count it twice; name each checkpoint once"
                )
            seen[os.path.realpath(path)] = path
    else:
        folder = os.path.join(config.output, FOLDER)
        # a run trained with --save-every keeps step checkpoints instead; one
        # the time budget stopped inside an epoch, its epochs and that step's
        epoch_steps = (run_config.get("time_budget") or {}).get("epoch_steps")
        kept, kind = kept_checkpoints(folder), "epoch"
        if kept and epoch_steps:
            kept = in_order(folder, epoch_steps)
        if not kept:
            kept = kept_checkpoints(folder, steps=True)
            kind = "step" if kept else "epoch or step"
        if len(kept) < config.last:
            raise ValueError(
                f"--last {config.last}: {folder} holds {len(kept)} {kind} "
                f"checkpoint{'' if len(kept) == 1 else 's'}; train with --average-last "
                f"{config.last} or more to keep them, or name files with --checkpoints"
            )
        paths = [path for _, path in kept[-config.last :]]
    valid = validation_file(config.output, config.valid, config.output, log)
    # The pairs, pieces and batches training validated on: its number
    # protection changes both, and the loss is a mean of batch means. (A run
    # whose record has no batching validates in batches of 64 pairs.)
    data, kept_pairs, _ = validation_batches(
        valid,
        (source_tokenizer, target_tokenizer),
        run_config["max_length"],
        batch_size=run_config.get("batch_size", 64),
        batch_tokens=run_config.get("batch_tokens"),
        numbers=number_protection(run_config),
    )
    if not kept_pairs:
        raise ValueError(f"no validation pair of {valid} fits the run's --max-length")
    load_checkpoint(model, paths[-1])
    last_loss = validation_loss(model, data)
    average_checkpoints(model, paths)
    average_loss = validation_loss(model, data)
    run_files.write_atomically(os.path.join(config.output, "model.keras"), model.save)
    record = {
        "checkpoints": [os.path.abspath(path) for path in paths],
        "val_loss_last": round(last_loss, 4),
    }
    run_files.write_json_atomically(
        os.path.join(config.output, "config.json"),
        {**run_config, "val_loss": round(average_loss, 4), "averaged": record},
    )
    log(
        f"averaged {len(paths)} checkpoints: validation loss {average_loss:.3f} (the last "
        f"alone: {last_loss:.3f}) -> {os.path.join(config.output, 'model.keras')}"
    )
    return average_loss, last_loss
