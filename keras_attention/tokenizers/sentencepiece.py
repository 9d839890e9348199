"""SentencePiece: `train_sentencepiece` (unigram, with byte fallback) and
`SentencePieceTokenizer`, run by TensorFlow Text's SentencePiece ops from
the serialized model, which the SavedModel keeps in its graph
(TensorFlow-specific). Lossless: `decode(encode(x)) == clean(x)` for every
text.

The model's pieces are read here (`sentencepiece_pieces`), with no
protocol buffer schema, so that loading a tokenizer needs only TensorFlow
and TensorFlow Text; training one needs the `sentencepiece` package.
"""

import hashlib
import io

import tensorflow as tf

from keras_attention.files import write_atomically
from keras_attention.tokenizers.base import (
    DIGITS,
    END,
    PAD,
    RESERVED,
    START,
    UNK,
    InGraphTokenizer,
    import_text,
    refuse_a_string,
)
from keras_attention.tokenizers.numbers import PLACEHOLDER

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
    Read here, with no protobuf schema, so that loading a tokenizer needs
    only TensorFlow and TensorFlow Text. `ValueError` if `model` is not a
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


def _import_sentencepiece():
    try:
        import sentencepiece
    except ImportError as error:  # pragma: no cover - an install problem, said clearly
        raise ImportError(
            "train_sentencepiece needs the sentencepiece package: "
            "pip install 'keras_attention[tensorflow]'"
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
    - `tokenizers.numbers.PLACEHOLDER`, the token of a protected number, is a
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
    Texts are cleaned as `SentencePieceTokenizer.clean` does (empty ones
    left out). `ValueError` when `vocab_size` is too small for the texts'
    characters (with byte fallback: 260 pieces plus one per kept character),
    and when `texts` is one string rather than a list of them.
    """
    refuse_a_string(texts, "train_sentencepiece")
    sentencepiece = _import_sentencepiece()
    cleaned = SentencePieceTokenizer.clean(tf.constant([*texts], tf.string)).numpy()
    cleaned = [text.decode("utf-8") for text in cleaned if text]
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


def _surface(piece, kind, copy=False):
    """The bytes a piece stands for in a decoded text: the piece with `▁`
    as a space; a byte piece `<0xNN>`, byte NN; a reserved or unused one,
    nothing. A copy (an `[UNK]` replaced by a source piece) of a byte that
    is part of a longer character is nothing: one byte of it is no text."""
    if kind == BYTE:
        value = int(piece[3:-1], 16)
        return b"" if copy and value >= 0x80 else bytes([value])
    if kind in (NORMAL, USER_DEFINED):
        return piece.replace(WORD_BOUNDARY, " ").encode("utf-8")
    return b""


def _lookup(table, ids, default):
    """`table[ids]` for ids of any shape; `default` where an id is outside
    the table."""
    ids = tf.cast(ids, tf.int64)
    inside = tf.logical_and(ids >= 0, ids < tf.size(table, out_type=tf.int64))
    return tf.where(inside, tf.gather(table, tf.where(inside, ids, 0)), default)


def _sentencepiece_ops():
    """TensorFlow Text's generated SentencePiece op wrappers."""
    import_text()
    from tensorflow_text.python.ops import sentencepiece_tokenizer

    return sentencepiece_tokenizer.gen_sentencepiece_tokenizer


class _SentencePieceModel(tf.saved_model.experimental.TrackableResource):
    """The SentencePiece model as a TensorFlow resource (`SentencepieceOp`,
    the serialized model its `model` attribute), created again from that
    attribute when a SavedModel loads.

    Unlike TensorFlow Text's own `SentencepieceTokenizer`, the resource has
    a `shared_name` (from the model's hash). Without one it is private to
    the op's kernel and deleted with it, and eager TensorFlow drops its
    cached kernels whenever a seed is set (`tf.random.set_seed`,
    `keras.utils.set_random_seed`): every tokenizer made before then failed
    with "Resource ... does not exist". Tokenizers of the same model share
    the resource, which is read-only.

    `model_file` (a `tf.saved_model.Asset` of the model's file, held here
    because Keras' `ExportArchive` saves the resources of what it tracks)
    puts a copy of the file in the SavedModel's `assets/`, for clients that
    tokenize themselves (the `tokens` signature); the graph does not read it.
    """

    def __init__(self, model, model_path):
        super().__init__()
        # A resource is not an AutoTrackable: its children are declared.
        self.model_file = self._track_trackable(tf.saved_model.Asset(model_path), "model_file")
        self._model_proto = model
        self._shared_name = "sentencepiece_" + hashlib.sha256(model).hexdigest()[:32]
        self.resource_handle  # noqa: B018 - creates the resource now, where the model is read

    def _create_resource(self):
        return _sentencepiece_ops().sentencepiece_op(
            model=self._model_proto, shared_name=self._shared_name
        )


class SentencePieceTokenizer(InGraphTokenizer):
    """SentencePiece tokenisation and lossless detokenisation in TensorFlow ops.

    Args:
        model_path: a SentencePiece model file (`train_sentencepiece`) whose
            pieces 0-3 are the reserved tokens `RESERVED`.

    `encode`, `pieces`, `tokens` and `blank_where_empty` are those of
    `SubwordTokenizer`. Tokenising runs TensorFlow Text's SentencePiece
    ops on the serialized model, an attribute of an op, so a SavedModel
    holds the model in its graph (and a copy of the file in `assets/`, for
    clients of the `tokens` signature).

    `clean(x)`: valid UTF-8 (bad bytes replaced by U+FFFD), `▁` (U+2581,
    SentencePiece's space mark) read as a space, surrounding space
    stripped, and a run of spaces as one (SentencePiece's
    `remove_extra_whitespaces`). Then for every text, with a model from
    `train_sentencepiece` (identity normalization, byte fallback):

        decode(encode(x)) == clean(x)

    `decode` is SentencePiece's decoding, `join_i surface(id_i)` with its
    leading spaces removed (the space SentencePiece puts before the first
    word), where the surface of a piece is the piece with `▁` as a space,
    of a byte piece `<0xNN>` that byte, of a reserved piece nothing. Bytes
    that form no complete UTF-8 character are dropped: a model may write a
    lead byte without its continuation bytes (`<0xC2> <0xC2> <0xA3>` is
    "£": the first `<0xC2>` is dropped), a lone continuation byte or a
    truncated sequence (`<0xE2> <0x82>`). SentencePiece's own decoder
    (`SentencePieceProcessor.decode`) writes U+FFFD for each such byte
    instead; a text never decodes to U+FFFD here unless its pieces spell
    U+FFFD itself. It is written with core ops, not TensorFlow Text's
    detokenizer, so that copied pieces can be spliced in.
    """

    def __init__(self, model_path, name=None):
        super().__init__(name=name)
        with open(model_path, "rb") as handle:
            model = handle.read()
        pieces = sentencepiece_pieces(model)
        if [piece for piece, _ in pieces[: len(RESERVED)]] != RESERVED:
            raise ValueError(
                f"SentencePiece model {model_path} must start with the reserved pieces "
                f"{RESERVED}; it starts with {[piece for piece, _ in pieces[: len(RESERVED)]]}."
            )
        self.vocab_size = len(pieces)
        self._pieces = tf.constant([piece for piece, _ in pieces])
        self._surfaces = tf.constant([_surface(piece, kind) for piece, kind in pieces])
        self._copies = tf.constant([_surface(piece, kind, copy=True) for piece, kind in pieces])
        self._model = _SentencePieceModel(model, model_path)

    @staticmethod
    def clean(strings):
        """Valid UTF-8, `▁` as a space, stripped, runs of spaces as one."""
        strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace")
        strings = tf.strings.regex_replace(strings, WORD_BOUNDARY, " ")
        return tf.strings.regex_replace(tf.strings.strip(strings), " +", " ")

    def pieces(self, strings, sampling=0.0):
        """Ragged `(B, None)` int64 piece ids, without `[START]`/`[END]`.

        `sampling` 0: the most likely segmentation. `sampling` a > 0
        (for training batches): a segmentation drawn from all of them,
        with probability proportional to P(segmentation)^a (Kudo's subword
        regularization, 2018); the smaller a, the flatter the draw, and 1
        draws by the model's own probabilities. The draws are not seeded
        (SentencePiece's generator): every run sees other ones."""
        if sampling < 0:
            raise ValueError(f"sampling must be >= 0; got {sampling}")
        ops = _sentencepiece_ops()
        ids, row_splits = ops.sentencepiece_tokenize_op(
            self._model.resource_handle,
            self.clean(strings),
            nbest_size=-1 if sampling else 0,  # -1: every segmentation may be drawn
            alpha=sampling or 1.0,
            add_bos=False,
            add_eos=False,
            reverse=False,
            out_type=tf.int32,
        )
        return tf.RaggedTensor.from_row_splits(tf.cast(ids, tf.int64), row_splits, validate=False)

    def tokens(self, ids):
        """The piece strings of `ids` (any shape), `▁` marking a word's
        start, e.g. for plot labels; `[UNK]` for an id outside the model."""
        return _lookup(self._pieces, ids, RESERVED[UNK])

    def decode(self, ids, replacements=None, source_tokenizer=None):
        """Text from `(B, L)` ids (see the class): reserved pieces and
        `[UNK]` write nothing.

        `replacements` (`(B, L)`, from generation's `replace_unknown`): where
        it holds a source id above the reserved ones, that piece of
        `source_tokenizer` (default this one, a `SentencePieceTokenizer`) is
        written in place of the `[UNK]`: its surface, not its id, since the
        two models number pieces differently. A piece with `▁` starts a new
        word; one without joins the word before it, as in the source; a
        byte piece of a longer character copies nothing (copying ASCII
        bytes, which are whole characters); a reserved id copies nothing.
        """
        source = self if source_tokenizer is None else source_tokenizer
        if not isinstance(source, SentencePieceTokenizer):
            raise ValueError(
                "source_tokenizer must be a SentencePieceTokenizer, as the target is; "
                f"got {type(source).__name__}"
            )
        surfaces = _lookup(self._surfaces, ids, "")
        if replacements is not None:
            replacements = tf.cast(replacements, tf.int64)
            copied = _lookup(source._copies, replacements, "")
            surfaces = tf.where(replacements > UNK, copied, surfaces)
        text = tf.strings.regex_replace(tf.strings.reduce_join(surfaces, axis=-1), "^ +", "")
        # Incomplete byte sequences (byte pieces) are dropped, not written as U+FFFD.
        return tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="ignore")
