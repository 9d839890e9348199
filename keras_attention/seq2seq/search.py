"""Decoding strategies as objects: `GreedySearch`, `BeamSearch` and
`RandomSampling`, configured once, passed around, serialised with the model
or the export, and called as `search(model, source, prefix=None)`.

This module holds `BeamSearch` and `get_search`, and re-exports the rest:
the options every strategy shares are defined, defaulted and validated
once, in `Search.__init__` (`search_base.py`); greedy search and sampling
are `sampling.py`; the per-call machinery they drive (the repetition
penalty, bans and forced prefixes of one step) is
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

import keras

from keras_attention import deprecations
from keras_attention.seq2seq.beam import beam_search_loop
from keras_attention.seq2seq.sampling import GreedySearch, RandomSampling
from keras_attention.seq2seq.search_base import Search, build_search, is_int

__all__ = ["MAX_BEAM_WIDTH", "BeamSearch", "get_search"]

# Offered here by 0.2.0 as well; they live in `sampling.py`.
_MOVED_TO_SAMPLING = ("check_vocabulary_fits", "decode_loop", "filter_logits")


def __getattr__(name):
    if name in _MOVED_TO_SAMPLING:
        from keras_attention.seq2seq import sampling

        deprecations.warn(
            "keras_attention.seq2seq.search's sampling helpers",
            f"import {name} from keras_attention.seq2seq.sampling",
        )
        return getattr(sampling, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The widest beam a `BeamSearch` takes: the widest Koehn and Knowles tried
# ("Six Challenges for Neural Machine Translation", 2017; BLEU falls with
# beams beyond a few dozen). Each step scores K x V candidates per source
# and keeps K hypotheses of L tokens (and their L x S attention when asked
# for), so a wider beam only costs time and memory (10**6 exhausts it):
# a mistake, refused at once. The translation recipe's `--beam-width`
# copies this bound (`recipes/translation/command_settings.py` `MAX_BEAM`).
MAX_BEAM_WIDTH = 1000


@keras.saving.register_keras_serializable(package="keras_attention")
class BeamSearch(Search):
    """Keep the `beam_width` best hypotheses at each step; rank finished ones
    by GNMT's s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y), with
    lp(Y) = ((5 + |Y|) / 6)^α and cp(X; Y) = β Σ_j log(min(Σ_t a_{t,j}, 1))
    over the non-padding source positions j (Wu et al., 2016). The stopping
    rule, the order of the results (finished first) and what fills the slots
    no finished hypothesis takes are described at `beam.beam_search_loop`.

    Args:
        beam_width: K, an int from 1 to `MAX_BEAM_WIDTH` (1000).
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
        self.beam_width = self._int(
            "beam_width",
            beam_width,
            1,
            f"a positive integer, at most MAX_BEAM_WIDTH={MAX_BEAM_WIDTH} (a wider beam "
            "translates no better, and each step scores beam_width x vocabulary candidates)",
            high=MAX_BEAM_WIDTH,
        )
        self.alpha = self._number("alpha", alpha, 0.0, "a finite number >= 0")
        self.coverage_penalty = self._number(
            "coverage_penalty", coverage_penalty, 0.0, "a number >= 0 (0 disables it)"
        )
        if num_hypotheses is not None and (
            not is_int(num_hypotheses) or not 1 <= num_hypotheses <= self.beam_width
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
            greedy = build_search(GreedySearch, self.owner, **self.shared_options())
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
