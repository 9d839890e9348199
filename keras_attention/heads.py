"""The head projections of `MultiHead`: `x W_h (+ b_h)` for every head h
of one projection or of several at once.

Several projections of the same input (the query, key and value of one
decoding step of self-attention) are computed as one product, their
kernels side by side: `x [W^Q | W^K | W^V]`, then split. Each output column
is the same sum as in its own product. Under XLA the side-by-side kernel
is loop-invariant and built once before a decoding loop; on CPU one
(B, D) × (D, 3D) product runs in about the time of one of the three
(BENCHMARKS.md, "A decoding step").
"""

import itertools

from keras import ops

from keras_attention import quantization


def project_heads(layer, x, *names):
    """`(B, T, D) -> [(B, H_i, T, d_i), ...]`, one per name in `names`
    ("query", "key", "value"): the heads of `x` through `layer`'s kernel
    `<name>_kernel (D, H_i, d_i)` (int8 with its per-channel scale, or
    float) and bias `<name>_bias (H_i, d_i)` (None without `use_bias`)."""
    weights, scales, biases, heads = [], [], [], []
    for name in names:
        weight, scale = quantization.kernel(layer, f"{name}_kernel", x.dtype)
        d_in, count, width = weight.shape
        weights.append(ops.reshape(weight, (d_in, count * width)))
        scales.append(None if scale is None else ops.reshape(scale, (-1,)))
        bias = getattr(layer, f"{name}_bias")
        biases.append(None if bias is None else ops.reshape(ops.cast(bias, x.dtype), (-1,)))
        heads.append((count, width))
    y = ops.matmul(x, _side_by_side(weights, 1))
    # A layer quantizes all its kernels or none, and `use_bias` holds for all.
    if scales[0] is not None:  # int8 kernels, read outside `dequantized`
        y = quantization.rescale(y, _side_by_side(scales, 0))
    if biases[0] is not None:
        y = y + _side_by_side(biases, 0)
    ends = list(itertools.accumulate(count * width for count, width in heads))
    parts = [y] if len(names) == 1 else ops.split(y, ends[:-1], axis=-1)
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    return [
        ops.transpose(ops.reshape(part, (batch, length, count, width)), (0, 2, 1, 3))
        for part, (count, width) in zip(parts, heads)
    ]


def _side_by_side(tensors, axis):
    return tensors[0] if len(tensors) == 1 else ops.concatenate(tensors, axis=axis)
