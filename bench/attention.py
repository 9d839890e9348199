"""Speed of keras_attention's layers against Keras's own, in one process.

Pairs (the peer does the same work; where Keras has no projections, the
projections are applied outside it with Dense layers):
    MultiHead            vs keras.layers.MultiHeadAttention
    DotProductAttention  vs keras.layers.Attention
    AdditiveAttention    vs Dense projections + keras.layers.AdditiveAttention
    MultiHead GQA        vs keras.layers.GroupQueryAttention (`--kv-heads`)
    MultiHead window     vs keras.layers.MultiHeadAttention(sliding_window=w)
                         (both keep |i - j| < w)

Each step is a `tf.function` (forward, or forward+backward with gradients
for the inputs and every weight), causal self-attention at batch 16, length
128, width 256, 8 heads by default. Ours and the peer are timed alternately,
`--repeats` times each, `--iters` calls per timing; the table shows medians,
the ratio peer/ours (> 1: ours is faster) and achieved GFLOP/s, next to a
plain 1024x1024x1024 matmul's GFLOP/s measured in the same run.

    python bench/attention.py [--repeats 7] [--iters 10] [--jit] [--only GQA window]
"""

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention import AdditiveAttention, DotProductAttention, MultiHead  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import alternate, median_ratio, time_call  # noqa: E402


def cases(B, T, D, H, kv_heads=2, window=33):
    """name -> ((ours, ours_layers), (peer, peer_layers), forward FLOPs)."""
    multi_head = MultiHead(num_heads=H, key_dim=D // H)
    keras_multi_head = keras.layers.MultiHeadAttention(num_heads=H, key_dim=D // H)
    dot = DotProductAttention()
    keras_dot = keras.layers.Attention()
    additive = AdditiveAttention(units=D)
    query_projection = keras.layers.Dense(D, use_bias=False)
    key_projection = keras.layers.Dense(D)
    keras_additive = keras.layers.AdditiveAttention(use_scale=True)

    def keras_additive_call(x):
        return keras_additive([query_projection(x), x, key_projection(x)], use_causal_mask=True)

    gqa = MultiHead(num_heads=H, key_dim=D // H, num_key_value_heads=kv_heads)
    keras_gqa = keras.layers.GroupQueryAttention(
        head_dim=D // H, num_query_heads=H, num_key_value_heads=kv_heads
    )
    windowed = MultiHead(num_heads=H, key_dim=D // H, sliding_window=window)
    keras_windowed = keras.layers.MultiHeadAttention(
        num_heads=H, key_dim=D // H, sliding_window=window
    )
    projections = 4 * 2 * B * T * D * D  # W^Q, W^K, W^V, W^O
    attention = 2 * 2 * B * T * T * D  # QKᵀ and AV over all heads
    # W_q q and W_k k, then tanh(q + k) and its dot with v over (T, T, U), then AV.
    additive_flops = 2 * 2 * B * T * D * D + 4 * B * T * T * D + 2 * B * T * T * D
    # W^Q and W^O full width, W^K and W^V to the kv_heads heads only.
    gqa_projections = 2 * 2 * B * T * D * D + 2 * 2 * B * T * D * (kv_heads * D // H)
    return {
        "MultiHead": (
            (lambda x: multi_head(x, x, use_causal_mask=True), [multi_head]),
            (lambda x: keras_multi_head(x, x, use_causal_mask=True), [keras_multi_head]),
            projections + attention,
        ),
        "DotProductAttention": (
            (lambda x: dot(x, x, use_causal_mask=True), [dot]),
            (lambda x: keras_dot([x, x], use_causal_mask=True), [keras_dot]),
            attention,
        ),
        "AdditiveAttention": (
            (lambda x: additive(x, x, use_causal_mask=True), [additive]),
            (keras_additive_call, [query_projection, key_projection, keras_additive]),
            additive_flops,
        ),
        # Both compute all T x T scores and mask the band (FLOPs as dense).
        "MultiHead GQA": (
            (lambda x: gqa(x, x, use_causal_mask=True), [gqa]),
            (lambda x: keras_gqa(x, x, use_causal_mask=True), [keras_gqa]),
            gqa_projections + attention,
        ),
        "MultiHead window": (
            (lambda x: windowed(x, x, use_causal_mask=True), [windowed]),
            (lambda x: keras_windowed(x, x, use_causal_mask=True), [keras_windowed]),
            projections + attention,
        ),
    }


def make_step(fn, layers, x, backward, jit):
    """A compiled forward (or forward+backward) step of `fn`."""
    fn(x)  # build the weights eagerly, so the tf.function only runs
    weights = [w.value for layer in layers for w in layer.trainable_weights]

    def step(x):
        if not backward:
            return fn(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(fn(x))
        return tape.gradient(loss, [x] + weights)

    return tf.function(step, jit_compile=jit)


def matmul_gflops(repeats, iters):
    a = tf.random.normal((1024, 1024))
    b = tf.random.normal((1024, 1024))
    fn = tf.function(lambda a: tf.matmul(a, b))
    fn(a)
    times = [time_call(fn, (a,), iters) for _ in range(repeats)]
    return 2 * 1024**3 / statistics.median(times) / 1e9


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--jit", action="store_true", help="compile the steps with XLA")
    parser.add_argument(
        "--kv-heads", type=int, default=2, help="key/value heads of the GQA pair (default 2)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=33,
        help="sliding_window w of the window pair, both sides (|i - j| < w; default 33)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="WORD",
        help="run only the pairs whose name contains one of these words (e.g. GQA window)",
    )
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    x = tf.random.normal((args.batch, args.length, args.width))
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, "
        f"backend {keras.backend.backend()}, "
        f"{os.cpu_count()} CPUs, GPU: {bool(tf.config.list_physical_devices('GPU'))}, "
        f"jit={args.jit}"
    )
    print(
        f"B={args.batch} T={args.length} D={args.width} H={args.heads}, causal; "
        f"GQA kv_heads={args.kv_heads}, window w={args.window}; "
        f"{args.repeats} alternating repeats x {args.iters} calls; medians\n"
    )
    print(f"plain matmul 1024^3: {matmul_gflops(args.repeats, args.iters):.1f} GFLOP/s\n")
    print(
        f"{'layer':<21s} {'pass':<9s} {'ours ms':>8s} {'peer ms':>8s} {'peer/ours':>9s} "
        f"{'ours GF/s':>9s} {'peer GF/s':>9s}"
    )
    pairs = cases(args.batch, args.length, args.width, args.heads, args.kv_heads, args.window)
    for name, (ours, peer, flops) in pairs.items():
        if args.only and not any(word in name for word in args.only):
            continue
        for backward in (False, True):
            steps = [make_step(fn, layers, x, backward, args.jit) for fn, layers in (ours, peer)]
            times = alternate([(step, (x,)) for step in steps], args.repeats, args.iters)
            ours_s, peer_s = statistics.median(times[0]), statistics.median(times[1])
            total = flops * (3 if backward else 1)  # backward ~ 2x the forward
            print(
                f"{name:<21s} {'fwd+bwd' if backward else 'fwd':<9s} {ours_s * 1e3:8.2f} "
                f"{peer_s * 1e3:8.2f} {median_ratio(times[1], times[0]):9.2f} "
                f"{total / ours_s / 1e9:9.1f} {total / peer_s / 1e9:9.1f}"
            )


if __name__ == "__main__":
    main()
