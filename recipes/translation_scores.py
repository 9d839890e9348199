"""Scores of the translation recipe: corpus BLEU and chrF with sacrebleu's
signatures (`scores.json`), and validation BLEU during training.

A BLEU score means little without the settings it was computed with
(tokenizer, smoothing, casing, number of references, sacrebleu's
version): the signature string names them, e.g.
`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`, and is
recorded beside every score.
"""

import math
import os
import time

import keras

from . import runs


def corpus_scores(hypotheses, references):
    """Corpus BLEU and chrF of `hypotheses` against one reference each
    (sacrebleu's defaults: 13a tokenization, exponential smoothing,
    case-sensitive) and the two signatures."""
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def write_scores(output, scores):
    """`<output>/scores.json`, written atomically; returns its path."""
    path = os.path.join(output, "scores.json")
    runs.write_json_atomically(path, scores)
    return path


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


def monitoring_callbacks(args, valid_path, translate, work, log=print):
    """`train`'s optional callbacks, to be placed before TensorBoard:
    validation BLEU every `--bleu-every` epochs on the first
    `--bleu-sentences` pairs of `valid_path` (`translate`: greedy
    `texts -> translations`), and the last `--average-last` epochs'
    weights kept in `<work>/checkpoints/` (also the one `<work>/backup/`
    restores)."""
    from .averaging import FOLDER, KeepLastEpochs
    from .translation_data import read_pairs

    callbacks = []
    if getattr(args, "bleu_every", 0):
        pairs = read_pairs(valid_path)[: args.bleu_sentences]
        callbacks.append(ValidationBleu(args.bleu_every, pairs, translate, log))
    if getattr(args, "average_last", None):
        callbacks.append(
            KeepLastEpochs(
                os.path.join(work, FOLDER), args.average_last, os.path.join(work, "backup")
            )
        )
    return callbacks
