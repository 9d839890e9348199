"""The decoding options that greedy search, sampling and beam search share:
each step's logits turned into the distribution the search scores and the
tokens it may emit, in `keras.ops` over fixed-size tensors (so the loops
stay one `ops.while_loop` that compiles with XLA and exports with core ops).

One step, for hypotheses whose tokens so far are `history (N, L)` (padded
with `padding_id`, `<sos>` excluded, step `t` the index of the token being
chosen):

1. repetition penalty (CTRL, Keskar et al., 2019) on the logits: for every
   token already in the hypothesis (the prefix included), z / θ when z > 0
   and z · θ otherwise;
2. log-softmax of those logits: the scores (and `token_scores`) are the
   log-probabilities of this penalized distribution, as in CTranslate2,
   which also penalizes before its log-softmax;
3. bans, set to `NEGATIVE` and *not* renormalised (a banned token has no
   score; the others keep their log-probabilities): padding and `<sos>`
   (`never_generated`), `suppress_tokens`, `<eos>` while t < `min_length`,
   and every token that would complete an n-gram of size
   `no_repeat_ngram_size` already in the hypothesis;
4. a forced prefix: while t < the prefix's length, the prefix token is the
   only choice, with its log-probability of step 2 (bans do not apply).
"""

from keras import ops

from keras_attention.masking import write_at
from keras_attention.validation import (
    check_ids_in_range,
    check_positive_int,
    check_token_ids,
    is_integer,
)

NEGATIVE = -1e9  # a dead hypothesis' score; finite, so arithmetic stays NaN-free
UNK_ID = 3  # `[UNK]` in the reserved ids of tokenizers/characters.py, for models without `unk_id`


def check_source(source, max_length, owner, model=None):
    """`source`, checked: int ids `(B, S)`, a batch of at least one row, and
    (with a `model` that has `source_vocab_size`) ids in its vocabulary."""
    check_positive_int("max_length", max_length, owner)
    check_token_ids("source", source, owner)
    if source.shape[0] == 0:
        raise ValueError(
            f"`source` of {owner} is an empty batch (shape {tuple(source.shape)}); give at "
            "least one row to decode."
        )
    vocab_size = getattr(model, "source_vocab_size", None)
    return check_ids_in_range("source", source, vocab_size, owner)


def check_prefix_ids(prefix, model, sos_id, owner):
    """A forced prefix holds target ids of the model's vocabulary, and never
    `<sos>` (outputs exclude it; forcing it would emit it)."""
    if prefix is None:
        return None
    prefix = ops.convert_to_tensor(prefix)
    if "int" not in str(prefix.dtype):
        return prefix  # DecodingOptions refuses it with its message
    return check_ids_in_range(
        "prefix",
        prefix,
        getattr(model, "target_vocab_size", None),
        owner,
        banned={sos_id: "<sos>: outputs exclude it, so a prefix cannot force it"},
    )


def unk_id_of(model, unk_id):
    return getattr(model, "unk_id", UNK_ID) if unk_id is None else unk_id


def never_generated(logits, sos_id, padding_id):
    """`logits (B, V)` with the `<sos>` and padding ids set to `NEGATIVE`, so
    that no search or draw emits them: a generated padding id would read as
    the end of the output (`lengths` counts non-padding tokens) and `<sos>`
    is never a real token. The other logits are unchanged. Returns float32.
    """
    vocab = ops.arange(ops.shape(logits)[-1])
    banned = ops.logical_or(vocab == sos_id, vocab == padding_id)  # (V,)
    return ops.where(banned[None], NEGATIVE, ops.cast(logits, "float32"))


class DecodingOptions:
    """One call of a search (`search.py`): its options, special ids and
    forced prefix, and what each step allows (see the module docstring)."""

    def __init__(self, search, batch, max_length, sos_id, eos_id, padding_id, prefix=None):
        # The options were validated once, by the `Search` (search.py).
        self.owner, self.max_length = search.owner, max_length
        self.sos_id, self.eos_id, self.padding_id = sos_id, eos_id, padding_id
        self.min_length = search.min_length
        self.ngram = search.no_repeat_ngram_size
        self.repetition_penalty = search.repetition_penalty
        self.suppress = search.suppress_tokens or ()
        self.prefix = None if prefix is None else self._check_prefix(prefix, batch)

    def _check_prefix(self, prefix, batch):
        prefix = ops.convert_to_tensor(prefix)
        shape = tuple(prefix.shape)
        if "int" not in str(prefix.dtype) or len(shape) != 2:
            raise ValueError(
                f"`prefix` of {self.owner} must be int token ids of shape (B, P), padded with "
                f"padding_id; received dtype {prefix.dtype} and shape {shape}."
            )
        if shape[0] is not None and is_integer(batch) and shape[0] != batch:
            raise ValueError(
                f"`prefix` of {self.owner} must have one row per source row ({batch}); "
                f"received prefix with shape {shape}."
            )
        if shape[1] is not None and shape[1] > self.max_length:
            raise ValueError(
                f"`prefix` of {self.owner} may be at most max_length={self.max_length} tokens "
                f"long; received prefix with shape {shape}."
            )
        if shape[1] == 0:
            return None  # nothing to force
        # One padding column more: `forced` reads column min(t, width - 1),
        # which then exists also when the width is 0 only at run time.
        return ops.pad(ops.cast(prefix, "int32"), [[0, 0], [0, 1]], constant_values=self.padding_id)

    def check_vocabulary(self, logits):
        vocab = logits.shape[-1]
        if vocab is not None and self.suppress and max(self.suppress) >= vocab:
            raise ValueError(
                f"`suppress_tokens` of {self.owner} must be ids below the vocabulary size "
                f"{vocab}; received suppress_tokens={list(self.suppress)!r}."
            )

    def repeat(self, copies):
        """The prefix rows repeated for `copies` hypotheses per source."""
        if self.prefix is not None and copies > 1:
            self.prefix = ops.repeat(self.prefix, copies, axis=0)

    def forced(self, t):
        """`(forcing (N,) bool, token (N,) int32)` at step `t`: the prefix
        token where row's prefix is longer than t."""
        if self.prefix is None:
            return None, None
        width = ops.shape(self.prefix)[1]
        token = ops.take(self.prefix, ops.minimum(t, width - 1), axis=1)
        forcing = ops.logical_and(t < width, token != self.padding_id)
        return forcing, token

    def _seen(self, history, vocab):
        """`(N, V)` bool: the tokens present in `history` (padding aside)."""
        present = ops.any(ops.one_hot(history, vocab, dtype="int32") > 0, axis=1)
        return ops.logical_and(present, (ops.arange(vocab) != self.padding_id)[None])

    def _repeated_ngrams(self, history, t, vocab):
        """`(N, V)` bool: tokens v such that (last n-1 tokens, v) is an n-gram
        already in the first `t` tokens of `history`."""
        n, length = self.ngram, ops.shape(history)[1]
        starts = length - n + 1  # the n-grams of the buffer, by first position
        if starts < 1:
            return ops.zeros((ops.shape(history)[0], vocab), "bool")
        windows = ops.stack([history[:, i : i + starts] for i in range(n)], axis=-1)  # (N, W, n)
        complete = ops.arange(starts) <= t - n  # the n-grams wholly before step t
        if n > 1:
            context = ops.take(history, ops.clip(t - n + 1 + ops.arange(n - 1), 0, length - 1), 1)
            same = ops.all(windows[:, :, :-1] == context[:, None, :], axis=-1)  # (N, W)
            complete = ops.logical_and(complete[None], same)
        else:
            complete = ops.broadcast_to(complete[None], ops.shape(windows)[:2])
        following = ops.one_hot(windows[:, :, -1], vocab, dtype="int32")  # (N, W, V)
        return ops.any(ops.logical_and(complete[:, :, None], following > 0), axis=1)

    def step(self, logits, history, t):
        """`(log_probs, allowed)`, both `(N, V)` float32: the log-probabilities
        of the penalized distribution (steps 1-2), and those of the tokens the
        search may choose at step `t` with the rest `NEGATIVE` (steps 3-4)."""
        self.check_vocabulary(logits)
        logits = ops.cast(logits, "float32")
        vocab = ops.shape(logits)[-1]
        if self.repetition_penalty != 1.0:
            theta = self.repetition_penalty
            penalized = ops.where(logits > 0, logits / theta, logits * theta)
            logits = ops.where(self._seen(history, vocab), penalized, logits)
        log_probs = ops.log_softmax(logits, axis=-1)
        ids = ops.arange(vocab)
        banned = ops.logical_or(ids == self.sos_id, ids == self.padding_id)[None]  # (1, V)
        for token in self.suppress:
            banned = ops.logical_or(banned, (ids == token)[None])
        if self.min_length > 0:
            banned = ops.logical_or(banned, ((ids == self.eos_id) & (t < self.min_length))[None])
        allowed = ban_columns(log_probs, banned)
        if self.ngram > 0:
            allowed = ops.where(self._repeated_ngrams(history, t, vocab), NEGATIVE, allowed)
        forcing, token = self.forced(t)
        if forcing is not None:
            only = ops.where(ids[None] == token[:, None], log_probs, NEGATIVE)
            allowed = ops.where(forcing[:, None], only, allowed)
        return log_probs, allowed


def ban_columns(values, banned):
    """`where(banned, NEGATIVE, values)` for a ban of whole columns, `banned`
    `(1, V)`: two clamps, `NEGATIVE` at banned columns, `values` elsewhere
    (a banned NaN stays NaN). XLA's CPU compiler emits a select on a
    broadcast boolean row as a scalar loop, and the clamps as vector code
    (BENCHMARKS.md, "A decoding step")."""
    ceiling = ops.where(banned, NEGATIVE, float("inf"))
    floor = ops.where(banned, NEGATIVE, float("-inf"))
    return ops.maximum(ops.minimum(values, ceiling), floor)


def unknown_replacements(source, step_attention, chosen, unk_id, buffer, t):
    """`buffer (N, L)` with, at step `t`, the source token id the step
    attended most where `chosen` is `unk_id`, and -1 elsewhere."""
    position = ops.argmax(ops.cast(step_attention, "float32"), axis=-1)  # (N,)
    copied = ops.take_along_axis(ops.cast(source, "int32"), position[:, None], axis=1)[:, 0]
    value = ops.where(chosen == unk_id, copied, -1)
    return write_at(buffer, value[:, None], t, axis=1)
