"""The spelled-out dates task at full size: the recipe's three families
learn to write dates in English, German and French as ISO dates, judged by
exact match through their exported SavedModels.

    python bench/dates.py --output runs/dates                # all three families
    python bench/dates.py --output runs/dates --families rnn --epochs 15

The corpus is made here with Babel's `format_date` (locales en_US, en_GB,
de_DE, fr_FR; formats full, long, medium; days 1950-01-01 to 2049-12-31):
`--pairs` distinct days for the training corpus, which the recipe splits
90/5/5 as any corpus, and `--test` other days held out, none of them in
the corpus. Each family is trained with the recipe's command line
(`keras-attention-translate train --corpus ...`; the RNN with additive
attention), exported (`export`), and the export's `serving_default`
translates the held-out dates in plain TensorFlow. Prints one line per
family (exact match, training minutes) and writes `<output>/results.json`.
The CPU's flags go with every figure (`grep -o avx512f /proc/cpuinfo`).
"""

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine  # noqa: E402

LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR")
FORMATS = ("full", "long", "medium")
FIRST, LAST = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
FAMILY_FLAGS = {
    "rnn": ["--family", "rnn", "--attention", "additive", "--num-layers", "1"],
    "convs2s": ["--family", "convs2s"],
    "transformer": ["--family", "transformer"],
}


def date_pairs(days, seed):
    """`(spelled-out date, ISO date)` for each day of `days`, each in a
    locale and format drawn at random."""
    from babel.dates import format_date

    draw = random.Random(seed)
    return [
        (format_date(day, draw.choice(FORMATS), locale=draw.choice(LOCALES)), day.isoformat())
        for day in days
    ]


def make_corpus(output, pairs, test, seed):
    """`(corpus path, held-out pairs)`: `pairs + test` distinct days."""
    draw = random.Random(seed)
    span = (LAST - FIRST).days + 1
    days = [FIRST + datetime.timedelta(days=n) for n in draw.sample(range(span), pairs + test)]
    made = date_pairs(days, seed + 1)
    corpus = os.path.join(output, "dates.tsv")
    os.makedirs(output, exist_ok=True)
    with open(corpus, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in made[:pairs])
    return corpus, made[pairs:]


def run(command, log):
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write("$ " + " ".join(command) + "\n")
        handle.flush()
        done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"{' '.join(command[:3])} failed (exit {done.returncode}); see {log}")
    return time.perf_counter() - started


def exact_match(export, held_out, batch=64):
    """The share of held-out dates the export writes exactly, and examples."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    serve = tf.saved_model.load(export).signatures["serving_default"]
    outputs = []
    for start in range(0, len(held_out), batch):
        texts = tf.constant([source for source, _ in held_out[start : start + batch]])
        outputs += [t.decode("utf-8") for t in serve(text=texts)["translation"].numpy()]
    right = [output == target for output, (_, target) in zip(outputs, held_out)]
    wrong = [(s, t, o) for (s, t), o, ok in zip(held_out, outputs, right) if not ok]
    return 100 * sum(right) / len(held_out), wrong[:5]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="runs/dates", help="folder of the runs and results")
    parser.add_argument("--families", nargs="+", choices=list(FAMILY_FLAGS), default=None)
    parser.add_argument("--pairs", type=int, default=6700, help="days in the training corpus")
    parser.add_argument("--test", type=int, default=300, help="held-out days")
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    families = args.families or list(FAMILY_FLAGS)
    corpus, held_out = make_corpus(args.output, args.pairs, args.test, args.seed)
    translate = os.path.join(os.path.dirname(sys.executable), "keras-attention-translate")
    results = {
        "cpu": machine.describe(),
        "pairs": args.pairs,
        "test": args.test,
        "epochs": args.epochs,
    }
    results["families"] = {}
    print(f"dates: {args.pairs} training days, {args.test} held out; {results['cpu']}")
    for family in families:
        folder = os.path.join(args.output, family)
        log = os.path.join(args.output, f"{family}.log")
        train = [translate, "train", "--corpus", corpus, "--output", folder, "--overwrite"]
        train += [*FAMILY_FLAGS[family], "--epochs", str(args.epochs), "--verbose", "2"]
        train += ["--hidden-dim", str(args.hidden_dim), "--vocab-size", "1000"]
        train += ["--max-length", "24", "--seed", str(args.seed)]
        seconds = run(train, log)
        exports = os.path.join(folder, "exports")
        run([translate, "export", "--output", folder, "--export-dir", exports], log)
        versions = sorted(os.listdir(os.path.join(exports, "translator")), key=int)
        score, wrong = exact_match(os.path.join(exports, "translator", versions[-1]), held_out)
        results["families"][family] = {
            "exact_match": round(score, 2),
            "train_minutes": round(seconds / 60, 1),
            "wrong_examples": wrong,
        }
        print(f"{family:12s} exact match {score:5.1f}% through the export, {seconds / 60:.1f} min")
        for source, target, output in wrong[:3]:
            print(f"    {source!r}: {output!r}, expected {target}")
    with open(os.path.join(args.output, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
