"""`make gpu-check`: is this machine's GPU ready for the recipes?

On a machine with one or more NVIDIA GPUs (`nvidia-smi -L`):

1. trains the demo's model (its family and preset, `COMMAND_DEFAULTS["demo"]`) with
   mixed float16 and XLA (`--mixed-precision float16 --jit`) for
   `--minutes` of training, then scores it on the Ding test split (beam
   search, sacrebleu);
2. runs a small KerasTuner search in KerasTuner's distributed mode, one
   worker process per GPU (`distributed_tuning.py`: worker i sees GPU i),
   one trial per GPU (the trials train in float32: `tune` has no
   precision flag);
3. exports the trained model as a SavedModel;

and prints one line per step with its time, then the BLEU. On a machine
without one it says so in one line and exits 0. Never part of `make test`.

    python -m recipes.gpu_check [--output runs/gpu-check] [--minutes 5]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from .distributed_tuning import gpu_count
from .translation.command_settings import COMMAND_DEFAULTS

# The tuner's trials: small, as the check is of the machinery, not the sizes.
SMALL_SEARCH = {"embed_dim": [64], "hidden_dim": [128], "num_layers": [1, 2], "num_heads": [4]}


def demo_flags():
    """The demo's model and data settings as `train` flags (not its run
    folder, time budget or epochs, which the check sets)."""
    skip = {"output", "time_budget", "epochs", "samples", "alpha"}
    flags = []
    for name, value in COMMAND_DEFAULTS["demo"].items():
        if name not in skip:
            flags += [f"--{name.replace('_', '-')}", str(value)]
    return flags


def check_commands(output, minutes, gpus):
    """The `keras-attention-translate` arguments of each step, by command."""
    run = os.path.join(output, "train")
    return {
        "train": ["train", "--output", run, *demo_flags(), "--mixed-precision", "float16"]
        + ["--jit", "--epochs", "200", "--time-budget", str(minutes), "--verbose", "0"],
        "evaluate": ["evaluate", "--output", run],
        "tune": ["tune", "--output", os.path.join(output, "tune"), "--algorithm", "random"]
        + ["--trials", str(gpus), "--epochs", "1", "--families", "transformer"],
        "export": ["export", "--output", run, "--export-dir", os.path.join(output, "export")],
    }


def step(name, command, env=None):
    """Run `command` (a list); print `name`, its seconds and status; return
    its output. A failed command's last lines go to standard error, and the
    check stops there."""
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
    return result.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", default="runs/gpu-check", help="the check's folder")
    parser.add_argument("--minutes", type=float, default=5.0, help="training time budget")
    args = parser.parse_args(argv)
    gpus = gpu_count()
    if not gpus:
        print("gpu-check: no NVIDIA GPU on this machine (nvidia-smi lists none); nothing to check")
        return 0
    import tensorflow as tf

    visible = tf.config.list_physical_devices("GPU")
    print(f"gpu-check: {gpus} GPU(s) by nvidia-smi, {len(visible)} seen by TensorFlow", flush=True)
    if not visible:
        sys.exit(
            "error: TensorFlow sees no GPU: install its CUDA libraries "
            '(pip install "tensorflow[and-cuda]"), as make gpu-check does'
        )
    shutil.rmtree(args.output, ignore_errors=True)
    commands = check_commands(args.output, args.minutes, gpus)
    translate = [sys.executable, "-m", "recipes.translate"]
    run = os.path.join(args.output, "train")
    step(
        f"train (demo model, mixed float16 + XLA, {args.minutes:g} min budget)",
        translate + commands["train"],
    )
    record = json.load(open(os.path.join(run, "config.json")))["time_budget"]
    print(f"gpu-check: training fit {record['epochs']} epochs, {record['steps']} steps", flush=True)
    step("evaluate (Ding test, beam 4)", translate + commands["evaluate"])
    scores = json.load(open(os.path.join(run, "scores.json")))
    step(
        f"tune (KerasTuner distributed, {gpus} worker(s), one trial per GPU)",
        [sys.executable, "-m", "recipes.distributed_tuning", "--workers", str(gpus)]
        + ["--logs", os.path.join(args.output, "tune-logs"), "--", *commands["tune"]],
        env={"KERAS_ATTENTION_SEARCH_SPACE": json.dumps(SMALL_SEARCH)},
    )
    step("export (SavedModel)", translate + commands["export"])
    print(
        f"gpu-check: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f} on "
        f"{scores['sentences']} test sentences ({args.output})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
