"""ConvS2S decoding with the incremental cache against recomputing the
prefix, and a ConvS2S training step against an equal-size Transformer.

1. Per-token decoding: one `decoder.step` with the cache (each causal
   convolution keeps its last k-1 inputs) against a full decoder pass over
   the whole prefix (what decoding without a cache must do for each new
   token), at prefix lengths 16, 64 and 256.
2. Training: one forward+backward+update step of a small ConvS2S
   encoder-decoder and of a Transformer encoder-decoder built from this
   library's layers with about the same number of parameters.

Both are `tf.function` steps timed alternately, `--repeats` rounds of
`--iters` calls; the table shows medians and same-run ratios.

    python bench/convs2s.py [--repeats 7] [--iters 5]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention import (  # noqa: E402
    ConvS2SDecoder,
    ConvS2SEncoder,
    PositionalEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import alternate, median_ratio  # noqa: E402

VOCAB = 1000


def convs2s(width, layers, max_length):
    encoder = ConvS2SEncoder(
        VOCAB, width, [(width, 3)] * layers, max_length=max_length, dropout=0.0
    )
    decoder = ConvS2SDecoder(
        VOCAB, width, [(width, 3)] * layers, max_length=max_length, dropout=0.0
    )
    return encoder, decoder


def decoding(args):
    encoder, decoder = convs2s(args.width, args.layers, max(args.prefixes) + 1)
    rng = np.random.default_rng(0)
    source = tf.constant(rng.integers(1, VOCAB, (args.batch, 32)), tf.int32)
    keys, values = encoder(source)
    cache = decoder.init_cache(keys, values)

    @tf.function
    def cached_step(tokens, cache, index):
        return decoder.step(tokens, cache, index)[0]

    @tf.function
    def recompute(prefix, keys, values):
        return decoder(prefix, keys, values)[:, -1]

    print(
        f"decoding, batch {args.batch}, width {args.width}, "
        f"{args.layers} decoder layers of kernel 3, "
        f"source length 32"
    )
    print(
        f"{'prefix':>6s} {'cached ms/token':>16s} "
        f"{'recompute ms/token':>19s} {'recompute/cached':>17s}"
    )
    for length in args.prefixes:
        prefix = tf.constant(rng.integers(1, VOCAB, (args.batch, length)), tf.int32)
        tokens = prefix[:, -1]
        index = tf.constant(length - 1)
        times = alternate(
            [(cached_step, (tokens, cache, index)), (recompute, (prefix, keys, values))],
            args.repeats,
            args.iters,
        )
        print(
            f"{length:6d} {statistics.median(times[0]) * 1e3:16.2f} "
            f"{statistics.median(times[1]) * 1e3:19.2f} {median_ratio(times[1], times[0]):17.1f}"
        )


def transformer(width, layers, heads, intermediate, max_length):
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    x = PositionalEmbedding(max_length)(
        keras.layers.Embedding(VOCAB, width, mask_zero=True)(source)
    )
    for _ in range(layers):
        x = TransformerEncoderLayer(heads, intermediate)(x)
    y = PositionalEmbedding(max_length)(keras.layers.Embedding(VOCAB, width)(target))
    for _ in range(layers):
        y = TransformerDecoderLayer(heads, intermediate)(y, x)
    return keras.Model([source, target], keras.layers.Dense(VOCAB)(y))


def convs2s_model(width, layers, max_length):
    encoder, decoder = convs2s(width, layers, max_length)
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    keys, values = encoder(source)
    return keras.Model([source, target], decoder(target, keys, values))


def training(args):
    rng = np.random.default_rng(0)
    source = tf.constant(rng.integers(1, VOCAB, (args.batch, 32)), tf.int32)
    target = tf.constant(rng.integers(1, VOCAB, (args.batch, 32)), tf.int32)
    labels = tf.constant(rng.integers(1, VOCAB, (args.batch, 32)), tf.int32)
    models = {
        "ConvS2S": convs2s_model(args.width, args.layers, 64),
        # The intermediate width brings the Transformer to about the same size.
        "Transformer": transformer(args.width, args.layers - 1, 4, 2 * args.width, 64),
    }
    steps = {}
    for name, model in models.items():
        optimizer = keras.optimizers.Adam(1e-4)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model([source, target])
        optimizer.build(model.trainable_variables)

        def step(source, target, labels, model=model, optimizer=optimizer, loss_fn=loss_fn):
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model([source, target], training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        steps[name] = tf.function(step)
    times = alternate(
        [(fn, (source, target, labels)) for fn in steps.values()], args.repeats, args.iters
    )
    print(f"\ntraining step, batch {args.batch}, source and target length 32")
    print(f"{'model':<12s} {'parameters':>10s} {'ms/step':>8s}")
    for (name, model), seconds in zip(models.items(), times):
        print(f"{name:<12s} {model.count_params():10d} {statistics.median(seconds) * 1e3:8.1f}")
    print(f"Transformer/ConvS2S time ratio: {median_ratio(times[1], times[0]):.2f}")


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prefixes", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, {os.cpu_count()} CPUs, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}\n"
    )
    decoding(args)
    training(args)


if __name__ == "__main__":
    main()
