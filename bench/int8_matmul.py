"""Why the int8 exports are weight-only: the int8 matrix products stock
TensorFlow offers on CPU (what TF Serving runs) against its float32 one.

For each shape `[m, k] @ [k, n]` of a decoding step (`--shapes beam`: 128
rows, batch 32 x beam 4; the 8000-way output projection, a 256 x 256
attention projection, the feed-forward's 256 -> 1024 and 1024 -> 256;
`--shapes base`: Transformer-base at batch 1, greedy and beam 4), in one
`tf.function` each:

- float32 `MatMul` (oneDNN, as every float export runs);
- weight-only int8: the int8 kernel cast to float32, then the float32
  product, the output scaled per channel (what `export --quantize int8` runs);
- int8 x int8 -> int32 (`tf.linalg.matmul(..., output_type=tf.int32)`,
  what Keras's default `quantize("int8")`, activations quantized too, runs);
- the same with the activations quantized in the graph (abs-max per row);
- `QuantizedMatMul`, quint8 x quint8 -> qint32 (TensorFlow's older
  quantized op; quint8 x qint8 has no CPU kernel);
- the first four again compiled by XLA (`jit_compile=True`, as an XLA
  export's searches run), compared with XLA's float32 product.

Prints medians of `--repeats` rounds of `--calls` calls and each one's
ratio to float32, measured in the same round:

    python bench/int8_matmul.py [--repeats 5] [--calls 50] [--shapes beam|base]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

SHAPES = {
    # 128 rows: beam 4 x batch 32 of a width-256 Transformer, 8,000 pieces
    "beam": ((128, 256, 8000), (128, 256, 256), (128, 256, 1024), (128, 1024, 256)),
    # Transformer-base at batch 1: greedy (1 row) and beam 4 (4 rows), the
    # 32,000-way output projection and the feed-forward's 512 -> 2048
    "base": ((1, 512, 32000), (4, 512, 32000), (1, 512, 2048), (4, 2048, 512)),
}


def products(m, k, n, seed=0):
    """`{name: tf.function}` of the products of one shape."""
    rng = np.random.default_rng(seed)
    inputs = tf.constant(rng.standard_normal((m, k), dtype=np.float32))
    kernel = tf.constant(rng.standard_normal((k, n), dtype=np.float32))
    kernel_int8 = tf.constant(rng.integers(-127, 128, (k, n)).astype(np.int8))
    scale = tf.constant(rng.random(n, dtype=np.float32))
    inputs_int8 = tf.constant(rng.integers(-127, 128, (m, k)).astype(np.int8))

    def quint8(shape):
        return tf.bitcast(tf.constant(rng.integers(0, 256, shape).astype(np.uint8)), tf.quint8)

    inputs_quint8, kernel_quint8 = quint8((m, k)), quint8((k, n))

    def float32():
        return tf.linalg.matmul(inputs, kernel)

    def weight_only():
        return tf.linalg.matmul(inputs, tf.cast(kernel_int8, tf.float32)) * scale

    def int8_int32():
        return tf.linalg.matmul(inputs_int8, kernel_int8, output_type=tf.int32)

    def int8_dynamic():
        row_scale = tf.reduce_max(tf.abs(inputs), axis=-1, keepdims=True) / 127.0
        quantized = tf.cast(tf.clip_by_value(tf.round(inputs / row_scale), -127, 127), tf.int8)
        product = tf.linalg.matmul(quantized, kernel_int8, output_type=tf.int32)
        return tf.cast(product, tf.float32) * row_scale * scale

    def quantized_matmul():
        return tf.raw_ops.QuantizedMatMul(
            a=inputs_quint8,
            b=kernel_quint8,
            min_a=-1.0,
            max_a=1.0,
            min_b=-1.0,
            max_b=1.0,
            Toutput=tf.qint32,
        )[0]

    functions = {
        "float32": float32,
        "weight-only int8": weight_only,
        "int8 x int8": int8_int32,
        "int8 x int8, activations quantized": int8_dynamic,
        "QuantizedMatMul": quantized_matmul,
    }
    compiled = {
        name: tf.function(function, autograph=False) for name, function in functions.items()
    }
    for name in (
        "float32",
        "weight-only int8",
        "int8 x int8",
        "int8 x int8, activations quantized",
    ):
        compiled[f"{name} (XLA)"] = tf.function(functions[name], autograph=False, jit_compile=True)
    return compiled


def baseline(name):
    """The float32 product a product's time is compared with: XLA's for
    the compiled ones."""
    return "float32 (XLA)" if name.endswith("(XLA)") else "float32"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument("--calls", type=int, default=50, help="calls per timing")
    parser.add_argument(
        "--shapes", choices=sorted(SHAPES), default="beam", help="which products (see above)"
    )
    args = parser.parse_args(argv)
    onednn = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)")
    print(f"tensorflow {tf.__version__}, TF_ENABLE_ONEDNN_OPTS {onednn}")
    for m, k, n in SHAPES[args.shapes]:
        functions = products(m, k, n)
        for function in functions.values():
            function()  # trace and warm up
        times = {name: [] for name in functions}
        for _ in range(args.repeats):
            for name, function in functions.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    function()
                times[name].append((time.perf_counter() - start) / args.calls)
        print(f"[{m}, {k}] @ [{k}, {n}]")
        for name, values in times.items():
            base = baseline(name)
            ratios = [value / other for value, other in zip(values, times[base])]
            print(
                f"  {name:42s} {1e3 * statistics.median(values):8.3f} ms"
                f"  {statistics.median(ratios):6.2f}x {base}'s time"
            )


if __name__ == "__main__":
    main()
