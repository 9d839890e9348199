"""Moved to `keras_attention.tokenizers`: `SentencePieceTokenizer`
(`tokenizers/sentencepiece.py`), `train_sentencepiece` and the piece types
(`tokenizers/pieces.py`), `SubwordTokenizer` and `build_vocabulary`
(`tokenizers/wordpiece.py`), `load_tokenizer` (`tokenizers/loading.py`),
the reserved tokens (`tokenizers/characters.py`).
This old path keeps working: each name taken from it is the same object,
with a `DeprecationWarning`,
until keras_attention 0.4.0 removes it (`keras_attention.deprecations`)."""

from keras_attention.deprecations import moved_module

__getattr__, __dir__ = moved_module(
    __name__,
    "keras_attention.tokenizers",
    (
        # Each name's own module first: later ones import from earlier ones.
        "keras_attention.tokenizers.characters",
        "keras_attention.tokenizers.number_rules",
        "keras_attention.tokenizers.pieces",
        "keras_attention.tokenizers.base",
        "keras_attention.tokenizers.numbers",
        "keras_attention.tokenizers.wordpiece",
        "keras_attention.tokenizers.sentencepiece",
        "keras_attention.tokenizers.loading",
    ),
)
