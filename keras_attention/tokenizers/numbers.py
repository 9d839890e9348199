"""Numbers copied, not guessed: protect, translate, restore (TensorFlow-specific).

A translation model learns numbers from the few it saw and writes
plausible wrong ones ("um 14:35 Uhr" -> "at 145"). Machine translation
systems therefore take numbers out of a model's hands: each digit group of
the source becomes one placeholder token, the model learns to place the
placeholders, and the translator writes the source's numbers back:

    protect:  "Das kostet 49 Euro, nicht 1975."  ->  "Das kostet ⟨N⟩ Euro, nicht ⟨N⟩."
    model:                                            "It costs ⟨N⟩ euros, not ⟨N⟩."
    restore:  the k-th placeholder of the output <- the k-th number of the source
              ->  "It costs 49 euros, not 1975."

What counts as a number. A digit group is ASCII digits with `.`, `,` or
`:` between digits (`49`, `3,50`, `1.000`, `14:35`, `24.12.2019`); a
phone number `030 1234567` is two groups. Every other character Unicode
counts as a number (categories Nd, Nl and No: `٣`, `½`, `²`, `Ⅻ`, `①`;
`OTHER_DIGITS`) is protected too, so that it is copied as written instead
of being left to a model that hardly ever saw it (byte fallback; it
vanished from translations): a run of them, or one joined to ASCII digits
(`10³`, `2½`), is one group. `NUMBER` is the whole pattern; `numbers_in`
finds the groups in Python, `NumberProtection.numbers` in the graph.

The placeholder `PLACEHOLDER` is U+E000, a private-use character; both
tokenizers of `keras_attention.tokenizers` keep it as one piece. A text is `sanitize`d
first: a U+E000 or a U+0001 (`_MARK`, which `numbers` and `restore` use
to split texts) that a user typed is read as a space, so no input can
forge a placeholder or a mark (a typed U+E000 would take the next
number's place). Placeholders are filled in source order, which holds for German
<-> English (dates, prices and times keep their order); a placeholder
beyond the source's numbers is left out (with the space before it), and a
number whose placeholder the model did not write is lost (the recipe's
`number_consistency` counts those). With a prefix forced on the
translation (`restore_after_prefix`, the Translator's `constrained`), the
prefix's own numbers are protected too and fill the translation's first
placeholders as typed, each taking the place of the source's next number,
so that a number typed in a prefix is not written twice.

`swap_separators=True` (German <-> English, either direction: the rule
reads the form of a number, not the language) exchanges `.` and `,` in a
copied number where the form says they are decimal or thousands
separators, and copies every other number as written (`SWAPPED`,
`copied_number`):

    2,5  2,50  0,125       -> 2.5  2.50  0.125     one `,`: a German decimal comma
    2,500                  -> 2.500                German 2.5 or English 2500: right for both
    1.000  1.000.000       -> 1,000  1,000,000     German thousands: groups of 3 digits
                                                   after a head of 1-3 digits (not 0)
    1,000  1,000,000       -> 1.000  1.000.000     English thousands, the mirror
    1.234,56  1,234.56     -> 1,234.56  1.234,56   thousands, then decimals
    14.30  24.12  2.0      -> as written           times, dates, versions: a `.`
    24.12.2019  3.1.4                              not followed by groups of 3 digits
    2.5  3.14159  0.500    -> as written           English decimals, but the form of German
                                                   times, versions, months (`01.2019`):
                                                   ambiguous, so kept
    14:35  192.168.0.1     -> as written           no decimal or thousands form
    1,2,3  10³

Everything is core TensorFlow string ops (`RegexReplace`,
`RegexFullMatch`, `StringSplitV2`, `ReduceJoin`, ragged gathers), so an
exported translator does the same inside TF Serving; the Python functions
here (`numbers_in`, `protect_text`, `copied_number`, `sanitized`) are the
same rules for the CTranslate2 path (`serving.ctranslate2`).
"""

import re

import tensorflow as tf

from keras_attention.tokenizers.base import character_class, code_point_ranges

PLACEHOLDER = "\ue000"
_MARK = "\x01"  # splits a text around its numbers; read as a space in texts (`sanitize`)

# The characters of Unicode's number categories (Nd, Nl, No) other than
# the ASCII digits, as code point ranges (Unicode 14.0, Python's
# `unicodedata`). Written out so that the graph (RE2) and Python's `re`
# match the same characters.
_OTHER_DIGIT_RANGES = """
00B2-00B3 00B9 00BC-00BE 0660-0669 06F0-06F9 07C0-07C9 0966-096F 09E6-09EF 09F4-09F9
0A66-0A6F 0AE6-0AEF 0B66-0B6F 0B72-0B77 0BE6-0BF2 0C66-0C6F 0C78-0C7E 0CE6-0CEF
0D58-0D5E 0D66-0D78 0DE6-0DEF 0E50-0E59 0ED0-0ED9 0F20-0F33 1040-1049 1090-1099
1369-137C 16EE-16F0 17E0-17E9 17F0-17F9 1810-1819 1946-194F 19D0-19DA 1A80-1A89
1A90-1A99 1B50-1B59 1BB0-1BB9 1C40-1C49 1C50-1C59 2070 2074-2079 2080-2089 2150-2182
2185-2189 2460-249B 24EA-24FF 2776-2793 2CFD 3007 3021-3029 3038-303A 3192-3195
3220-3229 3248-324F 3251-325F 3280-3289 32B1-32BF A620-A629 A6E6-A6EF A830-A835
A8D0-A8D9 A900-A909 A9D0-A9D9 A9F0-A9F9 AA50-AA59 ABF0-ABF9 FF10-FF19 10107-10133
10140-10178 1018A-1018B 102E1-102FB 10320-10323 10341 1034A 103D1-103D5 104A0-104A9
10858-1085F 10879-1087F 108A7-108AF 108FB-108FF 10916-1091B 109BC-109BD 109C0-109CF
109D2-109FF 10A40-10A48 10A7D-10A7E 10A9D-10A9F 10AEB-10AEF 10B58-10B5F 10B78-10B7F
10BA9-10BAF 10CFA-10CFF 10D30-10D39 10E60-10E7E 10F1D-10F26 10F51-10F54 10FC5-10FCB
11052-1106F 110F0-110F9 11136-1113F 111D0-111D9 111E1-111F4 112F0-112F9 11450-11459
114D0-114D9 11650-11659 116C0-116C9 11730-1173B 118E0-118F2 11950-11959 11C50-11C6C
11D50-11D59 11DA0-11DA9 11FC0-11FD4 12400-1246E 16A60-16A69 16AC0-16AC9 16B50-16B59
16B5B-16B61 16E80-16E96 1D2E0-1D2F3 1D360-1D378 1D7CE-1D7FF 1E140-1E149 1E2F0-1E2F9
1E8C7-1E8CF 1E950-1E959 1EC71-1ECAB 1ECAD-1ECAF 1ECB1-1ECB4 1ED01-1ED2D 1ED2F-1ED3D
1F100-1F10C 1FBF0-1FBF9
"""


OTHER_DIGITS = code_point_ranges(_OTHER_DIGIT_RANGES)
_OTHER = character_class(OTHER_DIGITS)
NUMBER = rf"(?:[0-9]+(?:[.,:][0-9]+)*|{_OTHER})+"

# The numbers whose `.` and `,` `copied` exchanges (see the module's table):
# one `,`; or groups of 3 digits after a 1-3 digit head, separated by one
# kind of separator, optionally followed by the other one and decimals.
SWAPPED = (
    r"(?:[0-9]+,[0-9]+"
    r"|[1-9][0-9]{0,2}(?:\.[0-9]{3})+(?:,[0-9]+)?"
    r"|[1-9][0-9]{0,2}(?:,[0-9]{3})+(?:\.[0-9]+)?)"
)
_EXCHANGE = str.maketrans(".,", ",.")


def sanitized(text):
    """`text` (a Python str) with `PLACEHOLDER` and `_MARK` read as spaces:
    what `sanitize` does in the graph."""
    return text.replace(PLACEHOLDER, " ").replace(_MARK, " ")


def sanitize(strings):
    """`strings (B,)` with every `PLACEHOLDER` and `_MARK` a user typed
    replaced by a space, so that no text forges a protected number or the
    mark `numbers` and `restore` split on (a space never joins two digit
    groups; the tokenizers read runs of spaces as one)."""
    return tf.strings.regex_replace(strings, f"[{PLACEHOLDER}{_MARK}]", " ")


def numbers_in(text):
    """The digit groups of `text` (a Python str), in order: what
    `NumberProtection.numbers` finds in the graph."""
    return re.findall(NUMBER, sanitized(text))


def protect_text(text):
    """`text` (a Python str) sanitized, each digit group replaced by
    `PLACEHOLDER`: what `NumberProtection.protect` does in the graph."""
    return re.sub(NUMBER, PLACEHOLDER, sanitized(text))


def copied_number(number, swap_separators=True):
    """`number` (a digit group, a Python str) as it is written into a
    translation: `.` and `,` exchanged when `swap_separators` and it is
    of the form `SWAPPED`, else as it is. What `NumberProtection.copied`
    does in the graph."""
    if swap_separators and re.fullmatch(SWAPPED, number):
        return number.translate(_EXCHANGE)
    return number


def number_key(group):
    """A digit group with either decimal separator written as `.`: two
    groups are one number when their keys are equal (`3,50` and `3.50`;
    `1.000` and `1,000`). `protect_pairs` applies the same rule in the graph."""
    return group.replace(",", ".")


def same_number(a, b):
    """Whether two digit groups are one number (`number_key`)."""
    return number_key(a) == number_key(b)


class NumberProtection:
    """Protect a source's numbers before a model and restore them after it,
    in TensorFlow ops (see the module's docstring).

    Args:
        swap_separators: exchange `.` and `,` in the copy of a number whose
            form says they are decimal or thousands separators (`SWAPPED`;
            for German <-> English, either direction).

    Example:

        numbers = NumberProtection(swap_separators=True)
        numbers.protect(tf.constant(["Das kostet 2,50 Euro."]))   # ["Das kostet \\ue000 Euro."]
        numbers.restore(tf.constant(["It costs \\ue000 euros."]),
                        tf.constant(["Das kostet 2,50 Euro."]))   # ["It costs 2.50 euros."]
    """

    def __init__(self, swap_separators=False):
        if not isinstance(swap_separators, bool):
            raise ValueError(
                "`swap_separators` of NumberProtection must be True or False; received "
                f"swap_separators={swap_separators!r}."
            )
        self.swap_separators = swap_separators

    def get_config(self):
        return {"swap_separators": self.swap_separators}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @staticmethod
    def protect(strings):
        """`strings (B,)` sanitized (`sanitize`), each digit group replaced
        by `PLACEHOLDER`."""
        return tf.strings.regex_replace(sanitize(strings), NUMBER, PLACEHOLDER)

    @staticmethod
    def numbers(strings):
        """The digit groups of each of `strings (B,)`: ragged `(B, None)`."""
        marked = tf.strings.regex_replace(sanitize(strings), f"({NUMBER})", _MARK + r"\1" + _MARK)
        parts = tf.strings.split(marked, _MARK)
        return tf.ragged.boolean_mask(parts, tf.strings.regex_full_match(parts, NUMBER))

    def protect_pairs(self, sources, targets):
        """`(sources, targets)` protected where both hold the same numbers in
        the same order (`same_number`), unchanged otherwise: training pairs
        whose numbers a restore would get right. A pair without numbers is
        unchanged either way."""

        def key(strings):
            found = tf.strings.regex_replace(self.numbers(strings), ",", ".")
            return tf.strings.reduce_join(found, axis=-1, separator=" ")

        same = tf.equal(key(sources), key(targets))
        return (
            tf.where(same, self.protect(sources), sources),
            tf.where(same, self.protect(targets), targets),
        )

    def copied(self, numbers):
        """`numbers` (a string tensor of digit groups) as they are written
        into a translation (`copied_number`)."""
        if not self.swap_separators:
            return numbers
        swapped = tf.strings.regex_replace(numbers, ",", _MARK)
        swapped = tf.strings.regex_replace(swapped, r"\.", ",")
        swapped = tf.strings.regex_replace(swapped, _MARK, ".")
        return tf.where(tf.strings.regex_full_match(numbers, SWAPPED), swapped, numbers)

    def restore(self, translations, sources):
        """`translations (B,)` with their k-th `PLACEHOLDER` replaced by the
        k-th digit group of `sources (B,)` (`copied`); placeholders beyond a
        source's numbers are left out."""
        return self.restore_numbers(translations, self.numbers(sources))

    def restore_numbers(self, translations, numbers):
        """`restore` with the source's digit groups given: ragged `(B', None)`
        with B' rows of `translations` (e.g. a source's numbers repeated for
        its N hypotheses)."""
        return self._fill(translations, numbers.with_flat_values(self.copied(numbers.flat_values)))

    def restore_after_prefix(self, translations, sources, prefixes):
        """`restore` of translations forced to start with `prefixes (B,)`
        (target-side text, protected as the sources are): the first k
        placeholders, those of a prefix with k digit groups, get the
        prefix's groups as typed, and the others the source's groups from
        the (k+1)-th on (`copied`), so that a number typed in the prefix
        takes the place of the source's number instead of being written
        twice."""
        found = self.numbers(sources)
        found = found.with_flat_values(self.copied(found.flat_values))
        typed = self.numbers(prefixes)
        column = tf.ragged.range(found.row_lengths())
        later = tf.greater_equal(column, tf.expand_dims(typed.row_lengths(), 1))
        return self._fill(translations, tf.concat([typed, tf.ragged.boolean_mask(found, later)], 1))

    @staticmethod
    def _fill(translations, found):
        """`translations (B,)` with their k-th `PLACEHOLDER` replaced by
        `found[b, k]` (ragged, written as they are); a placeholder beyond a
        row's groups is left out with the space before it. A `_MARK` in a
        translation is dropped first."""
        translations = tf.strings.regex_replace(translations, _MARK, "")
        parts = tf.strings.split(translations, PLACEHOLDER)  # k placeholders: k + 1 parts
        width = tf.maximum(tf.reduce_max(parts.row_lengths()), 1)
        found = found.to_tensor("")
        found = tf.pad(found, [[0, 0], [0, width]], constant_values="")  # (B', >= width)
        row, column = parts.value_rowids(), tf.ragged.range(parts.row_lengths()).flat_values
        last = tf.gather(parts.row_lengths(), row) - 1
        fill = tf.gather_nd(found, tf.stack([row, column], axis=1))
        # A placeholder beyond the source's numbers goes with a space before it.
        fill = tf.where(tf.logical_and(column < last, fill == ""), _MARK, fill)
        fill = tf.where(column < last, fill, "")  # nothing after the last part
        joined = parts.with_flat_values(tf.strings.join([parts.flat_values, fill]))
        return tf.strings.regex_replace(tf.strings.reduce_join(joined, axis=-1), f" ?{_MARK}", "")
