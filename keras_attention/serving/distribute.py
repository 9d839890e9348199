"""Moved to `keras_attention.training.distribute` (`adapt_for_distribution`,
`in_multi_worker_mode`). This old path keeps working: each name taken from
it is the same object, with a `DeprecationWarning`,
until keras_attention 0.4.0 removes it (`keras_attention.deprecations`)."""

from keras_attention.deprecations import moved_module

__getattr__, __dir__ = moved_module(
    __name__, "keras_attention.training.distribute", ("keras_attention.training.distribute",)
)
