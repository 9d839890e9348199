"""MultiHead's fused path against its plain path and Keras's own layer.

Three contenders do the same causal self-attention, forward+backward (the
gradients of the input and every weight) in one `tf.function` each:
    fused   MultiHead (keras.ops.dot_product_attention)
    plain   MultiHead(use_fused_attention=False) (scores, masked softmax, AV)
    keras   keras.layers.MultiHeadAttention (its dot_product_attention path)
at each length, timed alternately, `--repeats` rounds of `--iters` calls,
medians; the ratios are plain/fused and keras/fused (> 1: fused is faster).
On a CPU the op runs the same einsums as the plain path (no fused kernel
there), so the ratios say what routing costs, not what a GPU gains.

    python bench/fused_attention.py [--lengths 128 256 512 1024] [--batch 2]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention import MultiHead  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402
from timing import alternate, median_ratio  # noqa: E402


def training_step(layer, x):
    """A compiled forward+backward step of `layer(x, x, causal)`."""
    layer(x, x, use_causal_mask=True)  # build the weights eagerly
    weights = [w.value for w in layer.trainable_weights]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, x, use_causal_mask=True))
        return tape.gradient(loss, [x] + weights)

    return step


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iters", type=int, default=3)
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    head = args.width // args.heads
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}; CPU: {describe()}"
    )
    print(
        f"B={args.batch} D={args.width} H={args.heads}, causal, forward+backward; "
        f"{args.repeats} alternating repeats x {args.iters} calls; medians\n"
    )
    print(
        f"{'T':>5s} {'fused ms':>9s} {'plain ms':>9s} {'keras ms':>9s} "
        f"{'plain/fused':>11s} {'keras/fused':>11s}"
    )
    for length in args.lengths:
        x = tf.random.normal((args.batch, length, args.width))
        layers = (
            MultiHead(num_heads=args.heads, key_dim=head),
            MultiHead(num_heads=args.heads, key_dim=head, use_fused_attention=False),
            keras.layers.MultiHeadAttention(num_heads=args.heads, key_dim=head),
        )
        steps = [training_step(layer, x) for layer in layers]
        times = alternate([(step, (x,)) for step in steps], args.repeats, args.iters)
        fused, plain, peer = (statistics.median(t) * 1e3 for t in times)
        print(
            f"{length:5d} {fused:9.2f} {plain:9.2f} {peer:9.2f} "
            f"{median_ratio(times[1], times[0]):11.2f} {median_ratio(times[2], times[0]):11.2f}"
        )


if __name__ == "__main__":
    main()
