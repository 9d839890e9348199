"""What both in-graph tokenizers share (TensorFlow-specific): `encode` and
the cleaning of texts, built on a subclass's `clean` and `pieces`, and
what makes a text blank in the graph (`blank_texts`). The reserved tokens
and the blank characters themselves, and `is_blank` in Python, are
`characters.py`'s (no TensorFlow); they are importable from here too.
"""

import tensorflow as tf

from keras_attention.tokenizers.characters import (  # noqa: F401 (re-exported: the names' old home)
    BLANK,
    BLANK_CHARACTERS,
    DIGITS,
    END,
    PAD,
    RESERVED,
    START,
    UNK,
    character_class,
    code_point_ranges,
    is_blank,
    refuse_a_string,
)


def blank_texts(strings):
    """`(B,)` bool: which of `strings (B,)` are empty or only blank
    characters (bad UTF-8 bytes count as U+FFFD, not blank); `is_blank` in
    the graph, core ops only (`UnicodeTranscode`, `RegexFullMatch`)."""
    strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace")
    return tf.strings.regex_full_match(strings, BLANK)


def import_text():
    """The `tensorflow_text` module (its ops registered), or an `ImportError`
    that says how to install it."""
    try:
        import tensorflow_text
    except ImportError as error:  # pragma: no cover - an install problem, said clearly
        raise ImportError(
            "keras_attention.tokenizers needs tensorflow-text: "
            "pip install 'keras_attention[tensorflow]'"
        ) from error
    return tensorflow_text


class InGraphTokenizer(tf.Module):
    """What both tokenizers share: `blank_where_empty` and `encode`, built
    on a subclass's `clean` and `pieces`."""

    @staticmethod
    def clean(strings):
        """Valid UTF-8 (bad bytes replaced), surrounding space stripped."""
        strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace")
        return tf.strings.strip(strings)

    @classmethod
    def blank(cls, strings):
        """`(B,)` bool: the `strings` that are blank (`blank_texts`) after
        `clean` (SentencePiece's reads `▁` as a space), whose strings are
        valid UTF-8 already."""
        return tf.strings.regex_full_match(cls.clean(strings), BLANK)

    @classmethod
    def blank_where_empty(cls, strings, translations):
        """`translations` with "" wherever `strings` is blank (`blank`):
        nothing to translate gives nothing, not whatever a model generates
        from `[START] [END]`. The in-process translation and the exported
        signatures both use this, so they agree."""
        return tf.where(cls.blank(strings), tf.constant(""), translations)

    def encode(self, strings, max_length, sampling=0.0):
        """`(ids (B, max_length) int32, truncated (B,) bool)`: `[START]
        pieces... [END]`, padded with `[PAD]`; a text of more than
        `max_length - 2` pieces keeps its first ones, still ends with
        `[END]`, and is flagged. `sampling` is `pieces`'."""
        pieces = self.pieces(strings, sampling)
        room = max_length - 2
        truncated = pieces.row_lengths() > room
        pieces = pieces[:, :room]
        batch = tf.shape(pieces.row_lengths(), out_type=tf.int64)[0]
        start = tf.fill([batch, 1], tf.constant(START, tf.int64))
        end = tf.fill([batch, 1], tf.constant(END, tf.int64))
        ids = tf.concat([start, pieces, end], axis=1)
        return tf.cast(ids.to_tensor(PAD, shape=[None, max_length]), tf.int32), truncated
