"""`ShardBatches` (recipes/translation/batches.py) against the `tf.data`
pipeline (`pipeline.make_dataset`) on the same shard set: an epoch in the
split's order is the pipeline's, batch for batch; shuffled epochs hold the
pipeline's pairs. Its own rules (order, resume, draws, dropout) that need
no TensorFlow are checked on every backend in test_batches_portability.py."""

import numpy as np
import pytest
from keras_attention_recipes.translation import shards
from keras_attention_recipes.translation.batches import (
    ShardBatches,
    bucket_batch_sizes,
    bucket_boundaries,
)
from keras_attention_recipes.translation.pipeline import make_dataset
from keras_attention_recipes.translation.shards import chunk_files, read_meta

from tests.test_data_preparation import pairs_of, prepared, write_corpus

pytestmark = pytest.mark.tensorflow


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    """`(paths, tokenizers, numbers, folder)` of a tiny corpus's run, its
    shards in chunks of 50 pairs."""
    root = tmp_path_factory.mktemp("batches")
    corpus = str(root / "corpus.tsv")
    write_corpus(corpus)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shards, "CHUNK", 50)
        made = prepared(str(root / "run"), corpus)
    assert len(read_meta(made[3])["files"]) > 2
    return made


def shard_batches(folder, epochs=(0, 1, 0), shuffle=False, **options):
    boundaries = bucket_boundaries(12)
    sizes = bucket_batch_sizes(boundaries, 8, batch_tokens=40)
    files = chunk_files(folder, read_meta(folder))
    return ShardBatches(files, boundaries, sizes, epochs, seed=3, shuffle=shuffle, **options)


def test_an_epoch_in_the_split_s_order_is_the_tf_data_pipeline_s_batch_for_batch(shard_set):
    paths, tokenizers, numbers, folder = shard_set
    data, kept, _ = make_dataset(
        paths["train"], *tokenizers, 12, 8, batch_tokens=40, numbers=numbers, shards=folder
    )
    expected = list(data.as_numpy_iterator())
    batches = shard_batches(folder)
    assert len(batches.pairs) == kept and batches.num_batches == len(expected) > 10
    for index, ((source, target_in), target_out) in enumerate(expected):
        (got_source, got_in), got_out = batches[index]
        assert got_source.dtype == source.dtype == np.int32
        np.testing.assert_array_equal(got_source, source)
        np.testing.assert_array_equal(got_in, target_in)
        np.testing.assert_array_equal(got_out, target_out)


def test_a_shuffled_epoch_holds_the_pipeline_s_pairs_in_its_own_order(shard_set):
    paths, tokenizers, numbers, folder = shard_set
    data, _, _ = make_dataset(
        paths["train"], *tokenizers, 12, 8, True, 3, batch_tokens=40, numbers=numbers,
        shards=folder,
    )  # fmt: skip
    expected = pairs_of(data.as_numpy_iterator())
    batches = shard_batches(folder, epochs=(0, 2, 0), shuffle=True)
    steps = batches.steps
    epochs = [[batches[e * steps + i] for i in range(steps)] for e in range(2)]
    assert sorted(pairs_of(epochs[0])) == sorted(pairs_of(epochs[1])) == sorted(expected)
    assert pairs_of(epochs[0]) != pairs_of(epochs[1]) != expected
