"""The vocabulary shortlist (`seq2seq/shortlist.py`): the table learned
against a brute-force count, each request's columns against the priority
rule written out in Python, and searches over the shortlist against the
full searches on tiny random models of both families that have one:
greedy choices identical whenever they are listed, and beams identical,
scores included, when the pieces left out have no probability. Portable:
`keras.ops` only."""

import itertools

import keras
import numpy as np
import pytest

from keras_attention.seq2seq import (
    BeamSearch,
    ConvS2SSeq2Seq,
    Ensemble,
    GreedySearch,
    RecurrentSeq2Seq,
    Shortlist,
    TransformerSeq2Seq,
    shortlisted_search,
)
from keras_attention.seq2seq.shortlist import RESERVED, check_shortlist

V = 40
SOURCE = np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 9, 10, 2], [1, 11, 2, 0, 0, 0]], "int32")


def random_pairs(seed=0, count=60, source_vocab=V, target_vocab=V):
    rng = np.random.default_rng(seed)
    return [
        (
            rng.integers(0, source_vocab, rng.integers(1, 7)),
            rng.integers(0, target_vocab, rng.integers(1, 7)),
        )
        for _ in range(count)
    ]


def reference_table(pairs, source_vocab, target_vocab, depth):
    """Dice over sentence pairs by dictionaries, reserved ids left out."""
    pair_count, source_count, target_count = {}, [0] * source_vocab, [0] * target_vocab
    tokens = [0] * target_vocab
    for source, target in pairs:
        source = {int(i) for i in source if i >= RESERVED}
        target_list = [int(i) for i in target if i >= RESERVED]
        for t in target_list:
            tokens[t] += 1
        for s in source:
            source_count[s] += 1
        for t in set(target_list):
            target_count[t] += 1
        for s, t in itertools.product(source, set(target_list)):
            pair_count[s, t] = pair_count.get((s, t), 0) + 1
    frequency = sorted(range(target_vocab), key=lambda t: (-tokens[t], t))
    rank = {t: r for r, t in enumerate(frequency)}
    table = np.full((source_vocab, depth), -1)
    for s in range(source_vocab):
        found = [
            (2 * c / (source_count[s] + target_count[t]), t)
            for (a, t), c in pair_count.items()
            if a == s
        ]
        found.sort(key=lambda item: (-item[0], rank[item[1]]))
        table[s, : len(found[:depth])] = [t for _, t in found[:depth]]
    return table, frequency


def test_the_table_is_each_source_piece_s_best_dice_candidates():
    pairs = random_pairs()
    shortlist = Shortlist.learn(pairs, V, V + 5, size=12, depth=3)
    table, frequency = reference_table(pairs, V, V + 5, 3)
    np.testing.assert_array_equal(shortlist.candidates, table)
    np.testing.assert_array_equal(shortlist.frequency, frequency)
    # Counting in chunks gives the same table.
    from keras_attention.seq2seq import shortlist as module

    chunk, module.CHUNK = module.CHUNK, 7
    try:
        again = Shortlist.learn(pairs, V, V + 5, size=12, depth=3)
    finally:
        module.CHUNK = chunk
    np.testing.assert_array_equal(again.candidates, table)


def reference_columns(shortlist, source, prefix=None):
    """The module docstring's rule: reserved, `always` and prefix pieces,
    the frequent ones, then candidates by their best place in a source
    piece's list and by frequency, then the rest by frequency."""
    rank = {int(t): r for r, t in enumerate(shortlist.frequency)}
    fixed = set(range(RESERVED)) | set(shortlist.always)
    if prefix is not None:
        fixed |= {int(t) for t in np.ravel(prefix) if t != 0}
    frequent = {int(t) for t in shortlist.frequency[: shortlist.frequent]} - fixed
    place = {}
    for s in np.ravel(source):
        for j, t in enumerate(shortlist.candidates[s] if s != 0 else []):
            if t >= 0:
                place[int(t)] = min(place.get(int(t), j), j)
    found = set(place) - frequent - fixed
    chosen = sorted(fixed, key=rank.get) + sorted(frequent, key=rank.get)
    chosen += sorted(found, key=lambda t: (place[t], rank[t]))
    chosen += sorted(set(rank) - set(chosen), key=rank.get)
    return sorted(chosen[: shortlist.size])


@pytest.mark.parametrize("size", [6, 10, 16, 39])
def test_each_request_s_columns_follow_the_priority_rule(size):
    pairs = random_pairs(1)
    shortlist = Shortlist.learn(pairs, V, V, size=size, depth=4, always=[33])
    prefix = np.array([[0, 0], [17, 0], [0, 0]])
    for source, given in ((SOURCE, None), (SOURCE[:1], None), (SOURCE, prefix)):
        got = np.asarray(keras.ops.convert_to_numpy(shortlist.columns(source, given)))
        assert got.tolist() == reference_columns(shortlist, source, given)
        assert got[:RESERVED].tolist() == list(range(RESERVED)) and 33 in got
    # More candidates than room: the more frequent ones are kept.
    assert len(set(reference_columns(shortlist, SOURCE))) == size


def tiny(family, tie=True):
    keras.utils.set_random_seed(4)
    if family == "transformer":
        model = TransformerSeq2Seq(
            V,
            V,
            hidden_dim=16,
            num_heads=2,
            num_layers=1,
            intermediate_dim=32,
            max_length=12,
            tie_embeddings=tie,
        )
    else:
        model = ConvS2SSeq2Seq(
            V, V, embed_dim=16, hidden_dim=16, num_layers=2, max_length=12, tie_embeddings=tie
        )
    model.build()
    return model


def output_bias(model):
    owner = model.decoder if isinstance(model, ConvS2SSeq2Seq) else model
    return owner.output_bias if owner.tie_embeddings else owner.output_projection.bias


def listing(ids, size=None, frequent=None):
    """A `Shortlist` over V whose every request lists `ids` first (as its
    most frequent pieces) and then the other ids, `size` of them."""
    ids = [i for i in ids if i >= RESERVED]
    order = list(range(RESERVED)) + ids + [i for i in range(RESERVED, V) if i not in ids]
    size = size or RESERVED + len(ids)
    return Shortlist(
        np.full((V, 1), -1), order, size, frequent=size - RESERVED if frequent is None else frequent
    )


def numpy(result):
    return {key: keras.ops.convert_to_numpy(value) for key, value in result.items()}


@pytest.mark.parametrize(
    "family,tie",
    [("transformer", True), ("transformer", False), ("convs2s", True), ("convs2s", False)],
)
def test_greedy_choices_are_the_full_search_s_whenever_they_are_listed(family, tie):
    model = tiny(family, tie)
    search = GreedySearch(max_length=8, return_attention_scores=True)
    full = numpy(search(model, SOURCE))
    used = sorted(set(full["tokens"].ravel().tolist()) | {7, 19})
    got = numpy(shortlisted_search(search, model, listing(used), SOURCE))
    np.testing.assert_array_equal(got["tokens"], full["tokens"])
    np.testing.assert_allclose(got["attention"], full["attention"], atol=1e-6)
    # Normalised over fewer pieces: each log-probability is at least the full one.
    assert (got["scores"] >= full["scores"] - 1e-5).all()
    assert (got["scores"] > full["scores"] + 1e-3).any()


@pytest.mark.parametrize("family", ["transformer", "convs2s"])
def test_beams_are_the_full_search_s_when_the_pieces_left_out_have_no_probability(family):
    model = tiny(family)
    dead = list(range(20, V))
    bias = output_bias(model)
    bias.assign(np.where(np.isin(np.arange(V), dead), -1e4, keras.ops.convert_to_numpy(bias)))
    search = BeamSearch(
        beam_width=3, num_hypotheses=3, alpha=0.6, max_length=8, return_token_scores=True
    )
    full = numpy(search(model, SOURCE))
    got = numpy(shortlisted_search(search, model, listing(list(range(RESERVED, 20))), SOURCE))
    np.testing.assert_array_equal(got["tokens"], full["tokens"])
    np.testing.assert_allclose(got["scores"], full["scores"], atol=1e-5)
    np.testing.assert_allclose(got["token_scores"], full["token_scores"], atol=1e-5)
    best = numpy(
        shortlisted_search(search, model, listing(list(range(RESERVED, 20))), SOURCE, best=True)
    )
    np.testing.assert_array_equal(best["tokens"], full["tokens"][:, 0])


def test_a_forced_prefix_is_listed_and_keeps_the_reserved_ids_in_place():
    model = tiny("transformer")
    prefix = np.array([[31, 0], [32, 33], [0, 0]], "int32")
    shortlist = listing([5, 6, 7], size=10, frequent=3)  # 31-33 are neither frequent nor candidates
    search = GreedySearch(max_length=8)
    got = numpy(shortlisted_search(search, model, shortlist, SOURCE, prefix=prefix))
    assert got["tokens"][0, 0] == 31 and got["tokens"][1, :2].tolist() == [32, 33]
    reference = numpy(search(model, SOURCE, prefix=prefix))
    listed = set(keras.ops.convert_to_numpy(shortlist.columns(SOURCE, prefix)).tolist())
    if set(reference["tokens"].ravel().tolist()) <= listed:
        np.testing.assert_array_equal(got["tokens"], reference["tokens"])
    # As many prefix pieces as the list has room for: the reserved ids stay first.
    crowded = np.array([[30, 31], [32, 33], [0, 0]], "int32")
    small = Shortlist.learn(random_pairs(3), V, V, size=8, depth=2, frequent=0)
    columns = keras.ops.convert_to_numpy(small.columns(SOURCE, crowded)).tolist()
    assert columns == [0, 1, 2, 3, 30, 31, 32, 33]
    with pytest.raises(
        ValueError, match=r"`prefix` of shortlisted_search must hold token ids in \[0, 40\)"
    ):
        shortlisted_search(search, model, shortlist, SOURCE, prefix=np.full((3, 1), 45, "int32"))


def test_suppress_tokens_and_input_quantizing_int8_are_refused():
    """The full search bans suppressed tokens after its log-softmax over the
    vocabulary, which a list cannot repeat; Keras's int8 Dense that also
    quantizes its inputs has no float kernel to gather columns from."""
    model = tiny("transformer")
    with pytest.raises(ValueError, match="must have no suppress_tokens"):
        shortlisted_search(GreedySearch(suppress_tokens=[9]), model, listing([5]), SOURCE)
    with pytest.raises(ValueError, match="needs a search without suppress_tokens"):
        check_shortlist(
            listing([5]), model, "Translator.shortlisted", BeamSearch(suppress_tokens=[9])
        )
    untied = tiny("transformer", tie=False)
    untied.output_projection.quantize("int8", config=keras.quantizers.Int8QuantizationConfig())
    with pytest.raises(ValueError, match="cannot project onto columns"):
        shortlisted_search(GreedySearch(max_length=4), untied, listing([5]), SOURCE)


def test_an_int8_model_decodes_over_its_shortlist_as_over_its_whole_vocabulary():
    from keras_attention.quantization import quantize_layers

    for tie in (True, False):
        model = tiny("transformer", tie)
        quantize_layers(model)
        search = GreedySearch(max_length=8)
        full = numpy(search(model, SOURCE))
        got = numpy(
            shortlisted_search(search, model, listing(sorted(set(full["tokens"].ravel()))), SOURCE)
        )
        np.testing.assert_array_equal(got["tokens"], full["tokens"])


def test_save_load_and_the_vocabulary_map(tmp_path):
    shortlist = Shortlist.learn(random_pairs(2), V, V, size=12, depth=2, always=[30])
    shortlist.save(tmp_path / "table.npz")
    loaded = Shortlist.load(tmp_path / "table.npz")
    assert (
        loaded.get_config() == shortlist.get_config() == {"size": 12, "frequent": 3, "always": [30]}
    )
    np.testing.assert_array_equal(loaded.candidates, shortlist.candidates)
    assert Shortlist.load(tmp_path / "table.npz", size=20).size == 20
    pieces = [f"p{i}" for i in range(V)]
    lines = shortlist.vocabulary_map(pieces, pieces)
    frequent = [f"p{i}" for i in shortlist.frequency[:3] if i >= RESERVED] + ["p30"]
    assert lines[0] == "\t" + " ".join(frequent)
    for line in lines[1:]:
        source, targets = line.split("\t")
        row = shortlist.candidates[int(source[1:])]
        assert targets.split(" ") == [f"p{i}" for i in row if i >= RESERVED]


@pytest.mark.parametrize(
    "arguments,message",
    [
        (dict(size=4), "`size` of Shortlist must be an integer >= 5"),
        (dict(size=V + 1), "at most the target vocabulary's 40 pieces"),
        (dict(size=True), "`size` of Shortlist must be an integer"),
        (dict(size=8, frequent=6), "`frequent` of Shortlist must leave room"),
        (dict(size=8, always=[V]), "`always` of Shortlist must be target ids"),
    ],
)
def test_bad_shortlists_are_refused_naming_the_argument(arguments, message):
    with pytest.raises(ValueError, match=message):
        Shortlist(np.full((V, 1), -1), np.arange(V), **arguments)


def test_bad_tables_and_models_are_refused():
    with pytest.raises(ValueError, match="`candidates` of Shortlist must be target ids"):
        Shortlist(np.full((V, 1), V), np.arange(V), 8)
    with pytest.raises(ValueError, match="`frequency` every target id once"):
        Shortlist(np.full((V, 1), -1), np.zeros(V), 8)
    with pytest.raises(
        ValueError, match=r"`pairs` of Shortlist.learn must hold target ids in \[0, 40\)"
    ):
        Shortlist.learn([([5], [40])], V, V, 8)
    shortlist = listing([5])
    rnn = RecurrentSeq2Seq(V, V, embed_dim=4, hidden_dim=8)
    with pytest.raises(
        ValueError, match="needs a model that decodes over a shortlist.*RecurrentSeq2Seq"
    ):
        check_shortlist(shortlist, rnn, "Translator.shortlisted")
    with pytest.raises(
        ValueError, match="`model` of shortlisted_search must decode over a shortlist.*Ensemble"
    ):
        shortlisted_search(
            GreedySearch(max_length=4), Ensemble([tiny("transformer")] * 2), shortlist, SOURCE
        )
    other = Shortlist(np.full((V + 1, 1), -1), np.arange(V), 8)
    with pytest.raises(ValueError, match="learned for the model's vocabularies"):
        check_shortlist(other, tiny("transformer"), "SavedModelExporter")
    with pytest.raises(ValueError, match="must be a keras_attention.seq2seq.Shortlist or None"):
        check_shortlist({"size": 8}, tiny("transformer"), "SavedModelExporter")
