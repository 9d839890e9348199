"""The callbacks of `train` (`training_callbacks`, in the order `fit`
takes them): the resumable backup it is given, the stop on NaN, the best
epoch's weights (`best_weights`), validation BLEU every `--bleu-every`
epochs (`ValidationBleu`), the kept epochs or steps `average` reads
(`averaging.py`), validation every `--validate-every` steps
(`steps.StepValidation`), TensorBoard and early stopping.
"""

import importlib.util
import math
import os
import time

import keras

from .. import run_files, runs
from .averaging import FOLDER, KeepLastEpochs, KeepLastSteps
from .corpus import read_pairs
from .scores import corpus_scores
from .steps import StepValidation


def best_weights(path, log=print):
    """A callback that keeps the weights of the epoch with the lowest
    validation loss in `path` (written atomically, with its loss and epoch
    in `path.json`, so a resumed run knows the best so far); its
    `restore(model)` loads them at the end of training."""

    class BestWeights(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            record = path + ".json"
            remedy = (
                f"delete it and {os.path.basename(path)}: training then keeps the best of the "
                "epochs still to come"
            )
            saved = (
                run_files.read_json(
                    record, "the best epoch", {"val_loss": float, "epoch": int}, (), remedy
                )
                if os.path.exists(record)
                else {}
            )
            self.val_loss = saved.get("val_loss", math.inf)
            self.epoch = saved.get("epoch")
            self.last_val_loss = None

        def on_epoch_end(self, epoch, logs=None):
            value = (logs or {}).get("val_loss")
            if value is None or not math.isfinite(value):
                return
            self.last_val_loss = float(value)
            if value < self.val_loss:
                self.val_loss, self.epoch = float(value), epoch + 1
                run_files.write_atomically(path, self.model.save_weights)
                run_files.write_json_atomically(
                    path + ".json", {"val_loss": self.val_loss, "epoch": self.epoch}
                )

        def restore(self, model):
            """Load the best weights when an epoch before the last was
            better; True when the model now holds the best epoch's."""
            if self.epoch is None or not os.path.exists(path):
                return False
            if self.last_val_loss is not None and self.last_val_loss <= self.val_loss:
                return True  # the last epoch is the best
            last = model.get_weights()
            try:
                model.load_weights(path)
            except runs.DAMAGED_FILE_ERRORS as error:
                # A load that fails part-way has set some weights: the last
                # epoch's, which are whole, are put back and kept.
                model.set_weights(last)
                first = (str(error).splitlines() or [type(error).__name__])[0]
                log(
                    f"{path} does not load ({first}): it is damaged; keeping the last "
                    "epoch's weights instead of the best epoch's"
                )
                return False
            log(
                f"keeping epoch {self.epoch}'s weights, the best on validation loss "
                f"({self.val_loss:.3f})"
            )
            return True

    return BestWeights()


class ValidationBleu(keras.callbacks.Callback):
    """Corpus BLEU of greedy translations of `pairs` (validation sentences)
    every `every` epochs, added to the epoch's logs as `val_bleu` (so
    History and TensorBoard, placed after this callback, record it) and
    logged. Other epochs have no `val_bleu`.

    Args:
        every: K >= 1: epochs K, 2K, ... are scored.
        pairs: `(source, reference)` pairs.
        translate: `texts -> translations` with the model being trained
            (greedy: the cost is one decoding pass over `pairs`).
        log: where the score line goes (`None`: nowhere).
    """

    def __init__(self, every, pairs, translate, log=print):
        super().__init__()
        self.every, self.pairs, self.translate, self.log = every, pairs, translate, log

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or (epoch + 1) % self.every:
            return
        if not all(math.isfinite(value) for value in logs.values()):
            return  # a diverged epoch: TerminateOnNaN stops the run
        started = time.perf_counter()
        hypotheses = self.translate([source for source, _ in self.pairs])
        scores = corpus_scores(hypotheses, [reference for _, reference in self.pairs])
        logs["val_bleu"] = scores["bleu"]
        if self.log:
            self.log(
                f"epoch {epoch + 1}: validation BLEU {scores['bleu']:.2f} "
                f"(greedy, {len(self.pairs)} sentences, {time.perf_counter() - started:.0f}s)"
            )


def monitoring_callbacks(config, valid_path, translate, work, log=print, steps_per_epoch=None):
    """`train`'s optional callbacks, to be placed before TensorBoard:
    validation BLEU every `--bleu-every` epochs on the first
    `--bleu-sentences` pairs of `valid_path` (`translate`: greedy
    `texts -> translations`), and the last `--average-last` epochs'
    weights kept in `<work>/checkpoints/` (also the one `<work>/backup/`
    restores, and an epoch of fewer than `steps_per_epoch` steps as a step
    checkpoint; with `--save-every`, the trainer keeps the backups instead:
    `averaging.KeepLastSteps`)."""
    callbacks = []
    if config.bleu_every:
        pairs = read_pairs(valid_path)[: config.bleu_sentences]
        callbacks.append(ValidationBleu(config.bleu_every, pairs, translate, log))
    if config.average_last and not config.save_every:
        callbacks.append(
            KeepLastEpochs(
                os.path.join(work, FOLDER),
                config.average_last,
                os.path.join(work, "backup"),
                steps_per_epoch,
            )
        )
    return callbacks


def tensorboard(folder):
    """Keras's TensorBoard callback writing to `folder`, where TensorFlow
    (its event writer) is installed; else none."""
    if importlib.util.find_spec("tensorflow") is None:
        return []
    return [keras.callbacks.TensorBoard(folder)]


def training_callbacks(config, valid_path, translate, work, backup, best, log, steps):
    """The callbacks of `fit` before the time budget's: the `backup` (a
    `runs.resilient_backup`), the stop on NaN, the `best` epoch,
    validation BLEU (`translate(texts)` on the sentences of `valid_path`)
    and kept epochs, or with `--save-every` kept backups
    (`KeepLastSteps`), validation every `--validate-every` steps
    (`StepValidation`; `steps`: the validation data, an epoch's batches
    and where training starts), TensorBoard, early stopping. `log`: the
    chief's, None on the other workers."""
    valid_data, batches, position = steps
    callbacks = [
        backup,
        keras.callbacks.TerminateOnNaN(),
        best,
        # validation BLEU, kept epochs: before TensorBoard, which logs their val_bleu
        *monitoring_callbacks(config, valid_path, translate, work, log, batches),
        *tensorboard(os.path.join(work, "logs")),
    ]
    if config.save_every and config.average_last:
        folder = os.path.join(work, FOLDER)
        backup.saved.append(
            KeepLastSteps(folder, config.average_last, backup.weights_path, batches)
        )
    if config.validate_every:
        # a fixed sample: the first validation batches, about --bleu-sentences pairs
        sample = valid_data.take(max(1, math.ceil(config.bleu_sentences / config.batch_size)))
        pairs = read_pairs(valid_path)[: config.bleu_sentences]
        callbacks.insert(
            3,
            StepValidation(
                config.validate_every, sample, pairs, translate, batches, position, work, log
            ),
        )
    if config.patience:
        callbacks.append(
            keras.callbacks.EarlyStopping("val_loss", patience=config.patience, verbose=1)
        )
    return callbacks
