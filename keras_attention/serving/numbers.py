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

A digit group is `NUMBER`, `[0-9]+([.,:][0-9]+)*`: digits, with `.`, `,` or
`:` between digits (`49`, `3,50`, `1.000`, `14:35`, `24.12.2019`); a
phone number `030 1234567` is two groups. The placeholder `PLACEHOLDER` is
U+E000, a private-use character no text holds; both tokenizers of
`serving.text` keep it as one piece. Placeholders are filled in source
order, which holds for German <-> English (dates, prices and times keep
their order); a placeholder beyond the source's numbers is left out (with
the space before it), and a
number whose placeholder the model did not write is lost (the recipe's
`number_consistency` counts those).

`swap_separators=True` writes a number with exactly one `.` or `,` with the
other one (German `2,50` and `1.000` -> English `2.50` and `1,000`);
numbers with two or more separators (`24.12.2019`) or a `:` are copied as
they are.

Everything is core TensorFlow string ops (`RegexReplace`,
`RegexFullMatch`, `StringSplitV2`, `ReduceJoin`, ragged gathers), so an
exported translator does the same inside TF Serving.
"""

import re

import tensorflow as tf

NUMBER = r"[0-9]+(?:[.,:][0-9]+)*"
PLACEHOLDER = "\ue000"
_MARK = "\x01"  # splits a text around its numbers; removed from texts first


def numbers_in(text):
    """The digit groups of `text` (a Python str), in order: what
    `NumberProtection.numbers` finds in the graph."""
    return re.findall(NUMBER, text)


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
        swap_separators: write the copy of a number with exactly one `.` or
            `,` with the other one (for German <-> English).

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
        """`strings (B,)` with each digit group replaced by `PLACEHOLDER`."""
        return tf.strings.regex_replace(strings, NUMBER, PLACEHOLDER)

    @staticmethod
    def numbers(strings):
        """The digit groups of each of `strings (B,)`: ragged `(B, None)`."""
        marked = tf.strings.regex_replace(strings, _MARK, "")
        marked = tf.strings.regex_replace(marked, f"({NUMBER})", _MARK + r"\1" + _MARK)
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
        """`numbers` as they are written into a translation."""
        if not self.swap_separators:
            return numbers
        single = r"^([0-9]+)([.,])([0-9]+)$"
        swapped = tf.strings.regex_replace(numbers, r"^([0-9]+),([0-9]+)$", r"\1" + _MARK + r"\2")
        swapped = tf.strings.regex_replace(swapped, r"^([0-9]+)\.([0-9]+)$", r"\1,\2")
        swapped = tf.strings.regex_replace(swapped, _MARK, ".")
        return tf.where(tf.strings.regex_full_match(numbers, single), swapped, numbers)

    def restore(self, translations, sources):
        """`translations (B,)` with their k-th `PLACEHOLDER` replaced by the
        k-th digit group of `sources (B,)` (`copied`); placeholders beyond a
        source's numbers are left out."""
        return self.restore_numbers(translations, self.numbers(sources))

    def restore_numbers(self, translations, numbers):
        """`restore` with the source's digit groups given: ragged `(B', None)`
        with B' rows of `translations` (e.g. a source's numbers repeated for
        its N hypotheses)."""
        parts = tf.strings.split(translations, PLACEHOLDER)  # k placeholders: k + 1 parts
        width = tf.maximum(tf.reduce_max(parts.row_lengths()), 1)
        found = self.copied(numbers.to_tensor(""))
        found = tf.pad(found, [[0, 0], [0, width]], constant_values="")  # (B', >= width)
        row, column = parts.value_rowids(), tf.ragged.range(parts.row_lengths()).flat_values
        last = tf.gather(parts.row_lengths(), row) - 1
        fill = tf.gather_nd(found, tf.stack([row, column], axis=1))
        # A placeholder beyond the source's numbers goes with a space before it.
        fill = tf.where(tf.logical_and(column < last, fill == ""), _MARK, fill)
        fill = tf.where(column < last, fill, "")  # nothing after the last part
        joined = parts.with_flat_values(tf.strings.join([parts.flat_values, fill]))
        return tf.strings.regex_replace(tf.strings.reduce_join(joined, axis=-1), f" ?{_MARK}", "")
