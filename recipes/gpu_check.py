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
import shutil
import subprocess
import sys
import time

# A GPU's whole memory is not JAX's to take at its first use: the check's
# own process lists the devices and counts pieces, its steps are processes
# of their own, and the tuner's chief and worker share a GPU.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from . import runs  # noqa: E402 (after the environment JAX reads)
from .distributed_tuning import visible_gpus  # noqa: E402
from .translation.command_settings import COMMAND_DEFAULTS  # noqa: E402
from .translation.config import TranslationConfig  # noqa: E402
from .translation.corpus import CorpusError  # noqa: E402
from .translation.data import load_tokenizers, numbers_to_protect  # noqa: E402
from .translation.inputs import datasets  # noqa: E402
from .translation.splits import SPLITS  # noqa: E402
from .translation.training import prepared_run, train_settings  # noqa: E402

# The tuner's trials: small, as the check is of the machinery, not the sizes.
SMALL_SEARCH = {"embed_dim": [64], "hidden_dim": [128], "num_layers": [1, 2], "num_heads": [4]}
TRIALS = 2


def check_settings(output, minutes, gpus, extra=None):
    """The settings of each step's command, by command: the demo's model
    and data (`COMMAND_DEFAULTS["demo"]`: its family and preset) trained
    with mixed bfloat16 on a time budget, scored, and searched around;
    `extra`: more settings by command (a smaller run, for the tests). The
    search reads the run's splits as its corpus (`corpus_of_splits`),
    which it splits as the run did (by each source's hash)."""
    extra = extra or {}
    run = os.path.join(output, "train")
    demo = {key: COMMAND_DEFAULTS["demo"][key] for key in ("family", "preset")}
    settings = {
        "train": {"output": run, **demo, "mixed_precision": "bfloat16", "epochs": 200}
        | {"time_budget": minutes, "verbose": 2},
        "evaluate": {"output": run},
        "tune": {"output": os.path.join(output, "tune"), "algorithm": "random"}
        | {"trials": max(gpus, TRIALS), "epochs": 1, "families": ["convs2s"]}
        | {"corpus": os.path.join(output, "corpus.tsv"), "dictionary": 0.0},
    }
    return {name: {**values, **extra.get(name, {})} for name, values in settings.items()}


def command_line(command, settings):
    """`keras-attention-translate` arguments of `command` with `settings`."""
    argv = [command]
    for name, value in settings.items():
        argv += [runs.flag(name), *map(str, value if isinstance(value, list) else [value])]
    return argv


def prepare(output, minutes, extra=None, log=print):
    """Here, where the corpus is: the check's run with its data split and
    vocabularies, its settings claimed (`run.json`), in `<output>/prepared`,
    so that `train` on the GPU machine reads no corpus (each check trains a
    copy of it)."""
    settings = check_settings(output, minutes, 1, extra)["train"]
    config = config_of({**settings, "output": os.path.join(output, "prepared")})
    prepared_run(config, train_settings(config)[0], True, log)
    log(f"gpu-check: prepared {config.output}; carry it and the wheels to the GPU machine")


def config_of(settings):
    """The validated `TranslationConfig` of `train` with `settings`."""
    return TranslationConfig.for_command("train", **settings).validate()


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


def epoch_target_pieces(settings):
    """The target pieces (padding left out) of one epoch of the run that
    `train` with `settings` trains: its first epoch's batches, dictionary
    draws included, as training reads them."""
    config = config_of(settings)
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
    return sum(int((target > 0).sum()) for _, target in batches)


def check_gpus(output, minutes, gpus, extra=None):
    """The check's three steps on this machine (see the module docstring),
    on a fresh copy of the prepared run (a check run again starts over);
    returns the record it prints and writes to `<output>/gpu_check.json`."""
    settings = check_settings(output, minutes, gpus, extra)
    translate = [sys.executable, "-m", f"{__package__}.translate"]
    run = os.path.join(output, "train")
    for done in (run, os.path.join(output, "tune"), os.path.join(output, "tune-logs")):
        shutil.rmtree(done, ignore_errors=True)
    shutil.copytree(os.path.join(output, "prepared"), run)
    seconds = {
        "train": step(
            f"train (the demo's model, {minutes:g} min)",
            translate + command_line("train", settings["train"]),
        )
    }
    record = json.load(open(os.path.join(run, "config.json")))
    budget = record.get("time_budget") or {}
    seconds["evaluate"] = step(
        "evaluate (Ding test split, beam 4)",
        translate + command_line("evaluate", settings["evaluate"]),
    )
    scores = json.load(open(os.path.join(run, "scores.json")))
    workers, trials = max(gpus, 1), settings["tune"]["trials"]
    corpus_of_splits(output)
    tune = command_line("tune", settings["tune"])[1:]  # the launcher runs `tune`
    seconds["tune"] = step(
        f"tune ({trials} trials of 1 epoch, KerasTuner, {workers} worker(s))",
        [sys.executable, "-m", f"{__package__}.distributed_tuning", "--workers", str(workers)]
        + ["--logs", os.path.join(output, "tune-logs"), "--", *tune],
        env={"KERAS_ATTENTION_SEARCH_SPACE": json.dumps(SMALL_SEARCH)},
    )
    epochs = budget["steps"] / budget["epoch_steps"] if budget else record["epochs"]
    pieces = epoch_target_pieces(settings["train"]) * epochs
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
    errors = (runs.UsageError, CorpusError, ValueError, OSError)
    if args.prepare:
        with runs.command_errors(lambda: "interrupted: run it again", errors):
            prepare(args.output, args.minutes)
        return 0
    gpus = len(visible_gpus())
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
    if not os.path.exists(os.path.join(args.output, "prepared", "run.json")):
        sys.exit(
            f"error: {args.output}/prepared holds no prepared run: make gpu-check-prepare on a "
            "machine with the Ding corpus, and carry the folder here"
        )
    with runs.command_errors(lambda: "interrupted: run the check again", errors):
        check_gpus(args.output, args.minutes, gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
