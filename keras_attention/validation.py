"""Argument and shape checks shared by every layer.

Each check raises `ValueError` naming the argument, what was expected and what
was given, so that a user mistake is reported at `build()` time (static
shapes) instead of surfacing as a broadcasting error deep inside a matmul.
"""

import math
import numbers
import sys

import numpy as np
from keras import backend, ops


def _shape(shape):
    return None if shape is None else tuple(shape)


def is_integer(value):
    """Any integer (`int`, `np.int64`, ... every `numbers.Integral`) but a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value):
    """Any real number (`numbers.Real`: `np.float32` too) but a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_positive_int(name, value, owner):
    """`value` must be an integer >= 1 (any `numbers.Integral`, NumPy's
    included; bools are rejected). Returns it as a plain `int`, so that a
    config holding it stays JSON-serialisable."""
    if not is_integer(value) or value < 1:
        raise ValueError(
            f"`{name}` of {owner} must be a positive integer; received {name}={value!r}."
        )
    return int(value)


def check_rate(name, value, owner):
    """`value` must be a number in [0, 1). Returns it as a plain `float`."""
    if not is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"`{name}` of {owner} must be a float in [0, 1); received {name}={value!r}."
        )
    return float(value)


def check_finite(name, value, owner, low=None, expected="a finite number"):
    """`value` must be a finite real number (and > `low` when given).
    Returns it as a plain `float`."""
    if not is_number(value) or not math.isfinite(value) or (low is not None and not value > low):
        raise ValueError(f"`{name}` of {owner} must be {expected}; received {name}={value!r}.")
    return float(value)


def check_float_input(name, tensor, owner):
    """`tensor` must hold floating-point values: an integer or boolean
    input would be computed in its own dtype (an int softmax is all zeros,
    int sinusoids are truncated), a silent wrong answer. Keras's own
    `Attention` refuses them too."""
    dtype = getattr(tensor, "dtype", None)
    if dtype is None:
        return
    dtype = str(getattr(dtype, "name", dtype))
    if "float" not in dtype:
        raise TypeError(
            f"`{name}` of {owner} must be a floating-point tensor; received dtype {dtype}. "
            f'Cast it first, e.g. `keras.ops.cast({name}, "float32")`.'
        )


def check_choice(name, value, choices, owner):
    if value not in choices:
        raise ValueError(
            f"`{name}` of {owner} must be one of {list(choices)}; received {name}={value!r}."
        )


def check_texts(name, texts, owner):
    """`texts` as a list, each item a `str` (or UTF-8 `bytes`); a
    `ValueError` naming `name` and `owner` for a single string, something
    that is no list, or the first item that is not a string."""
    expected = f"`{name}` of {owner} must be a list of strings; received"
    if isinstance(texts, (str, bytes)):
        raise ValueError(f"{expected} a single string {texts!r} (wrap it in a list).")
    try:
        texts = list(texts)
    except TypeError:
        raise ValueError(f"{expected} {type(texts).__name__} {texts!r}.") from None
    for index, text in enumerate(texts):
        if not isinstance(text, (str, bytes)):
            raise ValueError(
                f"`{name}` of {owner} must be a list of strings; item {index} is "
                f"{type(text).__name__} {text!r}."
            )
    return texts


def check_rank(name, shape, ranks, owner, layout):
    """`shape` must have one of `ranks`; `layout` describes them, e.g.
    "(B, Tq, Dq) or (B, Dq)"."""
    shape = _shape(shape)
    if shape is None or len(shape) not in ranks:
        raise ValueError(
            f"`{name}` of {owner} must have rank "
            f"{' or '.join(str(r) for r in ranks)} with shape {layout}; "
            f"received {name} with shape {shape}."
        )


def check_equal_dim(name_a, dim_a, name_b, dim_b, owner, why):
    """Two static dimensions must agree (unknown dimensions pass)."""
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(
            f"{owner}: {why}; expected {name_b} = {name_a} = {dim_a}, received {name_b} = {dim_b}."
        )


def check_mask_shape(name, mask, expected, owner, layout, broadcast=False):
    """`mask` (a tensor or None) must have the static shape `expected`, where
    None entries in either shape are not checked; with `broadcast=True` a
    dimension of 1 also fits (it broadcasts)."""
    if mask is None:
        return
    shape = _shape(mask.shape)
    ok = len(shape) == len(expected) and all(
        a is None or b is None or a == b or (broadcast and a == 1) for a, b in zip(shape, expected)
    )
    if not ok:
        raise ValueError(
            f"`{name}` of {owner} must have shape {layout} = {tuple(expected)} "
            f"to fit the inputs; received {name} with shape {shape}."
        )


def check_built(layer, method):
    """Incremental-decoding methods need the weights: say how to get them."""
    if not layer.built:
        raise ValueError(
            f"{type(layer).__name__}.{method}() needs a built layer: call the layer once "
            "on a batch (or call `build()` with the input shapes) before decoding."
        )


def check_integer_dtype(name, tokens, owner):
    """Token ids given as values (NumPy, eager tensors) must have an integer
    dtype: float ids would be truncated towards zero by the embedding's
    gather (`3.7` read as id 3), a silent wrong answer. Bools are refused
    too (they are not ids)."""
    dtype = backend.standardize_dtype(tokens.dtype)
    # Only ids whose values are known (eager): Keras itself traces a model
    # with float placeholders when it builds it under a distribution strategy.
    if not dtype.startswith(("int", "uint")) and _known_values(tokens) is not None:
        raise ValueError(
            f"`{name}` of {owner} must be integer token ids; received dtype {dtype}. Cast ids "
            'held as floats with `ops.cast(ids, "int32")` only if every value is a whole '
            "number."
        )


def check_token_ids(name, tokens, owner):
    """`tokens` must be integer ids (`check_integer_dtype`) of static rank
    2, `(B, T)`, with `T >= 1` when known: the one check of a source batch
    that models and generation share."""
    check_integer_dtype(name, tokens, owner)
    shape = _shape(tokens.shape)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` of {owner} must be int token ids of shape (B, T); received shape {shape}."
        )
    if shape[1] == 0:
        raise ValueError(
            f"`{name}` of {owner} is empty (shape {shape}): it needs at least one token per "
            "row (pad short rows with the padding id)."
        )


def assert_at_run_time(condition, message, value):
    """`value`, made to depend on a run-time check that the scalar boolean
    `condition` holds, for a bound that is only known when the graph runs
    (a length that is `None` at trace time).

    On the TensorFlow backend this is a graph `Assert` that raises
    `InvalidArgumentError` with `message` (in a `tf.function`, in a
    SavedModel, and eagerly); on JAX and PyTorch, whose `keras.ops` have no
    assert, `value` is returned unchecked. The choice depends on the backend
    alone, never on which of this package's modules were imported. XLA
    (`jit_compile=True`) compiles asserts away, so there only the checks
    made at trace time hold.
    """
    if backend.backend() != "tensorflow":
        return value
    # Keras's TensorFlow backend has imported TensorFlow already; the layer
    # tier takes it from there and imports none itself (tests/test_layout.py).
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return value
    with tf.control_dependencies([tf.debugging.Assert(condition, [message])]):
        return tf.identity(value)


def check_same_batch(owner, **tensors):
    """Every tensor must have the same static batch size (axis 0) when known,
    so that a mismatch is a `ValueError`, not a backend matmul error."""
    known = {name: t.shape[0] for name, t in tensors.items() if t is not None}
    sizes = {size for size in known.values() if size is not None}
    if len(sizes) > 1:
        given = ", ".join(f"{name} {size}" for name, size in known.items())
        raise ValueError(
            f"{owner}: {', '.join(known)} must have the same batch size (axis 0); received {given}."
        )


def check_not_a_list_call(owner, args, kwargs):
    """Keras' own `AdditiveAttention`, `Attention` take `layer([query,
    value])`; ours take `layer(query, value)` like `MultiHeadAttention`.
    Since the names match, the list call is a likely mistake: say so."""
    if len(args) == 1 and "value" not in kwargs and isinstance(args[0], (list, tuple)):
        raise ValueError(
            f"{owner} takes the query and value as separate arguments: call "
            f"`layer(query, value)` or `layer(query, value, key=key)`, not "
            f"`layer([query, value])` as keras.layers.AdditiveAttention and "
            f"keras.layers.Attention do; received a {type(args[0]).__name__} of "
            f"{len(args[0])} items as the only argument."
        )


def check_token_id(name, value, vocab_size, owner):
    """A special token id (`padding_id`, `eos_id`, ...) must be an integer in
    `[0, vocab_size)`: an id outside the vocabulary can never be embedded or
    generated. Returns it as a plain `int`."""
    if not is_integer(value) or not 0 <= value < vocab_size:
        raise ValueError(
            f"`{name}` of {owner} must be a token id in [0, {vocab_size}) (the vocabulary "
            f"size is {vocab_size}); received {name}={value!r}."
        )
    return int(value)


def _known_values(tensor):
    """`tensor`'s values as a NumPy array when known (eager), else None."""
    try:
        return np.asarray(ops.convert_to_numpy(tensor))
    except Exception:  # each backend raises its own type for a traced tensor
        return None


def check_ids_in_range(name, tokens, vocab_size, owner, banned=None):
    """Token ids must lie in `[0, vocab_size)` (and not be `banned`, a dict
    {id: why}): a `ValueError` naming the first offender when the values are
    known (eager), else a run-time check (`assert_at_run_time`) that the
    returned tokens depend on. An id past the vocabulary would otherwise be a
    backend gather error (or, on some backends and under XLA, a clamped
    gather: a silent wrong answer); a negative one is always the latter.
    The dtype is not checked here: Keras itself calls a model with float
    placeholders when it builds it under a distribution strategy."""
    if vocab_size is None:
        return tokens
    values = _known_values(tokens)
    if values is not None:
        outside = (values < 0) | (values >= vocab_size)
        if outside.any():
            where = tuple(int(i) for i in np.argwhere(outside)[0])
            raise ValueError(
                f"`{name}` of {owner} must hold token ids in [0, {vocab_size}) (the vocabulary "
                f"size is {vocab_size}); received {name} holding {values[where]} at index "
                f"{where}."
            )
        for token, why in (banned or {}).items():
            if (values == token).any():
                raise ValueError(f"`{name}` of {owner} must not hold {token} ({why}).")
        return tokens
    inside = ops.logical_and(ops.all(tokens >= 0), ops.all(tokens < vocab_size))
    return assert_at_run_time(
        inside,
        f"`{name}` of {owner} must hold token ids in [0, {vocab_size}) (the vocabulary "
        f"size is {vocab_size}); it holds an id outside.",
        tokens,
    )
