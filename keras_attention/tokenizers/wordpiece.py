"""WordPiece: `build_vocabulary` (the tool that ships in tensorflow-text) and
`SubwordTokenizer`, which runs it in TensorFlow ops, its vocabulary file an
asset of the SavedModel (TensorFlow-specific).

Lossy: it splits punctuation off words and cannot say where spaces were
(`1988-06-13` decodes as `1988 - 06 - 13`); `decode` rebuilds common
punctuation and contractions by rule.
"""

import hashlib

import tensorflow as tf

from keras_attention.files import write_atomically
from keras_attention.tokenizers.base import InGraphTokenizer, import_text
from keras_attention.tokenizers.characters import DIGITS, RESERVED, UNK, refuse_a_string
from keras_attention.tokenizers.number_rules import PLACEHOLDER


def build_vocabulary(texts, path, vocab_size=8000, lower_case=False, split_digits=True):
    """Learn a WordPiece vocabulary from `texts` (a list of str or a
    `tf.data.Dataset` of strings; a bare string is a `ValueError`) and
    write it to `path`, one token a line,
    the reserved tokens first. Returns the number of tokens.

    `split_digits`: the vocabulary holds no piece with a digit other than
    the twenty single digits (`0`-`9`, `##0`-`##9`), which it always holds,
    so WordPiece's longest match splits every number into digits
    (`1975` is `1 ##9 ##7 ##5`) and decodes it whole again.

    The vocabulary always holds `tokenizers.numbers.PLACEHOLDER`, the token of
    a protected number, after the reserved tokens."""
    refuse_a_string(texts, "build_vocabulary")
    import_text()
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
    if split_digits:
        vocabulary = digits_split(vocabulary)
    if PLACEHOLDER not in vocabulary:
        vocabulary.insert(len(RESERVED), PLACEHOLDER)
    write_atomically(path, ("\n".join(vocabulary) + "\n").encode("utf-8"))
    return len(vocabulary)


def digits_split(vocabulary):
    """`vocabulary` (WordPiece tokens) without the tokens that hold a digit
    and more, with the single digits and their `##` continuations added
    after the reserved tokens."""
    single = [*DIGITS, *("##" + digit for digit in DIGITS)]
    kept = [
        token
        for token in vocabulary[len(RESERVED) :]
        if token not in single and not any(character in DIGITS for character in token)
    ]
    return [*vocabulary[: len(RESERVED)], *single, *kept]


class _VocabularyFileInitializer(tf.lookup.TextFileInitializer):
    """A `TextFileInitializer` whose table is shared under a name made of the
    vocabulary's contents.

    TensorFlow names a file's table after its filename argument, which for an
    Asset is the object's address: a later tokenizer given the same address
    would read an earlier tokenizer's table. Named after the contents, two
    tables share only when they hold the same entries. The table stays a
    named (not anonymous) one, which TF1-style loaders (TF Serving's) initialise
    with the SavedModel's main op."""

    def __init__(self, asset, digest, key_dtype, key_index, value_dtype, value_index):
        super().__init__(asset, key_dtype, key_index, value_dtype, value_index)
        self._digest = digest

    @property
    def _shared_name(self):
        return f"wordpiece_{self._digest}_{self._key_index}_{self._value_index}"


class SubwordTokenizer(InGraphTokenizer):
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
        text = import_text()
        self.vocabulary_file = tf.saved_model.Asset(vocabulary_path)
        with open(vocabulary_path, "rb") as handle:
            contents = handle.read()
        tokens = contents.decode("utf-8").splitlines()
        digest = hashlib.sha256(contents).hexdigest()[:32]
        if tokens[: len(RESERVED)] != RESERVED:
            raise ValueError(
                f"vocabulary {vocabulary_path} must start with the reserved tokens {RESERVED}; "
                f"it starts with {tokens[: len(RESERVED)]}."
            )
        self.vocab_size = len(tokens)
        self.lower_case = lower_case
        index = tf.lookup.TextFileIndex
        self._ids = tf.lookup.StaticVocabularyTable(
            _VocabularyFileInitializer(
                self.vocabulary_file,
                digest,
                tf.string,
                index.WHOLE_LINE,
                tf.int64,
                index.LINE_NUMBER,
            ),
            num_oov_buckets=1,
        )
        self._tokens = tf.lookup.StaticHashTable(
            _VocabularyFileInitializer(
                self.vocabulary_file,
                digest,
                tf.int64,
                index.LINE_NUMBER,
                tf.string,
                index.WHOLE_LINE,
            ),
            default_value="[UNK]",
        )
        self._tokenizer = text.BertTokenizer(
            self._ids, lower_case=lower_case, unknown_token="[UNK]"
        )

    def pieces(self, strings, sampling=0.0):
        """Ragged `(B, None)` int64 piece ids, without `[START]`/`[END]`.
        WordPiece has one segmentation: `sampling` must be 0."""
        if sampling:
            raise ValueError(
                f"sampling needs a SentencePiece model (WordPiece has one segmentation); "
                f"got sampling={sampling}"
            )
        return self._tokenizer.tokenize(self.clean(strings)).merge_dims(-2, -1)

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
