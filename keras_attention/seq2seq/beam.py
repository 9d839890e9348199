"""Beam search with GNMT's length and coverage penalties and the decoding
options of `decoding_options.py`, in one `keras.ops.while_loop` over
fixed-size tensors: the loop of `search.BeamSearch` (`beam_search` in
`generation.py` is its 0.2.0 wrapper).
"""

from keras import ops

from keras_attention import quantization
from keras_attention.masking import write_at
from keras_attention.seq2seq import selection
from keras_attention.seq2seq.decoding_options import NEGATIVE, unk_id_of, unknown_replacements


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


def reorder_beams(model, state, indices):
    """The state of the hypotheses `indices (B·K,)` picked among the beams
    of their own source: `model.reorder_beams`, which leaves what every beam
    of a source shares as it is (`Seq2Seq.beam_invariant_state`), or, for a
    model without it, `model.reorder_state`."""
    reorder = getattr(model, "reorder_beams", None)
    return model.reorder_state(state, indices) if reorder is None else reorder(state, indices)


def _rows(buffers, indices):
    """Every buffer's rows `indices (R,)`: the per-hypothesis buffers are
    kept flat, `(B·K, ...)` source-major, so picking hypotheses is one
    gather along axis 0 however many trailing axes a buffer has."""
    return {name: ops.take(value, indices, axis=0) for name, value in buffers.items()}


def _stack(first, second):
    return {name: ops.concatenate([first[name], second[name]], axis=0) for name in first}


def _merged_rows(pick, sources, batch, K, width):
    """Rows, in `concatenate([first, second], axis=0)` of a first block of
    K rows per source (`B·K`) and a second of `width` per source, of the
    slots `pick (B, N)` of each source's `[its K first | its width second]`;
    `sources (B, 1)` is `0 .. B-1`. Returns `(B·N,)`."""
    first = sources * K + pick
    second = batch * K + sources * width + (pick - K)
    return ops.reshape(ops.where(pick < K, first, second), (-1,))


def beam_search_loop(model, source, max_length, options, search, num_hypotheses):
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

    The loop of `search.BeamSearch` (`search` holds `beam_width`, `alpha`
    (α), `coverage_penalty` (β) and the switches, validated there;
    `options` is the call's `DecodingOptions`), for `num_hypotheses` N
    (None: K). CTranslate2 adds the same coverage term; its
    `length_penalty` is |Y|^α where ours is GNMT's ((5 + |Y|) / 6)^α.
    `token_scores` are each token's log-probability (of the penalized
    distribution), 0 at padding; they sum to the score before length and
    coverage penalties.

    Returns a dict: `tokens (B, N, L)`, `scores (B, N)`, `lengths (B, N)`,
    `finished (B, N)` bool and, with `return_attention_scores`, `attention
    (B, N, L, S)`, with `return_token_scores` `token_scores (B, N, L)`, with
    `replace_unknown` `replacements (B, N, L)`: the finished hypotheses best
    first, then, where fewer than N finished, the best live ones (scored
    with lp(max_length) and their coverage so far), then empty slots.
    `finished[b, n]` is True exactly when hypothesis n ends with `<eos>`.

    When unfinished hypotheses (`finished` False) come back:
    - with `num_hypotheses` N given, the search only stops early once N
      hypotheses have finished, so an unfinished one is returned only when
      `max_length` was reached first: it is cut there (L tokens, no
      `<eos>`), a prefix of a longer output;
    - without it (N = K, 0.2.0's rule), the search stops once the *best*
      finished hypothesis beats every live one, so the slots after the
      finished ones may hold live hypotheses shorter than `max_length`:
      prefixes the search stopped extending, not outputs. Give
      `num_hypotheses` when every returned hypothesis should be one;
    - a slot no hypothesis reached (dead entries) is empty, as above.

    Finished hypotheses come first whatever the scores. tensorflow-addons'
    `BeamSearchDecoder` and KerasHub's `BeamSampler` rank the hypotheses
    cut off at the maximum length together with the finished ones, by
    score. We do not, because a cut-off hypothesis is not an output: it
    never chose `<eos>`, and its score is the log-probability of a prefix,
    which only falls as it grows, so ranking it with complete ones favours
    truncation (more so with a short `max_length` or small α). Cut-off
    hypotheses fill only the slots no finished one takes, so a source
    always has N results, and `finished` says which are outputs. The
    layout is `(B, N, L)`, beams before time (tensorflow-addons'
    `predicted_ids` was `(B, L, K)`:
    `ops.transpose(tokens, (0, 2, 1))`).

    The kernels the steps read are made ready once for the call, after the
    encoder and before the loop (`quantization.dequantized`: an int8
    model's dequantized, the products' kernels laid out).
    """
    loop = _BeamLoop(model, source, max_length, options, search, num_hypotheses)
    start = loop.start(source)  # the source encoded
    with quantization.dequantized(model):
        _, _, _, *kept = ops.while_loop(loop.cond, loop.body, start)
    return loop.results(*kept)


class _BeamLoop:
    """One beam search's sizes, switches and shared tensors, and the steps
    of its `keras.ops.while_loop` (`beam_search_loop`): `start` makes the
    loop variables, `body` extends the hypotheses by one token (`extend`)
    and keeps the K best live and the K best finished, `cond` is the
    stopping rule and `results` gathers the N results.

    The per-hypothesis buffers (`tokens`, and of `attention`, `coverage`,
    `token_scores` and `replacements` only those asked for) are flat and
    source-major: row b·K + k is hypothesis k of source b (b·2K + k among
    the 2K candidates of a step), so that picking hypotheses is one gather
    of rows."""

    def __init__(self, model, source, max_length, options, search, num_hypotheses):
        self.model, self.options = model, options
        self.alpha, self.beta = search.alpha, float(search.coverage_penalty)
        self.return_attention = search.return_attention_scores
        self.return_token_scores = search.return_token_scores
        self.replace_unknown = search.replace_unknown
        self.unk_id = unk_id_of(model, search.unk_id)
        self.K, self.L = search.beam_width, max_length
        self.N = self.K if num_hypotheses is None else num_hypotheses
        # The finished hypothesis that must beat every live one to stop: the
        # best by default (as before num_hypotheses), the N-th when N is asked for.
        self.last = 0 if num_hypotheses is None else self.N - 1
        self.batch = ops.shape(source)[0]
        self.source_length = ops.shape(source)[1]
        # What the steps share, made once: each source's first row among its
        # K hypotheses, its 2K candidates and its K·V scores, the source's
        # non-padding positions, and the source repeated for the candidates.
        self.sources = ops.arange(self.batch)[:, None]  # (B, 1)
        self.source_mask = (ops.cast(source, "int32") != options.padding_id)[
            :, None, :
        ]  # (B, 1, S)
        self.candidate_source = (
            ops.repeat(source, 2 * self.K, axis=0) if self.replace_unknown else None
        )

    def start(self, source):
        """The loop variables at t = 0, the source encoded for K beams each."""
        K, L, batch = self.K, self.L, self.batch
        self.options.repeat(K)  # prefix rows follow the (B·K,) hypotheses
        state = self.model.encode(source, max_length=L)
        state = self.model.reorder_state(state, ops.repeat(ops.arange(batch), K))  # (B·K, ...)
        # Only the first beam is alive at the start, so the K copies do not
        # all propose the same continuations.
        alive_scores = ops.tile(
            ops.concatenate([ops.zeros((1,)), ops.full((K - 1,), NEGATIVE)])[None], (batch, 1)
        )
        alive = {"tokens": ops.full((batch * K, L), self.options.padding_id, "int32")}
        if self.return_attention:
            alive["attention"] = ops.zeros((batch * K, L, self.source_length), "float32")
        if self.beta:
            alive["coverage"] = ops.zeros((batch * K, self.source_length), "float32")
        if self.return_token_scores:
            alive["token_scores"] = ops.zeros((batch * K, L), "float32")
        if self.replace_unknown:
            alive["replacements"] = ops.full((batch * K, L), -1, "int32")
        finished = dict(alive)
        finished_scores = ops.full((batch, K), NEGATIVE, "float32")
        finished_flags = ops.zeros((batch, K), "bool")
        tokens = ops.full((batch * K,), self.options.sos_id, "int32")
        return 0, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags

    def extend(self, t, alive_scores, alive, logits, step_attention):
        """The 2K best one-token extensions of each source's hypotheses:
        `(top_scores (B, 2K), origin (B·2K,), token (B·2K,), ended (B, 2K),
        grown)`, `origin` the row each extends, `ended` where it is `<eos>`
        of a live beam, `grown` the candidates' buffers with step t written."""
        K, batch, sources = self.K, self.batch, self.sources
        log_probs, allowed = self.options.step(logits, alive["tokens"], t)  # (B·K, V)
        vocab = ops.shape(allowed)[-1]
        candidates = alive_scores[:, :, None] + ops.reshape(allowed, (batch, K, vocab))
        top_scores, top_index = selection.top_k(
            ops.reshape(candidates, (batch, K * vocab)), 2 * K
        )  # (B, 2K)
        origin = sources * K + top_index // vocab  # the row (hypothesis) each extends
        origin = ops.reshape(origin, (-1,))  # (B·2K,)
        token = ops.cast(top_index % vocab, "int32")
        # A candidate of a dead beam or of a banned token is dead: it never finishes.
        ended = ops.logical_and(token == self.options.eos_id, top_scores > NEGATIVE / 2)
        grown = _rows(alive, origin)  # (B·2K, ...)
        token = ops.reshape(token, (-1,))
        grown["tokens"] = write_at(grown["tokens"], token[:, None], t, axis=1)
        if self.return_attention or self.beta or self.replace_unknown:
            attended = ops.take(ops.cast(step_attention, "float32"), origin, axis=0)  # (B·2K, S)
        if self.return_attention:
            grown["attention"] = write_at(grown["attention"], attended[:, None], t, axis=1)
        if self.beta:
            grown["coverage"] = grown["coverage"] + attended
        if self.return_token_scores:
            gained = ops.take(
                ops.reshape(log_probs, (-1,)),
                ops.reshape(sources * (K * vocab) + top_index, (-1,)),
                axis=0,
            )
            grown["token_scores"] = write_at(grown["token_scores"], gained[:, None], t, axis=1)
        if self.replace_unknown:
            grown["replacements"] = unknown_replacements(
                self.candidate_source, attended, token, self.unk_id, grown["replacements"], t
            )
        return top_scores, origin, token, ended, grown

    def body(
        self, t, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags
    ):
        K, batch, sources = self.K, self.batch, self.sources
        logits, state, step_attention = self.model.decode_step(tokens, state)
        top_scores, origin, token, ended, grown = self.extend(
            t, alive_scores, alive, logits, step_attention
        )
        # Live beams: the K best candidates that did not just end.
        alive_scores, pick = ops.top_k(ops.where(ended, 2 * NEGATIVE, top_scores), K)
        picked = ops.reshape(sources * (2 * K) + pick, (-1,))  # (B·K,) rows of grown
        alive = _rows(grown, picked)
        state = reorder_beams(self.model, state, ops.take(origin, picked, axis=0))
        tokens = ops.take(token, picked, axis=0)
        # Finished: the K best of those already finished and those ending now.
        normalised = top_scores / length_penalty(t + 1, self.alpha)
        if self.beta:
            coverage = ops.reshape(grown["coverage"], (batch, 2 * K, self.source_length))
            normalised = normalised + coverage_penalty_of(coverage, self.source_mask, self.beta)
        normalised = ops.where(ended, normalised, NEGATIVE)
        merged_scores = ops.concatenate([finished_scores, normalised], axis=1)  # (B, 3K)
        finished_scores, keep = ops.top_k(merged_scores, K)
        kept = _merged_rows(keep, sources, batch, K, 2 * K)  # (B·K,)
        finished = _rows(_stack(finished, grown), kept)
        flags = ops.concatenate([ops.reshape(finished_flags, (-1,)), ops.reshape(ended, (-1,))], 0)
        finished_flags = ops.reshape(ops.take(flags, kept, axis=0), (batch, K))
        return t + 1, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags

    def cond(
        self, t, tokens, state, alive_scores, alive, finished, finished_scores, finished_flags
    ):
        best_possible = alive_scores[:, 0] / length_penalty(self.L, self.alpha)
        last = self.last
        done = ops.logical_and(finished_flags[:, last], finished_scores[:, last] >= best_possible)
        return ops.logical_and(t < self.L, ops.logical_not(ops.all(done)))

    def results(self, alive_scores, alive, finished, finished_scores, finished_flags):
        """The N results: finished hypotheses first (best first), then, for
        slots nothing finished for, the best live hypotheses (cut at
        max_length), then dead entries, emptied."""
        K, N, batch, padding_id = self.K, self.N, self.batch, self.options.padding_id
        real = alive_scores > NEGATIVE / 2
        live = alive_scores / length_penalty(self.L, self.alpha)
        if self.beta:
            coverage = ops.reshape(alive["coverage"], (batch, K, self.source_length))
            live = live + coverage_penalty_of(coverage, self.source_mask, self.beta)
        rank = ops.concatenate(
            [
                ops.where(finished_flags, finished_scores, 3 * NEGATIVE),
                ops.where(real, live + NEGATIVE, 4 * NEGATIVE),
            ],
            axis=1,
        )
        rank, pick = ops.top_k(rank, N)
        empty = rank < 2.5 * NEGATIVE  # (B, N)
        rows = _merged_rows(pick, self.sources, batch, K, K)
        chosen = _rows(_stack(finished, alive), rows)  # (B·N, ...)

        def per_source(value, fill):  # (B·N, L, ...) -> (B, N, L, ...), empty slots filled
            value = ops.reshape(value, (batch, N) + tuple(ops.shape(value)[1:]))
            return ops.where(
                ops.reshape(empty, (batch, N) + (1,) * (len(value.shape) - 2)), fill, value
            )

        scores = ops.take_along_axis(ops.concatenate([finished_scores, live], axis=1), pick, axis=1)
        tokens = per_source(chosen["tokens"], padding_id)
        # Finished: picked from the finished buffer (its first K slots) with its
        # flag set; live fragments and empty slots are not.
        flags = ops.concatenate([finished_flags, ops.zeros_like(finished_flags)], axis=1)
        result = {
            "tokens": tokens,
            "scores": ops.where(empty, NEGATIVE, scores),
            "lengths": ops.sum(ops.cast(tokens != padding_id, "int32"), axis=2),
            "finished": ops.logical_and(
                ops.take_along_axis(flags, pick, axis=1), ops.logical_not(empty)
            ),
        }
        if self.return_attention:
            result["attention"] = per_source(chosen["attention"], 0.0)
        if self.return_token_scores:
            result["token_scores"] = per_source(chosen["token_scores"], 0.0)
        if self.replace_unknown:
            result["replacements"] = per_source(chosen["replacements"], -1)
        return result
