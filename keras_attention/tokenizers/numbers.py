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
first: a U+E000 or a U+0001 (`MARK`, which `numbers` and `restore` use
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
of `number_rules.py` (`numbers_in`, `protect_text`, `protect_pair`,
`copied_number`, `restore_text`, `sanitized`) are the same rules without
TensorFlow, for the recipe's preparation on any
backend and the CTranslate2 path (`serving.ctranslate2`).
"""

import tensorflow as tf

from keras_attention.tokenizers.number_rules import (  # noqa: F401 (re-exported: the names' old home)
    MARK,
    NUMBER,
    OTHER_DIGITS,
    PLACEHOLDER,
    SWAPPED,
    copied_number,
    number_key,
    numbers_in,
    protect_text,
    same_number,
    sanitized,
)

_MARK = MARK  # its name before number_rules.py, which keras_attention.serving.numbers gave out


def sanitize(strings):
    """`strings (B,)` with every `PLACEHOLDER` and `MARK` a user typed
    replaced by a space, so that no text forges a protected number or the
    mark `numbers` and `restore` split on (a space never joins two digit
    groups; the tokenizers read runs of spaces as one)."""
    return tf.strings.regex_replace(strings, f"[{PLACEHOLDER}{MARK}]", " ")


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
        marked = tf.strings.regex_replace(sanitize(strings), f"({NUMBER})", MARK + r"\1" + MARK)
        parts = tf.strings.split(marked, MARK)
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
        swapped = tf.strings.regex_replace(numbers, ",", MARK)
        swapped = tf.strings.regex_replace(swapped, r"\.", ",")
        swapped = tf.strings.regex_replace(swapped, MARK, ".")
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
        row's groups is left out with the space before it. A `MARK` in a
        translation is dropped first."""
        translations = tf.strings.regex_replace(translations, MARK, "")
        parts = tf.strings.split(translations, PLACEHOLDER)  # k placeholders: k + 1 parts
        width = tf.maximum(tf.reduce_max(parts.row_lengths()), 1)
        found = found.to_tensor("")
        found = tf.pad(found, [[0, 0], [0, width]], constant_values="")  # (B', >= width)
        row, column = parts.value_rowids(), tf.ragged.range(parts.row_lengths()).flat_values
        last = tf.gather(parts.row_lengths(), row) - 1
        fill = tf.gather_nd(found, tf.stack([row, column], axis=1))
        # A placeholder beyond the source's numbers goes with a space before it.
        fill = tf.where(tf.logical_and(column < last, fill == ""), MARK, fill)
        fill = tf.where(column < last, fill, "")  # nothing after the last part
        joined = parts.with_flat_values(tf.strings.join([parts.flat_values, fill]))
        return tf.strings.regex_replace(tf.strings.reduce_join(joined, axis=-1), f" ?{MARK}", "")
