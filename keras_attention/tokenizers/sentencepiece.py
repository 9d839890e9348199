"""SentencePiece in the graph: `SentencePieceTokenizer`, run by TensorFlow
Text's SentencePiece ops from the serialized model, which the SavedModel
keeps in its graph (TensorFlow-specific). Lossless: `decode(encode(x)) ==
clean(x)` for every text.

Training a model (`train_sentencepiece`), reading its pieces with no
protocol buffer schema (`sentencepiece_pieces`) and its Python twin
(`SentencePieceEncoder`) are `pieces.py`'s, which needs no TensorFlow;
the first two are importable from here too.
"""

import hashlib

import tensorflow as tf

from keras_attention.tokenizers.base import InGraphTokenizer, import_text
from keras_attention.tokenizers.characters import RESERVED, UNK
from keras_attention.tokenizers.pieces import (  # noqa: F401 (re-exported: the names' old home)
    BYTE,
    NORMAL,
    USER_DEFINED,
    WORD_BOUNDARY,
    read_model,
    sentencepiece_pieces,
    surface,
    train_sentencepiece,
)


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
        model, pieces = read_model(model_path)
        self.vocab_size = len(pieces)
        self._pieces = tf.constant([piece for piece, _ in pieces])
        self._surfaces = tf.constant([surface(piece, kind) for piece, kind in pieces])
        self._copies = tf.constant([surface(piece, kind, copy=True) for piece, kind in pieces])
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
