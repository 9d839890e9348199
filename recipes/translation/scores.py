"""Scores of the translation recipe: corpus BLEU and chrF with sacrebleu's
signatures (`scores.json`), BLEU by source length and number consistency.

A BLEU score means little without the settings it was computed with
(tokenizer, smoothing, casing, number of references, sacrebleu's
version): the signature string names them, e.g.
`nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`, and is
recorded beside every score.
"""

import json
import os
import re
from collections import Counter

from .. import run_files


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
    from keras_attention.tokenizers.number_rules import number_key, numbers_in

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
    run_files.write_json_atomically(path, scores)
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
