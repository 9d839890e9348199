"""The searches' choices over a vocabulary: `top_k` and `argmax` of rows,
exactly `keras.ops.top_k` / `keras.ops.argmax` on rows without NaN (with
NaN the backends disagree already), in forms XLA's CPU compiler runs
faster (BENCHMARKS.md, "A decoding step").

- `argmax`: the row's maximum, then the lowest index holding it: two
  vectorised reductions, where XLA emits `ops.argmax` (a reduction of
  value-index pairs) as a scalar loop.
- `top_k` of long rows: the maxima of blocks of `BLOCK` neighbours, the
  `k` best blocks (`ops.top_k` over N / BLOCK maxima), then `ops.top_k`
  over those blocks' `k · BLOCK` entries. XLA's CPU `TopK` compares every
  entry in a scalar loop; this reads each entry once in a vectorised
  maximum.

Why it is exact, ties included (`ops.top_k` puts the lower index first):
order the entries by (value descending, index ascending). A block's place
in that order is its first entry's, and for blocks of neighbours that is
the order `ops.top_k` gives their maxima (equal maxima: lower block
first). An entry among the k first cannot lie outside the k first blocks:
each of those would hold an entry before it. The chosen blocks are read
in index order, so the last `ops.top_k` breaks ties by index too.
"""

from keras import ops

BLOCK = 8
# Rows shorter than this many blocks per wanted entry take `ops.top_k`.
MIN_BLOCKS_PER_ENTRY = 16


def argmax(x):
    """`ops.argmax(x, axis=-1)` of rows `x (R, N)`: the lowest index of
    each row's maximum, int32 (always an index of the row, NaN or not)."""
    width = ops.shape(x)[-1]
    best = ops.max(x, axis=-1, keepdims=True)
    where = ops.where(x == best, ops.arange(width, dtype="int32"), width)
    return ops.minimum(ops.min(where, axis=-1), width - 1)


def top_k(x, k):
    """`ops.top_k(x, k)` of rows `x (R, N)` (float): `(values (R, k),
    indices (R, k) int32)`, best first, ties to the lower index (on rows
    of `MIN_BLOCKS_PER_ENTRY · k` blocks and more, whatever the backend's
    `top_k` does with ties)."""
    width = x.shape[-1]
    if width is None or width < max(MIN_BLOCKS_PER_ENTRY, 1) * k * BLOCK:
        values, indices = ops.top_k(x, k)
        return values, ops.cast(indices, "int32")
    rows, blocks = ops.shape(x)[0], -(-width // BLOCK)
    if blocks * BLOCK > width:  # -inf after the last entry: never before a real one
        x = ops.pad(x, [[0, 0], [0, blocks * BLOCK - width]], constant_values=float("-inf"))
    x = ops.reshape(x, (rows, blocks, BLOCK))
    _, chosen = ops.top_k(ops.max(x, axis=2), k)  # (R, k), the k first blocks
    chosen = ops.sort(chosen, axis=-1)  # in index order
    entries = ops.take_along_axis(
        x, ops.broadcast_to(chosen[:, :, None], (rows, k, BLOCK)), axis=1
    )  # (R, k, BLOCK)
    values, at = ops.top_k(ops.reshape(entries, (rows, k * BLOCK)), k)
    block = ops.take_along_axis(chosen, at // BLOCK, axis=1)
    return values, ops.cast(block * BLOCK + at % BLOCK, "int32")
