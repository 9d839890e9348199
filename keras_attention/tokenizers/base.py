"""What both in-graph tokenizers share (TensorFlow-specific): the reserved
tokens and their ids, matching the `Seq2Seq` defaults (0 `[PAD]`, 1
`[START]` (<sos>), 2 `[END]` (<eos>), 3 `[UNK]`), `encode` and the
cleaning of texts, built on a subclass's `clean` and `pieces`.
"""

import tensorflow as tf

RESERVED = ["[PAD]", "[START]", "[END]", "[UNK]"]
PAD, START, END, UNK = 0, 1, 2, 3
DIGITS = "0123456789"


def _import_text():
    try:
        import tensorflow_text
    except ImportError as error:  # pragma: no cover - an install problem, said clearly
        raise ImportError(
            "keras_attention.tokenizers needs tensorflow-text: "
            "pip install 'keras_attention[tensorflow]'"
        ) from error
    return tensorflow_text


def _refuse_a_string(texts, function):
    """`ValueError` for `texts` that is one string, not a list of them (a
    string is an iterable of its characters: each was taken for a text)."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            f"`texts` of {function} must be a list of strings; received a single string "
            f"{texts[:40]!r}{'...' if len(texts) > 40 else ''} (wrap it in a list)."
        )


class _InGraphTokenizer(tf.Module):
    """What both tokenizers share: `blank_where_empty` and `encode`, built
    on a subclass's `clean` and `pieces`."""

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
