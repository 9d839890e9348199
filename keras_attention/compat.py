"""Everything that keeps older code and files working, in one module.

The one entry point for what keras_attention 0.1.0 wrote (code and `.keras`
files) is the class decorator `reads_0_1_0`: a class that takes it accepts
0.1.0's constructor arguments (with a `DeprecationWarning` naming the new
ones), reads 0.1.0's saved configs quietly, and loads 0.1.0's weight files.
What differs from 0.1.0 is listed here, class by class, and nowhere else:

- `RecurrentSeq2Seq`: `units`, `encoder_layers`, `decoder_layers` became
  `hidden_dim`, `num_layers`, `num_decoder_layers`;
- `TransformerSeq2Seq`: `width` became `hidden_dim`; its two token tables
  were `keras.layers.Embedding`s, saved under `layers/embedding` and
  `layers/embedding_1`, and are now the tables of two
  `TokenAndPositionEmbedding`s (`weights="token_tables"`);
- `Seq2Seq` with scheduled sampling: 0.1.0 saved no step counter
  (`weights="no_step_counter"`): it starts at 0;
- `LocalAttention`: 0.1.0 took the window first, `LocalAttention(4, ...)`
  (`arguments="window_first"`).

Two things stay with the layers because they are their shape, not code
that could move: the attribute names that are 0.1.0's weight paths
(`TokenAndPositionEmbedding.embeddings`, `ConvS2SEncoder.token_embedding`
and `position_embedding`), and `AttentionDecoder`'s call still taking the
dict of `init_cache` in place of the memory, as 0.1.0's
`decoder(target_tokens, state)` did.

Names renamed in 0.3.0 (one name per idea across the tiers) keep their
old spelling through `renamed_method` and `renamed_arguments`. Every
deprecated spelling these decorators accept has its row, its replacement
and the release that removes it in `deprecations.DEPRECATIONS`, whose
`warn` words every warning; old files stay readable. One meaning changed
in 0.3.0: `sliding_window` (`MultiHead`, the Transformer layers,
`TransformerSeq2Seq`) kept `|i - j| <= w` and now keeps Keras's
`|i - j| < w`; `keras_sliding_window` reads a 0.2.x config as the same
window, `w + 1`.
"""

import functools
import inspect
import numbers
import weakref

from keras_attention import deprecations

# Token tables found by a model at 0.1.0's paths, waiting for the
# TokenAndPositionEmbedding that now owns them. Keras loads a model's own
# variables before its sublayers', so the model finds the tables and the
# sublayer (whose own store is empty in a 0.1.0 file) takes them here.
_TOKEN_TABLES = weakref.WeakKeyDictionary()


def _no_step_counter(model, store, load):
    if len(store.keys()) == 0 and getattr(model, "scheduled_sampling", None) is not None:
        return  # a 0.1.0 file: no step counter was saved; it starts at 0
    load(store)


def _token_tables(model, store, load):
    load(store)
    if store.has_path("layers/embedding") and not store.has_path(
        "layers/token_and_position_embedding"
    ):
        for layer, path in (
            (model.source_embedding, "layers/embedding"),
            (model.target_embedding, "layers/embedding_1"),
        ):
            _TOKEN_TABLES[layer] = store.get(path)["0"]


def _token_table(layer, store, load):
    if len(store.keys()) == 0 and layer in _TOKEN_TABLES:
        layer.embeddings.assign(_TOKEN_TABLES.pop(layer))  # found by its model, above
        return
    load(store)


WEIGHT_READERS = {
    "no_step_counter": _no_step_counter,
    "token_tables": _token_tables,  # the model's half
    "token_table": _token_table,  # the embedding's half
}


def _window_first(owner, args, kwargs):
    score = args[0] if args else kwargs.get("score")
    if isinstance(score, numbers.Integral) and not isinstance(score, bool):
        deprecations.warn(f"{owner}(window, ...) with the window first", stacklevel=3)
        # As 0.1.0 read it: the int is the window, the score the default.
        kwargs = {key: value for key, value in kwargs.items() if key != "score"}
        if len(args) > 1:
            args = (None, score) + tuple(args[2:])
        else:
            args = (None,) if args else ()
            kwargs = {**kwargs, "window": score}
    return args, kwargs


ARGUMENT_READERS = {"window_first": _window_first}


def _renamed(config, renamed, owner, warn):
    """`config` with the old names of `renamed` (old -> new) replaced."""
    config = dict(config)
    for old, new in renamed.items():
        if old in config:
            if warn:
                deprecations.warn(f"`{old}` of {owner}", stacklevel=3)
            if new in config:
                raise ValueError(
                    f"{owner}: pass `{new}` only (`{old}` is its deprecated name); "
                    f"received both, {old}={config[old]!r} and {new}={config[new]!r}."
                )
            config[new] = config.pop(old)
    return config


def reads_0_1_0(renamed=None, weights=None, arguments=None):
    """Class decorator: the class accepts what keras_attention 0.1.0 wrote.

    Args:
        renamed: optional dict, 0.1.0 constructor argument -> today's name.
            In code the old name still works with a `DeprecationWarning`;
            in a saved config it is read quietly; the old name also reads
            as an attribute (`model.units` is `model.hidden_dim`).
        weights: optional key of `WEIGHT_READERS`: how the class's
            `load_own_variables` reads a 0.1.0 weight store.
        arguments: optional key of `ARGUMENT_READERS`: a change in the
            order of the constructor's positional arguments.

    Returns:
        The decorator; it returns the class it is given, changed in place.
    """

    def decorate(cls):
        owner = cls.__name__
        if renamed or arguments:
            init = cls.__init__

            @functools.wraps(init)
            def __init__(self, *args, **kwargs):
                if arguments:
                    args, kwargs = ARGUMENT_READERS[arguments](owner, args, kwargs)
                if renamed:
                    kwargs = _renamed(kwargs, renamed, owner, warn=True)
                init(self, *args, **kwargs)

            # Keras reads the constructor's signature twice, once following
            # `__wrapped__` and once not; both must see the real one.
            __init__.__signature__ = inspect.signature(init)
            cls.__init__ = __init__
        if renamed:
            from_config = cls.from_config.__func__

            def read_config(klass, config):
                return from_config(klass, _renamed(config, renamed, klass.__name__, warn=False))

            read_config.__doc__ = from_config.__doc__
            cls.from_config = classmethod(read_config)
            for old, new in renamed.items():
                if not hasattr(cls, old):
                    setattr(cls, old, property(lambda self, new=new: getattr(self, new)))
        if weights:
            reader = WEIGHT_READERS[weights]
            load = cls.load_own_variables

            @functools.wraps(load)
            def load_own_variables(self, store):
                reader(self, store, lambda store: load(self, store))

            cls.load_own_variables = load_own_variables
        return cls

    return decorate


def renamed_method(old, new, owner):
    """A method `old` that warns and calls `new` (a method renamed, with its
    row in `deprecations.DEPRECATIONS`).

    >>> import warnings
    >>> class Example:
    ...     def init_cache(self):
    ...         return "cache"
    ...     initial_state = renamed_method("initial_state", "init_cache", "AttentionDecoder")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     Example().initial_state()
    'cache'
    >>> str(caught[0].message).split(": ")[1]
    'use AttentionDecoder.init_cache (the same method).'
    """

    def method(self, *args, **kwargs):
        deprecations.warn(f"{owner}.{old}", stacklevel=2)
        return getattr(self, new)(*args, **kwargs)

    method.__name__ = old
    method.__doc__ = f"Deprecated name of `{new}`."
    return method


def renamed_arguments(owner, **renames):
    """Method decorator: keyword arguments renamed (`old="new"`, each with
    its row in `deprecations.DEPRECATIONS`) still work under their old
    names, with a `DeprecationWarning`.

    >>> import warnings
    >>> class Example:
    ...     @renamed_arguments("ConvS2SDecoder.step", index="cache_index")
    ...     def step(self, cache_index):
    ...         return cache_index
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     Example().step(index=3)
    3
    >>> str(caught[0].message).split(": ")[1]
    'use `cache_index` (the same meaning).'
    """

    def decorate(function):
        @functools.wraps(function)
        def method(*args, **kwargs):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(
                            f"{owner}: pass `{new}` only (`{old}` is its deprecated name)."
                        )
                    deprecations.warn(f"`{old}` of {owner}", stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return method

    return decorate


# `sliding_window` kept |i - j| <= w up to keras_attention 0.2.x; it now keeps
# |i - j| < w, as Keras's `MultiHeadAttention(sliding_window=w)`. A config
# written since then with a window says so under this key.
SLIDING_WINDOW_RULE = "sliding_window_rule"


def keras_sliding_window(cls):
    """Class decorator for the classes with a `sliding_window` argument
    (`MultiHead`, the Transformer layers, `TransformerSeq2Seq`): `get_config`
    writes `"sliding_window_rule": "keras"` beside a window (not beside None,
    so configs without one are as before), and `from_config` reads a config
    without that key, written by 0.2.x, as the same window: its `w` (keys with
    |i - j| <= w) becomes `w + 1` (keys with |i - j| < w + 1). So an older
    `.keras` file loads and computes as it did.

    >>> class Layer:
    ...     def __init__(self, sliding_window=None):
    ...         self.sliding_window = sliding_window
    ...     def get_config(self):
    ...         return {"sliding_window": self.sliding_window}
    ...     @classmethod
    ...     def from_config(cls, config):
    ...         return cls(**config)
    >>> Layer = keras_sliding_window(Layer)
    >>> Layer.from_config({"sliding_window": 2}).sliding_window  # written by 0.2.x
    3
    >>> Layer.from_config(Layer(2).get_config()).sliding_window
    2
    """
    get_config = cls.get_config
    from_config = cls.from_config.__func__

    @functools.wraps(get_config)
    def write_config(self):
        config = get_config(self)
        if config.get("sliding_window") is not None:
            config[SLIDING_WINDOW_RULE] = "keras"
        return config

    def read_config(klass, config):
        config = dict(config)
        rule = config.pop(SLIDING_WINDOW_RULE, None)
        if rule not in (None, "keras"):
            raise ValueError(
                f"`{SLIDING_WINDOW_RULE}` of a {klass.__name__} config must be 'keras'; "
                f"received {rule!r} (a file from a newer keras_attention?)."
            )
        window = config.get("sliding_window")
        if rule is None and window is not None:
            config["sliding_window"] = window + 1  # 0.2.x's |i - j| <= w is |i - j| < w + 1
        return from_config(klass, config)

    read_config.__doc__ = from_config.__doc__
    cls.get_config = write_config
    cls.from_config = classmethod(read_config)
    return cls
