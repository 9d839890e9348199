"""Greedy search and random sampling, the two strategies that extend one
hypothesis per source (`search.py` describes the contract and beam search):

    greedy:    y_t = argmax_v log p̃(v | y_<t, x)
    sampling:  y_t ~ softmax(filter(log p̃(· | y_<t, x) / T))   (top-k, top-p)
    score(y) = Σ_t log p̃(y_t | y_<t, x)                          (no temperature)

Both run `decode_loop`, one `keras.ops.while_loop` that differs only in how
a step's token is chosen from the allowed log-probabilities; `log p̃` and
the banned tokens come from `decoding_options.DecodingOptions`.
"""

import math

import keras
from keras import ops

from keras_attention import quantization
from keras_attention.masking import write_at
from keras_attention.seq2seq import selection
from keras_attention.seq2seq.decoding_options import NEGATIVE, unk_id_of, unknown_replacements
from keras_attention.seq2seq.search_base import Search, is_real

__all__ = [
    "GreedySearch",
    "RandomSampling",
    "check_vocabulary_fits",
    "decode_loop",
    "filter_logits",
]


def decode_loop(model, source, max_length, choose, options, search):
    """The loop shared by greedy search and sampling: `choose(allowed) ->
    tokens (B,)` picks each step's tokens from the allowed log-probabilities.
    The kernels the steps read are made ready once for the call, after the
    encoder and before the loop (`quantization.dequantized`: an int8
    model's dequantized, the products' kernels laid out)."""
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

    with quantization.dequantized(model):
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
            selection.argmax,
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
        if not is_real(temperature) or not math.isfinite(temperature):
            raise self.error("temperature", "> 0 (a finite number)", temperature)
        if not temperature > 0:
            raise self.error("temperature", "> 0", temperature)
        self.temperature = float(temperature)
        if top_k is not None:
            top_k = self._int("top_k", top_k, 1, "a positive integer")
        self.top_k = top_k
        if top_p is not None and (not is_real(top_p) or not 0.0 < top_p <= 1.0):
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
