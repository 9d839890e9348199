"""`make gpu-check`: the translation recipe on this machine's NVIDIA GPUs,
through Keras's JAX backend; TensorFlow is not needed there.

Made for a GPU machine without network or TensorFlow (JAX with CUDA, as
this project's are): the run's data and the few Python packages it lacks
are prepared on a machine with the corpus and carried along
(`make gpu-check-prepare`). On the GPU machine:

1. trains the demo's model (its family and preset, `COMMAND_DEFAULTS["demo"]`)
   with mixed bfloat16 for `--minutes` (`train --time-budget`), on every
   GPU of the machine (Keras's data parallelism);
2. scores it on the Ding test split (`evaluate`: beam 4, sacrebleu);
3. runs a KerasTuner search of two trials of one epoch on the run's
   training split, in KerasTuner's distributed mode, a worker process per
   GPU (`distributed_tuning.py`);

then prints one screen: the GPUs, each step's seconds, the training's
target pieces per second, BLEU and chrF. Back on a machine with
TensorFlow, `keras-attention-translate export --output RUN/train` makes
the trained model a SavedModel (the run's files are the same whichever
backend trained it). Without a GPU the check says so in one line and
exits 0. Never part of `make test`.

    python -m recipes.gpu_check --prepare [--output runs/gpu-check]   # here
    KERAS_BACKEND=jax python -m recipes.gpu_check [--output runs/gpu-check] [--minutes 4]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from .distributed_tuning import gpu_count
from .translation.command_settings import COMMAND_DEFAULTS

# The tuner's trials: small, as the check is of the machinery, not the sizes.
SMALL_SEARCH = {"embed_dim": [64], "hidden_dim": [128], "num_layers": [1, 2], "num_heads": [4]}
TRIALS = 2


def demo_flags():
    """The demo's model and data settings as `train` flags (not its run
    folder, time budget or epochs, which the check sets)."""
    skip = {"output", "time_budget", "epochs", "samples", "alpha"}
    flags = []
    for name, value in COMMAND_DEFAULTS["demo"].items():
        if name not in skip:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def check_commands(output, minutes, gpus, extra=None):
    """The `keras-attention-translate` arguments of each step, by command;
    `extra`: more flags by command (a smaller run, for the tests). The
    search reads the run's splits as its corpus (`corpus_of_splits`), which
    it splits as the run did (by each source's hash)."""
    extra = extra or {}
    run = os.path.join(output, "train")
    train = ["train", "--output", run, *demo_flags(), "--mixed-precision", "bfloat16"]
    train += ["--epochs", "200", "--time-budget", str(minutes), "--verbose", "2"]
    tune = ["tune", "--output", os.path.join(output, "tune"), "--algorithm", "random"]
    tune += ["--trials", str(max(gpus, TRIALS)), "--epochs", "1", "--families", "convs2s"]
    tune += ["--corpus", os.path.join(output, "corpus.tsv"), "--dictionary", "0"]
    commands = {"train": train, "evaluate": ["evaluate", "--output", run], "tune": tune}
    return {name: [*argv, *extra.get(name, ())] for name, argv in commands.items()}


def prepare(output, minutes, extra=None, log=print):
    """Here, where the corpus is: the check's run folder with its data
    split and vocabularies, its settings claimed (`run.json`), so that
    `train` on the GPU machine reads no corpus."""
    from .translate import check, parser
    from .translation.training import prepared_run, train_settings

    config = check(parser().parse_args(check_commands(output, minutes, 1, extra)["train"]))
    settings, _ = train_settings(config)
    prepared_run(config, settings, True, log)
    log(f"gpu-check: prepared {config.output}; carry it and the wheels to the GPU machine")


def step(name, command, env=None):
    """Run `command` (a list); print `name`, its seconds and status; return
    its seconds. A failed command's last lines go to standard error, and
    the check stops there."""
    started = time.perf_counter()
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    seconds = time.perf_counter() - started
    status = "ok" if result.returncode == 0 else f"failed (exit {result.returncode})"
    print(f"gpu-check: {name}: {seconds:.0f}s, {status}", flush=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        sys.exit(1)
    return seconds


def corpus_of_splits(output):
    """`<output>/corpus.tsv`: the check's run's train, valid and test
    splits in one file, the search's corpus (no corpus is needed there)."""
    data = os.path.join(output, "train", "data")
    with open(os.path.join(output, "corpus.tsv"), "w", encoding="utf-8") as corpus:
        for split in ("train", "valid", "test"):
            with open(os.path.join(data, f"{split}.tsv"), encoding="utf-8") as handle:
                corpus.writelines(handle)


def epoch_target_pieces(train_argv):
    """The target pieces (padding left out) of one epoch of the run that
    `train_argv` trains: its first epoch's batches, dictionary draws
    included, as training reads them."""
    import keras

    from .translate import check, parser
    from .translation.data import load_tokenizers, numbers_to_protect
    from .translation.inputs import datasets
    from .translation.splits import SPLITS

    config = check(parser().parse_args(train_argv))
    data = os.path.join(config.output, "data")
    paths = {split: os.path.join(data, f"{split}.tsv") for split in (*SPLITS, "dictionary")}
    quiet = lambda line: None  # noqa: E731
    (stream,), _ = datasets(
        paths,
        *load_tokenizers(config.output),
        config.max_length,
        config.batch_size,
        config.seed,
        quiet,
        batch_tokens=config.batch_tokens,
        dictionary=config.dictionary,
        numbers=numbers_to_protect(config, paths["train"], quiet),
        epochs=(0, 1, 0),
    )
    batches = (stream.dataset[i] for i in range(stream.steps))
    return sum(int(keras.ops.sum(target > 0)) for _, target in batches)


def check_gpus(output, minutes, gpus, extra=None):
    """The check's three steps on this machine (see the module docstring);
    returns the record it prints and writes to `<output>/gpu_check.json`."""
    commands = check_commands(output, minutes, gpus, extra)
    translate = [sys.executable, "-m", f"{__package__}.translate"]
    run = os.path.join(output, "train")
    seconds = {
        "train": step(f"train (the demo's model, {minutes:g} min)", translate + commands["train"])
    }
    record = json.load(open(os.path.join(run, "config.json")))
    budget = record.get("time_budget") or {}
    seconds["evaluate"] = step(
        "evaluate (Ding test split, beam 4)", translate + commands["evaluate"]
    )
    scores = json.load(open(os.path.join(run, "scores.json")))
    workers, trials = max(gpus, 1), max(gpus, TRIALS)
    corpus_of_splits(output)
    seconds["tune"] = step(
        f"tune ({trials} trials of 1 epoch, KerasTuner, {workers} worker(s))",
        [sys.executable, "-m", f"{__package__}.distributed_tuning", "--workers", str(workers)]
        + ["--logs", os.path.join(output, "tune-logs"), "--", *commands["tune"][1:]],
        env={"KERAS_ATTENTION_SEARCH_SPACE": json.dumps(SMALL_SEARCH)},
    )
    epochs = budget["steps"] / budget["epoch_steps"] if budget else record["epochs"]
    pieces = epoch_target_pieces(commands["train"]) * epochs
    found = {
        "gpus": gpus,
        "backend": record.get("backend"),
        "seconds": {name: round(value, 1) for name, value in seconds.items()},
        "train_seconds": record["train_seconds"],
        "epochs": round(epochs, 2),
        "target_pieces_per_second": round(pieces / record["train_seconds"]),
        "val_loss": record["val_loss"],
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "sentences": scores["sentences"],
    }
    with open(os.path.join(output, "gpu_check.json"), "w", encoding="utf-8") as handle:
        json.dump(found, handle, indent=2)
    print(
        f"gpu-check: {gpus} GPU(s), Keras on {found['backend']}: {sum(seconds.values()):.0f} s "
        f"of GPU time (train {seconds['train']:.0f}, evaluate {seconds['evaluate']:.0f}, "
        f"tune {seconds['tune']:.0f})\n"
        f"gpu-check: trained {epochs:.1f} epochs in {record['train_seconds']:.0f} s, "
        f"{found['target_pieces_per_second']:,} target pieces/s, validation loss "
        f"{record['val_loss']:.3f}\n"
        f"gpu-check: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} on "
        f"{scores['sentences']} test sentences ({run}; export it where TensorFlow is: "
        f"keras-attention-translate export --output {run})",
        flush=True,
    )
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", default="runs/gpu-check", help="the check's folder")
    parser.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    parser.add_argument(
        "--prepare", action="store_true", help="write the run's data here (with the corpus)"
    )
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.output, args.minutes)
        return 0
    gpus = gpu_count()
    if not gpus:
        print("gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check")
        return 0
    import keras

    devices = keras.distribution.list_devices() if keras.config.backend() == "jax" else []
    print(f"gpu-check: {gpus} GPU(s) by nvidia-smi; Keras on {keras.config.backend()}: {devices}")
    if not any("gpu" in str(device).lower() or "cuda" in str(device).lower() for device in devices):
        sys.exit(
            "error: JAX sees no GPU: run with KERAS_BACKEND=jax in a Python whose JAX has CUDA "
            "(pip install 'jax[cuda13]')"
        )
    if not os.path.exists(os.path.join(args.output, "train", "run.json")):
        sys.exit(
            f"error: {args.output}/train holds no prepared run: make gpu-check-prepare on a "
            "machine with the Ding corpus, and carry the folder here"
        )
    check_gpus(args.output, args.minutes, gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
