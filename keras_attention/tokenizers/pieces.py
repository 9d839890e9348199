"""SentencePiece in Python: the pieces of a model file read with no
protocol buffer schema (`sentencepiece_pieces`), and `SentencePieceEncoder`,
the twin of `SentencePieceTokenizer`'s `clean`, `encode` and `decode` for
what runs without TensorFlow (the recipe's preparation and its data on any
backend). It tokenises with the `sentencepiece` package, from the same
model file that the in-graph tokenizer and an export load, and gives the
same ids token for token (tests/test_python_tokenizers.py checks it on
the Ding corpus). No TensorFlow: it imports on every backend; the
`sentencepiece` package is imported when an encoder is made.
"""

import io
import numbers
import re

import numpy as np

from keras_attention.files import write_atomically
from keras_attention.tokenizers.characters import (
    DIGITS,
    END,
    PAD,
    RESERVED,
    START,
    UNK,
    refuse_a_string,
)
from keras_attention.tokenizers.number_rules import PLACEHOLDER

# SentencePiece's piece types (sentencepiece_model.proto, `SentencePiece.Type`).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
WORD_BOUNDARY = "\u2581"  # "▁": SentencePiece's mark of a space before a piece


def _varint(data, position):
    """The base-128 varint of a protocol buffer at `data[position:]`, and
    the position after it."""
    value, shift = 0, 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("a truncated or overlong varint")
        byte = data[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if byte < 0x80:
            return value, position


def _protobuf_fields(data):
    """`(field number, value)` of each field of a serialized protocol
    buffer message, in order: an int for a varint, the raw bytes otherwise.
    `ValueError` for bytes that are not one."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(data, position)
        elif wire_type in (1, 2, 5):  # fixed64, length-delimited, fixed32
            size = {1: 8, 5: 4}.get(wire_type)
            if size is None:
                size, position = _varint(data, position)
            value, position = data[position : position + size], position + size
            if position > len(data):
                raise ValueError(f"field {number} runs past the end")
        else:
            raise ValueError(f"field {number} has wire type {wire_type}, unknown here")
        yield number, value


def sentencepiece_pieces(model):
    """`[(piece, type), ...]` of a serialized SentencePiece `ModelProto`
    (bytes), in id order. The model's field 1 holds the pieces, each a
    `SentencePiece` message with the piece string in field 1 and its type in
    field 3 (`NORMAL` when absent; `BYTE` for byte fallback's `<0xNN>`).
    Read here, with no protobuf schema, so that neither tokenizer needs the
    `protobuf` package's SentencePiece schema to load a model. `ValueError` if `model` is not a
    SentencePiece model."""
    pieces = []
    for number, value in _protobuf_fields(model):
        if number != 1:
            continue
        if not isinstance(value, bytes):
            raise ValueError("field 1 (the pieces) is not a message")
        piece, kind = None, NORMAL
        for field, content in _protobuf_fields(value):
            if field == 1 and isinstance(content, bytes):
                piece = content.decode("utf-8")
            elif field == 3 and isinstance(content, int):
                kind = content
        if piece is None:
            raise ValueError(f"piece {len(pieces)} has no string")
        pieces.append((piece, kind))
    return pieces


def clean_text(text):
    """`SentencePieceTokenizer.clean` in Python: `text` (a str; bytes are
    read as UTF-8, bad bytes replaced) with `▁` as a space, stripped of
    ASCII white space as the graph strips (`tf.strings.strip`; a no-break
    space stays), and a run of spaces as one."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.replace(WORD_BOUNDARY, " ").strip(" \t\n\v\f\r")
    return re.sub(" +", " ", text)


def _import_sentencepiece():
    try:
        import sentencepiece
    except ImportError as error:  # pragma: no cover - an install problem, said clearly
        raise ImportError(
            "train_sentencepiece needs the sentencepiece package: pip install sentencepiece"
        ) from error
    return sentencepiece


def train_sentencepiece(
    texts,
    path,
    vocab_size=8000,
    model_type="unigram",
    character_coverage=0.9999,
    byte_fallback=True,
    split_digits=True,
    seed=0,
    input_sentence_size=0,
    shuffle_input_sentence=True,
    num_threads=1,
):
    """Train a SentencePiece model on `texts` (strings) and write it to
    `path` (atomically: the old file or the new one, never half of one).
    Returns the number of pieces, at most `vocab_size` (fewer when the texts
    cannot fill it).

    The choices that make `SentencePieceTokenizer` lossless and stable:
    - `normalization_rule_name="identity"`: SentencePiece's default,
      `nmt_nfkc`, applies NFKC, which changes text (full-width `ＡＢＣ` to
      `ABC`, `①` to `1`, ligatures split), so a decoded text would differ;
    - `byte_fallback`: a character outside the vocabulary becomes the pieces
      of its UTF-8 bytes (`<0x00>`-`<0xFF>`, 256 pieces) instead of `[UNK]`;
      `character_coverage` is the share of character occurrences that get
      pieces of their own, the rarest others are left to the bytes;
    - the reserved pieces of `RESERVED` at ids 0-3 (pad, bos, eos, unk);
    - `split_digits`: every digit is a piece of its own (`"1975-06"` is
      `1 9 7 5 - 0 6`, never a piece such as `▁1975-06-`), and the ten
      digits are required characters, so none is left to byte fallback
      however rare numbers are in the texts. A model then learns ten digits
      instead of one token per number it happened to see; the pieces
      carry no punctuation;
    - `number_rules.PLACEHOLDER`, the token of a protected number, is a
      piece of its own (a user-defined one);
    - a fixed `seed`: the same texts and options give the same file.

    `input_sentence_size` > 0: SentencePiece learns from at most that many
    of the texts (with `shuffle_input_sentence`, a sample drawn with
    `seed`; otherwise the first ones); 0 learns from all of them.
    `num_threads`: the threads of SentencePiece's training. Each thread
    sums the expected piece counts of its share of the texts, and the
    sums' float rounding then depends on the number of threads: the same
    texts give the same file for the same `num_threads`, and may give
    another for another number (one thread gives what this function gave
    before it had the option).
    Texts are cleaned as `SentencePieceTokenizer.clean` does (`clean_text`;
    empty ones left out). `ValueError` when `vocab_size` is too small for the texts'
    characters (with byte fallback: 260 pieces plus one per kept character),
    and when `texts` is one string rather than a list of them.
    """
    refuse_a_string(texts, "train_sentencepiece")
    sentencepiece = _import_sentencepiece()
    cleaned = [text for text in (clean_text(text) for text in texts) if text]
    if not cleaned:
        raise ValueError("`texts` must hold at least one text that is not empty or all space")
    sentencepiece.set_random_generator_seed(seed)
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(cleaned),
            model_writer=model,
            **_trainer_options(
                vocab_size, model_type, character_coverage, byte_fallback, split_digits
            ),
            input_sentence_size=input_sentence_size,
            shuffle_input_sentence=shuffle_input_sentence,
            num_threads=num_threads,
        )
    except RuntimeError as error:  # e.g. fewer pieces allowed than characters to keep
        bytes_note = " (byte fallback alone takes 260 pieces, the reserved ones included)"
        raise ValueError(
            f"SentencePiece could not train a vocabulary of vocab_size={vocab_size} on "
            f"{len(cleaned)} texts{bytes_note if byte_fallback else ''}: {error}"
        ) from None
    write_atomically(path, model.getvalue())
    return len(sentencepiece_pieces(model.getvalue()))


def _trainer_options(vocab_size, model_type, character_coverage, byte_fallback, split_digits):
    """`SentencePieceTrainer.train`'s options for `train_sentencepiece`:
    the given ones, and the fixed choices its docstring explains."""
    return dict(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        byte_fallback=byte_fallback,
        split_digits=split_digits,
        required_chars=DIGITS if split_digits else "",
        user_defined_symbols=[PLACEHOLDER],
        normalization_rule_name="identity",
        pad_id=PAD,
        bos_id=START,
        eos_id=END,
        unk_id=UNK,
        pad_piece=RESERVED[PAD],
        bos_piece=RESERVED[START],
        eos_piece=RESERVED[END],
        unk_piece=RESERVED[UNK],
        hard_vocab_limit=False,  # a small corpus gives fewer pieces, not an error
        minloglevel=2,  # its progress log is long; errors still raise
    )


def surface(piece, kind, copy=False):
    """The bytes a piece stands for in a decoded text: the piece with `▁`
    as a space; a byte piece `<0xNN>`, byte NN; a reserved or unused one,
    nothing. A copy (an `[UNK]` replaced by a source piece, in the graph's
    `decode`) of a byte that is part of a longer character is nothing: one
    byte of it is no text."""
    if kind == BYTE:
        value = int(piece[3:-1], 16)
        return b"" if copy and value >= 0x80 else bytes([value])
    if kind in (NORMAL, USER_DEFINED):
        return piece.replace(WORD_BOUNDARY, " ").encode("utf-8")
    return b""


def read_model(model_path):
    """`(model bytes, sentencepiece_pieces)` of the SentencePiece model file
    `model_path`; `ValueError` unless its pieces 0-3 are `RESERVED`. Both
    tokenizers load their model with it."""
    with open(model_path, "rb") as handle:
        model = handle.read()
    pieces = sentencepiece_pieces(model)
    first = [piece for piece, _ in pieces[: len(RESERVED)]]
    if first != RESERVED:
        raise ValueError(
            f"SentencePiece model {model_path} (`model_path`) must start with the reserved "
            f"pieces {RESERVED}; it starts with {first}."
        )
    return model, pieces


class SentencePieceEncoder:
    """Tokenise as `SentencePieceTokenizer` does in the graph, in Python.

    Args:
        model_path: a SentencePiece model file (`train_sentencepiece`) whose
            pieces 0-3 are the reserved tokens `RESERVED`.

    `encode(texts, max_length)` gives the graph's `encode` as NumPy arrays:
    `[START] pieces... [END]`, padded with `[PAD]`, a text of more than
    `max_length - 2` pieces cut to its first ones and flagged. `decode`
    writes text from ids as the graph's `decode` does without
    replacements (reserved pieces write nothing; bytes that form no
    complete UTF-8 character are dropped). Needs the `sentencepiece`
    package.

    Example:

        encoder = SentencePieceEncoder("run/source.spm")
        ids, truncated = encoder.encode(["Guten Morgen."], max_length=32)
        encoder.decode(ids)   # ["Guten Morgen."]
    """

    def __init__(self, model_path):
        try:
            import sentencepiece
        except ImportError as error:  # pragma: no cover - an install problem, said clearly
            raise ImportError(
                "SentencePieceEncoder needs the sentencepiece package: pip install sentencepiece"
            ) from error
        model, pieces = read_model(model_path)
        self.model_path = model_path
        self.vocab_size = len(pieces)
        self._surfaces = [surface(piece, kind) for piece, kind in pieces]
        self._processor = sentencepiece.SentencePieceProcessor(model_proto=model)

    clean = staticmethod(clean_text)

    def pieces(self, texts):
        """The piece ids of each of `texts` (a list of strings), cleaned
        first, without `[START]`/`[END]`: a list of lists of ints."""
        refuse_a_string(texts, "SentencePieceEncoder.pieces")
        return self._processor.encode([clean_text(text) for text in texts], out_type=int)

    def encode(self, texts, max_length):
        """`(ids (B, max_length) int32, truncated (B,) bool)` of `texts`, as
        the graph's `encode`."""
        integer = isinstance(max_length, numbers.Integral) and not isinstance(max_length, bool)
        if not integer or max_length < 2:
            raise ValueError(
                "`max_length` of SentencePieceEncoder.encode must be an integer of at least 2 "
                f"([START] and [END]); received max_length={max_length!r}."
            )
        found = self.pieces(texts)
        max_length = int(max_length)
        room = max_length - 2
        ids = np.full((len(found), max_length), PAD, np.int32)
        truncated = np.zeros(len(found), bool)
        for row, pieces in enumerate(found):
            truncated[row] = len(pieces) > room
            kept = [START, *pieces[:room], END]
            ids[row, : len(kept)] = kept
        return ids, truncated

    def decode(self, ids):
        """The text of each row of `ids` (`(B, L)` integers): the surfaces of
        its pieces joined, leading spaces removed; an id outside the model
        and a reserved piece write nothing."""
        ids = np.asarray(ids)
        if ids.ndim != 2 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(
                "`ids` of SentencePieceEncoder.decode must be a (batch, length) array of "
                f"integers; received shape {ids.shape} of {ids.dtype}."
            )
        texts = []
        for row in ids.tolist():
            joined = b"".join(self._surfaces[i] for i in row if 0 <= i < self.vocab_size)
            texts.append(re.sub(b"^ +", b"", joined).decode("utf-8", "ignore"))
        return texts
