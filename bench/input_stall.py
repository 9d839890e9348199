"""Whether training waits for its input: the demo's model trained on the
training split's shards, read by the recipe's own pipeline, against the
same batches already in memory.

Systems (one process, one model, taking turns within each round):

- `shards` — `make_dataset(..., shards=...)`, as `train` reads a corpus
  without the dictionary's draws: the shard set of `data/train.tsv`
  (`pipeline.training_shards`, written if missing), shuffled by the epoch's
  seed, bucketed by length at `--batch-tokens`, shifted, fed to `fit`;
- `memory` — the first `--steps` batches of that same stream, read once
  before timing into `tf.data`'s in-memory cache (`Dataset.cache()`):
  the same shapes and values in the same order, with no
  reading, shuffling or batching left to do.

Each pass is one `fit(steps_per_epoch=--steps)` on a fresh iterator, after a
warm-up pass of each (the train function traced for every shape). A
callback stamps the end of every batch: the *step* is the median time
between consecutive batch ends (its first batch left out), the *pass*
the whole `fit`, whose first batch also waits for the shard pipeline to
start (reading the shards into its shuffle buffer). The table holds
medians over `--repeats` rounds of the same-round ratio shards / memory
(1.00 = no stall), with the range. Before them, the pipeline alone: the
wall and CPU time per batch of reading the shard stream with no training.

    python bench/input_stall.py --run runs/demo [--steps 100] [--repeats 5]
    KERAS_BACKEND=jax python bench/input_stall.py --reader numpy --run runs/demo

`--reader numpy` (any backend): `shards` is `batches.ShardBatches` of the
run's shard set (written by a start of the run on TensorFlow, or by
`training_shards`), `memory` a `keras.utils.PyDataset` of its first
`--steps` batches held in a list.

`--run` is a run's folder: its `data/train.tsv` and vocabularies
(`make demo` writes `runs/demo`). The model is the demo's
(`cpu_training.demo_settings`), on TensorFlow's default threads.
"""

import argparse
import json
import os
import statistics
import sys
import time

import keras

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from cpu_training import demo_settings  # noqa: E402  (bench/cpu_training.py)
from machine import cpu  # noqa: E402  (bench/machine.py)

SYSTEMS = ("shards", "memory")


class BatchEnds(keras.callbacks.Callback):
    """Keeps `time.perf_counter()` at the start of training and at each
    batch's end."""

    def on_train_begin(self, logs=None):
        self.times = [time.perf_counter()]

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())


def shard_stream(run, settings, batch_tokens, seed):
    """The first epoch's training stream of `run` read from its shards,
    with the run's tokenizers and number protection; `(dataset, batches
    in the epoch, shard folder)`."""
    from keras_attention_recipes.translation.data import load_tokenizers
    from keras_attention_recipes.translation.pipeline import make_dataset, training_shards
    from keras_attention_recipes.translation.trained_run import number_protection

    with open(os.path.join(run, "config.json"), encoding="utf-8") as handle:
        numbers = number_protection(json.load(handle))
    tokenizers = load_tokenizers(run)
    train = os.path.join(run, "data", "train.tsv")
    max_length = settings["max_length"]
    folder = training_shards(train, *tokenizers, max_length, numbers, log=lambda line: None)
    streams, _, _ = make_dataset(
        train,
        *tokenizers,
        max_length,
        64,
        shuffle=True,
        seed=seed,
        batch_tokens=batch_tokens,
        numbers=numbers,
        shards=folder,
        epochs=(0, 1, 0),
    )
    return streams[0].dataset, streams[0].steps, folder, tokenizers


def numpy_stream(run, batch_tokens, seed):
    """`ShardBatches` of the first epoch of `run`'s training split's shard
    set (which a start of the run wrote), with the run's tokenizers and number
    protection; `(batches, steps in the epoch, folder, (source vocabulary
    size, target vocabulary size), max_length)`."""
    from keras_attention_recipes.translation.batches import (
        ShardBatches,
        bucket_batch_sizes,
        bucket_boundaries,
    )
    from keras_attention_recipes.translation.data import load_tokenizers
    from keras_attention_recipes.translation.shards import chunk_files, read_meta, shard_folder
    from keras_attention_recipes.translation.trained_run import number_protection

    with open(os.path.join(run, "config.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    tokenizers = load_tokenizers(run)
    train = os.path.join(run, "data", "train.tsv")
    max_length = record["max_length"]
    folder = shard_folder(train, tokenizers, max_length, number_protection(record))
    meta = read_meta(folder)
    if meta is None:
        raise SystemExit(f"{folder} is not written: start the run first")
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, 64, batch_tokens)
    batches = ShardBatches(chunk_files(folder, meta), boundaries, sizes, (0, 1, 0), seed=seed)
    vocabularies = tuple(tokenizer.vocab_size for tokenizer in tokenizers)
    return batches, batches.steps, folder, vocabularies, max_length


class Held(keras.utils.PyDataset):
    """The first `steps` batches of a `PyDataset`, read now into a list."""

    def __init__(self, batches, steps):
        super().__init__()
        self.held = [batches[index] for index in range(steps)]

    @property
    def num_batches(self):
        return len(self.held)

    def __getitem__(self, index):
        return self.held[index]


def in_memory(dataset, steps):
    """The first `steps` batches of `dataset`, read now into `tf.data`'s
    in-memory cache, which every later iterator reads in the same order."""
    held = dataset.take(steps).cache()
    for _ in held:  # fills the cache
        pass
    return held


def one_pass(model, dataset, steps):
    """`(median step seconds, pass seconds)` of one `fit`
    over `steps` batches of `dataset`."""
    ends = BatchEnds()
    start = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=[ends], verbose=0, shuffle=False)
    elapsed = time.perf_counter() - start
    gaps = [b - a for a, b in zip(ends.times[1:], ends.times[2:])]
    return statistics.median(gaps), elapsed


def pipeline_alone(dataset, steps, repeats=3):
    """`(median wall seconds, median CPU seconds)` per batch of reading
    `steps` batches of `dataset` with no training: what the pipeline costs
    the cores the training step shares with it."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, used = time.perf_counter(), time.process_time()
        if isinstance(dataset, keras.utils.PyDataset):
            for index in range(steps):
                dataset[index]
        else:
            for _ in dataset.take(steps):
                pass
        walls.append((time.perf_counter() - wall) / steps)
        cpus.append((time.process_time() - used) / steps)
    return statistics.median(walls), statistics.median(cpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="a run's folder (data, vocabularies)")
    parser.add_argument("--steps", type=int, default=100, help="batches per pass")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of both systems")
    parser.add_argument("--batch-tokens", type=int, default=1536)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reader",
        choices=("tf.data", "numpy"),
        default="tf.data",
        help="the recipe's tf.data pipeline (TensorFlow) or ShardBatches (any backend)",
    )
    args = parser.parse_args()
    for name in ("steps", "repeats"):
        if getattr(args, name) < 2:
            parser.error(f"--{name} must be at least 2; got {getattr(args, name)}")

    from keras_attention_recipes.translation.model import build_model

    settings = demo_settings()
    if args.reader == "numpy":
        shards, batches, folder, vocabularies, max_length = numpy_stream(
            args.run, args.batch_tokens, args.seed
        )
        settings = {**settings, "max_length": max_length}
        steps = min(args.steps, batches)
        held = Held(shards, steps)
    else:
        shards, batches, folder, tokenizers = shard_stream(
            args.run, settings, args.batch_tokens, args.seed
        )
        vocabularies = (tokenizers[0].vocab_size, tokenizers[1].vocab_size)
        steps = min(args.steps, batches)
        held = in_memory(shards, steps)
    data = {"shards": shards, "memory": held}
    model = build_model(settings, *vocabularies)
    machine = cpu()
    print(
        f"CPU: {machine['model']}, {machine['cores']} cores, {machine['isa']}; "
        f"Keras on {keras.backend.backend()}, reader {args.reader}; "
        f"{settings['family']} (the demo's model), {steps} steps a pass of the {batches} "
        f"of an epoch, --batch-tokens {args.batch_tokens}; shards: {folder}",
        flush=True,
    )
    wall, used = pipeline_alone(shards, steps)
    print(
        f"the shard pipeline alone: {wall * 1e3:.2f} ms a batch, {used * 1e3:.2f} ms of CPU",
        flush=True,
    )
    for name in SYSTEMS:  # warm-up: every shape traced
        one_pass(model, data[name], steps)
    rounds = []
    for repeat in range(args.repeats):
        order = SYSTEMS if repeat % 2 == 0 else SYSTEMS[::-1]
        measured = {name: one_pass(model, data[name], steps) for name in order}
        rounds.append(measured)
        print(
            f"round {repeat + 1}: "
            + ", ".join(
                f"{name} step {measured[name][0] * 1e3:.1f} ms, pass {measured[name][1]:.2f} s"
                for name in SYSTEMS
            ),
            flush=True,
        )
    print("\n| measure | shards / memory, median | range | shards, median | memory, median |")
    print("|---|---|---|---|---|")
    for index, (label, unit, scale) in enumerate([("step", "ms", 1e3), ("pass", "s", 1.0)]):
        ratios = [r["shards"][index] / r["memory"][index] for r in rounds]
        values = {name: statistics.median(r[name][index] for r in rounds) for name in SYSTEMS}
        print(
            f"| {label} | {statistics.median(ratios):.3f} | {min(ratios):.3f}-{max(ratios):.3f} "
            f"| {values['shards'] * scale:.2f} {unit} | {values['memory'] * scale:.2f} {unit} |"
        )


if __name__ == "__main__":
    main()
