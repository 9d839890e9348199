"""The reserved tokens and what makes a text blank, in Python: what the
in-graph tokenizers (`base.py`) and the Python twins of their preparation
(`pieces.py`, `number_rules.py`) share. No TensorFlow: it imports on every
backend.

Reserved ids, matching the `Seq2Seq` defaults: 0 `[PAD]`, 1 `[START]`
(<sos>), 2 `[END]` (<eos>), 3 `[UNK]`.

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
BLANK = character_class(BLANK_CHARACTERS) + "*"  # the pattern of a blank text


def is_blank(text):
    """Whether `text` (a str; bytes are read as UTF-8, bad bytes replaced)
    is empty or only blank characters: `blank_texts` in Python."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return re.fullmatch(BLANK, text) is not None


def refuse_a_string(texts, function):
    """`ValueError` for `texts` that is one string, not a list of them (a
    string is an iterable of its characters: each was taken for a text)."""
    if isinstance(texts, (str, bytes)):
        raise ValueError(
            f"`texts` of {function} must be a list of strings; received a single string "
            f"{texts[:40]!r}{'...' if len(texts) > 40 else ''} (wrap it in a list)."
        )
