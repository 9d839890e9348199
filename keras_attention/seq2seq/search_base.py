"""The base of the decoding strategies (`search.py`): the options every
strategy shares, defined, defaulted and validated once in
`Search.__init__`, and `Search.prepare`, which checks one call's source and
prefix and builds its `DecodingOptions` (`decoding_options.py`).

A strategy subclasses `Search`, adds its own options (validated with the
same `error`, `_int`, `_bool`, `_number`) and implements
`__call__(model, source, prefix=None)`; the result contract is the one in
`search.py`'s module docstring.
"""

import math
import numbers

from keras import ops

from keras_attention.seq2seq.decoding_options import (
    DecodingOptions,
    check_prefix_ids,
    check_source,
)

__all__ = ["Search"]


def is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class Search:
    """Base class of the decoding strategies: the options they all share.

    Args:
        max_length: int >= 1, the number of tokens generated at most (`L`,
            `<eos>` and a forced prefix included). Default `None`: the
            source's static width plus one (a source padded to the
            tokenizer's `max_length` then allows as many target pieces plus
            `<eos>`, the translation recipe's rule); an error at call time
            if that width is unknown.
        min_length: int >= 0; `<eos>` is banned until this many tokens
            (prefix included) are generated (CTranslate2's
            `min_decoding_length`). At most `max_length`.
        no_repeat_ngram_size: int n >= 0; n > 0 bans every token that would
            complete an n-gram already in the hypothesis.
        repetition_penalty: θ > 0; logits z of tokens already in the
            hypothesis become z / θ (z > 0) or z · θ (CTRL). 1.0 disables it.
        suppress_tokens: token ids (ints >= 0) never generated, or None.
            Padding and `<sos>` never are, whatever this says.
        replace_unknown: bool; adds `replacements` to the result: where a
            token is `unk_id`, the source id at that step's most attended
            position, -1 elsewhere.
        unk_id: the `<unk>` id for `replace_unknown`; default the model's
            `unk_id`, else 3.
        return_attention_scores: bool; adds `attention (..., L, S)`, each
            step's source attention (the layers' name for the same switch;
            the result's key is `"attention"`).
        sos_id, eos_id, padding_id: override the model's special ids.

    Call arguments:
        model: an object with the `Seq2Seq` decoding contract.
        source: int ids `(B, S)`, padded with the model's `padding_id`.
        prefix: optional int ids `(B, P)`, P <= L, padded with `padding_id`,
            forced as the first tokens of each output.

    Returns:
        the dict described in the module docstring.
    """

    def __init__(
        self,
        max_length=None,
        min_length=0,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
        suppress_tokens=None,
        replace_unknown=False,
        unk_id=None,
        return_attention_scores=False,
        sos_id=None,
        eos_id=None,
        padding_id=None,
    ):
        # `owner` names the search in errors; 0.2.0's wrappers set their
        # function's name (see `build_search`) so their messages stay as they were.
        self.owner = getattr(self, "owner", type(self).__name__)
        if max_length is not None:
            max_length = self._int("max_length", max_length, 1, "a positive integer")
        self.max_length = max_length
        self.min_length = self._int("min_length", min_length, 0, "an integer >= 0")
        self.no_repeat_ngram_size = self._int(
            "no_repeat_ngram_size", no_repeat_ngram_size, 0, "an integer >= 0 (0 disables it)"
        )
        if not is_real(repetition_penalty) or math.isnan(repetition_penalty):
            raise self.error("repetition_penalty", "a number > 0", repetition_penalty)
        if not repetition_penalty > 0 or math.isinf(repetition_penalty):
            raise self.error("repetition_penalty", "> 0 (1.0 disables it)", repetition_penalty)
        self.repetition_penalty = float(repetition_penalty)
        if suppress_tokens is not None and (
            isinstance(suppress_tokens, (str, bytes))
            or not hasattr(suppress_tokens, "__iter__")
            or not all(is_int(token) and token >= 0 for token in suppress_tokens)
        ):
            raise self.error("suppress_tokens", "a list of token ids (ints >= 0)", suppress_tokens)
        self.suppress_tokens = (
            None if suppress_tokens is None else tuple(int(token) for token in suppress_tokens)
        )
        self.replace_unknown = self._bool("replace_unknown", replace_unknown)
        self.return_attention_scores = self._bool(
            "return_attention_scores", return_attention_scores
        )
        for name, value in (
            ("unk_id", unk_id),
            ("sos_id", sos_id),
            ("eos_id", eos_id),
            ("padding_id", padding_id),
        ):
            if value is not None:  # any integer: eos_id=-1 is "never ends"
                value = self._int(name, value, -(2**31), "a token id (an integer) or None")
            setattr(self, name, value)
        self.check_min_length(self.max_length)

    # -- validation, the one place ---------------------------------------------
    def error(self, name, expected, value):
        return ValueError(
            f"`{name}` of {self.owner} must be {expected}; received {name}={value!r}."
        )

    def _int(self, name, value, low, expected, high=None):
        """An integer from `low` to `high` (None: no upper bound)."""
        if not is_int(value) or value < low or (high is not None and value > high):
            raise self.error(name, expected, value)
        return int(value)

    def _bool(self, name, value):
        if not isinstance(value, bool):
            raise self.error(name, "True or False", value)
        return value

    def _number(self, name, value, low, expected):
        """A finite real number >= `low`."""
        if not is_real(value) or not math.isfinite(value) or value < low:
            raise self.error(name, expected, value)
        return float(value)

    def check_min_length(self, max_length):
        if max_length is not None and self.min_length > max_length:
            raise ValueError(
                f"`min_length` of {self.owner} must be at most max_length={max_length} (no "
                f"output could end); received min_length={self.min_length}."
            )

    # -- one call ------------------------------------------------------------
    def decode_length(self, source):
        """`L`: `max_length`, or the source's static width + 1."""
        if self.max_length is not None:
            return self.max_length
        width = source.shape[1] if len(source.shape) == 2 else None
        if width is None:
            raise ValueError(
                f"`max_length` of {self.owner} is None, which means the source's width + 1, but "
                f"the source's width is not known statically (shape {tuple(source.shape)}); "
                "give max_length."
            )
        return int(width) + 1

    def prepare(self, model, source, prefix):
        """`(source, max_length, DecodingOptions)` of one call, checked."""
        source = ops.convert_to_tensor(source)
        max_length = self.decode_length(source)
        source = check_source(source, max_length, self.owner, model)
        self.check_min_length(max_length)
        sos_id = model.sos_id if self.sos_id is None else self.sos_id
        prefix = check_prefix_ids(prefix, model, sos_id, self.owner)
        if getattr(self, "coverage_penalty", 0.0) and not getattr(model, "has_attention", True):
            raise ValueError(
                f"`coverage_penalty` of {self.owner} needs a model with attention (it sums the "
                f"attention each source position received); {type(model).__name__} has none. "
                "Use coverage_penalty=0."
            )
        static = source.shape[0]
        options = DecodingOptions(
            self,
            static if static is not None else ops.shape(source)[0],
            max_length,
            *(
                getattr(model, name) if getattr(self, name) is None else getattr(self, name)
                for name in ("sos_id", "eos_id", "padding_id")
            ),
            prefix=prefix,
        )
        return source, max_length, options

    def __call__(self, model, source, prefix=None):
        raise NotImplementedError

    def best(self, model, source, prefix=None):
        """The best hypothesis per source: `tokens (B, L)`, `scores (B,)`, ..."""
        return self(model, source, prefix=prefix)

    # -- configuration ---------------------------------------------------------
    def get_config(self):
        return {
            "max_length": self.max_length,
            "min_length": self.min_length,
            "no_repeat_ngram_size": self.no_repeat_ngram_size,
            "repetition_penalty": self.repetition_penalty,
            "suppress_tokens": None if self.suppress_tokens is None else list(self.suppress_tokens),
            "replace_unknown": self.replace_unknown,
            "unk_id": self.unk_id,
            "return_attention_scores": self.return_attention_scores,
            "sos_id": self.sos_id,
            "eos_id": self.eos_id,
            "padding_id": self.padding_id,
        }

    def shared_options(self):
        """The options of `Search` (those every strategy takes), as a dict."""
        return Search.get_config(self)

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        changed = {
            name: value
            for name, value in self.get_config().items()
            if value != type(self)().get_config()[name]
        }
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


def build_search(cls, owner, **options):
    """`cls(**options)` whose errors name `owner` (a 0.2.0 function)."""
    search = cls.__new__(cls)
    search.owner = owner
    search.__init__(**options)
    return search
