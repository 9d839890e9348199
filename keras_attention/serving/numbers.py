"""Moved to `keras_attention.tokenizers.numbers` (`NumberProtection`) and
`keras_attention.tokenizers.number_rules` (the rules of number
protection). This old path keeps working: each name taken from it is the
same object, with a `DeprecationWarning`, until keras_attention 0.4.0
removes it (`keras_attention.deprecations`)."""

from keras_attention.deprecations import moved_module

__getattr__, __dir__ = moved_module(
    __name__,
    "keras_attention.tokenizers.numbers",
    (  # each name's own module first
        "keras_attention.tokenizers.characters",
        "keras_attention.tokenizers.number_rules",
        "keras_attention.tokenizers.numbers",
    ),
)
