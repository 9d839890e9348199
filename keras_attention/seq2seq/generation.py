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

import numbers

import keras
from keras import ops

from keras_attention.masking import write_at
from keras_attention.seq2seq.decoding_options import (
    NEGATIVE,
    DecodingOptions,
    never_generated,
    unknown_replacements,
)
from keras_attention.validation import check_positive_int, check_token_ids

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

UNK_ID = 3  # `[UNK]` in the reserved ids of serving/text.py, for models without `unk_id`


def _check(source, max_length, owner):
    check_positive_int("max_length", max_length, owner)
    check_token_ids("source", source, owner)


def _special(model, name, value):
    return getattr(model, name) if value is None else value


def _unk(model, unk_id):
    return getattr(model, "unk_id", UNK_ID) if unk_id is None else unk_id


def _batch(source):
    static = source.shape[0]
    return static if static is not None else ops.shape(source)[0]


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


def length_penalty(length, alpha):
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α (Wu et al., 2016)."""
    return ops.power((5.0 + ops.cast(length, "float32")) / 6.0, alpha)


def coverage_penalty_of(coverage, source_mask, beta):
    """GNMT's cp(X; Y) = β Σ_j log(min(Σ_t a_{t,j}, 1)) over the source
    positions j that are not padding; `coverage (..., S)` holds Σ_t a_{t,j}.
    A position never attended would give log 0: it is clamped at 1e-10
    (a finite penalty of β·log 1e-10 ≈ -23β), as every score here is finite.
    """
    clipped = ops.clip(ops.cast(coverage, "float32"), 1e-10, 1.0)
    return beta * ops.sum(ops.where(source_mask, ops.log(clipped), 0.0), axis=-1)


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


def _options(model, source, max_length, owner, sos_id, eos_id, padding_id, **options):
    return DecodingOptions(
        owner,
        _batch(source),
        max_length,
        _special(model, "sos_id", sos_id),
        _special(model, "eos_id", eos_id),
        _special(model, "padding_id", padding_id),
        **options,
    )


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
    _check(source, max_length, "greedy_search")
    options = _options(
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
        _unk(model, unk_id),
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
    _check(source, max_length, "sample")
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
    options = _options(
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
        _unk(model, unk_id),
    )


def _gather_beams(x, indices):
    """`x (B, K, ...)`, `indices (B, N)` -> `(B, N, ...)`: hypothesis
    `indices[b, n]` of source b, for every n."""
    for _ in range(len(x.shape) - 2):
        indices = ops.expand_dims(indices, -1)  # broadcast over the trailing axes
    return ops.take_along_axis(x, indices, axis=1)


def _gather_all(buffers, indices):
    return {name: _gather_beams(value, indices) for name, value in buffers.items()}


def _concatenate(first, second):
    return {name: ops.concatenate([first[name], second[name]], axis=1) for name in first}


def beam_search(
    model,
    source,
    max_length,
    beam_width=4,
    alpha=0.6,
    sos_id=None,
    eos_id=None,
    padding_id=None,
    return_attention=False,
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
):
    """Keep the `beam_width` best hypotheses at each step.

    A hypothesis is finished when it emits `<eos>`; its score is its
    log-probability divided by the length penalty `((5 + |Y|) / 6)^α`
    (|Y| counts the prefix and `<eos>`), plus, with `coverage_penalty` β,
    GNMT's cp = β Σ_j log(min(Σ_t a_{t,j}, 1)) over the non-padding source
    positions j, from the model's step attention a (`coverage_penalty_of`).
    Log-probabilities only fall, lp only grows with α >= 0 and cp <= 0, so
    a live hypothesis can reach at most its log-probability over
    lp(max_length). The search stops at `max_length` or once, for every
    source, the best finished hypothesis (the `num_hypotheses`-th best when
    that is given) beats that bound for every live one: with
    `num_hypotheses` and a beam wide enough to hold every live hypothesis,
    the result is exactly the n-best of all sequences.

    Padding and `<sos>` are never generated (`never_generated`). A beam
    wider than the hypotheses there are (a small vocabulary, a forced
    prefix) keeps the missing ones as dead entries that never finish; in the
    result they are empty: padding tokens, score `NEGATIVE`, length 0.

    The decoding options shared with greedy search are described in the
    module docstring. Beam search only:
        coverage_penalty: β >= 0 (GNMT's; 0 disables it). CTranslate2 adds
            the same term; its `length_penalty` is |Y|^α where ours is
            GNMT's ((5 + |Y|) / 6)^α (`alpha`).
        num_hypotheses: N <= beam_width hypotheses to return (default all).
        return_token_scores: also return each token's log-probability
            (of the penalized distribution), `token_scores (B, N, L)`, 0 at
            padding; they sum to the score before length and coverage
            penalties.

    Returns a dict: `tokens (B, N, L)`, `scores (B, N)`, `lengths (B, N)`
    and, with `return_attention`, `attention (B, N, L, S)`, with
    `return_token_scores` `token_scores (B, N, L)`, with `replace_unknown`
    `replacements (B, N, L)`: the finished hypotheses best first, then,
    where fewer than N finished, the best live ones (cut at `max_length`,
    scored with lp(max_length) and their coverage so far).
    """
    source = ops.convert_to_tensor(source)
    _check(source, max_length, "beam_search")
    check_positive_int("beam_width", beam_width, "beam_search")
    if alpha < 0:
        raise ValueError(f"`alpha` of beam_search must be >= 0; received alpha={alpha!r}.")
    if isinstance(coverage_penalty, bool) or not (
        isinstance(coverage_penalty, numbers.Real) and coverage_penalty >= 0
    ):
        raise ValueError(
            "`coverage_penalty` of beam_search must be a number >= 0 (0 disables it); "
            f"received coverage_penalty={coverage_penalty!r}."
        )
    if num_hypotheses is not None and (
        isinstance(num_hypotheses, bool)
        or not isinstance(num_hypotheses, numbers.Integral)
        or not 1 <= num_hypotheses <= beam_width
    ):
        raise ValueError(
            f"`num_hypotheses` of beam_search must be an integer from 1 to "
            f"beam_width={beam_width}; received num_hypotheses={num_hypotheses!r}."
        )
    options = _options(
        model,
        source,
        max_length,
        "beam_search",
        sos_id,
        eos_id,
        padding_id,
        min_length=min_length,
        no_repeat_ngram_size=no_repeat_ngram_size,
        repetition_penalty=repetition_penalty,
        suppress_tokens=suppress_tokens,
        prefix=prefix,
    )
    sos_id, eos_id, padding_id = options.sos_id, options.eos_id, options.padding_id
    unk_id = _unk(model, unk_id)
    K, L = beam_width, max_length
    N = K if num_hypotheses is None else num_hypotheses
    # The finished hypothesis that must beat every live one to stop: the
    # best by default (as before num_hypotheses), the N-th when N is asked for.
    last = 0 if num_hypotheses is None else N - 1
    batch = ops.shape(source)[0]
    source_length = ops.shape(source)[1]
    source_mask = (ops.cast(source, "int32") != padding_id)[:, None, :]  # (B, 1, S)
    beta = float(coverage_penalty)
    options.repeat(K)  # prefix rows follow the (B·K,) hypotheses

    state = model.encode(source, max_length=L)
    state = model.reorder_state(state, ops.repeat(ops.arange(batch), K))  # (B·K, ...)
    # Only the first beam is alive at the start, so the K copies do not
    # all propose the same continuations.
    alive_scores = ops.tile(
        ops.concatenate([ops.zeros((1,)), ops.full((K - 1,), NEGATIVE)])[None], (batch, 1)
    )
    # Per-hypothesis buffers; those not asked for are carried at size 1.
    alive = {
        "tokens": ops.full((batch, K, L), padding_id, "int32"),
        "attention": ops.zeros(
            (batch, K, L, source_length) if return_attention else (batch, K, 1, 1), "float32"
        ),
        "coverage": ops.zeros((batch, K, source_length if beta else 1), "float32"),
        "token_scores": ops.zeros((batch, K, L if return_token_scores else 1), "float32"),
        "replacements": ops.full((batch, K, L if replace_unknown else 1), -1, "int32"),
    }
    finished = dict(alive)
    finished_scores = ops.full((batch, K), NEGATIVE, "float32")
    finished_flags = ops.zeros((batch, K), "bool")
    tokens = ops.full((batch * K,), sos_id, "int32")

    def coverage_term(coverage):
        return coverage_penalty_of(coverage, source_mask, beta) if beta else 0.0

    def body(t, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags):
        logits, state, step_attention = model.decode_step(tokens, state)
        history = ops.reshape(alive["tokens"], (batch * K, L))
        log_probs, allowed = options.step(logits, history, t)  # (B·K, V)
        vocab = ops.shape(allowed)[-1]
        candidates = alive_scores[:, :, None] + ops.reshape(allowed, (batch, K, vocab))
        top_scores, top_index = ops.top_k(
            ops.reshape(candidates, (batch, K * vocab)), 2 * K
        )  # (B, 2K)
        origin = top_index // vocab  # the beam each candidate extends
        token = ops.cast(top_index % vocab, "int32")
        # A candidate of a dead beam or of a banned token is dead: it never finishes.
        ended = ops.logical_and(token == eos_id, top_scores > NEGATIVE / 2)
        step_attention = ops.reshape(ops.cast(step_attention, "float32"), (batch, K, -1))
        grown = _gather_all(alive, origin)  # (B, 2K, ...)
        grown["tokens"] = write_at(grown["tokens"], token[:, :, None], t, axis=2)
        attended = _gather_beams(step_attention, origin)  # (B, 2K, S)
        if return_attention:
            grown["attention"] = write_at(grown["attention"], attended[:, :, None], t, axis=2)
        if beta:
            grown["coverage"] = grown["coverage"] + attended
        if return_token_scores:
            gained = ops.take_along_axis(
                ops.reshape(log_probs, (batch, K * vocab)), top_index, axis=1
            )
            grown["token_scores"] = write_at(grown["token_scores"], gained[:, :, None], t, axis=2)
        if replace_unknown:
            flat = unknown_replacements(
                ops.repeat(source, 2 * K, axis=0),
                ops.reshape(attended, (batch * 2 * K, -1)),
                ops.reshape(token, (-1,)),
                unk_id,
                ops.reshape(grown["replacements"], (batch * 2 * K, L)),
                t,
            )
            grown["replacements"] = ops.reshape(flat, (batch, 2 * K, L))
        # Live beams: the K best candidates that did not just end.
        alive_scores, pick = ops.top_k(ops.where(ended, 2 * NEGATIVE, top_scores), K)
        alive = _gather_all(grown, pick)
        beam = ops.take_along_axis(origin, pick, axis=1)  # (B, K)
        state = model.reorder_state(
            state, ops.reshape(beam + ops.arange(batch)[:, None] * K, (-1,))
        )
        tokens = ops.reshape(ops.take_along_axis(token, pick, axis=1), (-1,))
        # Finished: the K best of those already finished and those ending now.
        normalised = top_scores / length_penalty(t + 1, alpha) + coverage_term(grown["coverage"])
        normalised = ops.where(ended, normalised, NEGATIVE)
        merged_scores = ops.concatenate([finished_scores, normalised], axis=1)  # (B, 3K)
        finished_scores, keep = ops.top_k(merged_scores, K)
        finished = _gather_all(_concatenate(finished, grown), keep)
        finished_flags = ops.take_along_axis(
            ops.concatenate([finished_flags, ended], axis=1), keep, axis=1
        )
        return t + 1, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags

    def cond(t, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags):
        best_possible = alive_scores[:, 0] / length_penalty(L, alpha)
        done = ops.logical_and(finished_flags[:, last], finished_scores[:, last] >= best_possible)
        return ops.logical_and(t < L, ops.logical_not(ops.all(done)))

    _, _, _, alive_scores, alive, finished, finished_scores, finished_flags = ops.while_loop(
        cond,
        body,
        (0, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags),
    )

    # The N results: finished hypotheses first (best first), then, for slots
    # nothing finished for, the best live hypotheses (cut at max_length),
    # then dead entries, emptied.
    real = alive_scores > NEGATIVE / 2
    live = alive_scores / length_penalty(L, alpha) + coverage_term(alive["coverage"])
    rank = ops.concatenate(
        [
            ops.where(finished_flags, finished_scores, 3 * NEGATIVE),
            ops.where(real, live + NEGATIVE, 4 * NEGATIVE),
        ],
        axis=1,
    )
    rank, pick = ops.top_k(rank, N)
    empty = rank < 2.5 * NEGATIVE  # (B, N)
    chosen = _gather_all(_concatenate(finished, alive), pick)
    scores = ops.take_along_axis(ops.concatenate([finished_scores, live], axis=1), pick, axis=1)
    tokens = ops.where(empty[:, :, None], padding_id, chosen["tokens"])
    result = {
        "tokens": tokens,
        "scores": ops.where(empty, NEGATIVE, scores),
        "lengths": ops.sum(ops.cast(tokens != padding_id, "int32"), axis=2),
    }
    if return_attention:
        result["attention"] = ops.where(empty[:, :, None, None], 0.0, chosen["attention"])
    if return_token_scores:
        result["token_scores"] = ops.where(empty[:, :, None], 0.0, chosen["token_scores"])
    if replace_unknown:
        result["replacements"] = ops.where(empty[:, :, None], -1, chosen["replacements"])
    return result


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
