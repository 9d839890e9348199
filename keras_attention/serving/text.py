"""In-graph subword tokenisation with TensorFlow Text (TensorFlow-specific).

`SubwordTokenizer` wraps a WordPiece vocabulary (built from training text
with the tool that ships in tensorflow-text) and does everything in
TensorFlow ops, so the same object tokenises a `tf.data` pipeline and goes
inside a SavedModel, its vocabulary file an asset.

Reserved ids, matching the `Seq2Seq` defaults: 0 `[PAD]`, 1 `[START]`
(<sos>), 2 `[END]` (<eos>), 3 `[UNK]`.
"""

import os

import tensorflow as tf

RESERVED = ["[PAD]", "[START]", "[END]", "[UNK]"]
PAD, START, END, UNK = 0, 1, 2, 3


def _import_text():
    try:
        import tensorflow_text
    except ImportError as error:  # pragma: no cover - an install problem, said clearly
        raise ImportError(
            "keras_attention.serving.text needs tensorflow-text: "
            "pip install 'keras_attention[tensorflow]'"
        ) from error
    return tensorflow_text


def build_vocabulary(texts, path, vocab_size=8000, lower_case=False):
    """Learn a WordPiece vocabulary from `texts` (a list of str or a
    `tf.data.Dataset` of strings) and write it to `path`, one token a line,
    the reserved tokens first. Returns the number of tokens."""
    _import_text()
    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset

    dataset = (
        texts
        if isinstance(texts, tf.data.Dataset)
        else tf.data.Dataset.from_tensor_slices(list(texts))
    )
    vocabulary = bert_vocab_from_dataset.bert_vocab_from_dataset(
        dataset.batch(1024).prefetch(2),
        vocab_size=vocab_size,
        reserved_tokens=RESERVED,
        bert_tokenizer_params={"lower_case": lower_case},
        learn_params={},
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write("\n".join(vocabulary) + "\n")
    os.replace(path + ".tmp", path)
    return len(vocabulary)


class SubwordTokenizer(tf.Module):
    """WordPiece tokenisation and detokenisation in TensorFlow ops.

    Args:
        vocabulary_path: a vocabulary file from `build_vocabulary`.
        lower_case: lower-case the input first (must match the vocabulary).

    `encode(strings, max_length)` gives `(ids (B, L) int32, truncated (B,))`:
    `[START] pieces... [END]`, padded with 0; a text longer than
    `max_length` keeps its first pieces and still ends with `[END]`.
    `decode(ids)` turns ids back into text, dropping reserved tokens.
    Invalid UTF-8 in the input is replaced (U+FFFD), never an error.
    """

    def __init__(self, vocabulary_path, lower_case=False, name=None):
        super().__init__(name=name)
        text = _import_text()
        self.vocabulary_file = tf.saved_model.Asset(vocabulary_path)
        with open(vocabulary_path, encoding="utf-8") as handle:
            tokens = handle.read().splitlines()
        if tokens[: len(RESERVED)] != RESERVED:
            raise ValueError(
                f"vocabulary {vocabulary_path} must start with the reserved tokens {RESERVED}; "
                f"it starts with {tokens[: len(RESERVED)]}."
            )
        self.vocab_size = len(tokens)
        self.lower_case = lower_case
        index = tf.lookup.TextFileIndex
        self._ids = tf.lookup.StaticVocabularyTable(
            tf.lookup.TextFileInitializer(
                self.vocabulary_file, tf.string, index.WHOLE_LINE, tf.int64, index.LINE_NUMBER
            ),
            num_oov_buckets=1,
        )
        self._tokens = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                self.vocabulary_file, tf.int64, index.LINE_NUMBER, tf.string, index.WHOLE_LINE
            ),
            default_value="[UNK]",
        )
        self._tokenizer = text.BertTokenizer(
            self._ids, lower_case=lower_case, unknown_token="[UNK]"
        )

    @staticmethod
    def clean(strings):
        """Valid UTF-8 (bad bytes replaced), surrounding space stripped."""
        strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace")
        return tf.strings.strip(strings)

    @classmethod
    def blank_where_empty(cls, strings, translations):
        """`translations` with "" wherever `strings` is empty or all space
        after `clean`: nothing to translate gives nothing, not whatever a
        model generates from `[START] [END]`. The in-process translation and
        the exported signatures both use this, so they agree."""
        empty = tf.equal(tf.strings.length(cls.clean(strings)), 0)
        return tf.where(empty, tf.constant(""), translations)

    def pieces(self, strings):
        """Ragged `(B, None)` int64 piece ids, without `[START]`/`[END]`."""
        return self._tokenizer.tokenize(self.clean(strings)).merge_dims(-2, -1)

    def encode(self, strings, max_length):
        """`(ids (B, max_length) int32, truncated (B,) bool)`."""
        pieces = self.pieces(strings)
        room = max_length - 2
        truncated = pieces.row_lengths() > room
        pieces = pieces[:, :room]
        batch = tf.shape(pieces.row_lengths(), out_type=tf.int64)[0]
        start = tf.fill([batch, 1], tf.constant(START, tf.int64))
        end = tf.fill([batch, 1], tf.constant(END, tf.int64))
        ids = tf.concat([start, pieces, end], axis=1)
        return tf.cast(ids.to_tensor(PAD, shape=[None, max_length]), tf.int32), truncated

    def tokens(self, ids):
        """The token strings of `ids` (any shape), e.g. for plot labels."""
        return self._tokens.lookup(tf.cast(ids, tf.int64))

    def decode(self, ids, replacements=None, source_tokenizer=None):
        """Text from `(B, L)` ids: reserved tokens dropped, `##` pieces
        joined, no space before closing punctuation.

        `replacements` (`(B, L)`, from generation's `replace_unknown`): where
        it holds a source id (>= 0), that source piece, looked up in
        `source_tokenizer` (default this one), is written in place of the
        `[UNK]`; a reserved source token copies nothing. With WordPiece the
        copy is the single most attended piece: a `##` piece joins the word
        before it, and of a source word split into pieces only that piece
        is copied.
        """
        ids = tf.cast(ids, tf.int64)
        tokens, keep = self.tokens(ids), ids > UNK
        if replacements is not None:
            replacements = tf.cast(replacements, tf.int64)
            copied = replacements > UNK
            source = self if source_tokenizer is None else source_tokenizer
            tokens = tf.where(copied, source.tokens(tf.maximum(replacements, 0)), tokens)
            keep = tf.logical_or(keep, copied)
        words = tf.ragged.boolean_mask(tokens, keep)
        text = tf.strings.reduce_join(words, axis=-1, separator=" ")
        text = tf.strings.regex_replace(text, r" ##", "")  # join word pieces
        text = tf.strings.regex_replace(
            text, r" ([.,!?;:%)\]”])", r"\1"
        )  # no space before closing marks
        text = tf.strings.regex_replace(text, r"([(\[“„]) ", r"\1")  # nor after opening ones
        # Contractions: "didn ' t", "he ’ s" -> "didn't", "he’s". A straight
        # quote elsewhere may open or close a quotation, so it keeps its spaces.
        text = tf.strings.regex_replace(text, r"(\w) ?([’']) ?(s|t|m|d|re|ve|ll)\b", r"\1\2\3")
        return text
