"""The rules of number protection in Python (`numbers.py`'s module
docstring says what they are): what a digit group is (`NUMBER`), how a
text is sanitized and protected, how a copied number is written, and the
restore of a translation's placeholders. `NumberProtection` applies the
same rules in TensorFlow ops; these are its twins for what runs without
TensorFlow (the recipe's preparation on any backend, the CTranslate2
path). No TensorFlow: it imports on every backend.
"""

import re

from keras_attention.tokenizers.characters import character_class, code_point_ranges

PLACEHOLDER = "\ue000"
MARK = "\x01"  # splits a text around its numbers; read as a space in texts (`sanitize`)

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
OTHER = character_class(OTHER_DIGITS)
NUMBER = rf"(?:[0-9]+(?:[.,:][0-9]+)*|{OTHER})+"

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
    """`text` (a Python str) with `PLACEHOLDER` and `MARK` read as spaces:
    what `numbers.sanitize` does in the graph."""
    return text.replace(PLACEHOLDER, " ").replace(MARK, " ")


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


def protect_pair(source, target):
    """`(source, target)` protected (`protect_text`) where both hold the
    same numbers in the same order (`same_number`), unchanged otherwise:
    what `NumberProtection.protect_pairs` does to a training pair in the
    graph."""
    same = [number_key(n) for n in numbers_in(source)] == [
        number_key(n) for n in numbers_in(target)
    ]
    return (protect_text(source), protect_text(target)) if same else (source, target)


def restore_text(translation, source, swap_separators=False):
    """`translation` with its k-th `PLACEHOLDER` replaced by the k-th digit
    group of `source` (`copied_number`); one beyond them is left out with
    the space before it, and a `MARK` in `translation` is dropped: what
    `NumberProtection.restore` does in the graph."""
    numbers = [copied_number(number, swap_separators) for number in numbers_in(source)]
    parts = translation.replace(MARK, "").split(PLACEHOLDER)
    text = parts[0]
    for index, part in enumerate(parts[1:]):
        if index < len(numbers):
            text += numbers[index]
        elif text.endswith(" "):
            text = text[:-1]
        text += part
    return text


class NumberRules:
    """`NumberProtection`'s twin without TensorFlow, configured the same way
    (`get_config` gives what `NumberProtection.get_config` gives, so one
    configuration names one protection whichever side applies it): a
    training pair protected (`protect_pair`), a text to translate protected
    (`protect_text`), and a translation's placeholders restored from its
    source (`restore`).

    Args:
        swap_separators: exchange `.` and `,` in the copy of a number whose
            form says they are decimal or thousands separators
            (`copied_number`).

    Example:

    >>> rules = NumberRules(swap_separators=True)
    >>> source, target = rules.protect_pair("Er zahlte 2,50 Euro.", "He paid 2.50 euros.")
    >>> source == f"Er zahlte {PLACEHOLDER} Euro."
    True
    >>> rules.restore(f"He paid {PLACEHOLDER} euros.", "Er zahlte 2,50 Euro.")
    'He paid 2.50 euros.'
    """

    def __init__(self, swap_separators=False):
        if not isinstance(swap_separators, bool):
            raise ValueError(
                "`swap_separators` of NumberRules must be True or False; "
                f"received swap_separators={swap_separators!r}."
            )
        self.swap_separators = swap_separators

    protect_pair = staticmethod(protect_pair)
    protect_text = staticmethod(protect_text)

    def restore(self, translation, source):
        """`restore_text` of `translation` from `source` with these rules."""
        return restore_text(translation, source, self.swap_separators)

    def get_config(self):
        return {"swap_separators": self.swap_separators}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
