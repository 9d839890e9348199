"""The one name table of the library's attention mechanisms.

    keras_attention.get("additive")                       # a new AdditiveAttention()
    keras_attention.get("local", window=8)                # defaults below, window overridden
    keras_attention.get(GeneralAttention())               # a layer is returned as it is
    keras_attention.get({"class_name": ..., "config": ...})  # a serialized layer

Models, `LocalAttention(score=...)` and the recipes resolve mechanism names
here and nowhere else, like `keras.activations.get` and KerasHub's
`samplers.get`.
"""

import keras

# name -> (class name in this package, default constructor arguments).
# The defaults are the sizes the seq2seq models use (Luong et al.'s local-p
# with a general score, four heads); every one can be overridden.
ATTENTION = {
    "dot": ("DotProductAttention", {}),
    "scaled_dot": ("DotProductAttention", {"scale": True}),
    "general": ("GeneralAttention", {}),
    "additive": ("AdditiveAttention", {}),
    "concat": ("ConcatAttention", {}),
    "local": ("LocalAttention", {"score": "general", "window": 4, "mode": "predictive"}),
    "multihead": ("MultiHead", {"num_heads": 4}),
}


def names():
    """The mechanism names `get` accepts."""
    return tuple(ATTENTION)


def _classes():
    # Imported here: the layer modules import this one (LocalAttention
    # resolves its score by name), so a module-level import would be circular.
    from keras_attention.additive import AdditiveAttention, ConcatAttention
    from keras_attention.local import LocalAttention
    from keras_attention.multi_head import MultiHead
    from keras_attention.multiplicative import DotProductAttention, GeneralAttention

    return {
        cls.__name__: cls
        for cls in (
            AdditiveAttention,
            ConcatAttention,
            DotProductAttention,
            GeneralAttention,
            LocalAttention,
            MultiHead,
        )
    }


def get(identifier, **kwargs):
    """An attention layer from a name, a layer or a serialized config.

    Args:
        identifier: one of `names()` ("dot", "scaled_dot", "general",
            "additive", "concat", "local", "multihead"), an attention layer
            (returned unchanged), or a config dict as written by
            `keras.saving.serialize_keras_object`.
        **kwargs: constructor arguments; with a name they override the
            defaults of the table above. Not allowed with a layer or config.

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
    if not isinstance(identifier, str) or identifier not in ATTENTION:
        raise ValueError(
            f"keras_attention.get: `identifier` must be one of {list(ATTENTION)}, an attention "
            f"layer or a serialized layer config; received {identifier!r}."
        )
    class_name, defaults = ATTENTION[identifier]
    return _classes()[class_name](**{**defaults, **kwargs})
