"""What both in-graph tokenizers share (TensorFlow-specific): the reserved
tokens and their ids, matching the `Seq2Seq` defaults (0 `[PAD]`, 1
`[START]` (<sos>), 2 `[END]` (<eos>), 3 `[UNK]`), `encode` and the
cleaning of texts, built on a subclass's `clean` and `pieces`; and what
makes a text blank, in the graph (`blank_texts`) and in Python
(`is_blank`).

A text is **blank** when nothing is left of it without its blank
characters (`BLANK_CHARACTERS`): Unicode's White_Space characters, the rest
of what Python's `str.isspace` counts (U+001C-U+001F, the information
separators), and the format characters, general category Cf (U+00AD soft
hyphen, U+200B-U+200F zero widths and directional marks, U+202A-U+202E
embeddings and overrides, U+2060-U+2064, U+FEFF byte order mark, ...).
Every path that translates text (the Translator's signatures in and out of
process, the CTranslate2 path) reads a blank text as nothing to translate:
"" with score 0.
"""

import re

import tensorflow as tf

RESERVED = ["[PAD]", "[START]", "[END]", "[UNK]"]
PAD, START, END, UNK = 0, 1, 2, 3
DIGITS = "0123456789"

# The blank characters, as code point ranges (Unicode 14.0, Python's
# `unicodedata`): White_Space and `str.isspace` (first line), then Cf.
# Written out so that the graph (RE2, whose tables need not be Python's
# version) and Python's `re` match the same characters.
_BLANK_RANGES = """
0009-000D 001C-0020 0085 00A0 1680 2000-200A 2028-2029 202F 205F 3000
00AD 0600-0605 061C 06DD 070F 0890-0891 08E2 180E 200B-200F 202A-202E 2060-2064
2066-206F FEFF FFF9-FFFB 110BD 110CD 13430-13438 1BCA0-1BCA3 1D173-1D17A E0001
E0020-E007F
"""


def code_point_ranges(text):
    """`[(first, last)]` of the code point spans written in `text`
    (hexadecimal, `0009-000D 0085 ...`)."""
    spans = (span.partition("-") for span in text.split())
    return [(int(first, 16), int(last or first, 16)) for first, _, last in spans]


def character_class(ranges):
    """The regular expression class `[...]` of the code point `ranges`,
    which RE2 (the graph) and Python's `re` read alike."""
    return "[" + "".join(f"{chr(first)}-{chr(last)}" for first, last in ranges) + "]"


BLANK_CHARACTERS = code_point_ranges(_BLANK_RANGES)
_BLANK = character_class(BLANK_CHARACTERS) + "*"


def is_blank(text):
    """Whether `text` (a str; bytes are read as UTF-8, bad bytes replaced)
    is empty or only blank characters: `blank_texts` in Python."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return re.fullmatch(_BLANK, text) is not None


def blank_texts(strings):
    """`(B,)` bool: which of `strings (B,)` are empty or only blank
    characters (bad UTF-8 bytes count as U+FFFD, not blank); `is_blank` in
    the graph, core ops only (`UnicodeTranscode`, `RegexFullMatch`)."""
    strings = tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace")
    return tf.strings.regex_full_match(strings, _BLANK)


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


def refuse_a_string(texts, function):
    """`ValueError` for `texts` that is one string, not a list of them (a
    string is an iterable of its characters: each was taken for a text)."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            f"`texts` of {function} must be a list of strings; received a single string "
            f"{texts[:40]!r}{'...' if len(texts) > 40 else ''} (wrap it in a list)."
        )


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
        return tf.strings.regex_full_match(cls.clean(strings), _BLANK)

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
