"""Training speed of the translation models with 0.2.0's padded batches
and with length buckets: real (non-padding) target tokens per second of `model.fit`
steps on the Ding corpus, with float32, `mixed_bfloat16` and XLA.

Models: the recipe's `build_model` at the demo's configuration, the
Transformer (width 128, 2 layers, 4 heads, feed-forward 256) and ConvS2S
of the same width (embedding 128, 2+2 layers of (128, 3) convolutions);
`--max-length 32`, dropout 0.1, Adam with `global_clipnorm`, label
smoothing 0.1. Vocabularies: SentencePiece, `--vocab-size` pieces a side
(`source.spm`, `target.spm` of `--run`, learned there when missing).

Batching (the rows of the table):

- `padded 64x32` (0.2.0, the baseline): 64 pairs a batch in a shuffled
  order, every source padded to 32 pieces and every target to 33
  (32 in, 32 out), built here from the same encoded pairs;
- `bucketed 2048`: `make_dataset(..., batch_tokens=2048)`, the recipe's
  `--batch-tokens 2048`: length buckets, about 2048 pieces a side a batch;
- `bucketed + tied` (Transformer): the same batches,
  `TransformerSeq2Seq(tie_embeddings=True)`.

Modes: `fp32`; `bf16` (`keras.mixed_precision` policy `mixed_bfloat16`);
`xla` (`compile(jit_compile=True)`, float32).

Method. Each cell (family, batching, mode) gets its own model. A cell's
timed sample is `--steps` batches: the padded batches are the first full
ones of the shuffled order; the bucketed ones are drawn evenly over the
epoch's batches of the `--shapes` most frequent batch shapes (XLA compiles
once per shape, and compiling every shape of an epoch would take most of
the run), and their share of the epoch's batches and tokens is printed.
Warm-up: one `fit` over one batch of each of the sample's shapes, then
the same again; the difference is the trace (and, with XLA, compile) cost,
one measurement. When every cell of a family is built, each runs that
warm-up `fit` once more, untimed. Then `--repeats` rounds, every cell of a family in turn
in each round, one `fit(epochs=1)` over its sample each. Tokens per second
count the real tokens of `target_out` (the loss's tokens); the table holds
medians over rounds and, per round, the ratio to the family's `padded
64x32 fp32` cell and to the same batching's `fp32` cell (medians of the
per-round ratios: rounds are paired in time, which cancels much of a
shared machine's drift).

    python bench/training.py [--run DIR] [--steps 10] [--repeats 8]
        [--families transformer convs2s] [--shapes 3] [--quick]
"""

import argparse
import gc
import os
import statistics
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

from keras_attention_recipes.runs import import_tensorflow_quietly  # noqa: E402

import_tensorflow_quietly()  # TensorFlow's CUDA probe messages on a CPU machine

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_attention_recipes.translation.corpus import read_pairs
from keras_attention_recipes.translation.data import load_tokenizers
from keras_attention_recipes.translation.model import build_model  # noqa: E402
from keras_attention_recipes.translation.pipeline import make_dataset
from keras_attention_recipes.translation.splits import prepare

BATCHINGS = {  # name -> (family allowed, tied embeddings)
    "padded 64x32": ("transformer", "convs2s"),
    "bucketed 2048": ("transformer", "convs2s"),
    "bucketed + tied": ("transformer",),
}
BASELINE = "padded 64x32"
MODES = ("fp32", "bf16", "xla")
PADDED_BATCH = 64  # 0.2.0's --batch-size
BATCH_TOKENS = 2048


def model_config(family, args, tied=False, jit=False):
    """The recipe's config of the demo's model (`build_model` reads it)."""
    config = {
        "family": family,
        "attention": None,
        "hidden_dim": args.units,
        "num_layers": args.layers,
        "dropout": 0.1,
        "learning_rate": 1e-3,
        "label_smoothing": 0.1,
        "max_length": args.max_length,
        "style": "luong",
        "warmup": 0,
        "jit": jit,
    }
    if family == "transformer":
        config.update(num_heads=args.heads, position="sinusoidal", tie_embeddings=tied)
    else:
        config["embed_dim"] = args.units
    return config


def build(family, batching, mode, args, vocab):
    """A compiled model for one cell, with the same seed for every cell."""
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if mode == "bf16" else "float32")
    try:
        config = model_config(family, args, tied=batching == "bucketed + tied", jit=mode == "xla")
        return build_model(config, *vocab)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def padded_batches(path, source_tokenizer, target_tokenizer, max_length, count, seed):
    """0.2.0's batches: the pairs that fit `max_length` in a shuffled order,
    `PADDED_BATCH` a batch, sources padded to `max_length`, targets to
    `max_length + 1` (then split into in and out); the first `count` full
    batches, and the number of batches an epoch had."""
    pairs = read_pairs(path)
    source, source_cut = source_tokenizer.encode(tf.constant([p[0] for p in pairs]), max_length)
    target, target_cut = target_tokenizer.encode(tf.constant([p[1] for p in pairs]), max_length + 1)
    keep = ~(source_cut.numpy() | target_cut.numpy())
    source, target = source.numpy()[keep], target.numpy()[keep]
    order = np.random.default_rng(seed).permutation(len(source))
    if len(source) < PADDED_BATCH * count:
        raise SystemExit(
            f"error: --steps {count} needs {PADDED_BATCH * count} training pairs; "
            f"the split has {len(source)} that fit"
        )
    batches = []
    for start in range(0, PADDED_BATCH * count, PADDED_BATCH):
        rows = order[start : start + PADDED_BATCH]
        batches.append(((source[rows], target[rows, :-1]), target[rows, 1:]))
    epoch = -(-len(source) // PADDED_BATCH)
    return batches, epoch, len(source)


def shape_of(batch):
    (source, target_in), _ = batch
    return source.shape, target_in.shape


def bucketed_sample(epoch, count, shapes, seed):
    """`count` batches of `epoch` drawn evenly over its batches of the
    `shapes` most frequent shapes (in proportion to their frequency), in a
    shuffled order; and those shapes' share of the epoch's batches and of
    its real target tokens."""
    frequency = {}
    for batch in epoch:
        frequency[shape_of(batch)] = frequency.get(shape_of(batch), 0) + 1
    kept = sorted(frequency, key=lambda shape: -frequency[shape])[:shapes]
    pool = sorted(
        (batch for batch in epoch if shape_of(batch) in kept),
        key=lambda batch: kept.index(shape_of(batch)),
    )
    picks = [pool[int((i + 0.5) * len(pool) / count)] for i in range(count)]
    picks = [picks[i] for i in np.random.default_rng(seed).permutation(count)]
    tokens = sum(real_tokens(batch) for batch in pool) / sum(real_tokens(b) for b in epoch)
    return picks, len(pool) / len(epoch), tokens


def real_tokens(batch):
    return int(np.count_nonzero(batch[1]))


def as_dataset(batches):
    """The batches, in order, as a `tf.data.Dataset` held in memory (shapes
    may differ, as in the recipe's bucketed dataset)."""
    data = None
    for batch in batches:
        one = tf.data.Dataset.from_tensors(batch)
        data = one if data is None else data.concatenate(one)
    return data


def fit_seconds(model, data):
    """Wall-clock and CPU seconds (this process's, all threads) of one
    `fit` epoch over `data`. Python's garbage collector is run before and
    held off during it (as `timeit` does): with a dozen traced models in
    memory, a full collection inside a timed epoch took seconds and made
    one cell 20x slower than the next in a trial run."""
    gc.collect()
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        model.fit(data, epochs=1, verbose=0, shuffle=False)
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        gc.enable()


def one_per_shape(batches):
    seen = {}
    for batch in batches:
        seen.setdefault(shape_of(batch), batch)
    return list(seen.values())


RUN_FILES = ("data/train.tsv", "source.spm", "target.spm")


def reusable(run):
    """Whether `run` holds a training split and SentencePiece vocabularies."""
    return all(os.path.exists(os.path.join(run, name)) for name in RUN_FILES)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--run",
        help="a folder holding (or to hold) data/ and source.spm, target.spm "
        "(default: a new temporary folder)",
    )
    parser.add_argument("--vocab-size", type=int, default=4000, help="pieces a side, if learned")
    parser.add_argument("--families", nargs="+", default=["transformer", "convs2s"])
    parser.add_argument("--batchings", nargs="+", default=list(BATCHINGS), choices=BATCHINGS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--steps", type=int, default=10, help="timed batches per cell and round")
    parser.add_argument("--repeats", type=int, default=8, help="timed rounds")
    parser.add_argument("--shapes", type=int, default=3, help="bucket shapes the sample draws on")
    parser.add_argument("--units", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 3000 pairs, 500 pieces, width 32, 1 layer, the Transformer's "
        "three batchings in fp32, 2 steps, 1 round, 1 shape",
    )
    args = parser.parse_args(argv)
    for family in args.families:
        if family not in ("transformer", "convs2s"):
            parser.error(f"--families: transformer and/or convs2s; got {family!r}")
    for name in ("steps", "repeats", "shapes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1; got {getattr(args, name)}")
    if args.run and os.path.exists(args.run) and os.listdir(args.run) and not reusable(args.run):
        parser.error(
            f"--run {args.run} must hold {', '.join(RUN_FILES)} (a run trained with "
            "--tokenizer sentencepiece), or be a new or empty folder to prepare them in"
        )
    if args.quick:
        args.vocab_size, args.units, args.layers, args.heads = 500, 32, 1, 2
        args.families, args.modes = ["transformer"], ["fp32"]
        args.steps, args.repeats, args.shapes = 2, 1, 1
    return args


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    run = args.run or tempfile.mkdtemp(prefix="training-bench-")
    if reusable(run):  # a run's split and vocabularies, whatever they were made with
        paths = {"train": os.path.join(run, "data", "train.tsv")}
    else:
        paths = prepare(run, limit=3000 if args.quick else None)
    tokenizers = load_tokenizers(run, paths, args.vocab_size, tokenizer="sentencepiece")
    vocab = [tokenizer.vocab_size for tokenizer in tokenizers]
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    padded, padded_epoch, kept = padded_batches(
        paths["train"], *tokenizers, args.max_length, args.steps, args.seed
    )
    data, _, _ = make_dataset(
        paths["train"],
        *tokenizers,
        args.max_length,
        PADDED_BATCH,
        shuffle=True,
        seed=args.seed,
        batch_tokens=BATCH_TOKENS,
    )
    epoch = list(data.as_numpy_iterator())
    bucketed, batch_share, token_share = bucketed_sample(epoch, args.steps, args.shapes, args.seed)
    epoch_tokens = sum(real_tokens(batch) for batch in epoch)
    epoch_positions = sum(batch[1].size for batch in epoch)
    padded_positions = padded_epoch * PADDED_BATCH * args.max_length
    print(
        f"train split: {kept} pairs fit, {epoch_tokens} real target tokens an epoch; "
        f"vocabularies {vocab[0]} / {vocab[1]} pieces"
    )
    print(
        f"padded 64x32: {padded_epoch} batches an epoch, "
        f"{100 * epoch_tokens / padded_positions:.0f}% of target positions real"
    )
    print(
        f"bucketed {BATCH_TOKENS}: {len(epoch)} batches an epoch in "
        f"{len({shape_of(b) for b in epoch})} shapes, "
        f"{100 * epoch_tokens / epoch_positions:.0f}% of target positions real; the sample "
        f"draws on the {args.shapes} most frequent shapes "
        f"({', '.join('x'.join(map(str, s[1])) for s in sorted({shape_of(b) for b in bucketed}))}"
        f" target in): {100 * batch_share:.0f}% of the batches, {100 * token_share:.0f}% of "
        "the tokens"
    )
    samples = {BASELINE: padded, "bucketed 2048": bucketed, "bucketed + tied": bucketed}
    print(
        f"sample: {args.steps} batches a cell; {args.repeats} rounds; "
        f"real target tokens per sample: padded {sum(map(real_tokens, padded))}, "
        f"bucketed {sum(map(real_tokens, bucketed))}\n"
    )

    rows = []
    for family in args.families:
        cells = [
            (batching, mode)
            for batching, families in BATCHINGS.items()
            if family in families and batching in args.batchings
            for mode in args.modes
        ]
        rows += measure(family, cells, samples, args, vocab)
    print(
        "\n| family | batching | mode | tokens/s | x baseline (range) | x fp32 | "
        "tokens/CPU-s | x baseline, CPU | trace+compile s (shapes) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['family']} | {row['batching']} | {row['mode']} | {row['speed']:.0f} | "
            f"{fmt(row['x_baseline'])} | {fmt(row['x_fp32'])} | {row['cpu_speed']:.0f} | "
            f"{fmt(row['x_baseline_cpu'])} | {row['warmup']:.1f} ({row['shapes']}) |"
        )
    print(
        f"\nload average at the end: {os.getloadavg()[0]:.1f}; "
        f"{(time.perf_counter() - started) / 60:.1f} minutes in all"
    )
    return rows


def measure(family, cells, samples, args, vocab):
    """One table row a cell of `family`: warm-up, then the timed rounds
    (see the module docstring)."""
    models, data, warm_data, warmup = {}, {}, {}, {}
    for cell in cells:
        batching, mode = cell
        models[cell] = model = build(family, batching, mode, args, vocab)
        warm_data[cell] = as_dataset(one_per_shape(samples[batching]))
        data[cell] = as_dataset(samples[batching])
        first, _ = fit_seconds(model, warm_data[cell])
        warmup[cell] = first - fit_seconds(model, warm_data[cell])[0]
        print(
            f"{family} {batching} {mode}: trace/compile {warmup[cell]:.1f}s "
            f"over {len(one_per_shape(samples[batching]))} shape(s)",
            flush=True,
        )
    # Once more, untimed: the first `fit` of a model after other models
    # were traced took seconds more than the next (0.2 s -> 3 s in a
    # trial), whatever its data.
    for cell in cells:
        fit_seconds(models[cell], warm_data[cell])
    wall = {cell: [] for cell in cells}
    cpu = {cell: [] for cell in cells}
    for index in range(args.repeats):
        # Each round starts one cell later, so no cell always runs first.
        for cell in cells[index % len(cells) :] + cells[: index % len(cells)]:
            tokens = sum(map(real_tokens, samples[cell[0]]))
            seconds, cpu_seconds = fit_seconds(models[cell], data[cell])
            wall[cell].append(tokens / seconds)
            cpu[cell].append(tokens / cpu_seconds)
        print(f"{family}: round {index + 1} of {args.repeats} done", flush=True)
    rows = []
    for cell in cells:
        batching, mode = cell
        baseline = (BASELINE, "fp32")
        rows.append(
            {
                "family": family,
                "batching": batching,
                "mode": mode,
                "speed": statistics.median(wall[cell]),
                "x_baseline": ratios(wall[cell], wall.get(baseline), spread=True),
                "x_fp32": ratios(wall[cell], wall.get((batching, "fp32"))),
                "cpu_speed": statistics.median(cpu[cell]),
                "x_baseline_cpu": ratios(cpu[cell], cpu.get(baseline)),
                "warmup": warmup[cell],
                "shapes": len(one_per_shape(samples[batching])),
            }
        )
    return rows


def ratios(speeds, reference, spread=False):
    """The median over rounds of speed / reference speed (rounds paired in
    time), with the lowest and highest round's when `spread`; None without
    a reference."""
    if reference is None:
        return None
    each = [s / r for s, r in zip(speeds, reference)]
    return (statistics.median(each), min(each), max(each)) if spread else statistics.median(each)


def fmt(ratio):
    if ratio is None:
        return "-"
    if isinstance(ratio, tuple):
        return f"{ratio[0]:.2f} ({ratio[1]:.2f}-{ratio[2]:.2f})"
    return f"{ratio:.2f}"


if __name__ == "__main__":
    main()
