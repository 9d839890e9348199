"""Generation from any `Seq2Seq` model: greedy, random sampling (temperature,
top-k, top-p) and beam search with GNMT's length penalty.

All three take any object with the `Seq2Seq` contract (`base.py`):
`encode(source, max_length)`, `decode_step(tokens, state) -> (logits,
state, attention)`, `reorder_state(state, indices)` and
`sos_id`/`eos_id`/`padding_id` attributes, and run their loop with
`keras.ops.while_loop` over fixed-size tensors and the model's
incremental caches: no Python loop over tensors and no custom op, so they
trace into a `tf.function` and export into a SavedModel.

Outputs exclude `<sos>`, include `<eos>` and are padded with `padding_id`
after it. Scores are sums of token log-probabilities (beam scores divided by
the length penalty).
"""

import keras
from keras import ops

from keras_attention.masking import write_at
from keras_attention.validation import check_positive_int, check_token_ids

NEGATIVE = -1e9  # a dead hypothesis' score; finite, so arithmetic stays NaN-free


def _check(source, max_length, owner):
    check_positive_int("max_length", max_length, owner)
    check_token_ids("source", source, owner)


def _special(model, name, value):
    return getattr(model, name) if value is None else value


def never_generated(logits, sos_id, padding_id):
    """`logits (B, V)` with the `<sos>` and padding ids set to `NEGATIVE`, so
    that no search or draw emits them: a generated padding id would read as
    the end of the output (`lengths` counts non-padding tokens) and `<sos>`
    is never a real token. The other logits are unchanged. Returns float32.
    """
    vocab = ops.arange(ops.shape(logits)[-1])
    banned = ops.logical_or(vocab == sos_id, vocab == padding_id)  # (V,)
    return ops.where(banned[None], NEGATIVE, ops.cast(logits, "float32"))


def check_vocabulary_fits(name, value, logits, sos_id, padding_id, owner):
    """`value` (a beam width or `top_k`) must not exceed the tokens the
    search can emit: the vocabulary (the static last axis of `logits`) less
    `<sos>` and padding (see `never_generated`)."""
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


def _decode(model, source, max_length, choose, sos_id, eos_id, padding_id, return_attention):
    """The loop shared by greedy and sampling: `choose(logits) -> tokens`."""
    state = model.encode(source, max_length=max_length)
    batch = ops.shape(source)[0]
    tokens = ops.full((batch,), sos_id, "int32")
    output = ops.full((batch, max_length), padding_id, "int32")
    scores = ops.zeros((batch,), "float32")
    finished = ops.zeros((batch,), "bool")
    # The alignment buffer is only carried through the loop when asked for.
    attention_shape = (
        (batch, max_length, ops.shape(source)[1]) if return_attention else (batch, 1, 1)
    )
    attention = ops.zeros(attention_shape, "float32")

    def body(t, tokens, state, output, scores, finished, attention):
        logits, state, step_attention = model.decode_step(tokens, state)
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)  # (B, V)
        chosen = ops.cast(choose(never_generated(logits, sos_id, padding_id)), "int32")
        chosen = ops.where(finished, padding_id, chosen)
        gained = ops.take_along_axis(log_probs, chosen[:, None], axis=1)[:, 0]
        scores = scores + ops.where(finished, 0.0, gained)
        output = write_at(output, chosen[:, None], t, axis=1)
        if return_attention:
            attention = write_at(attention, ops.cast(step_attention, "float32")[:, None], t, axis=1)
        finished = ops.logical_or(finished, chosen == eos_id)
        return t + 1, chosen, state, output, scores, finished, attention

    def cond(t, tokens, state, output, scores, finished, attention):
        return ops.logical_and(t < max_length, ops.logical_not(ops.all(finished)))

    _, _, _, output, scores, _, attention = ops.while_loop(
        cond, body, (0, tokens, state, output, scores, finished, attention)
    )
    result = {
        "tokens": output,
        "scores": scores,
        "lengths": ops.sum(ops.cast(output != padding_id, "int32"), axis=1),
    }
    if return_attention:
        result["attention"] = attention
    return result


def greedy_search(
    model, source, max_length, sos_id=None, eos_id=None, padding_id=None, return_attention=False
):
    """Pick the most probable token at each step.

    Returns a dict: `tokens (B, L)`, `scores (B,)` (log-probability),
    `lengths (B,)` and, with `return_attention`, `attention (B, L, S)`.
    Padding and `<sos>` are never generated (`never_generated`).
    """
    source = ops.convert_to_tensor(source)
    _check(source, max_length, "greedy_search")
    return _decode(
        model,
        source,
        max_length,
        lambda logits: ops.argmax(logits, axis=-1),
        _special(model, "sos_id", sos_id),
        _special(model, "eos_id", eos_id),
        _special(model, "padding_id", padding_id),
        return_attention,
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
):
    """Draw each token from the (filtered) softmax; see `filter_logits`.

    `seed` is an int or a `keras.random.SeedGenerator`. `top_k` may not
    exceed the vocabulary less padding and `<sos>`. Returns what
    `greedy_search` returns (scores are the model's log-probabilities of
    the drawn tokens, without temperature).
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

    sos_id = _special(model, "sos_id", sos_id)
    padding_id = _special(model, "padding_id", padding_id)

    def choose(logits):
        if top_k is not None:
            check_vocabulary_fits("top_k", top_k, logits, sos_id, padding_id, "sample")
        filtered = filter_logits(logits, temperature, top_k, top_p)
        return keras.random.categorical(filtered, 1, seed=generator)[:, 0]

    return _decode(
        model,
        source,
        max_length,
        choose,
        sos_id,
        _special(model, "eos_id", eos_id),
        padding_id,
        return_attention,
    )


def _gather_beams(x, indices):
    """`x (B, K, ...)`, `indices (B, N)` -> `(B, N, ...)`: hypothesis
    `indices[b, n]` of source b, for every n."""
    for _ in range(len(x.shape) - 2):
        indices = ops.expand_dims(indices, -1)  # broadcast over the trailing axes
    return ops.take_along_axis(x, indices, axis=1)


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
):
    """Keep the `beam_width` best hypotheses at each step.

    `beam_width` may not exceed the vocabulary less padding and `<sos>`,
    which are never generated (`never_generated`): wider beams would be
    filled with duplicates of dead hypotheses.

    A hypothesis is finished when it emits `<eos>`; its score is its
    log-probability divided by the length penalty `((5 + |Y|) / 6)^α`.
    The search stops at `max_length` or once, for every source, the best
    finished hypothesis beats what any live one could still reach
    (its log-probability divided by lp(max_length), since log-probabilities
    only fall and lp only grows with α >= 0).

    Returns a dict: `tokens (B, K, L)`, `scores (B, K)`, `lengths (B, K)`
    and, with `return_attention`, `attention (B, K, L, S)`: the finished
    hypotheses best first, then, where fewer than K finished, the best live
    ones (cut at `max_length`, scored with lp(max_length)).

    Finished hypotheses come first whatever the scores. tensorflow-addons'
    `BeamSearchDecoder` and KerasHub's `BeamSampler` rank the hypotheses
    cut off at the maximum length together with the finished ones, by
    score. We do not, because a cut-off hypothesis is not an output: it
    never chose `<eos>`, and its score is the log-probability of a prefix,
    which only falls as it grows, so ranking it with complete ones favours
    truncation (more so with a short `max_length` or small α). Cut-off
    hypotheses fill only the slots no finished one takes, so a source
    always has K outputs. The layout is `(B, K, L)`, beams before time
    (tensorflow-addons' `predicted_ids` was `(B, L, K)`:
    `ops.transpose(tokens, (0, 2, 1))`).
    """
    source = ops.convert_to_tensor(source)
    _check(source, max_length, "beam_search")
    check_positive_int("beam_width", beam_width, "beam_search")
    if alpha < 0:
        raise ValueError(f"`alpha` of beam_search must be >= 0; received alpha={alpha!r}.")
    sos_id = _special(model, "sos_id", sos_id)
    eos_id = _special(model, "eos_id", eos_id)
    padding_id = _special(model, "padding_id", padding_id)
    K, L = beam_width, max_length
    batch = ops.shape(source)[0]
    source_length = ops.shape(source)[1]

    state = model.encode(source, max_length=L)
    state = model.reorder_state(state, ops.repeat(ops.arange(batch), K))  # (B·K, ...)
    # Only the first beam is alive at the start, so the K copies do not
    # all propose the same continuations.
    alive_scores = ops.tile(
        ops.concatenate([ops.zeros((1,)), ops.full((K - 1,), NEGATIVE)])[None], (batch, 1)
    )
    alive_tokens = ops.full((batch, K, L), padding_id, "int32")
    finished_tokens = ops.full((batch, K, L), padding_id, "int32")
    finished_scores = ops.full((batch, K), NEGATIVE, "float32")
    finished_flags = ops.zeros((batch, K), "bool")
    attention_shape = (batch, K, L, source_length) if return_attention else (batch, K, 1, 1)
    alive_attention = ops.zeros(attention_shape, "float32")
    finished_attention = ops.zeros(attention_shape, "float32")
    tokens = ops.full((batch * K,), sos_id, "int32")

    def body(
        t,
        tokens,
        state,
        alive_scores,
        alive_tokens,
        alive_attention,
        finished_tokens,
        finished_scores,
        finished_flags,
        finished_attention,
    ):
        logits, state, step_attention = model.decode_step(tokens, state)
        check_vocabulary_fits("beam_width", K, logits, sos_id, padding_id, "beam_search")
        log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
        log_probs = never_generated(log_probs, sos_id, padding_id)
        vocab = ops.shape(log_probs)[-1]
        candidates = alive_scores[:, :, None] + ops.reshape(
            log_probs, (batch, K, vocab)
        )  # (B, K, V)
        top_scores, top_index = ops.top_k(
            ops.reshape(candidates, (batch, K * vocab)), 2 * K
        )  # (B, 2K)
        origin = top_index // vocab  # the beam each candidate extends
        token = ops.cast(top_index % vocab, "int32")
        grown = write_at(
            _gather_beams(alive_tokens, origin), token[:, :, None], t, axis=2
        )  # (B, 2K, L)
        ended = token == eos_id
        if return_attention:
            step_attention = ops.reshape(ops.cast(step_attention, "float32"), (batch, K, 1, -1))
            grown_attention = write_at(
                _gather_beams(alive_attention, origin),
                _gather_beams(step_attention, origin),
                t,
                axis=2,
            )
        # Live beams: the K best candidates that did not just end.
        alive_scores, pick = ops.top_k(ops.where(ended, NEGATIVE, top_scores), K)
        alive_tokens = _gather_beams(grown, pick)
        beam = ops.take_along_axis(origin, pick, axis=1)  # (B, K)
        state = model.reorder_state(
            state, ops.reshape(beam + ops.arange(batch)[:, None] * K, (-1,))
        )
        tokens = ops.reshape(ops.take_along_axis(token, pick, axis=1), (-1,))
        # Finished: the K best of those already finished and those ending now.
        normalised = ops.where(ended, top_scores / length_penalty(t + 1, alpha), NEGATIVE)
        merged_scores = ops.concatenate([finished_scores, normalised], axis=1)  # (B, 3K)
        finished_scores, keep = ops.top_k(merged_scores, K)
        finished_tokens = _gather_beams(ops.concatenate([finished_tokens, grown], axis=1), keep)
        finished_flags = ops.take_along_axis(
            ops.concatenate([finished_flags, ended], axis=1), keep, axis=1
        )
        if return_attention:
            alive_attention = _gather_beams(grown_attention, pick)
            finished_attention = _gather_beams(
                ops.concatenate([finished_attention, grown_attention], 1), keep
            )
        return (
            t + 1,
            tokens,
            state,
            alive_scores,
            alive_tokens,
            alive_attention,
            finished_tokens,
            finished_scores,
            finished_flags,
            finished_attention,
        )

    def cond(
        t,
        tokens,
        state,
        alive_scores,
        alive_tokens,
        alive_attention,
        finished_tokens,
        finished_scores,
        finished_flags,
        finished_attention,
    ):
        best_possible = alive_scores[:, 0] / length_penalty(L, alpha)
        done = ops.logical_and(
            ops.any(finished_flags, axis=1), finished_scores[:, 0] >= best_possible
        )
        return ops.logical_and(t < L, ops.logical_not(ops.all(done)))

    (
        _,
        _,
        _,
        alive_scores,
        alive_tokens,
        alive_attention,
        finished_tokens,
        finished_scores,
        finished_flags,
        finished_attention,
    ) = ops.while_loop(
        cond,
        body,
        (
            0,
            tokens,
            state,
            alive_scores,
            alive_tokens,
            alive_attention,
            finished_tokens,
            finished_scores,
            finished_flags,
            finished_attention,
        ),
    )

    # The K results: finished hypotheses first (best first), then, for slots
    # nothing finished for, the best live hypotheses (cut at max_length).
    live = alive_scores / length_penalty(L, alpha)
    rank = ops.concatenate(
        [ops.where(finished_flags, finished_scores, 3 * NEGATIVE), live + NEGATIVE], axis=1
    )
    _, pick = ops.top_k(rank, K)
    tokens = _gather_beams(ops.concatenate([finished_tokens, alive_tokens], axis=1), pick)
    scores = ops.take_along_axis(ops.concatenate([finished_scores, live], axis=1), pick, axis=1)
    result = {
        "tokens": tokens,
        "scores": scores,
        "lengths": ops.sum(ops.cast(tokens != padding_id, "int32"), axis=2),
    }
    if return_attention:
        result["attention"] = _gather_beams(
            ops.concatenate([finished_attention, alive_attention], axis=1), pick
        )
    return result


def generate(model, source, max_length, beam_width=1, alpha=0.6, return_attention=False):
    """The best hypothesis per source: beam search when `beam_width > 1`,
    greedy search otherwise. What the translation recipe and the exported
    translator call.

    Returns a dict: `tokens (B, L)`, `scores (B,)`, `lengths (B,)` and,
    with `return_attention`, `attention (B, L, S)`.
    """
    check_positive_int("beam_width", beam_width, "generate")
    if beam_width == 1:
        return greedy_search(model, source, max_length, return_attention=return_attention)
    result = beam_search(
        model,
        source,
        max_length,
        beam_width=beam_width,
        alpha=alpha,
        return_attention=return_attention,
    )
    return {name: value[:, 0] for name, value in result.items()}  # the best of the K
