"""Training counted in steps as well as epochs, for epochs of hours
(`train --save-every`, `--validate-every`): `fit` over the epoch streams of
a run that may resume mid-epoch (`fit_streams`), and validation every N
steps (`StepValidation`). The backup every N steps is `runs.resilient_backup`'s,
the step checkpoints that `--average-last` averages `averaging.KeepLastSteps`'.

A run's step is counted over the whole run, from 1: the `s`th step of
epoch `e` (from 0) is the run's step `e x steps_per_epoch + s`.
"""

import importlib.util
import json
import math
import os
import time

import keras

from .scores import corpus_scores


def fit_streams(model, streams, epochs, **fit_arguments):
    """`model.fit` over each of `streams` (`pipeline.EpochStream`s: a
    resumed epoch's remaining batches, then the epochs after it), its
    epochs up to `epochs`, with `fit_arguments` (callbacks, validation
    data, verbosity); the first stream of a run resumed mid-epoch is an
    epoch of fewer steps. A stop (`stop_training`: early stopping, the
    time budget) ends them all. Returns the streams' `History.history`
    joined."""
    history = {}
    for stream in streams:
        last = min(stream.last, epochs)
        if stream.first >= last:
            continue
        done = model.fit(
            stream.dataset,
            initial_epoch=stream.first,
            epochs=last,
            steps_per_epoch=stream.steps,
            shuffle=False,  # each epoch's order is the dataset's own
            **fit_arguments,
        ).history
        for key, values in done.items():
            history.setdefault(key, []).extend(values)
        if model.stop_training:
            break
    return history


class StepValidation(keras.callbacks.Callback):
    """Every `every` steps of the run, the validation loss on `data` (a
    fixed sample of validation batches) and the corpus BLEU of greedy
    translations of `pairs` (`(source, reference)`, a fixed sample:
    `translate(texts)` with the model being trained); logged, appended to
    `<work>/validation_steps.jsonl` (one JSON object a line: step, epoch,
    val_loss, val_bleu) and written to TensorBoard in `<work>/logs/steps`.
    The training loss and metrics of the epoch under way are kept
    (`evaluate` would reset them).

    Args:
        steps_per_epoch: the training batches of an epoch.
        position: `(epoch, steps)` where training starts (a resumed run's
            backup), to count the run's steps.
        log: where the line goes (`None`: nowhere; the record and
            TensorBoard are written either way).
    """

    def __init__(self, every, data, pairs, translate, steps_per_epoch, position, work, log=print):
        super().__init__()
        self.every, self.data, self.pairs, self.translate = every, data, pairs, translate
        self.steps_per_epoch, self.position, self.work, self.log = (
            steps_per_epoch,
            tuple(position),
            work,
            log,
        )
        self.epoch, self.step, self._writer = 0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        skipped = self.position[1] if epoch == self.position[0] else 0
        self.step = epoch * self.steps_per_epoch + skipped

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if self.step % self.every == 0:
            self.validate(logs)

    def validate(self, logs=None):
        """Score the samples now; the record written."""
        if not all(math.isfinite(float(value)) for value in (logs or {}).values()):
            return  # a diverged step: TerminateOnNaN stops the run
        started = time.perf_counter()
        val_loss = self._loss()
        record = {"step": self.step, "epoch": self.epoch + 1, "val_loss": round(val_loss, 4)}
        if self.pairs:
            hypotheses = self.translate([source for source, _ in self.pairs])
            references = [reference for _, reference in self.pairs]
            record["val_bleu"] = corpus_scores(hypotheses, references)["bleu"]
        with open(os.path.join(self.work, "validation_steps.jsonl"), "a") as handle:
            handle.write(json.dumps(record) + "\n")
        self._summary(record)
        if self.log:
            bleu = f", BLEU {record['val_bleu']:.2f}" if "val_bleu" in record else ""
            self.log(
                f"step {self.step} (epoch {self.epoch + 1}): validation loss {val_loss:.3f}"
                f"{bleu} (greedy, {len(self.pairs)} sentences, "
                f"{time.perf_counter() - started:.0f}s)"
            )

    def _loss(self):
        """The compiled loss on `data`, the training metrics' state kept."""
        variables = [variable for metric in self.model.metrics for variable in metric.variables]
        saved = [keras.ops.convert_to_numpy(variable) for variable in variables]
        result = self.model.evaluate(self.data, verbose=0, return_dict=True)
        for variable, value in zip(variables, saved):
            variable.assign(value)
        return float(result["loss"])

    def _summary(self, record):
        if importlib.util.find_spec("tensorflow") is None:  # TensorBoard's writer is TensorFlow's
            return
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(os.path.join(self.work, "logs", "steps"))
        with self._writer.as_default():
            for name in ("val_loss", "val_bleu"):
                if name in record:
                    tf.summary.scalar(name, record[name], step=self.step)
        self._writer.flush()
