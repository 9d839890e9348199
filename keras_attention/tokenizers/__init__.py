"""In-graph subword tokenisation and number protection with TensorFlow and
TensorFlow Text (TensorFlow-specific). Install with
`pip install keras_attention[tensorflow]`.

Two tokenizers with one interface, so the translation recipe, its data
pipelines and the SavedModel export take either; `load_tokenizer(path)`
picks the one a vocabulary file is for. Both do everything in TensorFlow
ops, so the same object tokenises a `tf.data` pipeline and goes inside a
SavedModel. Reserved ids, matching the `Seq2Seq` defaults: 0 `[PAD]`,
1 `[START]` (<sos>), 2 `[END]` (<eos>), 3 `[UNK]`.

    base.py           the reserved tokens, encode and clean, shared by both tokenizers
    sentencepiece.py  SentencePieceTokenizer (lossless) and train_sentencepiece
    wordpiece.py      SubwordTokenizer (WordPiece) and build_vocabulary
    loading.py        load_tokenizer: the tokenizer of a vocabulary file
    numbers.py        NumberProtection: numbers protected before a model, restored after it
"""

import importlib.util

if importlib.util.find_spec("tensorflow") is None:
    raise ImportError(
        "keras_attention.tokenizers needs TensorFlow (the in-graph tokenizers and number "
        "protection), which is not installed. Install it with "
        "`pip install keras_attention[tensorflow]` (tensorflow and tensorflow-text); the "
        "layers and keras_attention.seq2seq work without it."
    )

from keras_attention.tokenizers.base import END, PAD, RESERVED, START, UNK  # noqa: E402
from keras_attention.tokenizers.loading import load_tokenizer  # noqa: E402
from keras_attention.tokenizers.numbers import PLACEHOLDER, NumberProtection  # noqa: E402
from keras_attention.tokenizers.sentencepiece import (  # noqa: E402
    SentencePieceTokenizer,
    sentencepiece_pieces,
    train_sentencepiece,
)
from keras_attention.tokenizers.wordpiece import (  # noqa: E402
    SubwordTokenizer,
    build_vocabulary,
    digits_split,
)

__all__ = [
    "END",
    "PAD",
    "PLACEHOLDER",
    "RESERVED",
    "START",
    "UNK",
    "NumberProtection",
    "SentencePieceTokenizer",
    "SubwordTokenizer",
    "build_vocabulary",
    "digits_split",
    "load_tokenizer",
    "sentencepiece_pieces",
    "train_sentencepiece",
]
