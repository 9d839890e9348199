"""Decoding strategies as objects: `GreedySearch`, `BeamSearch` and
`RandomSampling`, configured once, passed around, serialised with the model
or the export, and called as `search(model, source, prefix=None)`.

The options every strategy shares are defined, defaulted and validated here
once, in `Search.__init__`; the per-call machinery they drive (the
repetition penalty, bans and forced prefixes of one step) is
`decoding_options.DecodingOptions`, and beam search's loop is `beam.py`.
The 0.2.0 functions `greedy_search`, `sample`, `beam_search` and `generate`
(`generation.py`) are thin wrappers over these objects.

One greedy or sampling step, for hypotheses y_<t (see `decoding_options.py`
for how `log p̃` is penalised and which tokens are banned):

    greedy:    y_t = argmax_v log p̃(v | y_<t, x)
    sampling:  y_t ~ softmax(filter(log p̃(· | y_<t, x) / T))   (top-k, top-p)
    score(y) = Σ_t log p̃(y_t | y_<t, x)                          (no temperature)

Beam search keeps the `beam_width` best y_≤t by Σ log p̃ and ranks finished
hypotheses by GNMT's s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y), with
lp(Y) = ((5 + |Y|) / 6)^α and cp(X; Y) = β Σ_j log(min(Σ_t a_{t,j}, 1))
(Wu et al., 2016; see `beam.beam_search_loop`).

Contract: a search takes any object with the `Seq2Seq` decoding contract
(`base.py`: `encode`, `decode_step`, `reorder_state`, `sos_id`/`eos_id`/
`padding_id`; beam search's step calls `reorder_beams` instead where the
model has it), `source (B, S)` int ids and an optional `prefix (B, P)` of
target ids padded with `padding_id`, and returns a dict of tensors:

    GreedySearch, RandomSampling:  tokens (B, L), scores (B,), lengths (B,),
                                   finished (B,)
    BeamSearch:                    tokens (B, N, L), scores (B, N), lengths (B, N),
                                   finished (B, N)

plus `attention` `(..., L, S)` with `return_attention_scores`,
`replacements` `(..., L)` with `replace_unknown` and (beam only)
`token_scores (B, N, L)` with `return_token_scores`. Outputs exclude
`<sos>`, include `<eos>` and are padded with `padding_id` after it; `L` is
`max_length`. `finished` (bool) is True where the output ends with `<eos>`
(emitted within the `L` tokens) and False for one cut at `max_length` or,
for beam search, a live prefix or an empty slot (`beam.beam_search_loop`
says exactly when those come back). `search.best(model, source, prefix)`
gives the best hypothesis per source, `(B, L)` for every strategy.

Serialisation: `get_config`/`from_config`, registered under the package
`keras_attention`, so `keras.saving.serialize_keras_object(search)` and
`deserialize_keras_object` round-trip it; `get_search` builds one from a
name, a config or an object, with overrides.

Example:

>>> import numpy as np
>>> from keras_attention.seq2seq import RecurrentSeq2Seq, get_search
>>> model = RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8)
>>> search = get_search("beam", beam_width=3, alpha=1.0, max_length=5)
>>> result = search(model, np.array([[1, 4, 5, 2]]))
>>> tuple(result["tokens"].shape)
(1, 3, 5)
>>> get_search(search, beam_width=2).beam_width
2
"""

import inspect
import math
import numbers

import keras
from keras import ops

from keras_attention.masking import write_at
from keras_attention.seq2seq.beam import beam_search_loop
from keras_attention.seq2seq.decoding_options import (
    NEGATIVE,
    DecodingOptions,
    check_prefix_ids,
    check_source,
    unk_id_of,
    unknown_replacements,
)

__all__ = [
    "BeamSearch",
    "GreedySearch",
    "RandomSampling",
    "Search",
    "check_vocabulary_fits",
    "filter_logits",
    "get_search",
]


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
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
        # function's name (see `_build`) so their messages stay as they were.
        self.owner = getattr(self, "owner", type(self).__name__)
        if max_length is not None:
            max_length = self._int("max_length", max_length, 1, "a positive integer")
        self.max_length = max_length
        self.min_length = self._int("min_length", min_length, 0, "an integer >= 0")
        self.no_repeat_ngram_size = self._int(
            "no_repeat_ngram_size", no_repeat_ngram_size, 0, "an integer >= 0 (0 disables it)"
        )
        if not _is_real(repetition_penalty) or math.isnan(repetition_penalty):
            raise self.error("repetition_penalty", "a number > 0", repetition_penalty)
        if not repetition_penalty > 0 or math.isinf(repetition_penalty):
            raise self.error("repetition_penalty", "> 0 (1.0 disables it)", repetition_penalty)
        self.repetition_penalty = float(repetition_penalty)
        if suppress_tokens is not None and (
            isinstance(suppress_tokens, (str, bytes))
            or not hasattr(suppress_tokens, "__iter__")
            or not all(_is_int(token) and token >= 0 for token in suppress_tokens)
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

    def _int(self, name, value, low, expected):
        if not _is_int(value) or value < low:
            raise self.error(name, expected, value)
        return int(value)

    def _bool(self, name, value):
        if not isinstance(value, bool):
            raise self.error(name, "True or False", value)
        return value

    def _number(self, name, value, low, expected):
        """A finite real number >= `low`."""
        if not _is_real(value) or not math.isfinite(value) or value < low:
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


def _build(cls, owner, **options):
    """`cls(**options)` whose errors name `owner` (a 0.2.0 function)."""
    search = cls.__new__(cls)
    search.owner = owner
    search.__init__(**options)
    return search


def decode_loop(model, source, max_length, choose, options, search):
    """The loop shared by greedy search and sampling: `choose(allowed) ->
    tokens (B,)` picks each step's tokens from the allowed log-probabilities."""
    return_attention, replace_unknown = search.return_attention_scores, search.replace_unknown
    unk_id = unk_id_of(model, search.unk_id)
    state = model.encode(source, max_length=max_length)
    batch = ops.shape(source)[0]
    sos_id, eos_id, padding_id = options.sos_id, options.eos_id, options.padding_id
    tokens = ops.full((batch,), sos_id, "int32")
    output = ops.full((batch, max_length), padding_id, "int32")
    scores = ops.zeros((batch,), "float32")
    finished = ops.zeros((batch,), "bool")
    # The alignment and replacement buffers are only carried when asked for.
    attention_shape = (
        (batch, max_length, ops.shape(source)[1]) if return_attention else (batch, 1, 1)
    )
    attention = ops.zeros(attention_shape, "float32")
    replacements = ops.full((batch, max_length if replace_unknown else 1), -1, "int32")

    def body(t, tokens, state, output, scores, finished, attention, replacements):
        logits, state, step_attention = model.decode_step(tokens, state)
        log_probs, allowed = options.step(logits, output, t)  # (B, V)
        chosen = ops.cast(choose(allowed), "int32")
        forcing, forced = options.forced(t)
        if forcing is not None:
            chosen = ops.where(forcing, forced, chosen)
        chosen = ops.where(finished, padding_id, chosen)
        gained = ops.take_along_axis(log_probs, chosen[:, None], axis=1)[:, 0]
        scores = scores + ops.where(finished, 0.0, gained)
        output = write_at(output, chosen[:, None], t, axis=1)
        if return_attention:
            attention = write_at(attention, ops.cast(step_attention, "float32")[:, None], t, axis=1)
        if replace_unknown:
            replacements = unknown_replacements(
                source, step_attention, chosen, unk_id, replacements, t
            )
        finished = ops.logical_or(finished, chosen == eos_id)
        return t + 1, chosen, state, output, scores, finished, attention, replacements

    def cond(t, tokens, state, output, scores, finished, attention, replacements):
        return ops.logical_and(t < max_length, ops.logical_not(ops.all(finished)))

    _, _, _, output, scores, finished, attention, replacements = ops.while_loop(
        cond, body, (0, tokens, state, output, scores, finished, attention, replacements)
    )
    result = {
        "tokens": output,
        "scores": scores,
        "lengths": ops.sum(ops.cast(output != padding_id, "int32"), axis=1),
        "finished": finished,
    }
    if return_attention:
        result["attention"] = attention
    if replace_unknown:
        result["replacements"] = replacements
    return result


@keras.saving.register_keras_serializable(package="keras_attention")
class GreedySearch(Search):
    """Pick the most probable allowed token at each step:
    y_t = argmax_v log p̃(v | y_<t, x), score Σ_t log p̃(y_t | y_<t, x).

    Args:
        **options: the shared options of `Search`.

    Call arguments:
        model, source, prefix: see `Search`.

    Returns:
        `tokens (B, L)`, `scores (B,)`, `lengths (B,)`, `finished (B,)`
        (`<eos>` emitted before `max_length` cut the output), and
        `attention (B, L, S)` / `replacements (B, L)` when asked for.

    Example:

    >>> import numpy as np
    >>> from keras_attention.seq2seq import GreedySearch, RecurrentSeq2Seq
    >>> model = RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8)
    >>> tuple(GreedySearch(max_length=6)(model, np.array([[1, 4, 2]]))["tokens"].shape)
    (1, 6)
    """

    def __call__(self, model, source, prefix=None):
        source, max_length, options = self.prepare(model, source, prefix)
        return decode_loop(
            model,
            source,
            max_length,
            lambda allowed: ops.argmax(allowed, axis=-1),
            options,
            self,
        )


def check_vocabulary_fits(name, value, logits, sos_id, padding_id, owner):
    """`value` (`top_k`) must not exceed the tokens the search can emit: the
    vocabulary (the static last axis of `logits`) less `<sos>` and padding
    (see `never_generated`)."""
    vocab = logits.shape[-1]
    if vocab is None:
        return
    usable = vocab - len({sos_id, padding_id} & set(range(vocab)))
    if value > usable:
        raise ValueError(
            f"`{name}` of {owner} must be at most {usable}, the tokens it can generate "
            f"(a vocabulary of {vocab} less <sos> and padding); received {name}={value}."
        )


def filter_logits(logits, temperature=1.0, top_k=None, top_p=None):
    """Logits for sampling: divided by `temperature`, then all but the `top_k`
    largest and all outside the smallest set of tokens whose probability
    reaches `top_p` (nucleus) set to a large negative value."""
    logits = ops.cast(logits, "float32") / temperature
    if top_k is not None:
        kth = ops.top_k(logits, top_k)[0][:, -1:]  # (B, 1)
        logits = ops.where(logits < kth, NEGATIVE, logits)
    if top_p is not None:
        sorted_logits, order = ops.top_k(logits, ops.shape(logits)[-1])  # descending
        probs = ops.softmax(sorted_logits, axis=-1)
        before = ops.cumsum(probs, axis=-1) - probs  # mass of the more probable tokens
        keep_sorted = before < top_p  # the first token is always kept
        # Back to vocabulary order: scatter via the inverse permutation.
        inverse = ops.argsort(order, axis=-1)
        keep = ops.take_along_axis(keep_sorted, inverse, axis=-1)
        logits = ops.where(keep, logits, NEGATIVE)
    return logits


@keras.saving.register_keras_serializable(package="keras_attention")
class RandomSampling(Search):
    """Draw each token from the filtered distribution of the allowed tokens:
    y_t ~ softmax(filter(log p̃(· | y_<t, x) / T)), where `filter` keeps the
    `top_k` largest and the smallest set whose probability reaches `top_p`
    (nucleus sampling; `filter_logits`). The score is Σ_t log p̃(y_t | ...),
    the model's log-probabilities with the repetition penalty but without
    the temperature.

    Args:
        temperature: T, a finite number > 0.
        top_k: None or an int >= 1, at most the vocabulary less padding and
            `<sos>` (checked at call time).
        top_p: None or a number in (0, 1].
        seed: None, an int (every call draws the same, as 0.2.0's `sample`
            with that seed) or a `keras.random.SeedGenerator` (draws advance
            it; not serialisable).
        **options: the shared options of `Search`.

    Call arguments, Returns: as `GreedySearch`.
    """

    def __init__(self, temperature=1.0, top_k=None, top_p=None, seed=None, **options):
        super().__init__(**options)
        if not _is_real(temperature) or not math.isfinite(temperature):
            raise self.error("temperature", "> 0 (a finite number)", temperature)
        if not temperature > 0:
            raise self.error("temperature", "> 0", temperature)
        self.temperature = float(temperature)
        if top_k is not None:
            top_k = self._int("top_k", top_k, 1, "a positive integer")
        self.top_k = top_k
        if top_p is not None and (not _is_real(top_p) or not 0.0 < top_p <= 1.0):
            raise self.error("top_p", "in (0, 1]", top_p)
        self.top_p = None if top_p is None else float(top_p)
        if seed is not None and not isinstance(seed, keras.random.SeedGenerator):
            seed = self._int("seed", seed, 0, "None, an integer >= 0 or a SeedGenerator")
        self.seed = seed

    def __call__(self, model, source, prefix=None):
        source, max_length, options = self.prepare(model, source, prefix)
        seed = self.seed
        generator = (
            seed
            if isinstance(seed, keras.random.SeedGenerator)
            else keras.random.SeedGenerator(seed)
        )

        def choose(allowed):
            if self.top_k is not None:
                check_vocabulary_fits(
                    "top_k", self.top_k, allowed, options.sos_id, options.padding_id, self.owner
                )
            # softmax(allowed / T) is softmax(logits / T) over the allowed tokens.
            filtered = filter_logits(allowed, self.temperature, self.top_k, self.top_p)
            return keras.random.categorical(filtered, 1, seed=generator)[:, 0]

        return decode_loop(model, source, max_length, choose, options, self)

    def get_config(self):
        if isinstance(self.seed, keras.random.SeedGenerator):
            raise ValueError(
                "`seed` of RandomSampling must be None or an integer to be serialised; "
                f"received seed={self.seed!r} (a SeedGenerator's state is not part of a config)."
            )
        return {
            **super().get_config(),
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
        }


@keras.saving.register_keras_serializable(package="keras_attention")
class BeamSearch(Search):
    """Keep the `beam_width` best hypotheses at each step; rank finished ones
    by GNMT's s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y), with
    lp(Y) = ((5 + |Y|) / 6)^α and cp(X; Y) = β Σ_j log(min(Σ_t a_{t,j}, 1))
    over the non-padding source positions j (Wu et al., 2016). The stopping
    rule, the order of the results (finished first) and what fills the slots
    no finished hypothesis takes are described at `beam.beam_search_loop`.

    Args:
        beam_width: K, an int >= 1.
        alpha: α, a finite number >= 0 (GNMT's length penalty).
        coverage_penalty: β, a finite number >= 0 (0 disables it).
        num_hypotheses: N, None (= K) or an int from 1 to K: the hypotheses
            returned, and the stopping rule waits for the N-th best, so
            every one returned is finished unless `max_length` came first.
            With None the search stops at the best finished one and the
            other slots may hold unfinished prefixes (`finished` False).
        return_token_scores: bool; adds `token_scores (B, N, L)`, each
            token's log p̃ (0 at padding).
        **options: the shared options of `Search`.

    Call arguments:
        model, source, prefix: see `Search`.

    Returns:
        `tokens (B, N, L)`, `scores (B, N)`, `lengths (B, N)`, `finished
        (B, N)` (ends with `<eos>`), and `attention (B, N, L, S)`,
        `token_scores (B, N, L)`, `replacements (B, N, L)` when asked for.
        `best()` gives `(B, L)`: the first of a search with N = 1 or, for a
        beam of 1 without coverage penalty or token scores, greedy search
        (0.2.0's `generate`; its score then has no length penalty).
    """

    def __init__(
        self,
        beam_width=4,
        alpha=0.6,
        coverage_penalty=0.0,
        num_hypotheses=None,
        return_token_scores=False,
        **options,
    ):
        super().__init__(**options)
        self.beam_width = self._int("beam_width", beam_width, 1, "a positive integer")
        self.alpha = self._number("alpha", alpha, 0.0, "a finite number >= 0")
        self.coverage_penalty = self._number(
            "coverage_penalty", coverage_penalty, 0.0, "a number >= 0 (0 disables it)"
        )
        if num_hypotheses is not None and (
            not _is_int(num_hypotheses) or not 1 <= num_hypotheses <= self.beam_width
        ):
            raise self.error(
                "num_hypotheses",
                f"an integer from 1 to beam_width={self.beam_width}",
                num_hypotheses,
            )
        self.num_hypotheses = None if num_hypotheses is None else int(num_hypotheses)
        self.return_token_scores = self._bool("return_token_scores", return_token_scores)

    def __call__(self, model, source, prefix=None):
        return self._run(model, source, prefix, self.num_hypotheses)

    def _run(self, model, source, prefix, num_hypotheses):
        source, max_length, options = self.prepare(model, source, prefix)
        return beam_search_loop(model, source, max_length, options, self, num_hypotheses)

    def is_greedy(self):
        """A beam of 1 without beam-only outputs: `best` decodes greedily."""
        return self.beam_width == 1 and not self.coverage_penalty and not self.return_token_scores

    def best(self, model, source, prefix=None):
        if self.is_greedy():
            greedy = _build(GreedySearch, self.owner, **self.shared_options())
            return greedy(model, source, prefix=prefix)
        result = self._run(model, source, prefix, 1)
        return {name: value[:, 0] for name, value in result.items()}  # the best of the K

    # The keys of `get_config()` that are not decoding options: set from the
    # model (its token ids), by the caller of each search (what it returns,
    # how many hypotheses, the longest output), or chosen in code only
    # (`suppress_tokens`, `replace_unknown`). Every other key is a decoding
    # option (`decoding_options`).
    NOT_DECODING_OPTIONS = (
        "max_length",
        "suppress_tokens",
        "replace_unknown",
        "unk_id",
        "return_attention_scores",
        "sos_id",
        "eos_id",
        "padding_id",
        "num_hypotheses",
        "return_token_scores",
    )

    def get_config(self):
        return {
            **super().get_config(),
            "beam_width": self.beam_width,
            "coverage_penalty": self.coverage_penalty,
            "alpha": self.alpha,
            "num_hypotheses": self.num_hypotheses,
            "return_token_scores": self.return_token_scores,
        }

    def decoding_options(self):
        """The options that choose how this search decodes, by their
        argument names: `get_config()` without `NOT_DECODING_OPTIONS`
        (`min_length`, `no_repeat_ngram_size`, `repetition_penalty`,
        `beam_width`, `coverage_penalty`, `alpha`). The one list of them:
        `Translator`'s n-best search, its `decoding_options` signature,
        0.2.0's export options and the translation recipe's decoding flags
        are these."""
        return {
            name: value
            for name, value in self.get_config().items()
            if name not in self.NOT_DECODING_OPTIONS
        }


SEARCHES = {
    "greedy": GreedySearch,
    "beam": BeamSearch,
    "sample": RandomSampling,
    "sampling": RandomSampling,
    "random": RandomSampling,
}


def get_search(identifier=None, **overrides):
    """A search from `identifier`, with `overrides` applied to its options.

    Args:
        identifier: a name (`"greedy"`, `"beam"`, `"sample"` (also
            `"sampling"`, `"random"`) or a class name such as
            `"BeamSearch"`), a config dict (what
            `keras.saving.serialize_keras_object` writes, or a plain
            `{"class_name": ..., "config": ...}`), a `Search` (copied when
            there are overrides) or None (greedy search).
        **overrides: options of the strategy, e.g. `beam_width=8`.

    Returns:
        a `Search`. `ValueError` for an unknown name or option.
    """
    if identifier is None:
        identifier = "greedy"
    if isinstance(identifier, Search):
        if not overrides:
            return identifier
        cls, config = type(identifier), identifier.get_config()
    elif isinstance(identifier, str):
        classes = {**SEARCHES, **{cls.__name__: cls for cls in set(SEARCHES.values())}}
        if identifier not in classes:
            raise ValueError(
                f"`identifier` of get_search must be one of {sorted(classes)}, a config or a "
                f"Search; received identifier={identifier!r}."
            )
        cls, config = classes[identifier], {}
    elif isinstance(identifier, dict):
        names = {cls.__name__: cls for cls in set(SEARCHES.values())}
        if identifier.get("class_name") in names and "module" not in identifier:
            search = names[identifier["class_name"]].from_config(identifier.get("config", {}))
        else:
            try:
                search = keras.saving.deserialize_keras_object(identifier)
            except TypeError as error:
                raise ValueError(
                    "`identifier` of get_search must be the config of a Search; "
                    f"received identifier={identifier!r} ({error})."
                ) from None
        if not isinstance(search, Search):
            raise ValueError(
                "`identifier` of get_search must be the config of a Search; "
                f"received identifier={identifier!r}."
            )
        if not overrides:
            return search
        cls, config = type(search), search.get_config()
    else:
        raise ValueError(
            "`identifier` of get_search must be a name, a config dict or a Search; "
            f"received identifier={identifier!r}."
        )
    known = set(inspect.signature(cls.__init__).parameters) | set(
        inspect.signature(Search.__init__).parameters
    )
    unknown = sorted(set(overrides) - known - {"self", "options"})
    if unknown:
        raise ValueError(
            f"`overrides` of get_search must be options of {cls.__name__}; received unknown "
            f"options {unknown}."
        )
    return cls(**{**config, **overrides})
