"""Greedy, sampling and beam search: a scripted model with a known answer,
real tiny models, compiled loops, bad input."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_attention.seq2seq import RecurrentSeq2Seq, TransformerSeq2Seq
from keras_attention.seq2seq.beam import length_penalty
from keras_attention.seq2seq.generation import beam_search, greedy_search, sample
from keras_attention.seq2seq.sampling import filter_logits
from tests import reference

PAD, SOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5


class ScriptedModel:
    """decode_step's distribution depends only on the previous token:

        after <sos>: A 0.50, B 0.45, <eos> 0.05
        after A:     <eos> 0.4, B 0.3, C 0.3
        after B:     <eos> 0.9, C 0.1
        after C:     <eos> 1.0

    Greedy takes A then <eos> (p = 0.5 · 0.4 = 0.2); the best sequence is
    B <eos> (p = 0.45 · 0.9 = 0.405), which a beam of 2 finds.
    """

    sos_id, eos_id, padding_id = SOS, EOS, PAD

    def __init__(self):
        table = np.full((6, 6), 1e-12)
        table[SOS, [A, B, EOS]] = [0.50, 0.45, 0.05]
        table[A, [EOS, B, C]] = [0.4, 0.3, 0.3]
        table[B, [EOS, C]] = [0.9, 0.1]
        table[C, EOS] = table[EOS, EOS] = table[PAD, EOS] = 1.0
        self.log_table = np.log(table / table.sum(1, keepdims=True)).astype("float32")

    def encode(self, source, max_length=None):
        return {
            "attention": ops.one_hot(
                ops.zeros(ops.shape(source)[:1], "int32"), ops.shape(source)[1]
            )
        }

    def decode_step(self, tokens, state):
        return ops.take(self.log_table, tokens, axis=0), state, state["attention"]

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


SOURCE = np.ones((2, 3), "int32")


def test_greedy_and_beam_differ_on_the_scripted_model():
    greedy = greedy_search(ScriptedModel(), SOURCE, max_length=5)
    np.testing.assert_array_equal(np.asarray(greedy["tokens"]), [[A, EOS, 0, 0, 0]] * 2)
    np.testing.assert_allclose(np.exp(np.asarray(greedy["scores"])), [0.2, 0.2], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(greedy["lengths"]), [2, 2])

    beam = beam_search(ScriptedModel(), SOURCE, max_length=5, beam_width=2, alpha=0.0)
    np.testing.assert_array_equal(
        np.asarray(beam["tokens"])[0], [[B, EOS, 0, 0, 0], [A, EOS, 0, 0, 0]]
    )
    np.testing.assert_allclose(np.exp(np.asarray(beam["scores"])[0]), [0.405, 0.2], rtol=1e-5)


def test_beam_length_penalty_and_early_stop():
    beam = beam_search(ScriptedModel(), SOURCE, max_length=5, beam_width=3, alpha=1.0)
    scores, tokens = np.asarray(beam["scores"])[0], np.asarray(beam["tokens"])[0]
    # Finished scores are log p / ((5 + |Y|) / 6)^α. After step 2 the best
    # finished (B <eos>: log 0.405 / (7/6) = -0.78) beats the best any live
    # hypothesis can reach (A C: log 0.15 / lp(5) = -1.14), so the search
    # stops: the third slot keeps <eos> (step 1), not A C <eos>.
    expected = [
        ((B, EOS), np.log(0.405) / (7 / 6)),
        ((A, EOS), np.log(0.2) / (7 / 6)),
        ((EOS,), np.log(0.05) / 1.0),
    ]
    for (sequence, score), row, got in zip(expected, tokens, scores):
        assert tuple(row[: len(sequence) + 1]) == sequence + (PAD,)
        assert got == pytest.approx(score, rel=1e-5)
    assert float(length_penalty(5, 0.6)) == pytest.approx(((5 + 5) / 6) ** 0.6)


def test_beam_fills_unfinished_slots_with_live_hypotheses():
    # max_length=1: only <eos> finished (p 0.05); the second slot gets the
    # best live hypothesis, A (p 0.5), ranked after the finished one.
    beam = beam_search(ScriptedModel(), SOURCE, max_length=1, beam_width=2, alpha=0.0)
    np.testing.assert_array_equal(np.asarray(beam["tokens"])[0], [[EOS], [A]])
    np.testing.assert_allclose(np.exp(np.asarray(beam["scores"])[0]), [0.05, 0.5], rtol=1e-5)


def test_beam_of_one_is_greedy():
    model = ScriptedModel()
    beam = beam_search(model, SOURCE, max_length=5, beam_width=1, alpha=0.0)
    np.testing.assert_array_equal(
        np.asarray(beam["tokens"])[:, 0], np.asarray(greedy_search(model, SOURCE, 5)["tokens"])
    )


def test_filter_logits_matches_reference(rng):
    logits = rng.normal(size=(3, 10)).astype("float32")
    kept = np.asarray(filter_logits(logits, temperature=2.0, top_k=3)) > -1e8
    np.testing.assert_array_equal(kept, logits >= np.sort(logits, 1)[:, -3:-2])
    np.testing.assert_allclose(
        np.asarray(filter_logits(logits, temperature=2.0))[kept], (logits / 2)[kept], rtol=1e-6
    )
    probs = reference.softmax(logits)
    nucleus = np.asarray(filter_logits(logits, top_p=0.6)) > -1e8
    for row, keep in zip(probs, nucleus):
        order = np.argsort(-row)
        mass_before = np.cumsum(row[order]) - row[order]
        np.testing.assert_array_equal(keep[order], mass_before < 0.6)


def test_sampling_follows_the_distribution():
    source = np.ones((3000, 2), "int32")
    drawn = np.asarray(sample(ScriptedModel(), source, max_length=1, seed=0)["tokens"])[:, 0]
    frequencies = [np.mean(drawn == token) for token in (A, B, EOS)]
    np.testing.assert_allclose(frequencies, [0.50, 0.45, 0.05], atol=0.03)
    # top_k=1 and a tiny nucleus leave only the argmax: greedy.
    greedy = np.asarray(greedy_search(ScriptedModel(), SOURCE, 5)["tokens"])
    np.testing.assert_array_equal(
        np.asarray(sample(ScriptedModel(), SOURCE, 5, top_k=1, seed=1)["tokens"]), greedy
    )
    np.testing.assert_array_equal(
        np.asarray(sample(ScriptedModel(), SOURCE, 5, top_p=0.01, seed=1)["tokens"]), greedy
    )


@pytest.fixture(scope="module")
def tiny_models():
    keras.utils.set_random_seed(7)
    rnn = RecurrentSeq2Seq(12, 12, 16, 16, attention="additive", style="bahdanau")
    transformer = TransformerSeq2Seq(12, 12, 16, 2, 32, 2, max_length=8)
    source = np.array([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 11, 3]], "int32")
    return {"rnn": rnn, "transformer": transformer}, source


@pytest.mark.parametrize("family", ["rnn", "transformer"])
def test_batch_of_different_lengths_equals_one_by_one(tiny_models, family):
    models, source = tiny_models
    model = models[family]
    batched = greedy_search(model, source, max_length=6, return_attention_scores=True)
    for row in range(2):
        alone = source[row : row + 1, : 4 if row == 0 else 6]
        single = greedy_search(model, alone, max_length=6)
        np.testing.assert_array_equal(
            np.asarray(batched["tokens"])[row], np.asarray(single["tokens"])[0]
        )
    attention = np.asarray(batched["attention"])
    assert np.all(attention[0, :, 4:] == 0.0)
    beams = beam_search(model, source, max_length=6, beam_width=3, return_attention_scores=True)
    assert beams["tokens"].shape == (2, 3, 6) and beams["attention"].shape == (2, 3, 6, 6)
    scores, tokens = np.asarray(beams["scores"]), np.asarray(beams["tokens"])
    for row_scores, row_tokens in zip(scores, tokens):
        finished = (row_tokens == model.eos_id).any(-1)
        assert not np.any(np.diff(finished.astype(int)) > 0)  # finished hypotheses first ...
        for group in (finished, ~finished):  # ... and each group best first
            assert np.all(np.diff(row_scores[group]) <= 1e-6)


# The Transformer's case is large (`make test-large`); its searches run
# inside tf.function in `make test` through tests/test_export.py's exports.
@pytest.mark.parametrize("family", ["rnn", pytest.param("transformer", marks=pytest.mark.large)])
def test_generation_runs_inside_tf_function(tiny_models, family):
    models, source = tiny_models
    model = models[family]

    @tf.function(autograph=False)  # as in a Keras export, which turns AutoGraph off
    def generate(source):
        return greedy_search(model, source, 6)["tokens"], beam_search(
            model, source, 6, beam_width=2
        )["tokens"]

    greedy, beam = generate(tf.constant(source))
    np.testing.assert_array_equal(
        np.asarray(greedy), np.asarray(greedy_search(model, source, 6)["tokens"])
    )
    np.testing.assert_array_equal(
        np.asarray(beam), np.asarray(beam_search(model, source, 6, beam_width=2)["tokens"])
    )


@pytest.mark.parametrize(
    "call,pattern",
    [
        (
            lambda m: beam_search(m, SOURCE, 5, beam_width=0),
            r"`beam_width` of beam_search must be a positive integer",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 0),
            r"`max_length` of greedy_search must be a positive integer; received max_length=0",
        ),
        (
            lambda m: beam_search(m, SOURCE, -2),
            r"`max_length` of beam_search must be a positive integer",
        ),
        (
            lambda m: greedy_search(m, np.zeros((2, 0), "int32"), 4),
            r"`source` of greedy_search is empty \(shape \(2, 0\)\)",
        ),
        (lambda m: sample(m, SOURCE, 4, temperature=0.0), r"`temperature` of sample must be > 0"),
        (lambda m: sample(m, SOURCE, 4, top_p=1.5), r"`top_p` of sample must be in \(0, 1\]"),
    ],
)
def test_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(ScriptedModel())
