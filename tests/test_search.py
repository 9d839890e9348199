"""The decoding strategy objects (`seq2seq/search.py`): each reproduces what
keras_attention 0.2.0's functions returned on tiny random models of the
three families (`data/search_0_2_0.npz`, written by 0.2.0's code with the
models' weights: `data/make_search_fixture.py`), the 0.2.0 functions (now
wrappers) still do, configs round-trip through Keras serialization and
`get_search`, `Seq2Seq.generate` uses the default search of `compile` or the
constructor, and bad options are refused naming the argument. Portable but
for the tests marked tensorflow (sampling draws are backend-specific)."""

import os
import warnings

import keras
import numpy as np
import pytest

from keras_attention.masking import write_at
from keras_attention.seq2seq import (
    BeamSearch,
    ConvS2SSeq2Seq,
    GreedySearch,
    RandomSampling,
    RecurrentSeq2Seq,
    Search,
    TransformerSeq2Seq,
    beam_search,
    generate,
    get_search,
    greedy_search,
    sample,
)

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "search_0_2_0.npz")
SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 9, 10, 2], [1, 3, 2, 0, 0, 0]], "int32")
PREFIX = np.array([[6, 0], [7, 4], [0, 0]], "int32")
OPTIONS = dict(min_length=2, no_repeat_ngram_size=2, repetition_penalty=1.3, suppress_tokens=[5])
FAMILIES = ("rnn", "convs2s", "transformer")

# The 0.2.0 calls of make_search_fixture.py, as search objects: (search, prefix, best).
CASES = {
    "greedy": (GreedySearch(max_length=7, return_attention_scores=True, **OPTIONS), None, False),
    "greedy_prefix_unk": (
        GreedySearch(max_length=7, replace_unknown=True, unk_id=4),
        PREFIX,
        False,
    ),
    "beam": (BeamSearch(max_length=7, return_attention_scores=True), None, False),
    "beam_options": (
        BeamSearch(
            beam_width=3,
            alpha=1.1,
            coverage_penalty=0.2,
            num_hypotheses=2,
            return_token_scores=True,
            max_length=7,
            **OPTIONS,
        ),
        PREFIX,
        False,
    ),
    "generate_beam": (BeamSearch(beam_width=3, alpha=1.2, max_length=7, **OPTIONS), None, True),
    # 0.2.0's generate with a beam of 1: greedy (`BeamSearch.best`).
    "generate_greedy": (BeamSearch(beam_width=1, max_length=7), PREFIX, True),
}
SAMPLING = {
    "sample": RandomSampling(temperature=0.8, top_k=6, top_p=0.9, seed=3, max_length=7),
    "sample_options": RandomSampling(seed=5, max_length=7, return_attention_scores=True, **OPTIONS),
}


@pytest.fixture(scope="module")
def fixture_models():
    """The fixture's models with 0.2.0's weights, and its outputs by family."""
    stored = np.load(FIXTURE)
    models = {
        "rnn": RecurrentSeq2Seq(12, 12, 8, 16, attention="additive", style="bahdanau"),
        "convs2s": ConvS2SSeq2Seq(12, 12, 8, max_length=10, hidden_dim=8, num_layers=2),
        "transformer": TransformerSeq2Seq(12, 12, 16, 2, 32, 2, max_length=10),
    }
    outputs = {}
    for family, model in models.items():
        model.build()
        count = len(model.get_weights())
        model.set_weights([stored[f"{family}/weight/{index}"] for index in range(count)])
        outputs[family] = {
            name[len(family) + 1 :]: stored[name]
            for name in stored.files
            if name.startswith(family + "/") and "/weight/" not in name
        }
    return models, outputs


def expected(outputs, case):
    return {
        name.split("/", 1)[1]: value
        for name, value in outputs.items()
        if name.split("/", 1)[0] == case
    }


def assert_same(result, reference):
    # `finished` is new since 0.2.0: every other key is 0.2.0's.
    assert sorted(result) == sorted({*reference, "finished"})
    assert_finished_means_eos(result)
    for name, value in reference.items():
        got = np.asarray(result[name])
        assert got.shape == value.shape, name
        if value.dtype.kind in "iub":
            np.testing.assert_array_equal(got, value, err_msg=name)
        else:
            np.testing.assert_allclose(got, value, rtol=1e-4, atol=1e-5, err_msg=name)


def assert_finished_means_eos(result, eos_id=2):
    """`finished` is True exactly where the hypothesis holds `<eos>`."""
    tokens = np.asarray(result["tokens"])
    finished = np.asarray(result["finished"])
    assert finished.dtype == bool and finished.shape == tokens.shape[:-1]
    np.testing.assert_array_equal(finished, (tokens == eos_id).any(axis=-1))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_search_objects_reproduce_0_2_0(fixture_models, family, case):
    models, outputs = fixture_models
    search, prefix, best = CASES[case]
    run = search.best if best else search
    assert_same(run(models[family], SOURCE, prefix=prefix), expected(outputs[family], case))


@pytest.mark.tensorflow
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("case", sorted(SAMPLING))
def test_random_sampling_reproduces_0_2_0_with_a_fixed_seed(fixture_models, family, case):
    models, outputs = fixture_models
    result = SAMPLING[case](models[family], SOURCE)
    assert_same(result, expected(outputs[family], case))
    # A seeded search draws the same on every call, as 0.2.0's `sample(seed=...)`.
    assert_same(SAMPLING[case](models[family], SOURCE), expected(outputs[family], case))
    if case == "sample":  # and the 0.2.0 function, now its wrapper
        again = sample(models[family], SOURCE, 7, temperature=0.8, top_k=6, top_p=0.9, seed=3)
        assert_same(again, expected(outputs[family], case))


@pytest.mark.parametrize("family", FAMILIES)
def test_the_0_2_0_functions_still_give_0_2_0_results(fixture_models, family):
    models, outputs = fixture_models
    model, reference = models[family], outputs[family]
    with pytest.warns(DeprecationWarning, match="`return_attention` of greedy_search"):
        old = greedy_search(model, SOURCE, 7, return_attention=True, **OPTIONS)
    assert_same(old, expected(reference, "greedy"))
    assert_same(
        greedy_search(model, SOURCE, 7, return_attention_scores=True, **OPTIONS),
        expected(reference, "greedy"),
    )
    assert_same(
        beam_search(
            model,
            SOURCE,
            7,
            beam_width=3,
            alpha=1.1,
            coverage_penalty=0.2,
            num_hypotheses=2,
            return_token_scores=True,
            prefix=PREFIX,
            **OPTIONS,
        ),
        expected(reference, "beam_options"),
    )
    assert_same(
        generate(model, SOURCE, 7, beam_width=3, alpha=1.2, **OPTIONS),
        expected(reference, "generate_beam"),
    )
    assert_same(generate(model, SOURCE, 7, prefix=PREFIX), expected(reference, "generate_greedy"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns of nothing
        greedy_search(model, SOURCE, 7, return_attention_scores=True)


def test_max_length_defaults_to_the_source_width_plus_one(fixture_models):
    models, _ = fixture_models
    model = models["rnn"]
    result = GreedySearch(**OPTIONS)(model, SOURCE)
    assert tuple(result["tokens"].shape) == (3, SOURCE.shape[1] + 1)
    np.testing.assert_array_equal(
        np.asarray(result["tokens"]),
        np.asarray(GreedySearch(max_length=7, **OPTIONS)(model, SOURCE)["tokens"]),
    )


# -- configuration ---------------------------------------------------------------------
SEARCHES = [
    GreedySearch(max_length=9, min_length=1, suppress_tokens=[4, 5], sos_id=1, eos_id=2),
    BeamSearch(beam_width=5, alpha=1.2, coverage_penalty=0.1, num_hypotheses=3, unk_id=3),
    RandomSampling(temperature=0.7, top_k=4, top_p=0.8, seed=9, replace_unknown=True),
]


@pytest.mark.parametrize("search", SEARCHES, ids=lambda s: type(s).__name__)
def test_config_round_trips_through_keras_serialization(search):
    serialized = keras.saving.serialize_keras_object(search)
    assert serialized["registered_name"] == f"keras_attention>{type(search).__name__}"
    rebuilt = keras.saving.deserialize_keras_object(serialized)
    assert type(rebuilt) is type(search) and rebuilt.get_config() == search.get_config()
    assert type(search).from_config(search.get_config()).get_config() == search.get_config()
    # A config is plain JSON.
    import json

    assert json.loads(json.dumps(search.get_config())) == search.get_config()
    assert get_search(serialized).get_config() == search.get_config()


def test_get_search_from_names_configs_and_objects_with_overrides():
    assert type(get_search("greedy")) is GreedySearch
    assert type(get_search()) is GreedySearch
    assert type(get_search("sample", seed=1)) is RandomSampling
    assert type(get_search("BeamSearch")) is BeamSearch
    beam = get_search("beam", beam_width=6, alpha=1.0, max_length=12)
    assert (beam.beam_width, beam.alpha, beam.max_length, beam.coverage_penalty) == (6, 1.0, 12, 0)
    assert get_search(beam) is beam  # no overrides: the object itself
    wider = get_search(beam, beam_width=8)
    assert wider is not beam and (wider.beam_width, wider.alpha, wider.max_length) == (8, 1.0, 12)
    assert beam.beam_width == 6  # the original is untouched
    config = keras.saving.serialize_keras_object(beam)
    assert get_search(config, min_length=3).get_config() == {**beam.get_config(), "min_length": 3}
    plain = {"class_name": "BeamSearch", "config": {"beam_width": 2}}
    assert get_search(plain).beam_width == 2
    with pytest.raises(ValueError, match=r"`identifier` of get_search must be one of .*'beam'"):
        get_search("nucleus")
    with pytest.raises(ValueError, match=r"options of GreedySearch; received unknown .*'alpha'"):
        get_search("greedy", alpha=1.0)
    with pytest.raises(ValueError, match="`identifier` of get_search must be a name"):
        get_search(3)


def test_numpy_integers_are_accepted_and_stored_as_ints():
    search = BeamSearch(beam_width=np.int64(3), num_hypotheses=np.int32(2), max_length=np.int64(6))
    assert (search.beam_width, search.num_hypotheses, search.max_length) == (3, 2, 6)
    assert all(
        type(v) is int for v in (search.beam_width, search.num_hypotheses, search.max_length)
    )
    assert GreedySearch(suppress_tokens=np.array([4, 5])).suppress_tokens == (4, 5)


@pytest.mark.parametrize(
    "make,pattern",
    [
        (lambda: GreedySearch(max_length=0), r"`max_length` of GreedySearch must be a positive"),
        (lambda: GreedySearch(max_length=True), r"`max_length` of GreedySearch .*received max_"),
        (lambda: GreedySearch(max_length=6.0), r"`max_length` of GreedySearch .*=6.0"),
        (
            lambda: GreedySearch(max_length=6, min_length=10),
            r"`min_length` of GreedySearch must be at most max_length=6 .*min_length=10",
        ),
        (lambda: GreedySearch(min_length=-1), r"`min_length` of GreedySearch must be an integer"),
        (
            lambda: BeamSearch(no_repeat_ngram_size=1.5),
            r"`no_repeat_ngram_size` of BeamSearch must be an integer >= 0",
        ),
        (
            lambda: GreedySearch(repetition_penalty="1.2"),
            r"`repetition_penalty` of GreedySearch must be a number > 0; received "
            r"repetition_penalty='1.2'",
        ),
        (lambda: GreedySearch(suppress_tokens=5), r"`suppress_tokens` of GreedySearch must be a"),
        (lambda: GreedySearch(replace_unknown=1), r"`replace_unknown` of GreedySearch must be Tr"),
        (
            lambda: GreedySearch(return_attention_scores="yes"),
            r"`return_attention_scores` of GreedySearch must be True or False",
        ),
        (lambda: GreedySearch(unk_id=2.0), r"`unk_id` of GreedySearch must be a token id"),
        (
            lambda: BeamSearch(beam_width=0),
            r"`beam_width` of BeamSearch must be a positive integer",
        ),
        (
            lambda: BeamSearch(beam_width=1001),
            r"`beam_width` of BeamSearch must be a positive integer, at most "
            r"MAX_BEAM_WIDTH=1000 \(.*\); received beam_width=1001\.",
        ),
        (
            lambda: BeamSearch(beam_width=10**6, num_hypotheses=1),
            r"`beam_width` of BeamSearch .* at most MAX_BEAM_WIDTH=1000 .*=1000000\.",
        ),
        (
            lambda: get_search("beam", beam_width=100000),
            r"`beam_width` of BeamSearch .* at most MAX_BEAM_WIDTH=1000 .*=100000\.",
        ),
        (
            lambda: generate(None, np.ones((1, 3), "int32"), 5, beam_width=5000),
            r"`beam_width` of beam_search .* at most MAX_BEAM_WIDTH=1000 .*=5000\.",
        ),
        (lambda: BeamSearch(alpha="0.6"), r"`alpha` of BeamSearch must be a finite number >= 0"),
        (lambda: BeamSearch(alpha=float("nan")), r"`alpha` of BeamSearch .*received alpha=nan"),
        (lambda: BeamSearch(alpha=-0.1), r"`alpha` of BeamSearch must be a finite number >= 0"),
        (
            lambda: BeamSearch(coverage_penalty=-1),
            r"`coverage_penalty` of BeamSearch must be a number >= 0",
        ),
        (
            lambda: BeamSearch(beam_width=2, num_hypotheses=3),
            r"`num_hypotheses` of BeamSearch must be an integer from 1 to beam_width=2; "
            r"received num_hypotheses=3",
        ),
        (
            lambda: RandomSampling(temperature=float("inf")),
            r"`temperature` of RandomSampling must be > 0 \(a finite number\)",
        ),
        (lambda: RandomSampling(temperature=0), r"`temperature` of RandomSampling must be > 0"),
        (lambda: RandomSampling(top_k=0), r"`top_k` of RandomSampling must be a positive integer"),
        (lambda: RandomSampling(top_p=0.0), r"`top_p` of RandomSampling must be in \(0, 1\]"),
        (lambda: RandomSampling(seed=-1), r"`seed` of RandomSampling must be None, an integer"),
        (lambda: RandomSampling(beam_width=2), r"unexpected keyword argument 'beam_width'"),
    ],
)
def test_bad_options_are_refused(make, pattern):
    with pytest.raises((ValueError, TypeError), match=pattern):
        make()


def test_errors_at_call_time_name_the_search(fixture_models):
    models, _ = fixture_models
    with pytest.raises(ValueError, match=r"`max_length` of GreedySearch is None.*not known"):
        GreedySearch().decode_length(keras.KerasTensor((2, None), "int32"))
    with pytest.raises(ValueError, match=r"`min_length` of BeamSearch must be at most max_length"):
        BeamSearch(min_length=9)(models["rnn"], SOURCE[:, :3])  # L = 4
    with pytest.raises(ValueError, match=r"`prefix` of GreedySearch must have one row per source"):
        GreedySearch(max_length=5)(models["rnn"], SOURCE, prefix=PREFIX[:2])
    generator_sampling = RandomSampling(seed=keras.random.SeedGenerator(1))
    with pytest.raises(ValueError, match=r"`seed` of RandomSampling must be None or an integer"):
        generator_sampling.get_config()


# -- Seq2Seq.generate --------------------------------------------------------------------
def test_seq2seq_generate_uses_compile_or_constructor_default_or_the_given_search(
    fixture_models, tmp_path
):
    models, outputs = fixture_models
    model = models["rnn"]
    # No default: greedy search, max_length = source width + 1.
    assert model.search is None
    plain = model.generate(SOURCE)
    np.testing.assert_array_equal(
        np.asarray(plain["tokens"]), np.asarray(greedy_search(model, SOURCE, 7)["tokens"])
    )
    beam, _, _ = CASES["beam_options"]
    given = model.generate(SOURCE, search=beam, prefix=PREFIX)
    assert_same(given, expected(outputs["rnn"], "beam_options"))
    # compile's search becomes the default.
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", search=beam)
    assert model.search is beam
    assert_same(model.generate(SOURCE, prefix=PREFIX), expected(outputs["rnn"], "beam_options"))
    greedy = model.generate(SOURCE, search="greedy")  # a name for one call
    np.testing.assert_array_equal(np.asarray(greedy["tokens"]), np.asarray(plain["tokens"]))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")  # keeps it
    assert model.search is beam
    model.search = None

    # The constructor's search is saved with the model (and only then).
    config = models["transformer"].get_config()
    assert "search" not in config
    made = TransformerSeq2Seq.from_config({**config, "search": {"class_name": "BeamSearch"}})
    assert isinstance(made.search, BeamSearch) and made.search.beam_width == 4
    made.build()
    made.set_weights(models["transformer"].get_weights())
    path = str(tmp_path / "with_search.keras")
    made.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.search, BeamSearch)
    assert loaded.search.get_config() == made.search.get_config()
    assert_same(
        loaded.generate(SOURCE, search=CASES["beam"][0]), expected(outputs["transformer"], "beam")
    )
    assert isinstance(loaded.search, Search)


def test_a_compiled_model_saves_and_loads_compiled_with_its_search(fixture_models, tmp_path):
    """`Seq2Seq.compile` is overridden (for `search`): a saved compiled model
    must still come back compiled, with its optimizer's state, and warn of
    nothing (Keras skips a custom `compile` on load unless
    `compile_from_config` is ours)."""
    model = RecurrentSeq2Seq(12, 12, 8, 16, attention="additive", style="bahdanau")
    model.build()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", search="beam")
    target = np.array([[1, 4, 2, 0], [1, 5, 6, 2], [1, 3, 2, 0]], "int32")
    model.fit((SOURCE, target[:, :-1]), target[:, 1:], epochs=1, verbose=0)
    path = str(tmp_path / "compiled.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        loaded = keras.saving.load_model(path)
    assert loaded.compiled and type(loaded.optimizer).__name__ == "Adam"
    assert int(loaded.optimizer.iterations) == 1
    assert isinstance(loaded.search, BeamSearch)
    assert_same(
        loaded.generate(SOURCE), {k: np.asarray(v) for k, v in model.generate(SOURCE).items()}
    )


# -- results say which hypotheses are outputs ----------------------------------


def _tiny_transformer(seed):
    """The issue's model: vocabulary 6, hidden_dim 8, one layer, random
    weights, the output bias making padding (0) and <sos> (1) likeliest
    (never generated, so the search wanders among 2..5)."""
    keras.utils.set_random_seed(seed)
    model = TransformerSeq2Seq(
        6, 6, hidden_dim=8, num_heads=2, intermediate_dim=8, num_layers=1, max_length=8
    )
    model.build()
    model.output_projection.bias.assign(np.array([5, 5, 0, 0, 0, 0], "float32"))
    return model


SEED_SOURCE = np.array([[3, 4, 5, 2]], "int32")


@pytest.mark.tensorflow  # the seeds' weights are TensorFlow's draws
def test_seed_examples_flag_the_live_prefixes_a_beam_returns():
    """Seed 1 of the issue: without num_hypotheses the search stops once its
    best finished hypothesis beats every live one, and returns two live
    prefixes of length 2 (no <eos>) in the other slots: now flagged."""
    expected = {  # seed: (tokens, finished) of beam_search(max_length=6, beam_width=3)
        0: ([[2, 0, 0, 0, 0, 0], [4, 2, 0, 0, 0, 0], [5, 2, 0, 0, 0, 0]], [True] * 3),
        1: ([[2, 0, 0, 0, 0, 0], [3, 4, 0, 0, 0, 0], [3, 3, 0, 0, 0, 0]], [True, False, False]),
        2: ([[2, 0, 0, 0, 0, 0], [3, 2, 0, 0, 0, 0], [3, 3, 0, 0, 0, 0]], [True, True, False]),
        3: ([[2, 0, 0, 0, 0, 0], [4, 2, 0, 0, 0, 0], [3, 2, 0, 0, 0, 0]], [True] * 3),
    }
    for seed, (tokens, finished) in expected.items():
        model = _tiny_transformer(seed)
        result = beam_search(model, SEED_SOURCE, max_length=6, beam_width=3)
        np.testing.assert_array_equal(np.asarray(result["tokens"])[0], tokens, err_msg=seed)
        assert np.asarray(result["finished"])[0].tolist() == finished, seed
        # With num_hypotheses the search runs on until 3 have finished.
        full = beam_search(model, SEED_SOURCE, max_length=6, beam_width=3, num_hypotheses=3)
        assert np.asarray(full["finished"])[0].tolist() == [True] * 3, seed
        assert_finished_means_eos(full)
    full = beam_search(
        _tiny_transformer(1), SEED_SOURCE, max_length=6, beam_width=3, num_hypotheses=3
    )
    np.testing.assert_array_equal(
        np.asarray(full["tokens"])[0],
        [[2, 0, 0, 0, 0, 0], [3, 4, 4, 4, 3, 2], [3, 4, 4, 3, 3, 2]],
    )
    # Greedy says the same: seed 1 never emits <eos> in 6 tokens, seed 3 does.
    greedy = greedy_search(_tiny_transformer(1), SEED_SOURCE, 6)
    assert np.asarray(greedy["tokens"]).tolist() == [[3, 4, 4, 3, 3, 3]]
    assert np.asarray(greedy["finished"]).tolist() == [False]
    assert np.asarray(greedy_search(_tiny_transformer(3), SEED_SOURCE, 6)["finished"]).tolist() == [
        True
    ]


# seed 0 in `make test`, the others large (`make test-large`)
@pytest.mark.parametrize(
    "seed", [pytest.param(seed, marks=pytest.mark.large if seed else ()) for seed in range(4)]
)
def test_every_search_returns_finished_and_num_hypotheses_waits_for_n(seed):
    """On every backend: `finished` (bool, True exactly where `<eos>` was
    emitted) comes with greedy search, sampling, beam search and `best`;
    with num_hypotheses N every unfinished hypothesis is cut at max_length
    (a fragment shorter than that never comes back)."""
    model = _tiny_transformer(seed)
    source = np.array([[3, 4, 5, 2], [5, 5, 3, 2]], "int32")
    for search in (
        GreedySearch(max_length=6),
        RandomSampling(max_length=6, seed=seed),
        BeamSearch(beam_width=3, max_length=6),
        BeamSearch(beam_width=3, max_length=4, num_hypotheses=3),
    ):
        result = search(model, source)
        assert_finished_means_eos(result)
        best = search.best(model, source)
        assert_finished_means_eos(best)
        assert np.asarray(best["finished"]).shape == (2,)
        if getattr(search, "num_hypotheses", None):
            finished = np.asarray(result["finished"])
            lengths = np.asarray(result["lengths"])
            assert (lengths[~finished] == search.max_length).all()
    # A search cut by max_length says so.
    cut = GreedySearch(max_length=2, suppress_tokens=[2])(model, source)
    assert np.asarray(cut["finished"]).tolist() == [False, False]


class GatherEverything:
    """`model` seen through the 0.2.0 contract alone (no `reorder_beams`):
    beam search then gathers the whole state at every step."""

    def __init__(self, model):
        self.model = model
        self.sos_id, self.eos_id, self.padding_id = model.sos_id, model.eos_id, model.padding_id
        self.has_attention = model.has_attention

    def encode(self, source, max_length=None):
        return self.model.encode(source, max_length=max_length)

    def decode_step(self, tokens, state):
        return self.model.decode_step(tokens, state)

    def reorder_state(self, state, indices):
        return self.model.reorder_state(state, indices)


REORDER_MODELS = {
    "rnn-bahdanau-context": lambda: RecurrentSeq2Seq(
        12, 12, 8, 16, attention="additive", style="bahdanau", context_input=True
    ),
    "rnn-luong-general": lambda: RecurrentSeq2Seq(12, 12, 8, 16, attention="general"),
    "rnn-none": lambda: RecurrentSeq2Seq(12, 12, 8, 16, attention=None),
    "convs2s": lambda: ConvS2SSeq2Seq(12, 12, 8, max_length=10, hidden_dim=8, num_layers=2),
    "transformer": lambda: TransformerSeq2Seq(12, 12, 16, 2, 32, 2, max_length=10),
    "transformer-gqa-rope": lambda: TransformerSeq2Seq(
        12, 12, 16, 4, 32, 2, max_length=10, position="rope", num_key_value_heads=2
    ),
}
# What each family's beam search leaves as it is after the first expansion.
INVARIANT = {
    "rnn-bahdanau-context": {"memory", "memory_mask", "keys", "context", "step"},
    "rnn-luong-general": {"memory", "memory_mask", "step"},
    "rnn-none": {"memory", "memory_mask", "step"},
    "convs2s": {"encoder_keys", "encoder_values", "source_mask", "step"},
    "transformer": {"source_mask", "step"}
    | {f"layer_{i}/cross_{kv}" for i in range(2) for kv in ("key", "value")},
}
INVARIANT["transformer-gqa-rope"] = INVARIANT["transformer"]


def _leaf_paths(state):
    return {
        "/".join(str(key) for key in path[:2] if isinstance(key, str))
        for path, _ in keras.tree.flatten_with_path(state)
    }


@pytest.mark.parametrize("family", sorted(REORDER_MODELS))
def test_beam_search_reorders_only_the_step_dependent_state(family, monkeypatch):
    """Beam search gathers at each step only what differs between the beams
    of a source: the results equal, token for token and score for
    score, those of the same model gathering its whole state (the 0.2.0
    contract); the first expansion gathers everything, each step afterwards
    none of the `beam_invariant_state` entries, which stay the very tensors
    they were."""
    keras.utils.set_random_seed(1)
    model = REORDER_MODELS[family]()
    model.build()
    source = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 9, 10, 2]], "int32")
    search = BeamSearch(
        beam_width=3,
        max_length=7,
        coverage_penalty=0.2 if model.has_attention else 0.0,
        return_attention_scores=True,
        return_token_scores=True,
    )
    reference = search(GatherEverything(model), source)
    gathered = []
    reorder_state = model.reorder_state

    def spy(state, indices):
        gathered.append(_leaf_paths(state))
        return reorder_state(state, indices)

    monkeypatch.setattr(model, "reorder_state", spy)
    result = search(model, source)
    assert sorted(result) == sorted(reference)
    for name, value in reference.items():
        np.testing.assert_array_equal(np.asarray(result[name]), np.asarray(value), err_msg=name)

    everything = _leaf_paths(model.encode(source, max_length=7))
    invariant = {"/".join(path) for path in model.beam_invariant_state()}
    assert invariant == INVARIANT[family]
    assert gathered[0] == everything  # the expansion to the beams
    assert len(gathered) > 1
    for paths in gathered[1:]:  # the steps
        assert paths == {
            p for p in everything if p.split("/")[0] not in invariant and p not in invariant
        }

    state = model.encode(np.repeat(source, 3, axis=0), max_length=7)
    order = np.array([2, 2, 0, 4, 3, 3], "int32")
    reordered = model.reorder_beams(state, order)
    flat = dict(keras.tree.flatten_with_path(state))
    for path, value in keras.tree.flatten_with_path(reordered):
        name = "/".join(str(key) for key in path[:2] if isinstance(key, str))
        if name in invariant:
            assert value is flat[path], name
        else:
            np.testing.assert_array_equal(np.asarray(value), np.asarray(flat[path])[order])


def test_reorder_beams_keeps_0_2_0_behaviour_without_invariants_and_names_bad_paths():
    """A Seq2Seq that does not name invariant entries gathers everything,
    through its own `reorder_state`; one naming an entry its state lacks
    gets a ValueError naming the path."""

    class Mine(TransformerSeq2Seq):
        def reorder_state(self, state, indices):
            self.calls = getattr(self, "calls", 0) + 1
            return super().reorder_state(state, indices)

        def beam_invariant_state(self):
            return getattr(self, "paths", ())

    model = Mine(12, 12, 16, 2, 32, 1, max_length=10)
    model.build()
    state = model.encode(np.array([[1, 4, 2], [1, 5, 2]], "int32"), max_length=4)
    order = np.array([1, 0], "int32")
    reordered = model.reorder_beams(state, order)
    assert model.calls == 1
    for (path, new), (_, old) in zip(
        keras.tree.flatten_with_path(reordered), keras.tree.flatten_with_path(state)
    ):
        np.testing.assert_array_equal(np.asarray(new), np.asarray(old)[order], err_msg=str(path))
    model.paths = [("layer_0", "cross_kee")]
    with pytest.raises(ValueError, match=r"beam_invariant_state\(\)` of Mine .*'cross_kee'"):
        model.reorder_beams(state, order)


@pytest.mark.parametrize("axis", [1, 2])
@pytest.mark.parametrize("index", [0, 2, 4, 5, -1])
def test_write_at_a_single_slot_writes_there_and_nowhere_else(axis, index):
    """`masking.write_at` with a one-slot update (every decoding step of the
    searches and caches; a broadcast select) writes exactly
    slot `index` of `axis`, and nothing for an index outside the buffer, as
    for a wider update."""
    buffer = np.arange(2 * 5 * 3, dtype="float32").reshape(2, 5, 3)
    if axis == 2:
        buffer = buffer.reshape(2, 3, 5)
    shape = list(buffer.shape)
    shape[axis] = 1
    update = -np.arange(np.prod(shape), dtype="float32").reshape(shape) - 1
    expected = buffer.copy()
    if 0 <= index < buffer.shape[axis]:
        np.put_along_axis(expected, np.full(shape, index), update, axis=axis)
    got = write_at(
        keras.ops.convert_to_tensor(buffer), update, keras.ops.convert_to_tensor(index), axis
    )
    np.testing.assert_array_equal(np.asarray(got), expected)
    wider = np.concatenate([update, update - 100], axis=axis)  # the general path agrees
    general = np.asarray(write_at(buffer, wider, index, axis))
    inside = np.take(general, [index], axis=axis) if 0 <= index < buffer.shape[axis] else None
    if inside is not None:
        np.testing.assert_array_equal(inside, update)


def _tiny(**kwargs):
    """A 10-token RecurrentSeq2Seq with random weights."""
    return RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8, **kwargs)


# Meaningless values and wrong types: our message, not Python's.
BAD_OPTIONS = {
    "beam_search alpha=nan": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, alpha=float("nan")),
        r"`alpha` of beam_search must be a finite number >= 0; received alpha=nan",
    ),
    "beam_search coverage_penalty=inf": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, coverage_penalty=float("inf")),
        r"`coverage_penalty` of beam_search must be a number >= 0",
    ),
    "beam_search repetition_penalty=nan": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, repetition_penalty=float("nan")),
        r"`repetition_penalty` of beam_search must be a number > 0",
    ),
    "sample temperature=inf": (
        lambda: sample(_tiny(), np.array([[4, 2]]), 4, temperature=float("inf")),
        r"`temperature` of sample must be > 0 \(a finite number\); received temperature=inf",
    ),
    "sample top_p=nan": (
        lambda: sample(_tiny(), np.array([[4, 2]]), 4, top_p=float("nan")),
        r"`top_p` of sample must be in \(0, 1\]",
    ),
    "greedy_search min_length > max_length": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 6, min_length=10),
        r"`min_length` of greedy_search must be at most max_length=6",
    ),
    "beam_search coverage_penalty without attention": (
        lambda: beam_search(_tiny(attention=None), np.array([[4, 2]]), 4, coverage_penalty=0.2),
        r"`coverage_penalty` of beam_search needs a model with attention .* "
        r"RecurrentSeq2Seq has none",
    ),
    "alpha='0.6'": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, alpha="0.6"),
        r"`alpha` of beam_search must be a finite number >= 0; received alpha='0.6'",
    ),
    "suppress_tokens=5": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 4, suppress_tokens=5),
        r"`suppress_tokens` of greedy_search must be a list of token ids",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OPTIONS))
def test_meaningless_options_and_wrong_types_get_our_messages(case):
    call, pattern = BAD_OPTIONS[case]
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()
