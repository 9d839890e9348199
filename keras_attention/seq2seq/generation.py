"""Generation from any `Seq2Seq` model, the 0.2.0 functions: `greedy_search`,
`sample` (temperature, top-k, top-p), `beam_search` (GNMT's length and
coverage penalties) and `generate`, with the decoding options of
`decoding_options.py` (minimum length, no repeated n-grams, repetition
penalty, suppressed tokens, forced prefixes, `<unk>` replacement).

Each is a thin wrapper over the decoding strategy objects of `search.py`
(`GreedySearch`, `RandomSampling`, `BeamSearch`), which hold and validate
the options once: `greedy_search(model, source, L, **options)` is
`GreedySearch(max_length=L, **options)(model, source, prefix)`, and so on.
New code can configure a search once and pass it around
(`Seq2Seq.generate(source, search)`, `serving.Translator`).

All three take any object with the `Seq2Seq` contract (`base.py`):
`encode(source, max_length)`, `decode_step(tokens, state) -> (logits,
state, attention)`, `reorder_state(state, indices)` and
`sos_id`/`eos_id`/`padding_id` attributes, and run their loop with
`keras.ops.while_loop` over fixed-size tensors and the model's
incremental caches: no Python loop over tensors and no custom op, so they
trace into a `tf.function` (with `jit_compile=True` too) and export into a
SavedModel.

Outputs exclude `<sos>`, include `<eos>` and are padded with `padding_id`
after it. Scores are sums of token log-probabilities (beam scores divided by
the length penalty, plus the coverage penalty).

Decoding options, shared by the three searches (see `decoding_options.py`):
    min_length: at least this many tokens (the prefix included) before
        `<eos>`, which is banned until then (CTranslate2's
        `min_decoding_length`).
    no_repeat_ngram_size: n > 0 bans every token that would complete an
        n-gram already in the hypothesis (prefix included, `<sos>` not).
    repetition_penalty: θ; logits of tokens already in the hypothesis are
        divided by θ when positive and multiplied by θ otherwise (CTRL); the
        scores are log-probabilities of this penalized distribution.
    suppress_tokens: ids never generated (padding and `<sos>` never are).
    prefix: int ids `(B, P)` padded with `padding_id`, forced as the first
        tokens of each output (rows may differ in length); the scores include
        the prefix's log-probabilities, and it counts in `min_length`, the
        n-grams and the length penalty.
    return_attention_scores: adds `attention` to the result (`return_attention`,
        0.2.0's name, is a deprecated alias: `keras_attention.deprecations`).
    replace_unknown: adds `replacements` to the result, same shape as
        `tokens`: where a token is `unk_id`, the *source* token id at the
        position of that step's highest attention weight, -1 elsewhere. The
        tokens themselves stay target ids; a detokenizer writes the source
        piece in place of `<unk>` (with a shared vocabulary,
        `where(replacements >= 0, replacements, tokens)`). With WordPiece
        the copy is one piece: a word split into several pieces contributes
        only its most attended piece, and a copied `##` piece joins the word
        before it when the pieces are joined.
"""

import inspect

from keras_attention import deprecations
from keras_attention.seq2seq.beam import coverage_penalty_of, length_penalty
from keras_attention.seq2seq.decoding_options import NEGATIVE, never_generated
from keras_attention.seq2seq.sampling import (
    GreedySearch,
    RandomSampling,
    check_vocabulary_fits,
    filter_logits,
)
from keras_attention.seq2seq.search import BeamSearch
from keras_attention.seq2seq.search_base import build_search
from keras_attention.validation import check_positive_int

__all__ = [
    "NEGATIVE",
    "beam_search",
    "check_vocabulary_fits",
    "coverage_penalty_of",
    "filter_logits",
    "generate",
    "greedy_search",
    "length_penalty",
    "never_generated",
    "sample",
]

_BEAM = BeamSearch()  # the defaults of the 0.2.0 signatures below are its own


def _attention_switch(return_attention, return_attention_scores, owner):
    """`return_attention_scores`, or 0.2.0's `return_attention` when given."""
    if return_attention is None:
        return return_attention_scores
    # stacklevel 4: the caller of the 0.2.0 function (past `_wrapped` and it)
    deprecations.warn(f"`return_attention` of {owner}", stacklevel=4)
    return return_attention


def _wrapped(cls, owner, arguments, best=False, caller=None):
    """Run a 0.2.0 function called with `arguments` (its `locals()`) as the
    search `cls` configured with the same options (`best`: its best
    hypothesis); errors name `owner`, the deprecation warning `caller`."""
    # Only the function's own arguments: AutoGraph adds names to locals().
    function = {"greedy_search": greedy_search, "sample": sample, "beam_search": beam_search}
    names = inspect.signature(function[owner] if caller is None else generate).parameters
    options = {name: arguments[name] for name in names if name in arguments}
    model, source, prefix = options.pop("model"), options.pop("source"), options.pop("prefix")
    options["return_attention_scores"] = _attention_switch(
        options.pop("return_attention"), options["return_attention_scores"], caller or owner
    )
    search = build_search(cls, owner, **options)
    return (search.best if best else search)(model, source, prefix=prefix)


def greedy_search(
    model,
    source,
    max_length,
    sos_id=None,
    eos_id=None,
    padding_id=None,
    return_attention=None,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    replace_unknown=False,
    unk_id=None,
    return_attention_scores=False,
):
    """Pick the most probable allowed token at each step: a thin wrapper,
    `GreedySearch(max_length=max_length, **options)(model, source, prefix)`.

    Returns a dict: `tokens (B, L)`, `scores (B,)` (log-probability),
    `lengths (B,)`, `finished (B,)` (`<eos>` emitted before `max_length`),
    with `return_attention_scores` `attention (B, L, S)` and with
    `replace_unknown` `replacements (B, L)`. Padding and `<sos>` are
    never generated (`never_generated`). The decoding options are described
    in the module docstring; `unk_id` defaults to the model's `unk_id`,
    else 3.
    """
    return _wrapped(GreedySearch, "greedy_search", locals())


def sample(
    model,
    source,
    max_length,
    temperature=1.0,
    top_k=None,
    top_p=None,
    seed=None,
    sos_id=None,
    eos_id=None,
    padding_id=None,
    return_attention=None,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    replace_unknown=False,
    unk_id=None,
    return_attention_scores=False,
):
    """Draw each token from the (filtered) softmax of the allowed tokens: a
    thin wrapper, `RandomSampling(temperature, top_k, top_p, seed,
    max_length=max_length, **options)(model, source, prefix)`; see
    `filter_logits` and the module docstring for the decoding options.

    `seed` is an int or a `keras.random.SeedGenerator`. `top_k` may not
    exceed the vocabulary less padding and `<sos>`. Returns what
    `greedy_search` returns (scores are the model's log-probabilities of
    the drawn tokens, with the repetition penalty but without temperature).
    """
    return _wrapped(RandomSampling, "sample", locals())


def beam_search(
    model,
    source,
    max_length,
    beam_width=_BEAM.beam_width,
    alpha=_BEAM.alpha,
    sos_id=None,
    eos_id=None,
    padding_id=None,
    return_attention=None,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    coverage_penalty=0.0,
    num_hypotheses=None,
    return_token_scores=False,
    replace_unknown=False,
    unk_id=None,
    return_attention_scores=False,
):
    """Keep the `beam_width` best hypotheses at each step: a thin wrapper,
    `BeamSearch(beam_width, alpha, coverage_penalty, num_hypotheses,
    return_token_scores, max_length=max_length, **options)(model, source,
    prefix)`. See `BeamSearch` and `beam.beam_search_loop` for the scores,
    the stopping rule and the order of the results.

    Returns a dict: `tokens (B, N, L)`, `scores (B, N)`, `lengths (B, N)`,
    `finished (B, N)` (the hypothesis ends with `<eos>`; False for one cut at
    `max_length` and, without `num_hypotheses`, for a live prefix the search
    stopped extending: see `beam.beam_search_loop`) and, with
    `return_attention_scores`, `attention (B, N, L, S)`, with
    `return_token_scores` `token_scores (B, N, L)`, with `replace_unknown`
    `replacements (B, N, L)`.
    """
    return _wrapped(BeamSearch, "beam_search", locals())


def generate(
    model,
    source,
    max_length,
    beam_width=1,
    alpha=_BEAM.alpha,
    return_attention=None,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    coverage_penalty=0.0,
    return_token_scores=False,
    replace_unknown=False,
    unk_id=None,
    return_attention_scores=False,
):
    """The best hypothesis per source, a thin wrapper:
    `BeamSearch(beam_width, alpha, coverage_penalty, ...).best(model, source,
    prefix)`, which is greedy search when `beam_width == 1` and no beam-only
    option (`coverage_penalty`, `return_token_scores`) is set, and the first
    of a beam search with `num_hypotheses=1` otherwise.

    Returns a dict: `tokens (B, L)`, `scores (B,)`, `lengths (B,)`,
    `finished (B,)` and, with `return_attention_scores`, `attention (B, L, S)` (and
    `token_scores`, `replacements (B, L)` when asked for).
    """
    arguments = dict(locals())
    beam_width = check_positive_int("beam_width", beam_width, "generate")
    if beam_width == 1 and not coverage_penalty and not return_token_scores:
        for name in ("beam_width", "alpha", "coverage_penalty", "return_token_scores"):
            del arguments[name]
        return _wrapped(GreedySearch, "greedy_search", arguments, caller="generate")
    return _wrapped(BeamSearch, "beam_search", arguments, best=True, caller="generate")
