"""Validation BLEU against training minutes, one line per run: what a
minute of CPU buys each model.

Each run must have been trained with `--time-budget` and `--bleu-every K`
(its `budget.json` holds every epoch's seconds and, every K epochs, its
greedy validation BLEU on the first `--bleu-sentences` validation pairs).
Prints each run's points and draws them into `--plot`:

    python bench/bleu_minutes.py --plot docs/bleu_minutes.png \\
        "ConvS2S (demo)=runs/curve-convs2s" "Transformer=runs/curve-transformer"
"""

import argparse
import json
import os
import sys


def curve(run):
    """`[(minutes, val_bleu)]` of a run's `budget.json`, at the epochs that
    were scored."""
    path = os.path.join(run, "budget.json")
    if not os.path.exists(path):
        sys.exit(f"error: {path} is missing: train the run with --time-budget and --bleu-every")
    with open(path) as handle:
        record = json.load(handle)
    points, elapsed = [], 0.0
    for seconds, logs in zip(record["epoch_seconds"], record.get("epochs", [])):
        elapsed += seconds
        if "val_bleu" in logs:
            points.append((elapsed / 60, logs["val_bleu"]))
    if not points:
        sys.exit(f"error: {path} has no validation BLEU: train the run with --bleu-every")
    return points


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN")
    parser.add_argument("--plot", help="draw the curves into this PNG")
    parser.add_argument("--title", default="Greedy validation BLEU against training minutes")
    args = parser.parse_args(argv)
    curves = []
    for item in args.runs:
        label, _, run = item.partition("=") if "=" in item else ("", "", item)
        points = curve(run)
        curves.append((label or run, points))
        print(f"{label or run}: " + ", ".join(f"{m:.1f} min {b:.2f}" for m, b in points))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(6.4, 4.0))
        for label, points in curves:
            axes.plot([m for m, _ in points], [b for _, b in points], marker="o", label=label)
        axes.set_xlabel("training minutes")
        axes.set_ylabel("validation BLEU (greedy)")
        axes.set_title(args.title, fontsize=10)
        axes.grid(alpha=0.3)
        axes.legend()
        figure.tight_layout()
        figure.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
