"""`ShardBatches` (recipes/translation/batches.py) on every backend, without
TensorFlow: the batches of a shard set written by `shards.write_shards`
from an encoder written out here, against values worked out by hand and
against `epoch_batches`' rule; `fit` reads them on the backend in use.
test_batches.py compares them with the `tf.data` pipeline."""

import os

import keras
import numpy as np
import pytest
from keras_attention_recipes.translation import batches as batches_module
from keras_attention_recipes.translation import shards
from keras_attention_recipes.translation.batches import (
    ShardBatches,
    bucket_batch_sizes,
    bucket_boundaries,
    epoch_batches,
    shard_datasets,
)
from keras_attention_recipes.translation.shards import (
    chunk_files,
    read_chunk,
    read_meta,
    write_shards,
)

from keras_attention.tokenizers.characters import END, START, UNK
from keras_attention.tokenizers.number_rules import PLACEHOLDER, NumberRules, protect_pair

MAX_LENGTH = 12


def encode(lines):
    """`source<TAB>target` lines of numbers: a side's pieces are its numbers
    (each at least 4), `[START]`/`[END]` around them, padded to
    `max_length` (+1 for the target); a pair fits when both sides do."""
    sides = [[[int(n) for n in part.split()] for part in line.split(b"\t")] for line in lines]
    arrays, fits = [], np.ones(len(lines), bool)
    for column, width in ((0, MAX_LENGTH), (1, MAX_LENGTH + 1)):
        ids = np.zeros((len(lines), width), np.int32)
        for row, pair in enumerate(sides):
            pieces = [START, *pair[column], END]
            fits[row] &= len(pieces) <= width
            ids[row, : min(width, len(pieces))] = pieces[:width]
        arrays.append(ids)
    return arrays[0], arrays[1], fits


def write_split(path, pairs):
    with open(path, "w") as handle:
        for source, target in pairs:
            handle.write(" ".join(map(str, source)) + "\t" + " ".join(map(str, target)) + "\n")


def made_pairs(count, seed=0, longest=11):
    """`count` pairs of random lengths (1 to `longest` pieces a side) whose
    pieces number them: pair i's source starts with 100 + i."""
    rng = np.random.default_rng(seed)
    return [
        (
            [100 + i, *rng.integers(4, 50, rng.integers(0, longest))],
            [*rng.integers(4, 50, rng.integers(1, longest + 1))],
        )
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    """`(folder, pairs that fit)`: a shard set of 300 pairs, some too long,
    in chunks of 64."""
    root = tmp_path_factory.mktemp("shards")
    pairs = made_pairs(300, longest=13)
    write_split(str(root / "train.tsv"), pairs)
    folder = str(root / "shards")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shards, "CHUNK", 64)
        write_shards(folder, str(root / "train.tsv"), encode, MAX_LENGTH, log=lambda line: None)
    fits = [p for p in pairs if len(p[0]) + 2 <= MAX_LENGTH and len(p[1]) + 2 <= MAX_LENGTH + 1]
    return folder, fits


def batches_of(folder, epochs=(0, 1, 0), shuffle=True, **options):
    boundaries = bucket_boundaries(MAX_LENGTH)
    sizes = bucket_batch_sizes(boundaries, 8, batch_tokens=40)
    return ShardBatches(
        chunk_files(folder, read_meta(folder)),
        boundaries,
        sizes,
        epochs,
        seed=3,
        shuffle=shuffle,
        **options,
    )


def rows_of(batch):
    """Each pair of a `((source, target_in), target_out)` batch as
    `(source pieces, target pieces)` tuples, `[START]`/`[END]` and padding
    left out, and the rows of padding alone (`full`, `replicas`) too."""
    (source, _), target_out = batch
    return [
        (tuple(int(i) for i in s[(s > END)]), tuple(int(i) for i in t[(t > END)]))
        for s, t in zip(source, target_out)
        if t.any()
    ]


def test_the_shard_set_holds_each_pair_that_fits_in_order(shard_set):
    folder, fits = shard_set
    meta = read_meta(folder)
    assert meta["pairs"] == len(fits) < meta["lines"] == 300
    files = chunk_files(folder, meta)
    assert [os.path.basename(path) for path in files] == [
        f"chunk-{i:05d}.npy" for i in range(-(-len(fits) // 64))
    ]
    first = np.load(files[0])
    assert first.dtype == np.int32 and first[0] == 64
    s, t = fits[0]
    assert first[1] == len(s) + 2 and first[65] == len(t) + 2
    assert first[129 : 129 + len(s) + 2].tolist() == [START, *s, END]
    found = []
    for path in files:
        sources, targets = read_chunk(path)
        found += [(source.tolist(), target.tolist()) for source, target in zip(sources, targets)]
    assert found == [([START, *s, END], [START, *t, END]) for s, t in fits]
    longer = [max(len(s), len(t)) + 2 for s, t in fits]
    assert meta["lengths"] == np.bincount(longer, minlength=MAX_LENGTH + 2).tolist()


def test_the_epoch_rule_is_tf_data_s_bucketing_worked_by_hand():
    # Buckets of 2 and 3 pairs; pairs 0-6 in buckets 0 1 0 1 1 0 0.
    buckets = np.array([0, 1, 0, 1, 1, 0, 0])
    planned = epoch_batches(np.arange(7), buckets, [2, 3])
    assert [b.tolist() for b in planned] == [[0, 2], [1, 3, 4], [5, 6]]
    planned = epoch_batches([6, 5, 4, 3, 2, 1, 0], buckets, [3, 3])
    assert [b.tolist() for b in planned] == [[6, 5, 2], [4, 3, 1], [0]]
    planned = epoch_batches(np.arange(7), buckets, [3, 2])  # the remainders by bucket
    assert [b.tolist() for b in planned] == [[1, 3], [0, 2, 5], [6], [4]]


def test_an_epoch_in_the_set_s_order_pads_each_batch_to_its_bucket(shard_set):
    folder, fits = shard_set
    batches = batches_of(folder, shuffle=False)
    boundaries = bucket_boundaries(MAX_LENGTH)
    sizes = bucket_batch_sizes(boundaries, 8, batch_tokens=40)
    seen = []
    for index in range(batches.num_batches):
        batch = batches[index]
        (source, target_in), target_out = batch
        width = source.shape[1]
        assert target_in.shape[1] == target_out.shape[1] == width - 1
        bucket = boundaries.index(width + 1)
        longest = max(max(len(s), len(t)) + 2 for s, t in rows_of(batch))
        assert (boundaries[bucket - 1] if bucket else 0) <= longest < boundaries[bucket]
        assert len(source) <= sizes[bucket]
        np.testing.assert_array_equal(target_in[:, 1:], target_out[:, :-1])
        seen += rows_of(batch)
    assert sorted(seen) == sorted((tuple(s), tuple(t)) for s, t in fits)
    assert seen != [(tuple(s), tuple(t)) for s, t in fits]  # batched by length, not in order


def test_each_epoch_s_order_is_a_function_of_the_seed_and_the_epoch(shard_set):
    folder, fits = shard_set
    whole = batches_of(folder, epochs=(0, 3, 0))
    steps = whole.steps
    everything = [rows_of(whole[i]) for i in range(whole.num_batches)]
    epochs = [sum(everything[e * steps : (e + 1) * steps], []) for e in range(3)]
    assert all(sorted(epoch) == sorted(epochs[0]) for epoch in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    # A run resumed 5 batches into epoch 1, in another process: the same batches.
    resumed = batches_of(folder, epochs=(1, 3, 5))
    assert resumed.num_batches == whole.num_batches - steps - 5
    assert [rows_of(resumed[i]) for i in range(resumed.num_batches)] == everything[steps + 5 :]
    files = chunk_files(folder, read_meta(folder))
    other_seed = ShardBatches(files, whole.boundaries, whole.sizes, (0, 1, 0), seed=4)
    assert sum((rows_of(other_seed[i]) for i in range(steps)), []) != epochs[0]


def test_word_dropout_replaces_input_pieces_by_unk_alone(shard_set):
    folder, _ = shard_set
    plain, dropped = batches_of(folder), batches_of(folder, word_dropout=0.5)
    changed = total = 0
    for index in range(plain.num_batches):
        ((source, target_in), target_out) = plain[index]
        ((noisy_source, noisy_in), noisy_out) = dropped[index]
        np.testing.assert_array_equal(noisy_out, target_out)
        for clean, noisy in ((source, noisy_source), (target_in, noisy_in)):
            assert np.all((noisy == clean) | (noisy == UNK))
            assert np.all(noisy[clean <= UNK] == clean[clean <= UNK])  # reserved ids stay
            changed += int((noisy != clean).sum())
            total += int((clean > UNK).sum())
    assert 0.45 < changed / total < 0.55
    again = batches_of(folder, word_dropout=0.5)
    np.testing.assert_array_equal(again[3][0][0], dropped[3][0][0])


def test_each_epoch_draws_other_extra_pairs_and_keeps_its_length(shard_set, tmp_path):
    folder, fits = shard_set
    extra_pairs = [([7, 7, 4 + i], [8, 4 + i]) for i in range(60)]
    write_split(str(tmp_path / "extra.tsv"), extra_pairs)
    extra = str(tmp_path / "extra")
    write_shards(extra, str(tmp_path / "extra.tsv"), encode, MAX_LENGTH, log=lambda line: None)
    plain = batches_of(folder, epochs=(0, 2, 0))
    drawing = batches_of(folder, epochs=(0, 2, 0), extra=(chunk_files(extra, read_meta(extra)), 20))
    # The 20 draws, all in the first bucket (5 pairs a batch): 4 batches more.
    assert drawing.steps == plain.steps + 4
    own = sorted((tuple(s), tuple(t)) for s, t in fits)
    drawn = []
    for epoch in range(2):
        rows = sum((rows_of(drawing[epoch * drawing.steps + i]) for i in range(drawing.steps)), [])
        extras = [row for row in rows if row[0][:2] == (7, 7)]
        assert len(extras) == len(set(extras)) == 20
        assert sorted(row for row in rows if row[0][:2] != (7, 7)) == own
        drawn.append(set(extras))
    assert drawn[0] != drawn[1]


def test_fit_reads_the_batches_on_this_backend(shard_set):
    folder, _ = shard_set
    batches = batches_of(folder, epochs=(0, 2, 0))
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(512, 4)(target)
    context = keras.ops.mean(keras.layers.Embedding(512, 4)(source), axis=1, keepdims=True)
    logits = keras.layers.Dense(64)(embedded + context)
    model = keras.Model([source, target], logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(batches, epochs=2, steps_per_epoch=batches.steps, shuffle=False, verbose=0)
    assert len(history.history["loss"]) == 2
    assert history.history["loss"][1] < history.history["loss"][0]
    assert os.path.basename(folder) == "shards"


def test_a_run_s_datasets_without_tensorflow(tmp_path):
    """`shard_datasets` with SentencePiece models learned and read without
    TensorFlow: each split's pairs that fit, numbers protected, as the
    Python encoder gives them; a resumed epoch's stream; a dictionary."""
    pytest.importorskip("sentencepiece")
    from keras_attention.tokenizers.pieces import (
        SentencePieceEncoder,
        sentencepiece_pieces,
        train_sentencepiece,
    )

    rng = np.random.default_rng(0)
    words = "haus baum katze hund maus wald feld berg see fluss stadt dorf weg tag".split()
    lines = []
    for index in range(400):
        picked = " ".join(rng.choice(words, rng.integers(2, 14)))
        number = f" {index}" if index % 5 == 0 else ""
        lines.append(f"{picked}{number}\t{picked.upper()}{number}")
    paths = {}
    entries = [f"{word}\t{word.upper()}" for word in words]  # 14, none a training pair
    for split, part in (("train", lines[:300]), ("valid", lines[300:]), ("dictionary", entries)):
        paths[split] = str(tmp_path / f"{split}.tsv")
        with open(paths[split], "w", encoding="utf-8") as handle:
            handle.write("\n".join(part) + "\n")
    models = []
    for column, side in enumerate(("source", "target")):
        models.append(str(tmp_path / f"{side}.spm"))
        texts = [line.split("\t")[column] for line in lines[:300]]
        train_sentencepiece(texts, models[-1], vocab_size=330)
    encoders = [SentencePieceEncoder(model) for model in models]
    logs = []
    streams, valid = shard_datasets(
        paths, *encoders, 12, 8, 3, logs.append, batch_tokens=40, numbers=NumberRules(True),
        dictionary=0.04, epochs=(1, 3, 2),
    )  # fmt: skip
    assert [line.split(":")[0] for line in logs if not line.startswith("shards")] == [
        "train",
        "valid",
    ]

    def fitting(part):  # an independent reference: the encoders on the protected texts
        found = []
        for line in part:
            source, target = protect_pair(*line.split("\t"))
            s, s_cut = encoders[0].encode([source], 12)
            t, t_cut = encoders[1].encode([target], 13)
            if not (s_cut[0] or t_cut[0]):
                found.append((tuple(s[0][s[0] > END]), tuple(t[0][t[0] > END])))
        return sorted(found)

    valid_rows = sum((rows_of(valid[i]) for i in range(valid.num_batches)), [])
    assert sorted(valid_rows) == fitting(lines[300:]) and len(valid_rows) > 50
    # training batches `full`: a bucket's share one shape, its size in rows (40 pieces'
    # worth); the validation batches hold their pairs alone (Keras weighs each by its rows)
    boundaries = bucket_boundaries(12)
    sizes = bucket_batch_sizes(boundaries, 8, 40)
    shapes = set()
    for stream in streams:
        shapes |= {stream.dataset[i][0][0].shape for i in range(stream.dataset.num_batches)}
    assert all(rows == sizes[boundaries.index(width + 1)] for rows, width in shapes), shapes
    assert all(valid[i][1].any(axis=1).all() for i in range(valid.num_batches))
    with open(models[0], "rb") as handle:
        pieces = [piece for piece, _ in sentencepiece_pieces(handle.read())]
    protected = pieces.index(PLACEHOLDER)
    assert any(protected in row[0] for row in valid_rows)  # numbers protected
    partial, rest = streams
    assert (partial.first, partial.last, rest.first, rest.last) == (1, 2, 2, 3)
    assert partial.steps == rest.steps - 2
    own, extra = fitting(lines[:300]), set(fitting(entries))
    draws = round(0.04 * len(own))
    assert 0 < draws <= len(extra) == len(entries)
    for stream in streams:
        rows = sum((rows_of(stream.dataset[i]) for i in range(stream.dataset.num_batches)), [])
        drawn = [row for row in rows if row in extra]
        if stream is rest:  # a whole epoch: every pair once, and `draws` entries
            assert sorted(row for row in rows if row not in extra) == own
            assert len(drawn) == len(set(drawn)) == draws
        else:  # the resumed epoch: its plan's batches after the first 2
            plan = [batch.tolist() for batch in rest.dataset.batches(1)]
            assert [batch.tolist() for batch in stream.dataset.batches(1)] == plan
            assert stream.dataset.num_batches == len(plan) - 2


def test_an_epoch_with_draws_from_another_set_reads_each_chunk_once(shard_set, monkeypatch):
    """Draws from another set (the dictionary's) come from anywhere in it,
    mixed among the epoch's pairs: every chunk read is kept (within
    `HELD_BYTES`), so an epoch reads each file once, where a cache of a
    few chunks re-read them batch after batch; with a budget of one
    chunk's bytes, the same batches, the files read again and again."""
    folder, _ = shard_set
    files = chunk_files(folder, read_meta(folder))
    loaded = []
    load = np.load
    monkeypatch.setattr(
        np,
        "load",
        lambda path, *a, **k: (loaded.append(path) if not k else None, load(path, *a, **k))[1],
    )
    made = batches_of(folder, extra=(files, 150))
    epoch = [made[i] for i in range(made.num_batches)]
    assert sorted(loaded) == sorted(files * 2)  # each file once, for each of the two sets
    monkeypatch.setattr(batches_module, "HELD_BYTES", 1)
    loaded.clear()
    tight = batches_of(folder, extra=(files, 150))
    again = [tight[i] for i in range(tight.num_batches)]
    assert len(loaded) > 4 * len(files) and len(again) == len(epoch)
    for ours, theirs in zip(epoch, again):
        for mine, other in zip((*ours[0], ours[1]), (*theirs[0], theirs[1])):
            np.testing.assert_array_equal(mine, other)
