"""Generation from any `Seq2Seq` model: greedy, random sampling (temperature,
top-k, top-p) and beam search with GNMT's length and coverage penalties,
and the decoding options of `decoding_options.py` (minimum length, no
repeated n-grams, repetition penalty, suppressed tokens, forced prefixes,
`<unk>` replacement).

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

import keras
from keras import ops

from keras_attention.masking import write_at
from keras_attention.seq2seq.beam import beam_search, coverage_penalty_of, length_penalty
from keras_attention.seq2seq.decoding_options import (
    NEGATIVE,
    check_source,
    never_generated,
    search_options,
    unk_id_of,
    unknown_replacements,
)
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


def _decode(model, source, max_length, choose, options, return_attention, replace_unknown, unk_id):
    """The loop shared by greedy and sampling: `choose(allowed) -> tokens`."""
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

    _, _, _, output, scores, _, attention, replacements = ops.while_loop(
        cond, body, (0, tokens, state, output, scores, finished, attention, replacements)
    )
    result = {
        "tokens": output,
        "scores": scores,
        "lengths": ops.sum(ops.cast(output != padding_id, "int32"), axis=1),
    }
    if return_attention:
        result["attention"] = attention
    if replace_unknown:
        result["replacements"] = replacements
    return result


def greedy_search(
    model,
    source,
    max_length,
    sos_id=None,
    eos_id=None,
    padding_id=None,
    return_attention=False,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    replace_unknown=False,
    unk_id=None,
):
    """Pick the most probable allowed token at each step.

    Returns a dict: `tokens (B, L)`, `scores (B,)` (log-probability),
    `lengths (B,)`, with `return_attention` `attention (B, L, S)` and with
    `replace_unknown` `replacements (B, L)`. Padding and `<sos>` are never
    generated (`never_generated`). The decoding options are described in
    the module docstring; `unk_id` defaults to the model's `unk_id`, else 3.
    """
    source = ops.convert_to_tensor(source)
    check_source(source, max_length, "greedy_search")
    options = search_options(
        model,
        source,
        max_length,
        "greedy_search",
        sos_id,
        eos_id,
        padding_id,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        suppress_tokens=suppress_tokens,
        prefix=prefix,
    )
    return _decode(
        model,
        source,
        max_length,
        lambda allowed: ops.argmax(allowed, axis=-1),
        options,
        return_attention,
        replace_unknown,
        unk_id_of(model, unk_id),
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
    return_attention=False,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    replace_unknown=False,
    unk_id=None,
):
    """Draw each token from the (filtered) softmax of the allowed tokens;
    see `filter_logits` and the module docstring for the decoding options.

    `seed` is an int or a `keras.random.SeedGenerator`. `top_k` may not
    exceed the vocabulary less padding and `<sos>`. Returns what
    `greedy_search` returns (scores are the model's log-probabilities of
    the drawn tokens, with the repetition penalty but without temperature).
    """
    source = ops.convert_to_tensor(source)
    check_source(source, max_length, "sample")
    if not temperature > 0:
        raise ValueError(
            f"`temperature` of sample must be > 0; received temperature={temperature!r}."
        )
    if top_k is not None:
        check_positive_int("top_k", top_k, "sample")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"`top_p` of sample must be in (0, 1]; received top_p={top_p!r}.")
    generator = (
        seed if isinstance(seed, keras.random.SeedGenerator) else keras.random.SeedGenerator(seed)
    )
    options = search_options(
        model,
        source,
        max_length,
        "sample",
        sos_id,
        eos_id,
        padding_id,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        suppress_tokens=suppress_tokens,
        prefix=prefix,
    )

    def choose(allowed):
        if top_k is not None:
            check_vocabulary_fits(
                "top_k", top_k, allowed, options.sos_id, options.padding_id, "sample"
            )
        # softmax(allowed / T) is softmax(logits / T) over the allowed tokens.
        filtered = filter_logits(allowed, temperature, top_k, top_p)
        return keras.random.categorical(filtered, 1, seed=generator)[:, 0]

    return _decode(
        model,
        source,
        max_length,
        choose,
        options,
        return_attention,
        replace_unknown,
        unk_id_of(model, unk_id),
    )


def generate(
    model,
    source,
    max_length,
    beam_width=1,
    alpha=0.6,
    return_attention=False,
    min_length=0,
    no_repeat_ngram_size=0,
    repetition_penalty=1.0,
    suppress_tokens=None,
    prefix=None,
    coverage_penalty=0.0,
    return_token_scores=False,
    replace_unknown=False,
    unk_id=None,
):
    """The best hypothesis per source: beam search when `beam_width > 1` or
    a beam-only option (`coverage_penalty`, `return_token_scores`) is set,
    greedy search otherwise. What the translation recipe and the exported
    translator call; the options are those of `greedy_search` and
    `beam_search`.

    Returns a dict: `tokens (B, L)`, `scores (B,)`, `lengths (B,)` and,
    with `return_attention`, `attention (B, L, S)` (and `token_scores`,
    `replacements (B, L)` when asked for).
    """
    check_positive_int("beam_width", beam_width, "generate")
    options = dict(
        return_attention=return_attention,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        suppress_tokens=suppress_tokens,
        prefix=prefix,
        replace_unknown=replace_unknown,
        unk_id=unk_id,
    )
    if beam_width == 1 and not coverage_penalty and not return_token_scores:
        return greedy_search(model, source, max_length, **options)
    result = beam_search(
        model,
        source,
        max_length,
        beam_width=beam_width,
        alpha=alpha,
        coverage_penalty=coverage_penalty,
        num_hypotheses=1,
        return_token_scores=return_token_scores,
        **options,
    )
    return {name: value[:, 0] for name, value in result.items()}  # the best of the K
