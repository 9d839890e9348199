"""Subword tokenisation and number protection: in the graph, with
TensorFlow and TensorFlow Text (`pip install keras_attention[tensorflow]`),
and their Python twins, which need no TensorFlow.

Two in-graph tokenizers with one interface, so the translation recipe's
`tf.data` input and the SavedModel export take either; `load_tokenizer(path)`
picks the one a vocabulary file is for. Both do everything in TensorFlow
ops, so the same object tokenises a `tf.data` pipeline and goes inside a
SavedModel. `SentencePieceEncoder` tokenises as the in-graph
SentencePiece tokenizer does, token for token, from the same model file,
for what runs on JAX or PyTorch; `number_rules` protects and restores
numbers as `NumberProtection` does. Reserved ids, matching the `Seq2Seq`
defaults: 0 `[PAD]`, 1 `[START]` (<sos>), 2 `[END]` (<eos>), 3 `[UNK]`.

    characters.py     the reserved tokens; what makes a text blank (Python)
    number_rules.py   the rules of number protection (Python)
    pieces.py         train_sentencepiece, sentencepiece_pieces, SentencePieceEncoder (Python)
    base.py           encode and clean in the graph, shared by both tokenizers
    sentencepiece.py  SentencePieceTokenizer (lossless)
    wordpiece.py      SubwordTokenizer (WordPiece) and build_vocabulary
    loading.py        load_tokenizer: the tokenizer of a vocabulary file
    numbers.py        NumberProtection: numbers protected before a model, restored after it

The in-graph names are imported when first used (`__getattr__`), so that
`from keras_attention.tokenizers import SentencePieceEncoder` needs no
TensorFlow (on the TensorFlow backend Keras imports it anyway); without
TensorFlow an in-graph name is an `ImportError` that says what to install.
"""

import importlib
import importlib.util

from keras_attention.tokenizers.characters import END, PAD, RESERVED, START, UNK
from keras_attention.tokenizers.number_rules import PLACEHOLDER
from keras_attention.tokenizers.pieces import (
    SentencePieceEncoder,
    sentencepiece_pieces,
    train_sentencepiece,
)

# The in-graph names, by the module that defines them.
IN_GRAPH = {
    "NumberProtection": "numbers",
    "SentencePieceTokenizer": "sentencepiece",
    "SubwordTokenizer": "wordpiece",
    "build_vocabulary": "wordpiece",
    "digits_split": "wordpiece",
    "load_tokenizer": "loading",
}


def __getattr__(name):
    module = IN_GRAPH.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_attention.tokenizers' has no attribute {name!r}")
    if importlib.util.find_spec("tensorflow") is None:
        raise ImportError(
            f"keras_attention.tokenizers.{name} needs TensorFlow (the in-graph tokenizers and "
            "number protection), which is not installed. Install it with "
            "`pip install keras_attention[tensorflow]` (tensorflow and tensorflow-text); "
            "SentencePieceEncoder, train_sentencepiece and number_rules work without it."
        )
    return getattr(importlib.import_module(f"keras_attention.tokenizers.{module}"), name)


__all__ = [
    "END",
    "PAD",
    "PLACEHOLDER",
    "RESERVED",
    "START",
    "UNK",
    "NumberProtection",
    "SentencePieceEncoder",
    "SentencePieceTokenizer",
    "SubwordTokenizer",
    "build_vocabulary",
    "digits_split",
    "load_tokenizer",
    "sentencepiece_pieces",
    "train_sentencepiece",
]
