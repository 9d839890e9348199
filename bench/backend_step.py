"""The recipe's training step on Keras's TensorFlow and JAX backends: the
same model (`build_model` of the demo's settings, or a family's `small`
preset), the same batch shapes and values, `train_on_batch` timed in a
process of each backend's virtualenv, the two taking turns within each
round.

A process builds each model, trains `--warmup` steps on each shape (JAX
compiles a program per shape, TensorFlow traces one), then times
`--steps` more; its result is the median step of each (family, shape).
The table holds, per cell, the median over `--rounds` rounds of the
same-round ratio TensorFlow / JAX (above 1: JAX's step is faster), its
range, and each backend's median step.

    python bench/backend_step.py --tf-python .venv/bin/python \\
        --jax-python .venv-jax/bin/python [--families convs2s transformer] [--rounds 3]

Batches: random piece ids of a 4,000-piece vocabulary a side, at the two
shapes (rows x pieces) that `--batch-tokens 1536` gives most often on Ding
(`SHAPES`); the targets one piece longer, shifted
as the recipe shifts them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SHAPES = ((219, 7), (80, 19))  # (rows, pieces) of the demo's most frequent batches
VOCABULARY = 4000


def child(families, warmup, steps):
    """Time the step of each family at each shape on this process's backend;
    prints one JSON line `{"backend": ..., "steps": {"family rowsxpieces": ms}}`."""
    sys.path.insert(0, HERE)
    import keras
    import numpy as np
    from cpu_training import demo_settings  # bench/cpu_training.py
    from keras_attention_recipes.translation.config import TranslationConfig, model_settings
    from keras_attention_recipes.translation.model import build_model

    found = {}
    for family in families:
        settings = demo_settings()
        if family != settings["family"]:
            settings = model_settings(TranslationConfig(family=family, preset="small"))
        keras.utils.set_random_seed(0)
        model = build_model(settings, VOCABULARY, VOCABULARY)
        rng = np.random.default_rng(0)
        for rows, pieces in SHAPES:
            source = rng.integers(4, VOCABULARY, (rows, pieces)).astype("int32")
            target = rng.integers(4, VOCABULARY, (rows, pieces + 1)).astype("int32")
            batch = ((source, target[:, :-1]), target[:, 1:])
            for _ in range(warmup):
                model.train_on_batch(*batch)
            times = []
            for _ in range(steps):
                started = time.perf_counter()
                model.train_on_batch(*batch)
                times.append(time.perf_counter() - started)
            found[f"{family} {rows}x{pieces}"] = 1e3 * statistics.median(times)
    print("RESULT " + json.dumps({"backend": keras.backend.backend(), "steps": found}), flush=True)


def measure(python, backend, args):
    """One child process of `python` on `backend`: its step times (ms)."""
    command = [python, __file__, "--child", "--families", *args.families]
    command += ["--warmup", str(args.warmup), "--steps", str(args.steps)]
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not found:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    result = json.loads(found[-1][len("RESULT ") :])
    if result["backend"] != backend:
        raise SystemExit(f"{python} ran Keras on {result['backend']}, not {backend}")
    return result["steps"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tf-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    parser.add_argument("--jax-python", default=os.path.join(ROOT, ".venv-jax", "bin", "python"))
    parser.add_argument("--families", nargs="+", default=["convs2s", "transformer"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.families, args.warmup, args.steps)
    for name in ("rounds", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1; got {getattr(args, name)}")
    sys.path.insert(0, HERE)
    from machine import cpu  # bench/machine.py

    machine = cpu()
    print(f"CPU: {machine['model']}, {machine['cores']} cores, {machine['isa']}", flush=True)
    systems = {"tensorflow": args.tf_python, "jax": args.jax_python}
    rounds = []
    for index in range(args.rounds):
        order = list(systems) if index % 2 == 0 else list(systems)[::-1]
        measured = {backend: measure(systems[backend], backend, args) for backend in order}
        rounds.append(measured)
        print(f"round {index + 1}: {json.dumps(measured)}", flush=True)
    print("\n| model, batch | TensorFlow / JAX, median | range | TensorFlow | JAX |")
    print("|---|---|---|---|---|")
    for cell in rounds[0]["tensorflow"]:
        ratios = [r["tensorflow"][cell] / r["jax"][cell] for r in rounds]
        steps = {b: statistics.median(r[b][cell] for r in rounds) for b in systems}
        print(
            f"| {cell} | {statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} "
            f"| {steps['tensorflow']:.0f} ms | {steps['jax']:.0f} ms |"
        )


if __name__ == "__main__":
    main()
