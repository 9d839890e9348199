"""What must hold on every Keras backend (TensorFlow, JAX, PyTorch): each
family builds, trains with Keras's own `fit` (scheduled sampling included),
generates with greedy and beam search, equals its cached decoding and
round-trips a `.keras` file. `make test` runs this file under TensorFlow
and JAX, `make test-torch` under PyTorch."""

import os
import tempfile

import keras
import numpy as np
import pytest

from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    MaskedCrossEntropy,
    RecurrentSeq2Seq,
    ScheduledSampling,
    TransformerSeq2Seq,
    beam_search,
    greedy_search,
)

VOCAB, SOS, EOS = 11, 1, 2

FAMILIES = {
    "rnn": lambda **kw: RecurrentSeq2Seq(VOCAB, VOCAB, 8, 8, attention="additive", **kw),
    "rnn-local": lambda **kw: RecurrentSeq2Seq(VOCAB, VOCAB, 8, 8, attention="local", **kw),
    "convs2s": lambda **kw: ConvS2SSeq2Seq(
        VOCAB, VOCAB, 8, hidden_dim=8, num_layers=2, max_length=12, **kw
    ),
    "transformer": lambda **kw: TransformerSeq2Seq(VOCAB, VOCAB, 8, 2, 16, 1, max_length=12, **kw),
    "transformer-tied": lambda **kw: TransformerSeq2Seq(
        VOCAB, VOCAB, 8, 2, 16, 1, max_length=12, tie_embeddings=True, **kw
    ),
    # three-way tying: one table for the source, the target and the output
    "convs2s-shared": lambda **kw: ConvS2SSeq2Seq(
        VOCAB,
        VOCAB,
        8,
        hidden_dim=8,
        num_layers=2,
        max_length=12,
        tie_embeddings=True,
        share_embeddings=True,
        **kw,
    ),
}


def data(count=32, length=5):
    rng = np.random.default_rng(0)
    source = rng.integers(3, VOCAB, (count, length)).astype("int32")
    source[::3, -2:] = 0
    target = source[:, ::-1]
    target_in = np.concatenate([np.full((count, 1), SOS), target], 1).astype("int32")
    target_out = np.concatenate([target, np.full((count, 1), EOS)], 1).astype("int32")
    return source, target_in, target_out


# Under TensorFlow, tests/test_seq2seq.py trains every family with `fit`
# (scheduled sampling included) in `make test`: these fits are large there.
# Under JAX, `make test` fits and generates with the three families as they
# come (`BASE`), scheduled sampling on; the variants (local attention, tied
# and shared tables) and the fits without scheduled sampling are large.
BACKEND = keras.backend.backend()
BASE = ("rnn", "convs2s", "transformer")


def large_on(*backends):
    """The `large` mark if this run's backend is one of `backends`."""
    return [pytest.mark.large] if BACKEND in backends else []


def families(*variants_large_on, large_on_backends=()):
    """FAMILIES as parameters: each large on `large_on_backends`, the
    variants (not in BASE) also on `variants_large_on`."""
    return [
        pytest.param(
            family,
            marks=large_on(*large_on_backends)
            + ([] if family in BASE else large_on(*variants_large_on)),
        )
        for family in FAMILIES
    ]


@pytest.mark.parametrize("family", families("jax", large_on_backends=["tensorflow"]))
@pytest.mark.parametrize("scheduled", [pytest.param(False, marks=large_on("jax")), True])
def test_fit_one_epoch(family, scheduled):
    source, target_in, target_out = data()
    kwargs = (
        {"scheduled_sampling": ScheduledSampling("linear", start=0.0, end=0.5, steps=4, seed=1)}
        if scheduled
        else {}
    )
    model = FAMILIES[family](**kwargs)
    model.compile(keras.optimizers.Adam(1e-2), MaskedCrossEntropy())
    before = (
        [keras.ops.convert_to_numpy(w).copy() for w in model.trainable_weights]
        if model.built
        else None
    )
    history = model.fit((source, target_in), target_out, batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert before is None or any(not np.allclose(a, b) for a, b in zip(before, after))
    if scheduled:  # two training steps were counted, for the schedule
        assert int(keras.ops.convert_to_numpy(model.sampling_step)) == 2


@pytest.mark.parametrize(
    "style,context_input", [("luong", False), pytest.param("bahdanau", True, marks=large_on("jax"))]
)
def test_a_recurrent_decoder_with_dropout_fits_compiled(style, context_input):
    """Dropout on the inputs a recurrent decoder's steps read (the fed
    context or h̃, the encoder's context) under a compiled `fit` (JAX's
    `jit` traces the steps' loop, whose body cannot draw from the layer's
    seed): the masks are drawn before the loop, a mask of its own per
    step, values 0 or 1 / (1 - rate)."""
    source, target_in, target_out = data()
    model = RecurrentSeq2Seq(
        VOCAB, VOCAB, 8, 8, attention="additive", style=style, context_input=context_input,
        dropout=0.5,
    )  # fmt: skip
    model.compile(keras.optimizers.Adam(1e-2), MaskedCrossEntropy(), jit_compile="auto")
    history = model.fit((source, target_in), target_out, batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    decoder = model.decoder
    memory = keras.ops.zeros((4, 5, 8))
    state = decoder.init_cache(memory, [keras.ops.zeros((4, 8))] * 2)
    masks = decoder._dropout_masks(keras.ops.zeros((30, 4, 1)), state, training=True)
    assert sorted(masks) == (["context", "fed"] if context_input else ["fed"])
    for mask in masks.values():
        mask = keras.ops.convert_to_numpy(mask)
        assert mask.shape[:2] == (30, 4) and set(np.unique(mask)) <= {0.0, 2.0}
        assert 0.35 < (mask == 0).mean() < 0.65  # the rate, 0.5
        assert not np.array_equal(mask[0], mask[1])  # each step its own
    assert decoder._dropout_masks(keras.ops.zeros((30, 4, 1)), state, training=False) == {}


@pytest.mark.parametrize("family", families("jax"))
def test_generate_and_round_trip(family):
    source, target_in, _ = data(4)
    model = FAMILIES[family]()
    logits = keras.ops.convert_to_numpy(model((source, target_in)))
    # Cached incremental decoding equals the teacher-forced pass.
    state = model.encode(source, max_length=target_in.shape[1])
    for t in range(target_in.shape[1]):
        step, state, attention = model.decode_step(target_in[:, t], state)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(step), logits[:, t], atol=1e-5)
        assert tuple(attention.shape) == source.shape
    greedy = greedy_search(model, source, 6, return_attention_scores=True)
    beam = beam_search(model, source, 6, beam_width=3, return_attention_scores=True)
    assert tuple(greedy["tokens"].shape) == (4, 6) and tuple(greedy["attention"].shape) == (4, 6, 5)
    assert tuple(beam["tokens"].shape) == (4, 3, 6)
    # Greedy's score is the log-probability of its tokens under the model.
    tokens = keras.ops.convert_to_numpy(greedy["tokens"])[0]
    length = int(np.argmax(tokens == EOS)) + 1 if (tokens == EOS).any() else len(tokens)
    prefix = np.concatenate([[SOS], tokens[: length - 1]])[None].astype("int32")
    log_probs = keras.ops.convert_to_numpy(
        keras.ops.log_softmax(model((source[:1], prefix)), axis=-1)
    )
    expected = sum(log_probs[0, t, tokens[t]] for t in range(length))
    assert float(keras.ops.convert_to_numpy(greedy["scores"])[0]) == pytest.approx(
        expected, abs=1e-4
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded((source, target_in))), logits, atol=1e-6
    )
