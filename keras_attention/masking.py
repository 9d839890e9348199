"""Masks and the masked softmax shared by every attention layer.

All masks are boolean, `True` where attention is allowed (PyTorch's
`key_padding_mask` is the opposite, True = ignore: pass `~mask`; Keras's
masks are True = attend, as ours). A row whose keys are all masked gives
zero weights and a zero output here, uniform weights in Keras, NaN in
PyTorch and in tensorflow-addons (which fills with -inf and asserts
`memory_sequence_length > 0`); see docs/conventions.md. Padding masks
(`(B, Tq)` for queries, `(B, Tv)` for keys/values), explicit attention masks
(`(B, Tq, Tv)`) and the causal mask are merged by `merge_masks` into one
`(B, Tq, Tv)` mask (possibly broadcastable: `(B, 1, Tv)`, `(1, Tq, Tv)`).
"""

import keras
import numpy as np
from keras import ops

from keras_attention.validation import check_mask_shape


def known_values(tensor):
    """`tensor` as a NumPy array when its values are known (eager), else None
    (a symbolic `KerasTensor`, a `tf.function` or `jax.jit` tracer)."""
    try:
        return np.asarray(ops.convert_to_numpy(tensor))
    except Exception:  # each backend raises its own type for a traced tensor
        return None


def as_boolean(mask, name="mask", owner="attention"):
    """`mask` as a boolean tensor, `True` where attention is allowed.

    Accepts boolean masks and 0/1 masks of any dtype (`mask == 1`). A mask
    holding any other value is refused with a `ValueError` when its values
    are known (eager): an additive float mask (0 = attend, -1e9 = masked)
    cast to bool would be inverted (0 -> False, -1e9 -> True). Inside a
    traced function the values are unknown, and any value other than 1 reads
    as masked, never as allowed.
    """
    if mask is None:
        return None
    if not hasattr(mask, "dtype"):
        mask = np.asarray(mask)
    if keras.backend.standardize_dtype(mask.dtype) == "bool":
        return mask
    values = known_values(mask)
    if values is not None and not np.isin(values, (0, 1)).all():
        others = np.unique(values[~np.isin(values, (0, 1))])[:3].tolist()
        dtype = keras.backend.standardize_dtype(mask.dtype)
        raise ValueError(
            f"`{name}` of {owner} must be boolean (True = attend) or hold only 0 and 1; "
            f"received a {dtype} mask holding {others}. An additive mask "
            f"(0 = attend, a large negative = masked) converts with `{name} == 0`."
        )
    return ops.equal(mask, ops.cast(1, mask.dtype))


HALF_PRECISION = ("float16", "bfloat16")


def is_half_precision(dtype):
    """Whether `dtype` (a name or a backend dtype) is float16 or bfloat16."""
    return keras.backend.standardize_dtype(dtype) in HALF_PRECISION


def score_product(a, b):
    """`a @ b`, in float32 when either operand is float16 or bfloat16.

    Scores are products of many terms: under `mixed_float16` inputs of
    magnitude ~100 in 8 dimensions give q·k = 8e4, past float16's largest
    value (65504), and the softmax sees inf/NaN. bfloat16 has float32's
    range but 8 significant bits: scores of 1e5 are rounded to multiples of
    512, which erases the differences between keys and any bias added after
    (ALiBi, Shaw's relative term). float32 holds both, and the softmax runs
    in float32 anyway (`masked_softmax`). float32 and float64 operands
    multiply as they are.
    """
    if is_half_precision(a.dtype) or is_half_precision(b.dtype):
        a, b = ops.cast(a, "float32"), ops.cast(b, "float32")
    return ops.matmul(a, b)


# The most negative finite values: float16's, bfloat16's (float32's rounds
# to -inf in bfloat16), float32's (also taken for float64).
LARGE_NEGATIVE = {"float16": -65504.0, "bfloat16": -3.3895313892515355e38}
FLOAT32_MIN = -3.4028234663852886e38


def large_negative(dtype):
    """A finite score that `exp()` sends to exactly 0 after max-subtraction,
    for scores of `dtype` (a name or a backend dtype): the dtype's most
    negative finite value.

    Anything larger (-1e9) fails when every allowed score is below it:
    inputs near float16's range (3e4 in 8 dimensions) give float32 logits
    of -7e9, and the masked entries would take all the weight. Never
    `-inf`: `-inf - (-inf)` is NaN for a row whose every key is masked.
    """
    return LARGE_NEGATIVE.get(keras.backend.standardize_dtype(dtype), FLOAT32_MIN)


def causal_mask(query_length, key_length, alignment="end"):
    """`(Tq, Tv)` lower-triangular mask.

    `alignment="end"` (ours, the default everywhere, `use_causal_mask=True`
    included): query i may attend to key j iff `j <= i + (Tv - Tq)`. With
    `Tq == Tv` this is the usual "no position sees a later one"; with
    `Tq < Tv` the queries are the last `Tq` positions of the key sequence,
    which is what a decoder that feeds only its newest steps over a cache
    needs.

    `alignment="start"` is Keras's convention (`keras.layers.
    MultiHeadAttention(use_causal_mask=True)`, `ops.tril` of a `(Tq, Tv)`
    ones matrix): `j <= i`, the queries are the *first* `Tq` positions. The
    two agree when `Tq == Tv`. To get Keras's behaviour from our layers,
    pass `attention_mask=causal_mask(Tq, Tv, "start")[None]` instead of
    `use_causal_mask=True`.
    """
    if alignment not in ("end", "start"):
        raise ValueError(
            f'`alignment` of causal_mask must be "end" or "start"; received {alignment!r}.'
        )
    offset = key_length - query_length if alignment == "end" else 0
    rows = ops.expand_dims(ops.arange(query_length), 1) + offset
    cols = ops.expand_dims(ops.arange(key_length), 0)
    return ops.less_equal(cols, rows)  # (Tq, Tv)


def merge_masks(
    query,
    key,
    query_mask=None,
    value_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    owner="attention",
):
    """Combine every mask that applies into one boolean `(B, Tq, Tv)` mask.

    Args:
        query: `(B, Tq, Dq)` tensor (only its shape is used).
        key: `(B, Tv, Dk)` tensor (only its shape is used).
        query_mask: optional `(B, Tq)`; a padded query attends to nothing.
        value_mask: optional `(B, Tv)`; a padded key receives no weight.
        attention_mask: optional `(B, Tq, Tv)`, or broadcastable to it.
            Each mask is boolean or 0/1 (see `as_boolean`).
        use_causal_mask: add `causal_mask(Tq, Tv)`.
        owner: layer name for error messages.

    Returns:
        A boolean mask broadcastable to `(B, Tq, Tv)`, or None.
    """
    batch, query_length = query.shape[0], query.shape[1]
    key_length = key.shape[1]
    # A Python list (of bools or 0/1) is taken as the array it spells.
    query_mask, value_mask, attention_mask = (
        mask if mask is None or hasattr(mask, "shape") else np.asarray(mask)
        for mask in (query_mask, value_mask, attention_mask)
    )
    check_mask_shape("query_mask", query_mask, (batch, query_length), owner, "(B, Tq)")
    check_mask_shape("value_mask", value_mask, (batch, key_length), owner, "(B, Tv)")
    check_mask_shape(
        "attention_mask",
        attention_mask,
        (batch, query_length, key_length),
        owner,
        "(B, Tq, Tv)",
        broadcast=True,
    )
    value_mask = as_boolean(value_mask, "value_mask", owner)
    query_mask = as_boolean(query_mask, "query_mask", owner)
    attention_mask = as_boolean(attention_mask, "attention_mask", owner)
    masks = []
    if value_mask is not None:
        masks.append(ops.expand_dims(value_mask, 1))  # (B, 1, Tv)
    if query_mask is not None:
        masks.append(ops.expand_dims(query_mask, 2))  # (B, Tq, 1)
    if attention_mask is not None:
        masks.append(attention_mask)  # (B, Tq, Tv)
    if use_causal_mask:
        shape_q, shape_k = ops.shape(query), ops.shape(key)
        masks.append(ops.expand_dims(causal_mask(shape_q[1], shape_k[1]), 0))
    if not masks:
        return None
    mask = masks[0]
    for other in masks[1:]:
        mask = ops.logical_and(mask, other)
    return mask


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax over `axis` that gives masked entries exactly zero weight.

    The softmax runs in float32 whatever the compute dtype (float16 `exp`
    overflows past ~11), and the result is cast back to `scores`' dtype. The
    masked entries get the large negative of the dtype the softmax reads,
    float32. A row whose entries are all masked yields all zeros rather than
    a uniform row or NaN.
    """
    dtype = scores.dtype
    scores = ops.cast(scores, "float32")
    if mask is None:
        return ops.cast(ops.softmax(scores, axis=axis), dtype)
    scores = ops.where(mask, scores, large_negative(scores.dtype))
    weights = ops.where(mask, ops.softmax(scores, axis=axis), 0.0)
    return ops.cast(weights, dtype)


def zero_unattended(values, mask):
    """`values (..., Tv, D)` with zeros at the keys that no query may attend
    to under `mask (..., Tq, Tv)` (broadcastable; None: `values` as given).

    A masked key gets weight exactly 0, but `0 * NaN` and `0 * inf` are NaN:
    without this, a NaN or inf in a padding position (an uninitialised
    buffer, a previous layer's overflow) would make every output NaN. One
    `where` on the values, before the weighted sum. An inf or huge value at
    a key that *is* attended is garbage in, and still gives garbage out.
    """
    if mask is None:
        return values
    attended = ops.any(ops.cast(mask, "bool"), axis=-2)  # (..., Tv)
    return ops.where(ops.expand_dims(attended, -1), values, ops.zeros_like(values))


def keras_mask(tensor):
    """The Keras padding mask attached to `tensor` by an upstream layer
    (e.g. `Embedding(mask_zero=True)`), or None."""
    return getattr(tensor, "_keras_mask", None)


def write_at(buffer, update, index, axis):
    """`buffer` with `update` written at positions `index .. index + n - 1`
    of `axis` (n = update's size there); `index` may be a tensor.

    Built from a gather and a select rather than `ops.slice_update`, whose
    TensorFlow lowering (XlaDynamicUpdateSlice) has no gradient and is not
    a core serving op: this stays differentiable and exportable.
    """
    size = ops.shape(buffer)[axis]
    shape = [1] * len(buffer.shape)
    shape[axis] = -1
    if update.shape[axis] == 1:  # one slot (a decoding step): the update broadcasts
        inside = ops.reshape(ops.arange(size) == index, shape)
        return ops.where(inside, ops.cast(update, buffer.dtype), buffer)
    count = ops.shape(update)[axis]
    positions = ops.arange(size) - index  # position in `update` of each slot
    inside = ops.logical_and(positions >= 0, positions < count)
    gathered = ops.take(update, ops.clip(positions, 0, count - 1), axis=axis)
    return ops.where(ops.reshape(inside, shape), ops.cast(gathered, buffer.dtype), buffer)


def as_one_step_sequence(query, use_causal_mask, owner, *per_query):
    """A single-step query `(B, Dq)` as a one-position sequence `(B, 1, Dq)`.

    `per_query` are optional tensors with one entry per query (a query mask
    `(B,)`, an attention mask `(B, Tv)`, query positions `(B,)`); each gets
    the same new axis 1 (None stays None). Returns `(query, *per_query)`.
    A causal mask needs the positions of a rank-3 query, so it is refused.
    """
    if use_causal_mask:
        raise ValueError(
            f"`use_causal_mask=True` of {owner} needs a rank-3 query (B, Tq, Dq); "
            f"received a single-step query with shape {tuple(query.shape)}."
        )
    expanded = [None if t is None else ops.expand_dims(t, 1) for t in per_query]
    return (ops.expand_dims(query, 1), *expanded)  # (B, 1, Dq), (B, 1, ...)
