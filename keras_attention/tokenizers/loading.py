"""`load_tokenizer(path)`: the tokenizer a vocabulary file is for
(TensorFlow-specific)."""

from keras_attention.tokenizers.characters import PAD, RESERVED
from keras_attention.tokenizers.sentencepiece import SentencePieceTokenizer
from keras_attention.tokenizers.wordpiece import SubwordTokenizer


def load_tokenizer(path):
    """The tokenizer of the vocabulary file `path`: a `SubwordTokenizer`
    for a WordPiece vocabulary (text whose first line is `[PAD]`), else a
    `SentencePieceTokenizer` for a SentencePiece model. `ValueError` if the
    file is neither."""
    with open(path, "rb") as handle:
        first_line = handle.read(len(RESERVED[PAD]) + 2).split(b"\n")[0].rstrip(b"\r")
    if first_line == RESERVED[PAD].encode():
        return SubwordTokenizer(path)
    try:
        return SentencePieceTokenizer(path)
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(
            f"{path} is neither a WordPiece vocabulary (one token a line, {RESERVED} first) "
            f"nor a SentencePiece model ({error})"
        ) from None
