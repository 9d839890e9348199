"""`seq2seq.Ensemble`: an ensemble of a model with itself (or of one model)
decodes as the model does; two models' combined step log-probabilities
equal a NumPy reference computed from the members' own logits (a mixture
of their distributions, or their weighted log-probabilities), along a
scripted sequence of steps and in teacher forcing; the ensemble's greedy
tokens equal a greedy loop written here over the members' steps; mixed
families decode with beam search; configs and `.keras` files round-trip;
bad arguments are refused naming the argument. Portable (every backend);
the recipe's `--ensemble` and the SavedModel export of an ensemble are
tested in tests/test_translation_ensemble.py."""

import keras
import numpy as np
import pytest

from keras_attention.seq2seq import (
    BeamSearch,
    ConvS2SSeq2Seq,
    Ensemble,
    GreedySearch,
    RecurrentSeq2Seq,
    TransformerSeq2Seq,
)

V = 14
SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 9, 10, 2], [1, 3, 2, 0, 0, 0]], "int32")
TARGET_IN = np.array([[1, 5, 7, 9], [1, 4, 4, 0], [1, 12, 0, 0]], "int32")


def make(family, seed):
    keras.utils.set_random_seed(seed)
    model = {
        "rnn": lambda: RecurrentSeq2Seq(V, V, 8, 16, attention="additive", style="bahdanau"),
        "convs2s": lambda: ConvS2SSeq2Seq(V, V, 8, max_length=10, hidden_dim=8, num_layers=2),
        "transformer": lambda: TransformerSeq2Seq(V, V, 16, 2, 32, 2, max_length=10),
    }[family]()
    model.build()
    return model


def twin(model):
    """A second model with `model`'s config and weights."""
    copy = type(model).from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


def log_softmax(x):
    x = np.asarray(x, "float64")
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def reference(logits, weights, combine):
    """The combination in NumPy, float64, from the members' raw logits."""
    log_probs = [log_softmax(x) for x in logits]
    if combine == "probabilities":
        return np.log(sum(w * np.exp(lp) for w, lp in zip(weights, log_probs)))
    return sum(w * lp for w, lp in zip(weights, log_probs))


# The Transformer's case is large (`make test-large`).
@pytest.mark.parametrize(
    "family", ["rnn", "convs2s", pytest.param("transformer", marks=pytest.mark.large)]
)
def test_an_ensemble_of_a_model_with_itself_decodes_as_the_model(family):
    model = make(family, 1)
    for ensemble in (Ensemble([model]), Ensemble([model, twin(model)])):
        for search in (GreedySearch(max_length=7), BeamSearch(beam_width=3, max_length=7)):
            alone, together = model.generate(SOURCE, search), ensemble.generate(SOURCE, search)
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(together["tokens"]),
                keras.ops.convert_to_numpy(alone["tokens"]),
            )
            np.testing.assert_allclose(
                keras.ops.convert_to_numpy(together["scores"]),
                keras.ops.convert_to_numpy(alone["scores"]),
                rtol=1e-4,
                atol=1e-5,
            )


@pytest.mark.parametrize(
    "combine, weights", [("probabilities", None), ("log_probabilities", [1.0, 3.0])]
)
def test_scripted_steps_combine_the_members_log_probabilities_as_numpy_does(combine, weights):
    first, second = make("transformer", 1), make("convs2s", 2)
    ensemble = Ensemble([first, second], combine=combine, weights=weights)
    normalised = [0.5, 0.5] if weights is None else [0.25, 0.75]
    state = ensemble.encode(SOURCE, max_length=6)
    states = [first.encode(SOURCE, max_length=6), second.encode(SOURCE, max_length=6)]
    # A scripted target: each step feeds these tokens, whatever was predicted.
    for tokens in ([1, 1, 1], [5, 4, 12], [7, 4, 2], [9, 3, 3]):
        tokens = np.array(tokens, "int32")
        combined, state, attention = ensemble.decode_step(tokens, state)
        members = []
        for i, member in enumerate((first, second)):
            logits, states[i], member_attention = member.decode_step(tokens, states[i])
            members.append((keras.ops.convert_to_numpy(logits), member_attention))
        expected = reference([m[0] for m in members], normalised, combine)
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(combined), expected, rtol=1e-5, atol=1e-5
        )
        mean = sum(w * keras.ops.convert_to_numpy(a) for w, (_, a) in zip(normalised, members))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(attention), mean, atol=1e-6)
    if combine == "probabilities":  # a mixture is a distribution
        mixture = np.exp(keras.ops.convert_to_numpy(combined).astype("float64"))
        np.testing.assert_allclose(mixture.sum(-1), 1.0, rtol=1e-5)


def test_teacher_forcing_combines_the_members_outputs():
    first, second = make("rnn", 3), make("transformer", 4)
    ensemble = Ensemble([first, second])
    expected = reference(
        [keras.ops.convert_to_numpy(m((SOURCE, TARGET_IN))) for m in (first, second)],
        [0.5, 0.5],
        "probabilities",
    )
    got = keras.ops.convert_to_numpy(ensemble((SOURCE, TARGET_IN)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    maps = ensemble.attention_weights(SOURCE, TARGET_IN)
    assert any(name.startswith("model_0/") for name in maps)
    assert any(name.startswith("model_1/") for name in maps)


def test_greedy_tokens_equal_a_greedy_loop_over_the_members_steps():
    first, second = make("convs2s", 5), make("transformer", 6)
    ensemble = Ensemble([first, second])
    length = 6
    got = keras.ops.convert_to_numpy(
        ensemble.generate(SOURCE, GreedySearch(max_length=length))["tokens"]
    )
    states = [m.encode(SOURCE, max_length=length) for m in (first, second)]
    tokens = np.full(len(SOURCE), first.sos_id, "int32")
    finished = np.zeros(len(SOURCE), bool)
    expected = np.full((len(SOURCE), length), first.padding_id, "int32")
    for t in range(length):
        logits = []
        for i, member in enumerate((first, second)):
            step, states[i], _ = member.decode_step(tokens, states[i])
            logits.append(keras.ops.convert_to_numpy(step))
        scores = reference(logits, [0.5, 0.5], "probabilities")
        scores[:, [first.sos_id, first.padding_id]] = -np.inf  # never generated
        tokens = np.where(finished, first.padding_id, scores.argmax(-1)).astype("int32")
        expected[:, t] = tokens
        finished |= tokens == first.eos_id
    np.testing.assert_array_equal(got, expected)


def test_mixed_families_decode_with_beam_search_and_round_trip(tmp_path):
    ensemble = Ensemble(
        [make("rnn", 7), make("convs2s", 8), make("transformer", 9)],
        combine="log_probabilities",
        weights=[2, 1, 1],
        search=BeamSearch(beam_width=3, max_length=7, num_hypotheses=2),
    )
    result = ensemble.generate(SOURCE)
    tokens = keras.ops.convert_to_numpy(result["tokens"])
    assert tokens.shape == (3, 2, 7)
    assert ensemble.max_length == 10  # the members' smallest that has one
    restored = Ensemble.from_config(ensemble.get_config())
    restored.build()
    restored.set_weights(ensemble.get_weights())
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(restored.generate(SOURCE)["tokens"]), tokens
    )
    path = str(tmp_path / "ensemble.keras")
    ensemble.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Ensemble) and loaded.model_weights == [0.5, 0.25, 0.25]
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded.generate(SOURCE)["tokens"]), tokens
    )


# Large: each member is a model quantized as tests/test_quantization.py checks.
@pytest.mark.large
def test_quantizing_an_ensemble_quantizes_each_member():
    ensemble = Ensemble([make("transformer", 10), make("convs2s", 11)])
    before = keras.ops.convert_to_numpy(ensemble((SOURCE, TARGET_IN)))
    ensemble.quantize("int8")
    assert ensemble.quantization_mode == "int8"
    assert all(m.quantization_mode == "int8" for m in ensemble.models)
    after = keras.ops.convert_to_numpy(ensemble((SOURCE, TARGET_IN)))
    assert 0 < np.abs(after - before).max() < 0.1  # int8 weights, nearly the same outputs


def test_bad_arguments_are_refused_naming_them():
    model = make("transformer", 12)
    other = TransformerSeq2Seq(V, V + 1, 16, 2, 32, 2, max_length=10)
    with pytest.raises(ValueError, match="`models` of Ensemble must share `target_vocab_size`"):
        Ensemble([model, other])
    with pytest.raises(ValueError, match="`models` of Ensemble must be a non-empty list"):
        Ensemble([])
    with pytest.raises(ValueError, match="`models` of Ensemble must be a non-empty list"):
        Ensemble(model)
    with pytest.raises(ValueError, match="received Dense at index 1"):
        Ensemble([model, keras.layers.Dense(3)])
    with pytest.raises(ValueError, match="`combine` of Ensemble must be one of"):
        Ensemble([model], combine="mean")
    with pytest.raises(ValueError, match="`weights` of Ensemble must be a list of 2 numbers"):
        Ensemble([model, model], weights=[1.0])
    with pytest.raises(ValueError, match="`weights` of Ensemble must be positive finite"):
        Ensemble([model, model], weights=[1.0, -1.0])
    assert Ensemble([model, model], weights=[np.float32(1), np.int64(3)]).model_weights == [
        0.25,
        0.75,
    ]
    with pytest.raises(ValueError, match="`return_attention_scores` of Ensemble.teacher_forced"):
        Ensemble([model]).teacher_forced(SOURCE, TARGET_IN, return_attention_scores=True)
