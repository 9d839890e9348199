"""The head projections of `MultiHead`: `x W_h (+ b_h)` for every head h
of one projection or of several at once.

Several projections of the same input (the query, key and value of one
decoding step of self-attention) are computed as one product, their
kernels side by side: `x [W^Q | W^K | W^V]`, then split. Each output column
is the same sum as in its own product.

A search's loop reads the kernels laid out once, before the loop
(`quantization.dequantized` calls `MultiHead.loop_kernels`, which calls
`flat_kernels` here). Under XLA this matters on CPU: a kernel reshaped
inside the loop is a bitcast that XLA's CPU compiler fuses into a batch-1
(matrix-vector) product, which it then emits as a slow elemental loop
instead of its matrix-vector routine (BENCHMARKS.md, "A decoding step").
"""

import itertools

from keras import ops

from keras_attention import quantization

# The products a decoding step makes: a self-attention step's query, key
# and value at once; a cross-attention step's query.
STEP_PRODUCTS = (("query", "key", "value"), ("query",))


def product_name(names):
    """The name of the side-by-side kernel of `names`: "query+key+value"."""
    return "+".join(names)


def flat_kernels(kernel, names):
    """`[W_1 | W_2 | ...]` `(D, Σ H_i·d_i)`: the kernels `<name>_kernel`
    `(D, H_i, d_i)` of `names` flattened and side by side; `kernel(name)`
    gives a kernel's value."""
    flat = []
    for name in names:
        weight = kernel(f"{name}_kernel")
        flat.append(ops.reshape(weight, (weight.shape[0], -1)))
    return flat[0] if len(flat) == 1 else ops.concatenate(flat, axis=1)


def project_heads(layer, x, *names):
    """`(B, T, D) -> [(B, H_i, T, d_i), ...]`, one per name in `names`
    ("query", "key", "value"): the heads of `x` through `layer`'s kernel
    `<name>_kernel (D, H_i, d_i)` (int8 with its per-channel scale, or
    float) and bias `<name>_bias (H_i, d_i)` (None without `use_bias`),
    as one product."""
    shapes = [tuple(getattr(layer, f"{name}_kernel").shape[1:]) for name in names]
    prepared = quantization.prepared(layer, product_name(names))
    if prepared is not None:  # laid out before a search's loop, float
        y = ops.matmul(x, ops.cast(prepared, x.dtype))
    else:
        kernels = {}
        scales = []
        for name in names:
            kernels[f"{name}_kernel"], scale = quantization.kernel(layer, f"{name}_kernel", x.dtype)
            scales.append(scale)
        y = ops.matmul(x, flat_kernels(kernels.get, names))
        # A layer quantizes all its kernels or none.
        if scales[0] is not None:  # int8 kernels, read outside `dequantized`
            y = quantization.rescale(y, _side_by_side([ops.reshape(s, (-1,)) for s in scales]))
    biases = [getattr(layer, f"{name}_bias") for name in names]
    if biases[0] is not None:  # `use_bias` holds for every kernel of a layer
        y = y + _side_by_side([ops.reshape(ops.cast(b, x.dtype), (-1,)) for b in biases])
    ends = list(itertools.accumulate(count * width for count, width in shapes))
    parts = [y] if len(names) == 1 else ops.split(y, ends[:-1], axis=-1)
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    return [
        ops.transpose(ops.reshape(part, (batch, length, count, width)), (0, 2, 1, 3))
        for part, (count, width) in zip(parts, shapes)
    ]


def _side_by_side(vectors):
    return vectors[0] if len(vectors) == 1 else ops.concatenate(vectors, axis=0)
