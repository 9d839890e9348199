"""Train and evaluate every configuration of the translation recipe at one
training budget on the Ding corpus and write RESULTS.md.

    keras-attention-results [--epochs 4] [--hidden-dim 128] [--output runs/results]
    keras-attention-results --only "no attention" general convs2s transformer \
        --flags="--batch-tokens 1536 --dictionary 0.5 --warmup 400 --learning-rate 3e-3"

Each configuration is `keras-attention-translate train` then `evaluate`
(beam 4, the whole test split) with the same epochs, widths, data and
seed (and `--flags`, given to every `train`); the tables list BLEU, chrF,
parameters and training time, BLEU by source length (Bahdanau et al.,
2015, Fig. 2), and the exact commands; `--plot` draws BLEU against source
length, a line per model.
"""

import argparse
import io
import os
import shutil
import subprocess
import sys

from .run_files import read_json, write_atomically

CONFIGURATIONS = [
    ("RNN, no attention (bottleneck)", ["--family", "rnn", "--attention", "none"]),
    ("RNN + dot attention", ["--family", "rnn", "--attention", "dot"]),
    ("RNN + general attention", ["--family", "rnn", "--attention", "general"]),
    (
        "RNN + additive attention",
        ["--family", "rnn", "--attention", "additive", "--style", "bahdanau"],
    ),
    ("RNN + concat attention", ["--family", "rnn", "--attention", "concat"]),
    ("RNN + local-p attention", ["--family", "rnn", "--attention", "local"]),
    ("ConvS2S", ["--family", "convs2s"]),
    # The demo's Transformer: relative positions and tied embeddings.
    (
        "Transformer",
        ["--family", "transformer", "--position", "relative", "--tie-embeddings"],
    ),
]


def parser():
    """The command line of `keras-attention-results`."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=4)
    # --units: the spelling of 0.2.0, as `train` still parses it.
    parser.add_argument("--hidden-dim", "--units", dest="hidden_dim", type=int, default=128)
    parser.add_argument("--embed-dim", type=int, default=128)
    parser.add_argument("--output", default="runs/results")
    parser.add_argument("--results", default="RESULTS.md")
    parser.add_argument(
        "--machine",
        default="the project's 2-core CPU machine, no GPU",
        help="where the runs trained, for the report",
    )
    parser.add_argument(
        "--only", nargs="*", help="run only configurations whose name contains one of these"
    )
    parser.add_argument(
        "--flags",
        default="",
        help="more `train` flags for every configuration, e.g. "
        '--flags="--batch-tokens 1536 --warmup 400"',
    )
    parser.add_argument("--plot", help="also draw BLEU by source length into this PNG")
    parser.add_argument(
        "--table-only",
        action="store_true",
        help="train nothing: write RESULTS.md from the runs already finished in --output",
    )
    return parser


def main(argv=None):
    args = parser().parse_args(argv)
    common = [
        "--epochs",
        str(args.epochs),
        "--hidden-dim",
        str(args.hidden_dim),
        "--num-layers",
        "2",
        "--verbose",
        "0",
        *args.flags.split(),
    ]
    rows, shared = [], None
    for name, flags in CONFIGURATIONS:
        if args.only and not any(part.lower() in name.lower() for part in args.only):
            continue
        output = os.path.join(
            args.output,
            name.split(" (")[0].lower().replace(" + ", "-").replace(", ", "-").replace(" ", "-"),
        )
        if shared is not None:
            share_data(shared, output)
        # The transformer's embedding width is its --hidden-dim (it has no --embed-dim).
        widths = [] if "transformer" in flags else ["--embed-dim", str(args.embed_dim)]
        train = ["train", "--output", output, *flags, *common, *widths]
        if args.table_only:
            if not os.path.exists(os.path.join(output, "scores.json")):
                continue
        else:
            train_and_evaluate(train, output)
        shared = shared or output
        rows.append(measured(name, output, train))
    write_generated_part(args.results, report(args, rows))
    print(f"wrote {args.results}")
    if args.plot:
        plot_by_length([(row[0], row[-1]) for row in rows], args.plot)
        print(f"wrote {args.plot}")


VOCABULARIES = ("source.spm", "target.spm")  # train's default --tokenizer, SentencePiece


def share_data(shared, output):
    """Same data, same vocabularies: copy the first run's (`shared`) split
    and vocabulary files into `output` instead of learning them again,
    unless `output` has its vocabulary already."""
    if os.path.exists(os.path.join(output, VOCABULARIES[0])):
        return
    os.makedirs(output, exist_ok=True)
    shutil.copytree(os.path.join(shared, "data"), os.path.join(output, "data"), dirs_exist_ok=True)
    for vocab in VOCABULARIES:
        shutil.copy(os.path.join(shared, vocab), os.path.join(output, vocab))


def train_and_evaluate(train, output):
    """Run `keras-attention-translate` with the arguments `train`, then
    `evaluate` (beam 4, no samples) on `output`, each printed first; a
    finished run is trained again (`--overwrite`)."""
    evaluate = ["evaluate", "--output", output, "--beam-width", "4", "--samples", "0"]
    for command in (train, evaluate):
        if command is train and os.path.exists(os.path.join(output, "model.keras")):
            command = [*train, "--overwrite"]  # train refuses a finished run otherwise
        print("$ keras-attention-translate " + " ".join(command), flush=True)
        subprocess.run([sys.executable, "-m", f"{__package__}.translate", *command], check=True)


def measured(name, output, train):
    """The table's row of the run in `output`: `(name, BLEU, chrF,
    validation loss, parameters, training seconds, the train arguments,
    BLEU by source length)`."""
    scores = read_json(os.path.join(output, "scores.json"), "the run's scores")
    config = read_json(os.path.join(output, "config.json"), "the trained model's settings")
    import keras

    import keras_attention  # noqa: F401

    parameters = keras.saving.load_model(os.path.join(output, "model.keras")).count_params()
    return (
        name,
        scores["bleu"],
        scores["chrf"],
        config.get("val_loss", float("nan")),
        parameters,
        config["train_seconds"],
        train,
        scores.get("bleu_by_source_length", {}),
    )


def report(args, rows):
    """The generated part of RESULTS.md: how the `rows` (`measured`) were
    made, their table, BLEU by source length, and the commands."""
    with io.StringIO() as handle:
        handle.write("# Results: German → English on the Ding corpus\n\n")
        handle.write(
            f"Produced by `keras-attention-results --epochs {args.epochs} "
            f"--hidden-dim {args.hidden_dim} "
            f"--embed-dim {args.embed_dim}"
            + (f' --flags="{args.flags}"' if args.flags else "")
            + "` (`make results` runs it for the models below, with `--plot`). "
            "Test split of "
            "the Ding dictionary's example sentences (Debian `trans-de-en`, "
            "hashed 90/5/5 split), beam "
            "search of width 4, sacrebleu BLEU and chrF. "
            f"Every model trained {args.epochs} epochs with "
            f"width {args.hidden_dim}, 2 layers and the `train` defaults "
            "(dropout 0.1, label smoothing 0.1, Adam, SentencePiece)"
            + (f" changed by `{args.flags}`" if args.flags else "")
            + ", the same data and vocabularies (learned once from the training split), "
            "seed 0, on "
            f"{args.machine}. Training time is wall-clock on that (shared, noisy) machine.\n\n"
        )
        missing = [name for name, _ in CONFIGURATIONS if name not in [row[0] for row in rows]]
        if missing:
            handle.write(f"Not yet run at this budget: {', '.join(missing)}.\n\n")
        handle.write(
            "| model | BLEU | chrF | validation loss | parameters | training time (s) |\n"
            "|---|---|---|---|---|---|\n"
        )
        for name, bleu, chrf, val_loss, parameters, seconds, *_ in rows:
            handle.write(
                f"| {name} | {bleu:.2f} | {chrf:.2f} | {val_loss:.3f} | "
                f"{parameters:,} | {seconds:.0f} |\n"
            )
        handle.write(length_table([(row[0], row[-1]) for row in rows]))
        handle.write(
            "\nCommands (each followed by `keras-attention-translate evaluate --output DIR "
            "--beam-width 4`):\n\n```bash\n"
        )
        for *_, command, _ in rows:
            handle.write("keras-attention-translate " + " ".join(command) + "\n")
        handle.write("```\n")
        return handle.getvalue()


def length_buckets(rows):
    """The buckets ("1-5", ..., "26+") any of `rows`' runs has, shortest first."""
    found = {bucket for _, by_length in rows for bucket in by_length}
    return sorted(found, key=lambda bucket: int(bucket.split("-")[0].rstrip("+")))


def length_table(rows):
    """BLEU by source length, a row per model and a column per bucket
    (`evaluate`'s `bleu_by_source_length`; "—" where a run has none)."""
    buckets = length_buckets(rows)
    if not buckets:
        return ""
    sizes = {b: by_length[b]["sentences"] for _, by_length in rows for b in by_length}
    lines = [
        "",
        "BLEU by source length in words (test sentences in each bucket):",
        "",
        "| model | " + " | ".join(f"{b} ({sizes[b]})" for b in buckets) + " |",
        "|---|" + "---:|" * len(buckets),
    ]
    for name, by_length in rows:
        cells = [f"{by_length[b]['bleu']:.2f}" if b in by_length else "—" for b in buckets]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot_by_length(rows, path):
    """BLEU against source length (bucket order), a line per model; the
    no-attention baseline dashed, as in `recipes.bottleneck`'s plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = length_buckets(rows)
    figure, axis = plt.subplots(figsize=(6, 4))
    for name, by_length in rows:
        style = {"linestyle": "--", "color": "black"} if "no attention" in name else {}
        points = [(i, by_length[b]["bleu"]) for i, b in enumerate(buckets) if b in by_length]
        axis.plot(*zip(*points), marker="o", label=name, **style)
    axis.set_xticks(range(len(buckets)), buckets)
    axis.set_xlabel("source length (words)")
    axis.set_ylabel("test BLEU")
    axis.set_title("Ding German→English, BLEU by source length")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=70)
    plt.close(figure)


BEGIN, END = "<!-- generated by recipes/results.py: begin -->", "<!-- generated: end -->"


def write_generated_part(path, text):
    """Write `text` between the `BEGIN` and `END` markers of `path`,
    keeping what was written by hand around them (the whole file when it
    does not exist or has no markers yet)."""
    before, after = "", ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            old = handle.read()
        if BEGIN in old and END in old:
            before, after = old.split(BEGIN, 1)[0], old.split(END, 1)[1]

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(f"{before}{BEGIN}\n{text}{END}{after or chr(10)}")

    write_atomically(path, write)


if __name__ == "__main__":
    main()
