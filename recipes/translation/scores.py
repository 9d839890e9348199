"""Scores of the translation recipe: corpus BLEU and chrF with sacrebleu's
signatures (`scores.json`), and validation BLEU during training.

A BLEU score means little without the settings it was computed with
(tokenizer, smoothing, casing, number of references, sacrebleu's
version): the signature string names them, e.g.
`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`, and is
recorded beside every score.
"""

import json
import math
import os
import re
import time
from collections import Counter

import keras

from .. import runs
from .averaging import FOLDER, KeepLastEpochs
from .data import read_pairs


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


def number_consistency(sources, hypotheses):
    """How many of the sources' digit groups (`tokenizers.numbers.NUMBER`:
    `49`, `3,50`, `14:35`, `24.12.2019`) reach their translations:
    `number_groups` (all of them), `numbers_kept` and `number_consistency`
    (percent; None without numbers). A group counts once per occurrence,
    found in its own translation written with either decimal separator
    (German `3,50` is kept as `3.50`; `1.000` as `1,000`)."""
    from keras_attention.tokenizers.numbers import number_key, numbers_in

    total = kept = 0
    for source, hypothesis in zip(sources, hypotheses):
        wanted = Counter(map(number_key, numbers_in(source)))
        found = Counter(map(number_key, numbers_in(hypothesis)))
        total += sum(wanted.values())
        kept += sum(min(count, found[group]) for group, count in wanted.items())
    return {
        "number_groups": total,
        "numbers_kept": kept,
        "number_consistency": round(100 * kept / total, 2) if total else None,
    }


def write_scores(output, scores, test_set=None):
    """`<output>/scores.json` (the run's own test split), or with
    `test_set` (the name of a `--test` file: `test_set_name`)
    `<output>/scores.<test_set>.json`, written atomically; returns its path."""
    path = os.path.join(output, "scores.json" if test_set is None else f"scores.{test_set}.json")
    runs.write_json_atomically(path, scores)
    return path


def test_set_name(path, output=None):
    """The name a `--test` file's results are kept under: its file name
    without the extension, other characters than letters, digits, `.`,
    `_` and `-` as `_` (`small.tsv` -> `small`). With the run folder
    `output`, a name whose `scores.<name>.json` holds another file's
    results (its "test" path) is not taken: `small-2`, `small-3`, ...,
    so that two files of one name never replace each other's."""
    stem = os.path.splitext(os.path.basename(os.path.normpath(path)))[0]
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip(".") or "test"
    if output is None:
        return stem
    wanted, name, number = os.path.abspath(path), stem, 1
    while True:
        scores = os.path.join(output, f"scores.{name}.json")
        if not os.path.exists(scores):
            return name
        try:
            with open(scores, encoding="utf-8") as handle:
                recorded = json.load(handle).get("test")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if recorded == wanted:
            return name
        number += 1
        name = f"{stem}-{number}"


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


def monitoring_callbacks(config, valid_path, translate, work, log=print):
    """`train`'s optional callbacks, to be placed before TensorBoard:
    validation BLEU every `--bleu-every` epochs on the first
    `--bleu-sentences` pairs of `valid_path` (`translate`: greedy
    `texts -> translations`), and the last `--average-last` epochs'
    weights kept in `<work>/checkpoints/` (also the one `<work>/backup/`
    restores; with `--save-every`, the trainer keeps the backups instead:
    `averaging.KeepLastSteps`)."""
    callbacks = []
    if config.bleu_every:
        pairs = read_pairs(valid_path)[: config.bleu_sentences]
        callbacks.append(ValidationBleu(config.bleu_every, pairs, translate, log))
    if config.average_last and not config.save_every:
        callbacks.append(
            KeepLastEpochs(
                os.path.join(work, FOLDER), config.average_last, os.path.join(work, "backup")
            )
        )
    return callbacks


LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 25), (26, None))  # source words


def bleu_by_length(sources, hypotheses, references, buckets=LENGTH_BUCKETS):
    """Corpus BLEU of the sentences in each source-length bucket (words
    split on white space), as Bahdanau et al. (2015, Fig. 2) plot it:
    `{"1-5": {"bleu": ..., "sentences": n}, ..., "26+": ...}`; a bucket
    without sentences is left out."""
    import sacrebleu

    table = {}
    for low, high in buckets:
        chosen = [
            (hypothesis, reference)
            for source, hypothesis, reference in zip(sources, hypotheses, references)
            if low <= len(source.split()) and (high is None or len(source.split()) <= high)
        ]
        if chosen:
            bleu = sacrebleu.corpus_bleu([h for h, _ in chosen], [[r for _, r in chosen]])
            name = f"{low}-{high}" if high else f"{low}+"
            table[name] = {"bleu": round(bleu.score, 2), "sentences": len(chosen)}
    return table
