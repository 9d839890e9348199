"""`train --workers N` on this machine: training steps per second and real
target pieces per second of the demo's model, one process against a
cluster of worker processes, on the same global batches.

Cells (each a fresh set of processes, taking turns within each round):

- `1 process` — `train` as it runs by default: one process, every core,
  TensorFlow's own thread pools;
- `N workers` — `train --workers N`: N processes in a
  `MultiWorkerMirroredStrategy` cluster on loopback, each pinned to its
  share of the cores with thread pools of that size (the helpers of
  `recipes/translation/workers.py`), each global batch split among them
  (tf.data's DATA sharding, as in the recipe) and the gradients summed
  over gRPC every step;
- `N halves, no exchange` (`--upper-bound`) — the same N pinned
  processes, each training alone on its part of every global batch,
  with no gradient exchange: what the cluster could reach if the
  exchange and the step-by-step synchronisation were free.

Method. The parent draws `--steps` batches of the run's bucketed training
epoch at the demo's `--batch-tokens 1536` (the 3 most frequent shapes,
as `bench/cpu_training.py` does). Each process builds the demo's model
(`recipes.translation.model.build_model`) and runs `fit` for two
epochs over the batches, timing the second (the first traces the step
and, in a cluster, sets up the collectives): its steps, from the first
one's start to the last one's end, and the whole epoch. A cluster's
workers are given the batches as the recipe gives them
(`repeated_for_fit`: one iterator for every epoch). Pieces/s count
the real target pieces of the global batches, once; the cluster's time
is its slowest worker's. The table holds medians over `--repeats`
rounds and the median of each round's ratio to `1 process`. The load
average is printed before each round (other programs on the machine
slow every cell).

    python bench/workers.py --run runs/demo [--workers 2] [--steps 32] [--repeats 5]
        [--upper-bound]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cpu_training import demo_settings, draw_batches  # noqa: E402  (bench/cpu_training.py)
from keras_attention_recipes.translation.cluster import shares  # noqa: E402
from keras_attention_recipes.translation.workers import free_ports  # noqa: E402


def child(args):
    """One process's measurement (`--child`), printed as a JSON line."""
    import numpy as np

    options = json.loads(args.options)
    cores = options.get("cores")
    if cores:
        os.sched_setaffinity(0, cores)
    import tensorflow as tf

    if cores:
        tf.config.threading.set_intra_op_parallelism_threads(len(cores))
        tf.config.threading.set_inter_op_parallelism_threads(len(cores))
    # TF_CONFIG from the parent: collectives before any other op
    strategy = tf.distribute.MultiWorkerMirroredStrategy() if os.environ.get("TF_CONFIG") else None
    import keras
    from keras_attention_recipes.translation.model import build_model

    from keras_attention.training.distribute import adapt_for_distribution, repeated_for_fit

    stored = np.load(args.batches)
    count = len([k for k in stored.files if k.startswith("source_")])
    batches = [
        tuple(stored[f"{name}_{i}"] for name in ("source", "target_in", "target_out"))
        for i in range(count)
    ]
    part, parts = options.get("part", 0), options.get("parts", 1)
    if strategy is None and parts > 1:  # this process's part of each batch only
        batches = [tuple(np.array_split(a, parts)[part] for a in batch) for batch in batches]
    tokens = sum(int(np.count_nonzero(target_out)) for _, _, target_out in batches)
    keras.utils.set_random_seed(0)
    settings = {**demo_settings(), "jit": False}
    if strategy is not None:
        with strategy.scope():
            model = build_model(settings, args.source_vocab, args.target_vocab)
            model.optimizer.build(model.trainable_variables)
            adapt_for_distribution(model)
    else:
        model = build_model(settings, args.source_vocab, args.target_vocab)

    def dataset(chosen):
        data = None
        for source, target_in, target_out in chosen:
            one = tf.data.Dataset.from_tensors(((source, target_in), target_out))
            data = one if data is None else data.concatenate(one)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        return data.with_options(options)

    class Clock(keras.callbacks.Callback):  # the second epoch: the first traced the step
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch, self.cpu = time.perf_counter(), time.process_time()

        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                self.first = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            self.last = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.epoch = time.perf_counter() - self.epoch
            self.cpu = time.process_time() - self.cpu

    clock = Clock()
    data, steps = repeated_for_fit(model, dataset(batches))  # as the recipe feeds it
    model.fit(data, steps_per_epoch=steps, epochs=2, verbose=0, shuffle=False, callbacks=[clock])
    # the steps, and the whole epoch (its end included: a new iterator for the next)
    wall, epoch, cpu = clock.last - clock.first, clock.epoch, clock.cpu
    print(json.dumps({"steps": count, "tokens": tokens, "wall": wall, "epoch": epoch, "cpu": cpu}))


def launch(args, vocab, batches, options, tf_config=None):
    """One child process of a cell."""
    command = [sys.executable, os.path.abspath(__file__), "--child", "--batches", batches]
    command += ["--options", json.dumps(options)]
    command += ["--source-vocab", str(vocab[0]), "--target-vocab", str(vocab[1])]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ROOT}
    environment.pop("TF_CONFIG", None)
    if tf_config is not None:
        environment["TF_CONFIG"] = json.dumps(tf_config)
    return subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def measure(cell, args, vocab, batches):
    """`(steps/s, pieces/s, CPU-seconds, epoch seconds)` of one run of `cell`:
    the steps' rates from the first step's start to the last one's end,
    the epoch's seconds from its start to its end (what `fit` does
    between epochs included)."""
    count = 1 if cell == "1 process" else args.workers
    cores = shares(sorted(os.sched_getaffinity(0)), count, wrap=True) if count > 1 else [None]
    configs = [None] * count
    if cell.endswith("workers"):
        cluster = [f"127.0.0.1:{port}" for port in free_ports(count)]
        configs = [
            {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": k}}
            for k in range(count)
        ]
    processes = [
        launch(args, vocab, batches, {"cores": cores[k], "part": k, "parts": count}, configs[k])
        for k in range(count)
    ]
    results = []
    for process in processes:
        out, err = process.communicate()
        if process.returncode:
            sys.exit(f"cell {cell!r} failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = max(r["wall"] for r in results)
    # the global batches' pieces: the cluster's workers each count all of them
    tokens = results[0]["tokens"] if cell.endswith("workers") else sum(r["tokens"] for r in results)
    epoch = max(r["epoch"] for r in results)
    return results[0]["steps"] / wall, tokens / wall, sum(r["cpu"] for r in results), epoch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="a run's folder (data and vocabularies)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--upper-bound", action="store_true", help="add the no-exchange cell")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batches", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--source-vocab", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--target-vocab", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    from keras_attention_recipes.runs import import_tensorflow_quietly

    import_tensorflow_quietly()
    batches = os.path.join(tempfile.mkdtemp(prefix="bench-workers-"), "batches.npz")
    vocab = draw_batches(args.run, args.steps, batches)
    cells = ["1 process", f"{args.workers} workers"]
    if args.upper_bound:
        cells.append(f"{args.workers} halves, no exchange")
    print(
        f"{len(os.sched_getaffinity(0))} cores; {args.steps} steps x {args.repeats} rounds; "
        f"the demo's model at --batch-tokens 1536",
        flush=True,
    )
    rounds = []
    for index in range(args.repeats):
        with open("/proc/loadavg") as handle:
            load = handle.read().split()[:3]
        results = {}
        for cell in cells[index % len(cells) :] + cells[: index % len(cells)]:
            results[cell] = measure(cell, args, vocab, batches)
        rounds.append(results)
        print(
            f"round {index + 1} (load average {' '.join(load)}): "
            + ", ".join(f"{cell} {r[1]:.0f} pieces/s" for cell, r in results.items()),
            flush=True,
        )
    print("\n| cell | steps/s | target pieces/s | x 1 process (range) | CPU-s | epoch s |")
    print("|---|---|---|---|---|---|")
    for cell in cells:
        ratios = [r[cell][1] / r["1 process"][1] for r in rounds]
        print(
            f"| {cell} | {statistics.median(r[cell][0] for r in rounds):.2f} | "
            f"{statistics.median(r[cell][1] for r in rounds):,.0f} | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{statistics.median(r[cell][2] for r in rounds):.1f} | "
            f"{statistics.median(r[cell][3] for r in rounds):.1f} |"
        )


if __name__ == "__main__":
    main()
