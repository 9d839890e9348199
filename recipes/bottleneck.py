"""The seeds' thesis, measured: a fixed-size context vector is a bottleneck
that attention removes, most visibly as sequences grow (Bahdanau et al.,
2015, Fig. 2).

Task: each source is a random sequence x_1..x_L over SYMBOLS symbols,
L uniform in [--min-length, --max-length]; its target is the source
reversed and mapped symbol by symbol,

    y_t = m(x_{L+1-t}),   m(i) = (3 i + 1) mod SYMBOLS   (a permutation, no fixed point)

so every output token depends on one source token, and the whole source
has to reach the decoder. Every model gets the same budget: the same
batches (--steps of --batch-size, drawn from --seed), width (--units),
optimizer (Adam, global norm clipped at 1, the learning rate warmed up to
its peak over the first tenth of the steps, then cosine-decayed to 0) and
loss (token cross-entropy). One exception: the Transformer's peak rate is
its own (--transformer-learning-rate, 2e-3), as it does not train at the
others' 1e-2 (exact match 0 in every bucket at the default budget; of
1e-3, 2e-3, 5e-3 and 1e-2, 2e-3 did best).

    rnn-none         RecurrentSeq2Seq(attention=None): the bottleneck baseline
    rnn-<mechanism>  RecurrentSeq2Seq(attention=<mechanism>, style="luong"), one per
                     name of keras_attention.get (dot, general, additive, concat,
                     local = Luong's local-p, multihead); 1-layer LSTMs
    convs2s          ConvS2SSeq2Seq, 4 encoder and 4 decoder convolutions (kernel 3)
    transformer      TransformerSeq2Seq, 2 layers, 4 heads

Evaluation: greedy decoding (`generate`) of a fixed test set with the same
count of sources in each length bucket (5-10, 11-15, ..., 26-30 by
default). Against the reference y_1..y_L <eos>: exact match (all L + 1
tokens right) and token accuracy (right tokens / reference tokens,
position by position; padding is not counted). The test set comes from a
random stream of its own; a training sequence may equal a test one only
among the shortest (10^5 sequences of length 5), which is rare and the
same for every model.

    python -m recipes.bottleneck                          # the nine models, ~8 min on 2 cores
    python -m recipes.bottleneck --models rnn-none rnn-additive --output runs/two

Writes DIR/results.json and DIR/predictions.json after each model (an
interrupted sweep keeps the finished models), then DIR/table.md (also
printed) and DIR/bottleneck.png (accuracy against source length).
"""

import argparse
import os
import sys
import time

import numpy as np

# TensorFlow is imported once the arguments are parsed (`--help` at once):
# the attention names are the recipes' checked copy of the library's
# (`keras_attention.registry.names()`).
from . import run_files, runs
from .runs import LIBRARY_ATTENTION, import_tensorflow_quietly

PADDING_ID, SOS_ID, EOS_ID = 0, 1, 2
FIRST_SYMBOL_ID = 3  # ids 3 .. 3 + SYMBOLS - 1 are the symbols
SYMBOLS = 10
MULTIPLIER, OFFSET = 3, 1  # m(i) = (3 i + 1) mod 10: gcd(3, 10) = 1, so a permutation
BUCKET_WIDTH = 5  # lengths per test bucket
PAD_MULTIPLE = 10  # training batches are padded to a multiple of this
HEADS = 4  # of the transformer and of the RNN's multi-head attention
MODELS = (
    ("rnn-none",)
    + tuple(
        f"rnn-{name}"
        for name in LIBRARY_ATTENTION
        if name != "scaled_dot"  # dot's scaled twin
    )
    + ("convs2s", "transformer")
)
# The budget: the sweep of nine fits in minutes on a 2-core CPU, and is
# still enough for an attention RNN to learn lengths up to 20 almost
# perfectly and for the baseline to learn up to 10 (RESULTS.md).
DEFAULTS = {
    "steps": 500,
    "batch_size": 32,
    "units": 64,
    "min_length": 5,
    "max_length": 30,
    "per_bucket": 100,
    "learning_rate": 1e-2,
    "transformer_learning_rate": 2e-3,
}
TINY = {"steps": 4, "batch_size": 8, "units": 8, "max_length": 14, "per_bucket": 3}


UsageError = runs.UsageError  # a user mistake: printed as `error: ...`, exit status 2


# -- the task -----------------------------------------------------------------------
def map_symbols(ids):
    """m applied to symbol ids (any shape): id 3 + i -> id 3 + (3 i + 1) mod SYMBOLS."""
    index = np.asarray(ids) - FIRST_SYMBOL_ID
    return FIRST_SYMBOL_ID + (MULTIPLIER * index + OFFSET) % SYMBOLS


def transduce(source):
    """The target of one unpadded source row: reversed, then mapped."""
    return map_symbols(np.asarray(source)[::-1])


def pad_rows(rows, width):
    """Rows of ids into an int32 `(len(rows), width)` array padded with PADDING_ID."""
    out = np.full((len(rows), width), PADDING_ID, "int32")
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def random_sources(rng, lengths):
    return [rng.integers(FIRST_SYMBOL_ID, FIRST_SYMBOL_ID + SYMBOLS, n) for n in lengths]


def length_buckets(min_length, max_length, width=BUCKET_WIDTH):
    """`[(low, high), ...]` inclusive: the first ends at the first multiple of
    `width` above `min_length`, the others span `width` lengths (5, 30 ->
    5-10, 11-15, 16-20, 21-25, 26-30); the last stops at `max_length`."""
    buckets, low = [], min_length
    while low <= max_length:
        high = min(max_length, (low // width + 1) * width)
        buckets.append((low, high))
        low = high + 1
    return buckets


def bucket_name(bucket):
    return f"{bucket[0]}-{bucket[1]}"


def training_batches(seed, steps, batch_size, min_length, max_length, pool=16):
    """The `steps` training batches `(source, target_in, target_out)`, the
    same for every model. Lengths are uniform in [min_length, max_length];
    `pool` batches are drawn at a time, sorted by length and cut into
    batches (in random order), so that a batch holds similar lengths and
    little padding. Each batch is padded to a multiple of PAD_MULTIPLE (or
    to max_length), so a compiled train step sees a handful of shapes."""
    rng = np.random.default_rng([seed, 0])
    made = 0
    while made < steps:
        count = min(pool, steps - made)
        lengths = np.sort(rng.integers(min_length, max_length + 1, count * batch_size))
        sources = random_sources(rng, lengths)
        for index in rng.permutation(count):
            rows = sources[index * batch_size : (index + 1) * batch_size]
            longest = max(len(row) for row in rows)
            width = min(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, max_length)
            targets = [transduce(row) for row in rows]
            yield (
                pad_rows(rows, width),
                pad_rows([[SOS_ID, *target] for target in targets], width + 1),
                pad_rows([[*target, EOS_ID] for target in targets], width + 1),
            )
        made += count


def test_set(seed, buckets, per_bucket):
    """`{bucket: (sources, references)}`: `per_bucket` unpadded sources per
    bucket, their lengths spread evenly over the bucket, and references
    `transduce(source) + [EOS_ID]`. Drawn from a stream of its own."""
    rng = np.random.default_rng([seed, 1])
    test = {}
    for low, high in buckets:
        lengths = low + np.arange(per_bucket) % (high - low + 1)
        sources = random_sources(rng, lengths)
        test[(low, high)] = (sources, [[*transduce(row), EOS_ID] for row in sources])
    return test


# -- models -------------------------------------------------------------------------
def learning_rate_schedule(peak, steps):
    """Linear warmup from 0 to `peak` over the first tenth of the steps, then
    cosine decay to 0 at `steps`: the same for every model (the Transformer
    does not train at a constant rate that suits the RNNs)."""
    import keras

    warmup = max(1, steps // 10)
    return keras.optimizers.schedules.CosineDecay(
        0.0, max(1, steps - warmup), alpha=0.0, warmup_target=peak, warmup_steps=warmup
    )


def build_model(name, units, max_length, learning_rate, steps):
    """One of MODELS, compiled; `max_length` is the longest source, `steps`
    the length of the learning-rate schedule."""
    import keras

    from keras_attention.seq2seq import (
        ConvS2SSeq2Seq,
        MaskedCrossEntropy,
        RecurrentSeq2Seq,
        TransformerSeq2Seq,
    )

    vocab = FIRST_SYMBOL_ID + SYMBOLS
    positions = max_length + 2  # the target has <sos>/<eos> added
    if name.startswith("rnn-"):
        attention = None if name == "rnn-none" else name[len("rnn-") :]
        model = RecurrentSeq2Seq(vocab, vocab, units, units, attention=attention, style="luong")
    elif name == "convs2s":
        convolutions = [(units, 3)] * 4
        model = ConvS2SSeq2Seq(
            vocab, vocab, units, convolutions, convolutions, max_length=positions
        )
    else:
        model = TransformerSeq2Seq(vocab, vocab, units, HEADS, 2 * units, 2, max_length=positions)
    model.build()
    model.compile(
        keras.optimizers.Adam(learning_rate_schedule(learning_rate, steps), global_clipnorm=1.0),
        MaskedCrossEntropy(),
    )
    return model


def train(model, batches, log=print, every=100):
    """`train_on_batch` over `batches`; returns the mean loss of the last
    `every` steps."""
    recent = []
    for step, (source, target_in, target_out) in enumerate(batches, 1):
        loss = model.train_on_batch((source, target_in), target_out)
        recent = (recent + [float(np.asarray(loss).reshape(-1)[0])])[-every:]
        if step % every == 0:
            log(f"  step {step}: loss {np.mean(recent):.4f}")
    return float(np.mean(recent))


def predict(model, test, batch_size=256):
    """`{bucket: [token row, ...]}`: greedy outputs (<eos> included, padding
    dropped). All buckets are decoded together, padded to the longest
    source (the padding is masked; a decoding step costs about the same
    for any batch size on a CPU)."""
    from keras_attention.seq2seq.generation import generate

    sources = [row for bucket_sources, _ in test.values() for row in bucket_sources]
    width = max(len(row) for row in sources)
    rows = []
    for start in range(0, len(sources), batch_size):
        source = pad_rows(sources[start : start + batch_size], width)
        tokens = np.asarray(generate(model, source, width + 1)["tokens"])
        rows += [[int(t) for t in row if t != PADDING_ID] for row in tokens]
    predictions, start = {}, 0
    for bucket, (bucket_sources, _) in test.items():
        predictions[bucket] = rows[start : start + len(bucket_sources)]
        start += len(bucket_sources)
    return predictions


def score(predictions, references):
    """Exact match and token accuracy of one bucket's predictions.

    exact: the fraction of rows whose first len(reference) tokens are the
    reference (it ends in <eos>, so nothing may follow). token: over all
    reference positions of all rows, the fraction where the prediction has
    the reference's token (a missing position counts as wrong)."""
    exact = right = total = 0
    for predicted, reference in zip(predictions, references):
        matches = [i < len(predicted) and predicted[i] == r for i, r in enumerate(reference)]
        exact += all(matches)
        right += sum(matches)
        total += len(reference)
    return {"exact_match": exact / len(references), "token_accuracy": right / total}


# -- reports ------------------------------------------------------------------------
def markdown_table(results):
    """Two tables (exact match, token accuracy): a row per model, a column
    per length bucket, and the training time."""
    buckets, config = results["buckets"], results["config"]
    budget = (
        f"{config['steps']} steps of {config['batch_size']}, {config['units']} units, "
        f"peak learning rate {config['learning_rate']:g} "
        f"(Transformer {config['transformer_learning_rate']:g})"
    )
    lines = []
    for metric, title in (("exact_match", "Exact match"), ("token_accuracy", "Token accuracy")):
        lines += [
            f"{title} by source length ({budget}):",
            "",
            "| model | " + " | ".join(buckets) + " | all | train s |",
            "|---|" + "---:|" * (len(buckets) + 2),
        ]
        for name, model in results["models"].items():
            cells = [f"{model[metric][bucket]:.3f}" for bucket in buckets]
            lines.append(
                f"| {name} | "
                + " | ".join(cells)
                + f" | {model['overall'][metric]:.3f} | {model['train_seconds']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(results, path):
    """Exact match and token accuracy against source length (bucket
    centres), one line per model; the no-attention baseline dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buckets = results["buckets"]
    centres = [sum(map(int, bucket.split("-"))) / 2 for bucket in buckets]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for axis, (metric, title) in zip(
        axes, (("exact_match", "exact match"), ("token_accuracy", "token accuracy"))
    ):
        for name, model in results["models"].items():
            style = {"linestyle": "--", "color": "black"} if name == "rnn-none" else {}
            axis.plot(centres, [model[metric][b] for b in buckets], marker="o", label=name, **style)
        axis.set_xlabel("source length")
        axis.set_title(title)
        axis.set_xticks(centres, buckets, fontsize=8)
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=70)
    plt.close(figure)


# -- the sweep ----------------------------------------------------------------------
def run(args, log=print):
    import keras

    buckets = length_buckets(args.min_length, args.max_length)
    names = [bucket_name(bucket) for bucket in buckets]
    test = test_set(args.seed, buckets, args.per_bucket)
    config = {key: getattr(args, key) for key in (*DEFAULTS, "seed")}
    config.update(symbols=SYMBOLS, backend=keras.backend.backend())
    results = {"config": config, "buckets": names, "models": {}}
    predictions = {
        "buckets": names,
        "sources": {bucket_name(b): [list(map(int, s)) for s in test[b][0]] for b in buckets},
        "references": {bucket_name(b): [list(map(int, r)) for r in test[b][1]] for b in buckets},
        "models": {},
    }
    os.makedirs(args.output, exist_ok=True)
    try:
        for name in args.models:
            log(f"== {name}")
            keras.utils.set_random_seed(args.seed)  # the same initial draws for every model
            rate = args.transformer_learning_rate if name == "transformer" else args.learning_rate
            model = build_model(name, args.units, args.max_length, rate, args.steps)
            started = time.perf_counter()
            batches = training_batches(
                args.seed, args.steps, args.batch_size, args.min_length, args.max_length
            )
            loss = train(model, batches, log)
            trained = time.perf_counter()
            predicted = predict(model, test)
            evaluated = time.perf_counter()
            per_bucket = {bucket_name(b): score(predicted[b], test[b][1]) for b in buckets}
            everything = score(
                [row for b in buckets for row in predicted[b]],
                [row for b in buckets for row in test[b][1]],
            )
            results["models"][name] = {
                "exact_match": {b: per_bucket[b]["exact_match"] for b in names},
                "token_accuracy": {b: per_bucket[b]["token_accuracy"] for b in names},
                "overall": everything,
                "final_loss": loss,
                "parameters": int(model.count_params()),
                "train_seconds": round(trained - started, 1),
                "evaluate_seconds": round(evaluated - trained, 1),
            }
            predictions["models"][name] = {bucket_name(b): predicted[b] for b in buckets}
            run_files.write_json_atomically(os.path.join(args.output, "results.json"), results)
            run_files.write_json_atomically(
                os.path.join(args.output, "predictions.json"), predictions
            )
            log(
                f"  exact match {everything['exact_match']:.3f}, token accuracy "
                f"{everything['token_accuracy']:.3f} ({trained - started:.0f} s training, "
                f"{evaluated - trained:.0f} s decoding)"
            )
    finally:  # after an interruption too: the report of the finished models
        if results["models"]:
            table = markdown_table(results)
            with open(os.path.join(args.output, "table.md"), "w", encoding="utf-8") as handle:
                handle.write(table)
            plot(results, os.path.join(args.output, "bottleneck.png"))
            log("\n" + table)
    return results


def parser():
    parser = argparse.ArgumentParser(
        prog="python -m recipes.bottleneck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(MODELS),
        metavar="MODEL",
        help=f"models to train, in this order (default all: {' '.join(MODELS)})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"training batches per model (default {DEFAULTS['steps']})",
    )
    parser.add_argument(
        "--batch-size", type=int, help=f"sequences per batch (default {DEFAULTS['batch_size']})"
    )
    parser.add_argument(
        "--units",
        type=int,
        help=f"width of every model: embeddings, RNN, convolutions, transformer; a multiple "
        f"of {HEADS} (default {DEFAULTS['units']})",
    )
    parser.add_argument(
        "--min-length",
        type=int,
        help=f"shortest source (default {DEFAULTS['min_length']})",
    )
    parser.add_argument(
        "--max-length", type=int, help=f"longest source (default {DEFAULTS['max_length']})"
    )
    parser.add_argument(
        "--per-bucket",
        type=int,
        help=f"test sources per length bucket (default {DEFAULTS['per_bucket']})",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        help=f"Adam's peak rate, all but the Transformer (default {DEFAULTS['learning_rate']})",
    )
    parser.add_argument(
        "--transformer-learning-rate",
        type=float,
        help=f"the Transformer's peak rate (default {DEFAULTS['transformer_learning_rate']})",
    )
    parser.add_argument("--seed", type=int, default=0, help="data and initialisation (default 0)")
    parser.add_argument(
        "--output", default="runs/bottleneck", help="folder of the results (default %(default)s)"
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="a seconds-long run (the test's): "
        + ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in TINY.items())
        + "; flags given explicitly win",
    )
    return parser


def check(args):
    """Fill the defaults (the tiny ones with --tiny) and refuse bad values."""
    for key, value in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, TINY.get(key, value) if args.tiny else value)
    runs.check_outside_runs("output", args.output)
    unknown = [name for name in args.models if name not in MODELS]
    if unknown:
        raise UsageError(f"--models: unknown {' '.join(unknown)}; choose from {' '.join(MODELS)}")
    if len(set(args.models)) != len(args.models):
        raise UsageError("--models: each model once")
    for key in ("steps", "batch_size", "units", "min_length", "per_bucket"):
        if getattr(args, key) < 1:
            raise UsageError(f"--{key.replace('_', '-')} must be >= 1; got {getattr(args, key)}")
    if args.max_length < args.min_length:
        raise UsageError(
            f"--max-length must be >= --min-length {args.min_length}; got {args.max_length}"
        )
    for key in ("learning_rate", "transformer_learning_rate"):
        if not getattr(args, key) > 0:
            raise UsageError(f"--{key.replace('_', '-')} must be > 0; got {getattr(args, key)}")
    heads = [name for name in args.models if name in ("rnn-multihead", "transformer")]
    if heads and args.units % HEADS:
        raise UsageError(
            f"--units must be a multiple of {HEADS} for {' and '.join(heads)} "
            f"({HEADS} heads); got {args.units}"
        )


def main(argv=None):
    """The command line: a user mistake, or a folder that cannot be written,
    is one `error:` line and exit status 2, never a traceback."""
    args = parser().parse_args(argv)
    import_tensorflow_quietly()  # before anything imports TensorFlow
    try:
        check(args)
        run(args)
    except (UsageError, OSError) as error:
        print(f"error: {str(error).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(f"interrupted: the finished models are in {args.output}/results.json")


if __name__ == "__main__":
    main()
