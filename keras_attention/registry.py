"""The one name table of the library's attention mechanisms.

    keras_attention.get("additive")                       # a new AdditiveAttention()
    keras_attention.get("local", window=8)                # defaults below, window overridden
    keras_attention.get(GeneralAttention())               # a layer is returned as it is
    keras_attention.get({"class_name": ..., "config": ...})  # a serialized layer

Models, `LocalAttention(score=...)` and the recipes resolve mechanism names
here and nowhere else, like `keras.activations.get` and KerasHub's
`samplers.get`.

The table is filled by the mechanism modules themselves: each applies
`register(name, **defaults)` to its classes, so this module imports no layer
module and a new mechanism needs no edit here::

    @registry.register("scaled_dot", scale=True)
    @registry.register("dot")
    class DotProductAttention(ScoreAttention): ...

Importing any `keras_attention` module runs the package's `__init__` first,
which imports every mechanism module, so the table is complete whenever
`get` can be called. Its order (the order of `names()`, whose first entry is
the recipes' and tuner's default) is the order in which `__init__` imports
the mechanism modules.
"""

import keras

# name -> (class, default constructor arguments), in registration order.
# The defaults are the sizes the seq2seq models use (Luong et al.'s local-p
# with a general score, four heads); every one can be overridden.
_TABLE = {}


def _path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def register(name, **defaults):
    """A class decorator that puts an attention layer in the table under `name`.

    Args:
        name: the mechanism's name for `get` (a string, not yet registered
            for another class).
        **defaults: constructor arguments `get(name)` passes unless the
            caller overrides them.

    Returns:
        The decorator; it returns the class unchanged, so several
        registrations (one per name) can be stacked on one class.

    Example:

    >>> import keras
    >>> @register("doc_example", units=3)
    ... class Example(keras.layers.Layer):
    ...     def __init__(self, units=1, **kwargs):
    ...         super().__init__(**kwargs)
    ...         self.units = units
    >>> get("doc_example").units, get("doc_example", units=5).units
    (3, 5)
    >>> _ = _TABLE.pop("doc_example")  # the example leaves the table as it was
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register: `name` must be a non-empty string; received {name!r}.")

    def decorator(cls):
        # The same class registered again (a module reloaded) replaces itself.
        if name in _TABLE and _path(_TABLE[name][0]) != _path(cls):
            raise ValueError(
                f"register: the name {name!r} is already taken by "
                f"{_path(_TABLE[name][0])}; received {_path(cls)}."
            )
        _TABLE[name] = (cls, dict(defaults))
        return cls

    return decorator


def __getattr__(attribute):
    # `ATTENTION`, 0.2.0's written-out table, stays readable for its code:
    # built from the live table on each read.
    if attribute == "ATTENTION":
        return {name: (cls.__name__, dict(defaults)) for name, (cls, defaults) in _TABLE.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def names():
    """The mechanism names `get` accepts.

    >>> names()
    ('dot', 'scaled_dot', 'general', 'additive', 'concat', 'local', 'multihead')
    """
    return tuple(_TABLE)


def get(identifier, **kwargs):
    """An attention layer from a name, a layer or a serialized config.

    Args:
        identifier: one of `names()` ("dot", "scaled_dot", "general",
            "additive", "concat", "local", "multihead"), an attention layer
            (returned unchanged), or a config dict as written by
            `keras.saving.serialize_keras_object`.
        **kwargs: constructor arguments; with a name they override the
            defaults the mechanism registered with.

    Returns:
        A `keras.layers.Layer`.

    Example:

    >>> get("local", window=2).window
    2
    >>> type(get("scaled_dot")).__name__, get("scaled_dot").scale
    ('DotProductAttention', True)
    """
    if isinstance(identifier, keras.layers.Layer) or isinstance(identifier, dict):
        if kwargs:
            raise ValueError(
                "keras_attention.get: constructor arguments go with a mechanism name only; "
                f"received a {type(identifier).__name__} and arguments {sorted(kwargs)}."
            )
        if isinstance(identifier, dict):
            return keras.saving.deserialize_keras_object(identifier)
        return identifier
    if not isinstance(identifier, str) or identifier not in _TABLE:
        raise ValueError(
            f"keras_attention.get: `identifier` must be one of {list(_TABLE)}, an attention "
            f"layer or a serialized layer config; received {identifier!r}."
        )
    cls, defaults = _TABLE[identifier]
    return cls(**{**defaults, **kwargs})
