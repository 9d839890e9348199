"""The `tf.data` pipelines of a run's split files, tokenised in the graph:
`((source, target_in), target_out)` batches bucketed by length (`make_dataset`),
and the training and validation datasets of a run (`datasets`).

TensorFlow and NumPy are imported when a pipeline is made, not with the
module: the command line is parsed before they load.

The pipeline's functions are TensorFlow ops with Python-level `if`s only,
each wrapped in `do_not_convert`: tf.data would run AutoGraph over each (and
everything they call, the tokenizers' and NumberProtection's methods
included) for nothing: about 1.5 s of a recipe process's start, in every
process.
"""

import itertools
import os

from .config import UsageError
from .shards import read_meta, shard_key, shard_pairs, write_shards


def bucket_boundaries(max_length, width=4):
    """Length buckets of `make_dataset`: `[8, 12, ...]` (every `width`
    pieces) up to the longest example, `max_length + 1` target pieces.
    A bucket holds the lengths below its boundary and is padded to one less."""
    return sorted({*range(8, max_length + 2, width), max_length + 2})


def bucket_batch_sizes(boundaries, batch_size, batch_tokens=None):
    """Examples per batch in each bucket: `batch_size` everywhere, or, with
    `batch_tokens`, as many as fit that many padded pieces per side."""
    if batch_tokens is None:
        return [batch_size] * (len(boundaries) + 1)
    return [max(1, batch_tokens // (b - 1)) for b in boundaries] + [1]


def make_dataset(
    path,
    source_tokenizer,
    target_tokenizer,
    max_length,
    batch_size,
    shuffle=False,
    seed=0,
    batch_tokens=None,
    extra_path=None,
    extra_ratio=0.0,
    numbers=None,
    word_dropout=0.0,
    subword_sampling=0.0,
    shards=None,
):
    """`((source, target_in), target_out)` batches from a split file,
    tokenised in the graph: `target_in = [START] y`, `target_out = y [END]`.
    A pair longer than `max_length` pieces (either side) is left out.

    Batches are bucketed by length (`bucket_boundaries`) and padded only to
    their bucket's longest length, so the CPU is spent on tokens rather than
    padding; `batch_tokens` sizes each bucket's batches to about that many
    pieces per side (long sentences in small batches), otherwise every batch
    holds `batch_size` pairs.

    `extra_path` (with `shuffle`, for training): each epoch also draws
    `extra_ratio` x (the pairs of `path`) pairs at random from this file,
    e.g. the Ding dictionary's entries; a new draw every epoch.

    `numbers` (a `serving.NumberProtection`): the digit groups of each
    pair whose two sides hold the same numbers are replaced by the
    placeholder (`NumberProtection.protect_pairs`), as the translator
    replaces a source's before its model.

    `word_dropout` (for training): each piece of `source` and of
    `target_in` is replaced by `[UNK]` with this probability, a new draw
    for every batch (Gal and Ghahramani's word dropout, which Sennrich and
    Zhang found worth several BLEU on small data); `[PAD]`, `[START]` and
    `[END]` stay, and `target_out`, what the loss scores, is never changed.

    `subword_sampling` a > 0 (for training, SentencePiece tokenizers):
    each epoch segments every sentence anew, drawing a segmentation with
    probability proportional to P(segmentation)^a (Kudo's subword
    regularization; `SentencePieceTokenizer.pieces`). A pair whose drawn
    segmentation does not fit `max_length` sits that epoch out; `kept`
    counts the pairs whose best segmentation fits.

    `shards` (a folder of `shards.write_shards`, `path`'s pairs tokenised
    as here): the pairs are read from it instead of tokenising `path`, and
    counted from its `meta.json`; the same batches. Not with
    `subword_sampling`, which segments the text anew each epoch, nor with
    `extra_path`'s draws, which are text: those read `path`.

    Returns `(dataset, kept, total)`: the pairs of `path` that fit, counted
    first, and all of them. The dataset knows its length in batches (Keras
    then knows an epoch's length): exact without `extra_path`; with it, the
    expected number, each epoch cut or topped up to that number."""
    import tensorflow as tf

    encode = _encoder(source_tokenizer, target_tokenizer, max_length, numbers)
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    if shards is not None and reads_shards(extra_path, extra_ratio, subword_sampling):
        kept, total, per_bucket, pairs = _from_shards(shards, boundaries, sizes, shuffle, seed)
        batches = _expected_batches(per_bucket, sizes)
        pairs = _bucket(pairs, boundaries, sizes)
        return _batches(pairs, batches, shuffle, word_dropout, seed), kept, total
    found, total = _lengths(encode, path)
    per_bucket = _bucket_counts(found, boundaries, sizes)
    lines = tf.data.TextLineDataset(path)
    if shuffle:
        lines = lines.shuffle(50_000, seed=seed, reshuffle_each_iteration=True)
    if extra_path is not None and extra_ratio > 0:
        draws = int(round(extra_ratio * len(found)))
        per_bucket = per_bucket + draws * _bucket_shares(encode, extra_path, boundaries, sizes)
        lines = _with_draws(lines, extra_path, draws, len(found), seed)
    batches = _expected_batches(per_bucket, sizes)
    pairs = _bucketed(lines, encode, boundaries, sizes, subword_sampling)
    return _batches(pairs, batches, shuffle, word_dropout, seed), len(found), total


def _batches(pairs, batches, shuffle, word_dropout, seed):
    """`make_dataset`'s batches of the bucketed `pairs`: `batches` of them
    an epoch (with `shuffle`, repeated and cut to that), shifted, with word
    dropout, prefetched."""
    import tensorflow as tf

    if shuffle:  # an epoch of exactly `batches` batches, whatever the draw
        pairs = pairs.repeat().take(batches)
    batched = _shifted(pairs.apply(tf.data.experimental.assert_cardinality(batches)))
    if word_dropout > 0:
        batched = _with_word_dropout(batched, word_dropout, seed)
    return _untuned(batched)


def reads_shards(extra_path, extra_ratio, subword_sampling):
    """Whether `make_dataset` reads a training split's shards: not with
    `subword_sampling` nor with `extra_path`'s draws (both need text)."""
    return not subword_sampling and not (extra_path is not None and extra_ratio > 0)


def training_shards(path, source_tokenizer, target_tokenizer, max_length, numbers, log=print):
    """The shard set of the training split `path` (`shards.write_shards`,
    beside it, named by `shards.shard_key`), written when missing; returns
    its folder."""
    tokenizers = (source_tokenizer, target_tokenizer)
    key = shard_key(path, tokenizers, max_length, numbers)
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), f"shards-{key}")
    encode = _encoder(source_tokenizer, target_tokenizer, max_length, numbers)
    write_shards(folder, path, encode, max_length, log=log)
    return folder


def _from_shards(folder, boundaries, sizes, shuffle, seed):
    """`(kept, total, pairs per bucket, unpadded pairs)` of a shard set."""
    import numpy as np

    meta = read_meta(folder)
    if meta is None:
        raise UsageError(f"{folder} is not a complete shard set: train again to write it")
    counts = np.asarray(meta["lengths"])
    buckets = np.searchsorted(boundaries, np.arange(len(counts)), side="right")
    per_bucket = np.bincount(buckets, weights=counts, minlength=len(sizes)).astype(np.int64)
    return meta["pairs"], meta["lines"], per_bucket, shard_pairs(folder, meta, shuffle, seed)


def _encoder(source_tokenizer, target_tokenizer, max_length, numbers):
    """`encode(lines, sampling=0.0)`: a batch of `source<TAB>target` lines
    -> `(source ids, target ids, fits)`, numbers protected first (`numbers`,
    when given), `fits` False where either side was cut (the source at
    `max_length` pieces, the target at `max_length + 1`)."""
    import tensorflow as tf

    def encode(lines, sampling=0.0):
        parts = tf.strings.split(lines, "\t", maxsplit=1).to_tensor("", shape=[None, 2])
        sources, targets = parts[:, 0], parts[:, 1]
        if numbers is not None:
            sources, targets = numbers.protect_pairs(sources, targets)
        source, source_cut = source_tokenizer.encode(sources, max_length, sampling)
        target, target_cut = target_tokenizer.encode(targets, max_length + 1, sampling)
        return source, target, tf.logical_not(tf.logical_or(source_cut, target_cut))

    return encode


def _lengths(encode, path, limit=None):
    """The bucketing lengths of the pairs among the first `limit` lines
    of `path` that fit (`encode`'s `fits`), and how many lines. Eager, 1024
    lines a call (the file streamed): a `tf.data` map here traced `encode`
    first, most of the count's time for a small file, for the same numbers.
    Lines are TextLineDataset's: split on `\\n`, every `\\r` dropped."""
    import numpy as np
    import tensorflow as tf

    found, count = [], 0
    with open(path, "rb") as handle:
        lines = itertools.islice(handle, limit)
        while chunk := [
            line.rstrip(b"\n").replace(b"\r", b"") for line in itertools.islice(lines, 1024)
        ]:
            source, target, keep = (np.asarray(part) for part in encode(tf.constant(chunk)))
            found.append(np.maximum((source > 0).sum(1), (target > 0).sum(1))[keep])
            count += len(chunk)
    return (np.concatenate(found) if found else np.zeros(0, int)), count


def _bucket_counts(lengths, boundaries, sizes):
    """How many of `lengths` fall in each bucket."""
    import numpy as np

    return np.bincount(np.searchsorted(boundaries, lengths, side="right"), minlength=len(sizes))


def _bucket_shares(encode, path, boundaries, sizes):
    """The share of each bucket among the pairs of `path`, estimated from
    its first 20,000 lines (zeros for an empty file)."""
    import numpy as np

    sample, sample_lines = _lengths(encode, path, 20_000)
    if not sample_lines:
        return np.zeros(len(sizes))
    return _bucket_counts(sample, boundaries, sizes) / sample_lines


def _expected_batches(per_bucket, sizes):
    """The batches of an epoch of `per_bucket` pairs in each bucket."""
    import numpy as np

    return int(sum(np.ceil(n / size) for n, size in zip(per_bucket, sizes) if n > 0))


def _with_draws(lines, extra_path, draws, kept, seed):
    """`lines` (`kept` pairs) and `draws` lines drawn at random from
    `extra_path`, a new draw every epoch, mixed at random."""
    import tensorflow as tf

    extra = (
        tf.data.TextLineDataset(extra_path)
        .shuffle(1_000_000, seed=seed + 1, reshuffle_each_iteration=True)
        .take(draws)
    )
    return tf.data.Dataset.sample_from_datasets(
        [lines, extra], weights=[kept / (kept + draws), draws / (kept + draws)], seed=seed
    )


def _bucketed(lines, encode, boundaries, sizes, subword_sampling):
    """`(source, target)` batches of the `lines` that fit, each bucket's
    padded to its boundary less one, `sizes[i]` pairs to a batch of bucket i."""
    import tensorflow as tf

    graph_only = tf.autograph.experimental.do_not_convert

    @graph_only
    def fitting(lines):
        source, target, keep = encode(lines, subword_sampling)
        return tf.boolean_mask(source, keep), tf.boolean_mask(target, keep)

    @graph_only
    def unpadded(source, target):  # bucketing pads again, less
        return (
            source[: tf.math.count_nonzero(source, dtype=tf.int32)],
            target[: tf.math.count_nonzero(target, dtype=tf.int32)],
        )

    pairs = lines.batch(1024).map(fitting, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    return _bucket(pairs.map(unpadded, num_parallel_calls=tf.data.AUTOTUNE), boundaries, sizes)


def _bucket(pairs, boundaries, sizes):
    """Unpadded `(source, target)` pairs in batches by length: bucket i's
    `sizes[i]` pairs to a batch, padded to its boundary less one."""
    import tensorflow as tf

    graph_only = tf.autograph.experimental.do_not_convert
    return pairs.bucket_by_sequence_length(
        graph_only(lambda source, target: tf.maximum(tf.size(source), tf.size(target))),
        boundaries,
        sizes,
        pad_to_bucket_boundary=True,
    )


def _shifted(pairs):
    """`(source, target)` batches -> `((source, target_in), target_out)`:
    the target without its last piece, and without its first."""
    import tensorflow as tf

    return pairs.map(
        tf.autograph.experimental.do_not_convert(
            lambda source, target: ((source, target[:, :-1]), target[:, 1:])
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _with_word_dropout(batched, word_dropout, seed):
    """`batched` with each piece of `source` and `target_in` replaced by
    `[UNK]` with probability `word_dropout`; `[PAD]`, `[START]` and `[END]`
    stay, and `target_out` is never changed."""
    import tensorflow as tf

    from keras_attention.tokenizers import UNK

    def dropped(ids, seed):
        kept = tf.random.stateless_uniform(tf.shape(ids), seed) >= word_dropout
        return tf.where(kept | (ids <= UNK), ids, tf.cast(UNK, ids.dtype))

    # Stateless draws seeded from a stream of `seed`: the same noise
    # for the same batches, whatever the parallelism.
    seeds = tf.data.Dataset.random(seed=seed + 2).batch(4, drop_remainder=True)
    return tf.data.Dataset.zip(batched, seeds).map(
        tf.autograph.experimental.do_not_convert(
            lambda batch, s: (
                (dropped(batch[0][0], s[:2]), dropped(batch[0][1], s[2:])),
                batch[1],
            )
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def _untuned(batched):
    """`batched`, prefetched, sharded by element, without autotuning."""
    import tensorflow as tf

    options = tf.data.Options()
    # One file per split: several workers shard it by element, not by file.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # No autotuning. Keras drops an epoch's iterator when the next begins,
    # and the drop waited for a tf.data thread (the autotuner's, by the
    # stack) 15-30 s with every core idle, at 3 of 10 epoch boundaries of
    # the demo on the AVX2 EPYC; none in 20 untuned (BENCHMARKS.md, "The
    # stalls between epochs"). Untuned, the maps run min(16, cores) calls
    # at once and the prefetch grows its own buffer; the pipeline, a few
    # seconds of an epoch's minute, costs less CPU so.
    options.autotune.enabled = False
    return batched.prefetch(tf.data.AUTOTUNE).with_options(options)


def datasets(
    paths,
    source_tokenizer,
    target_tokenizer,
    max_length,
    batch_size,
    seed,
    log,
    batch_tokens=None,
    dictionary=0.0,
    numbers=None,
    word_dropout=0.0,
    subword_sampling=0.0,
):
    """The training and validation datasets; each split's pairs are counted
    after the `max_length` filter, reported, and an empty split stops the
    run with a message. With `dictionary` > 0, each training epoch adds that
    many dictionary entries per sentence pair; `numbers` protects the
    numbers of pairs that share them, and `word_dropout` and
    `subword_sampling` are the training batches' (`make_dataset`). The
    training split is tokenised once into shards (`training_shards`) and
    read from them, unless `subword_sampling` or the dictionary's draws
    need its text."""
    made = []
    extra = paths.get("dictionary") if dictionary else None
    shards = None
    if reads_shards(extra, dictionary, subword_sampling):  # the training split: read once
        shards = training_shards(
            paths["train"], source_tokenizer, target_tokenizer, max_length, numbers, log
        )
    for split in ("train", "valid"):
        training = split == "train"
        data, kept, total = make_dataset(
            paths[split],
            source_tokenizer,
            target_tokenizer,
            max_length,
            batch_size,
            shuffle=training,
            seed=seed,
            batch_tokens=batch_tokens,
            extra_path=paths.get("dictionary") if training and dictionary else None,
            extra_ratio=dictionary if training else 0.0,
            numbers=numbers,
            word_dropout=word_dropout if training else 0.0,
            subword_sampling=subword_sampling if training else 0.0,
            shards=shards if training else None,
        )
        log(
            f"{split}: {kept} of {total} pairs fit --max-length {max_length}"
            + (f" ({total - kept} longer ones left out)" if kept < total else "")
        )
        if kept == 0:
            raise UsageError(
                f"no {split} pair fits --max-length {max_length} ({total} pairs, each longer "
                "in subword pieces): raise --max-length or --vocab-size"
            )
        made.append(data)
    return made
