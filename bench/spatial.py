"""BilinearSampler against torch.nn.functional.grid_sample (CPU, if PyTorch
is installed) and keras.ops.image.map_coordinates(order=1), forward and
backward (gradients for the image and the sampling coordinates), in one run.

Cases: batch 64, 60x60x1 -> 40x40 (the cluttered-digits recipe) and batch
16, 128x128x32 -> 64x64. The grid is a random affine warp. Ours and
map_coordinates run as `tf.function`s; grid_sample runs eagerly in
PyTorch (align_corners=True, zeros padding: the same sampling). Timed
alternately, `--repeats` rounds, medians.

    python bench/spatial.py [--repeats 7] [--iters 5]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention import AffineGrid, BilinearSampler  # noqa: E402

CASES = [(64, 60, 60, 1, 40, 40), (16, 128, 128, 32, 64, 64)]


def make_inputs(batch, height, width, channels, out_h, out_w, rng):
    image = rng.random((batch, height, width, channels)).astype("float32")
    theta = np.tile(np.array([[0.7, 0.1, 0.1, -0.1, 0.7, -0.05]], "float32"), (batch, 1))
    theta += rng.normal(scale=0.05, size=theta.shape).astype("float32")
    grid = np.asarray(AffineGrid((out_h, out_w))(theta))
    return image, grid


def ours(image, grid, jit=False):
    sampler = BilinearSampler()

    @tf.function(jit_compile=jit)
    def step(image, grid):
        with tf.GradientTape() as tape:
            tape.watch([image, grid])
            loss = tf.reduce_sum(sampler(image, grid))
        return tape.gradient(loss, [image, grid])

    @tf.function(jit_compile=jit)
    def forward(image, grid):
        return sampler(image, grid)

    return forward, step


def map_coordinates(image, grid):
    """The same sampling with keras.ops.image.map_coordinates: coordinates
    for every (batch, row, column, channel) of the output."""
    batch, height, width, channels = image.shape
    _, out_h, out_w, _ = grid.shape

    def coordinates(grid):
        x = (grid[..., 0] + 1.0) * (width - 1) / 2.0
        y = (grid[..., 1] + 1.0) * (height - 1) / 2.0
        shape = (batch, out_h, out_w, channels)
        b = tf.broadcast_to(tf.reshape(tf.range(batch, dtype=tf.float32), (-1, 1, 1, 1)), shape)
        c = tf.broadcast_to(tf.reshape(tf.range(channels, dtype=tf.float32), (1, 1, 1, -1)), shape)
        return [b, tf.broadcast_to(y[..., None], shape), tf.broadcast_to(x[..., None], shape), c]

    def sample(image, grid):
        return keras.ops.image.map_coordinates(
            image, coordinates(grid), order=1, fill_mode="constant"
        )

    @tf.function
    def step(image, grid):
        with tf.GradientTape() as tape:
            tape.watch([image, grid])
            loss = tf.reduce_sum(sample(image, grid))
        return tape.gradient(loss, [image, grid])

    return tf.function(sample), step


def torch_grid_sample(image, grid):
    import torch

    image_t = torch.tensor(np.transpose(image, (0, 3, 1, 2)).copy())
    grid_t = torch.tensor(grid)

    def forward(image, grid):
        with torch.no_grad():
            return torch.nn.functional.grid_sample(
                image_t, grid_t, mode="bilinear", padding_mode="zeros", align_corners=True
            )

    def step(image, grid):
        x = image_t.clone().requires_grad_(True)
        g = grid_t.clone().requires_grad_(True)
        torch.nn.functional.grid_sample(
            x, g, mode="bilinear", padding_mode="zeros", align_corners=True
        ).sum().backward()
        return x.grad, g.grad

    return forward, step


def timed(fn, args, iters):
    fn(*args)  # trace / warm up
    start = time.perf_counter()
    for _ in range(iters):
        result = fn(*args)
    for item in result if isinstance(result, (list, tuple)) else [result]:
        np.asarray(item.numpy() if hasattr(item, "numpy") else item)
    return (time.perf_counter() - start) / iters


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--jit", action="store_true", help="also time ours compiled with XLA")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    try:
        import torch

        torch.set_num_threads(os.cpu_count())
        peer_note = f"torch {torch.__version__}"
    except ImportError:
        torch = None
        peer_note = "torch not installed: grid_sample skipped (pip install torch)"
    print(
        f"keras {keras.__version__}, tensorflow {tf.__version__}, "
        f"{os.cpu_count()} CPUs; {peer_note}\n"
    )
    print(
        f"{'case':<30s} {'pass':<8s} {'ours ms':>8s} {'map_coord ms':>12s} {'grid_sample ms':>14s} "
        f"{'map_coord/ours':>14s} {'ours/grid_sample':>16s}"
    )
    for case in CASES:
        image, grid = make_inputs(*case, rng)
        contenders = {"ours": ours(image, grid), "map_coordinates": map_coordinates(image, grid)}
        if args.jit:
            contenders["ours (XLA)"] = ours(image, grid, jit=True)
        if torch is not None:
            contenders["grid_sample"] = torch_grid_sample(image, grid)
        batch, height, width, channels, out_h, out_w = case
        label = f"{batch}x{height}x{width}x{channels}->{out_h}x{out_w}"
        for pass_index, pass_name in enumerate(("fwd", "fwd+bwd")):
            times = {name: [] for name in contenders}
            tf_args = (tf.constant(image), tf.constant(grid))
            for fns in contenders.values():
                timed(fns[pass_index], tf_args, 1)
            for _ in range(args.repeats):
                for name, fns in contenders.items():
                    times[name].append(timed(fns[pass_index], tf_args, args.iters))
            median = {name: statistics.median(t) for name, t in times.items()}
            ratio_mc = statistics.median(
                m / o for m, o in zip(times["map_coordinates"], times["ours"])
            )
            grid_ms, ratio_gs = "-", "-"
            if "grid_sample" in times:
                grid_ms = f"{median['grid_sample'] * 1e3:.2f}"
                ratio = statistics.median(
                    o / g for o, g in zip(times["ours"], times["grid_sample"])
                )
                ratio_gs = f"{ratio:.2f}"
            print(
                f"{label:<30s} {pass_name:<8s} {median['ours'] * 1e3:8.2f} "
                f"{median['map_coordinates'] * 1e3:12.2f} "
                f"{grid_ms:>14s} {ratio_mc:14.2f} {ratio_gs:>16s}"
            )
            if "ours (XLA)" in times and "grid_sample" in times:
                xla = statistics.median(
                    o / g for o, g in zip(times["ours (XLA)"], times["grid_sample"])
                )
                print(
                    f"{'':<30s} {'':<8s} ours compiled with XLA: "
                    f"{median['ours (XLA)'] * 1e3:.2f} ms, "
                    f"ours (XLA)/grid_sample {xla:.2f}"
                )


if __name__ == "__main__":
    main()
