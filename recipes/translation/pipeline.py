"""The `tf.data` pipelines of a run's split files, tokenised in the graph:
`((source, target_in), target_out)` batches bucketed by length
(`make_dataset`), from the split's text or its shards (`training_shards`);
`inputs.datasets` makes a run's training and validation data of them.

TensorFlow is imported when a pipeline is made; the command line, which
does not import this module, is parsed before it loads. The length buckets
are `batches.py`'s, whose `ShardBatches` makes the same batches of the
shards without TensorFlow.

The pipeline's functions are TensorFlow ops with Python-level `if`s only,
each wrapped in `do_not_convert`: tf.data would run AutoGraph over each (and
everything they call, the tokenizers' and NumberProtection's methods
included) for nothing, which costs seconds of every recipe process's start.
"""

import functools
import itertools

from ..runs import UsageError
from .batches import (
    EpochStream,
    bucket_batch_sizes,
    bucket_boundaries,
    buckets_of,
    epoch_seed,
    expected_batches,
)
from .shards import chunk_files, read_meta, shard_folder, write_shards


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
    epochs=None,
):
    """`((source, target_in), target_out)` batches from a split file,
    tokenised in the graph: `target_in = [START] y`, `target_out = y [END]`.
    A pair longer than `max_length` pieces (either side) is left out.

    Batches are bucketed by length (`bucket_boundaries`) and padded only to
    their bucket's longest length, so the CPU is spent on tokens rather than
    padding; `batch_tokens` sizes each bucket's batches to about that many
    pieces per side (long sentences in small batches), otherwise every batch
    holds `batch_size` pairs.

    `extra_path` (training): each epoch also draws `extra_ratio` x (the
    pairs of `path`) pairs from this file (the Ding dictionary's entries).

    `numbers` (a `NumberProtection`): `protect_pairs` replaces the numbers
    that a pair's two sides share by the placeholder, as the translator does.

    `word_dropout` (for training): each piece of `source` and `target_in`
    becomes `[UNK]` with this probability (`_with_word_dropout`: Gal and
    Ghahramani's word dropout); `target_out` is never changed.

    `subword_sampling` a > 0 (for training, SentencePiece): each epoch draws
    a segmentation with probability ~ P(segmentation)^a (Kudo's subword
    regularization); a pair whose draw does not fit sits that epoch out.

    `shards` (`shards.write_shards` of `path`): the pairs and their counts
    are read from it, the same batches; not with `subword_sampling` nor
    `extra_path`'s draws, which need the text (`reads_shards`).

    Returns `(dataset, kept, total)`: the pairs of `path` that fit, and all
    of them. The dataset knows its length in batches (exact; with
    `extra_path`, the expected number, each epoch cut or topped up to it).

    `epochs` (training): `(first, last, skip)`, the dataset is a list of
    `EpochStream`s, each epoch's order a function of `seed` and the epoch,
    epoch `first` without its first `skip` batches (`_epoch_streams`)."""
    encode = _encoder(source_tokenizer, target_tokenizer, max_length, numbers)
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    if shards is not None and reads_shards(extra_path, extra_ratio, subword_sampling):
        kept, total, per_bucket, meta = _shard_counts(shards, boundaries, sizes)
        pieces = (functools.partial(_shard_pairs, chunk_files(shards, meta)), _bucket)
        extra = (None, 0, kept)
    else:
        kept, total, per_bucket, extra = _text_counts(
            encode, path, boundaries, sizes, extra_path, extra_ratio
        )
        pieces = (
            functools.partial(_text_lines, path),
            functools.partial(_bucketed, encode=encode, subword_sampling=subword_sampling),
        )
    batches = expected_batches(per_bucket, sizes)
    one_epoch = functools.partial(
        _one_epoch,
        pieces=pieces,
        buckets=(boundaries, sizes, batches),
        shuffle=shuffle,
        stateless=epochs is not None,
        extra=extra,
        word_dropout=word_dropout,
    )
    if epochs is None:
        return _untuned(one_epoch(seed)), kept, total
    return _epoch_streams(one_epoch, seed, batches, *epochs), kept, total


def _text_counts(encode, path, boundaries, sizes, extra_path, extra_ratio):
    """`(kept, total, pairs per bucket, (extra_path, draws, kept))` of a
    split read as text: its pairs that fit counted (`_lengths`), and the
    expected share of each epoch's `extra_ratio` draws from `extra_path`."""
    found, total = _lengths(encode, path)
    kept, per_bucket = len(found), _bucket_counts(found, boundaries, sizes)
    draws = int(round(extra_ratio * kept)) if extra_path is not None and extra_ratio > 0 else 0
    if draws:
        per_bucket = per_bucket + draws * _bucket_shares(encode, extra_path, boundaries, sizes)
    return kept, total, per_bucket, (extra_path, draws, kept)


def _text_lines(path, order=None):
    """The lines of a split file: in the file's order (`order` None), or
    shuffled (`order`: `(seed, stateless)`): each 50,000 lines permuted
    in an order of the seed alone (`_shuffled`), or a new order each pass."""
    import tensorflow as tf

    return _in_order(tf.data.TextLineDataset(path), order, 50_000)


def _in_order(elements, order, buffer):
    """`elements` as they are (`order` None), or shuffled (`order`: `(seed,
    stateless)`): in an order of the seed alone (`_shuffled`, each `buffer`
    elements permuted in turn), or a new order each pass (a `buffer` of them)."""
    if order is None:
        return elements
    seed, stateless = order
    if stateless:
        return _shuffled(elements, seed, buffer)
    return elements.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)


def _shard_pairs(files, order=None):
    """The unpadded `(source, target)` pairs of a shard set's chunk files
    (`files`), a chunk read at a time: in the split's order (`order`
    None), or shuffled (`order`: `(seed, stateless)`): the chunks in an
    order of the seed, each chunk's pairs permuted (stateless: by the seed
    and the chunk's place, else a new order each pass)."""
    import tensorflow as tf

    graph_only = tf.autograph.experimental.do_not_convert
    names = _in_order(tf.data.Dataset.from_tensor_slices(files), order, 50_000)
    chunks = names.enumerate().map(graph_only(lambda i, name: _read_chunk(name, i, order)))
    return chunks.flat_map(
        graph_only(
            lambda *padded: tf.data.Dataset.from_tensor_slices(padded).map(
                graph_only(
                    lambda source, sources, target, targets: (source[:sources], target[:targets])
                )
            )
        )
    )


def _read_chunk(path, place, order):
    """`(source, source lengths, target, target lengths)` of a chunk file
    (`shards.py` says the layout): its pairs' int32 pieces padded to the
    chunk's longest, permuted when `order` is `(seed, stateless)`."""
    import tensorflow as tf

    content = tf.io.read_file(path)
    # A version 1.0 `.npy` file: its array after 10 bytes and the header
    # whose length the little-endian uint16 at byte 8 says.
    header = tf.io.decode_raw(tf.strings.substr(content, 8, 2), tf.uint16, little_endian=True)
    start = 10 + tf.cast(header[0], tf.int32)
    data = tf.strings.substr(content, start, tf.strings.length(content) - start)
    values = tf.io.decode_raw(data, tf.int32, little_endian=True)
    count = values[0]
    source_lengths, target_lengths = values[1 : 1 + count], values[1 + count : 1 + 2 * count]
    pieces = values[1 + 2 * count :]
    split = tf.reduce_sum(source_lengths)
    source = tf.RaggedTensor.from_row_lengths(pieces[:split], source_lengths)
    target = tf.RaggedTensor.from_row_lengths(pieces[split:], target_lengths)
    if order is not None:
        seed, stateless = order
        if stateless:
            # A second word below 0: apart from `_shuffled`'s [seed, 0, 1, ...].
            seeds = tf.stack([tf.cast(seed, tf.int64), -1 - tf.cast(place, tf.int64)])
            permuted = tf.random.experimental.stateless_shuffle(tf.range(count), seed=seeds)
        else:
            permuted = tf.random.shuffle(tf.range(count), seed=seed)
        source, target = tf.gather(source, permuted), tf.gather(target, permuted)
    return source.to_tensor(), source.row_lengths(), target.to_tensor(), target.row_lengths()


def _one_epoch(shuffle_seed, pieces, buckets, shuffle, stateless, extra, word_dropout):
    """One epoch's batches of `make_dataset`, its draws made with
    `shuffle_seed`: `stateless` ones (a function of the seed alone, which
    may be a tensor), or a new shuffle and draw each pass. `pieces`:
    `(read(order), bucketed(elements, boundaries, sizes))`, the elements
    (text lines or shard pairs) in the epoch's order (`order`: None, or
    `(seed, stateless)` to shuffle) and their batches by length; `buckets`:
    `(boundaries, sizes, batches)`; `extra`: `(extra_path, draws, kept)`."""
    import tensorflow as tf

    read, bucketed = pieces
    boundaries, sizes, batches = buckets
    extra_path, draws, kept = extra
    elements = read((shuffle_seed, stateless) if shuffle else None)
    if draws:
        elements = _with_draws(elements, extra_path, draws, kept, shuffle_seed, stateless)
    pairs = bucketed(elements, boundaries=boundaries, sizes=sizes)
    if shuffle:  # an epoch of exactly `batches` batches, whatever the draw
        pairs = pairs.repeat().take(batches)
    batched = _shifted(pairs.apply(tf.data.experimental.assert_cardinality(batches)))
    if word_dropout > 0:
        batched = _with_word_dropout(batched, word_dropout, shuffle_seed, stateless)
    return batched


def _epoch_streams(one_epoch, seed, batches, first, last, skip=0):
    """`make_dataset`'s `EpochStream`s for `fit`: the batches of epochs
    `first` to `last - 1` (counted from 0), each epoch's order (its shuffle,
    draws and word dropout) a function of `seed` and the epoch alone
    (`epoch_seed`), so that an epoch's batches are the same whenever and in
    whichever process it is built (SentencePiece's subword sampling draws
    anew). With `skip`, the first `skip` batches of epoch `first` (those a
    run resumed mid-epoch trained before) are left out, and its other
    batches are a stream of their own, before the later epochs'.
    `one_epoch(seed)`: an epoch's batches."""
    import tensorflow as tf

    def epochs(start, stop):
        return tf.data.Dataset.range(start, stop).flat_map(
            tf.autograph.experimental.do_not_convert(lambda e: one_epoch(epoch_seed(seed, e)))
        )

    streams = []
    if skip:
        partial = epochs(first, first + 1).skip(skip)
        partial = partial.apply(tf.data.experimental.assert_cardinality(batches - skip))
        streams.append(EpochStream(_untuned(partial), first, first + 1, batches - skip))
        first += 1
    rest = epochs(first, last).apply(
        tf.data.experimental.assert_cardinality(max(0, last - first) * batches)
    )
    streams.append(EpochStream(_untuned(rest), first, max(first, last), batches))
    return streams


def reads_shards(extra_path, extra_ratio, subword_sampling):
    """Whether `make_dataset` reads a training split's shards: not with
    `subword_sampling` nor with `extra_path`'s draws (both need text)."""
    return not subword_sampling and not (extra_path is not None and extra_ratio > 0)


def training_shards(path, source_tokenizer, target_tokenizer, max_length, numbers, log=print):
    """The shard set of the training split `path` (`shards.write_shards`,
    in `shards.shard_folder`), written when missing; returns its folder."""
    import tensorflow as tf

    folder = shard_folder(path, (source_tokenizer, target_tokenizer), max_length, numbers)
    encode = _encoder(source_tokenizer, target_tokenizer, max_length, numbers)
    write_shards(folder, path, lambda lines: encode(tf.constant(lines)), max_length, log=log)
    return folder


def _shard_counts(folder, boundaries, sizes):
    """`(kept, total, pairs per bucket, meta)` of a shard set."""
    import numpy as np

    meta = read_meta(folder)
    if meta is None:
        raise UsageError(f"{folder} is not a complete shard set: train again to write it")
    counts = np.asarray(meta["lengths"])
    buckets = buckets_of(np.arange(len(counts)), boundaries)
    per_bucket = np.bincount(buckets, weights=counts, minlength=len(sizes)).astype(np.int64)
    return meta["pairs"], meta["lines"], per_bucket, meta


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

    return np.bincount(buckets_of(lengths, boundaries), minlength=len(sizes))


def _bucket_shares(encode, path, boundaries, sizes):
    """The share of each bucket among the pairs of `path`, estimated from
    its first 20,000 lines (zeros for an empty file)."""
    import numpy as np

    sample, sample_lines = _lengths(encode, path, 20_000)
    if not sample_lines:
        return np.zeros(len(sizes))
    return _bucket_counts(sample, boundaries, sizes) / sample_lines


def _shuffled(lines, seed, size=50_000):
    """`lines` in an order drawn from `seed` (an int or an int64 scalar
    tensor): each `size` lines in turn permuted, with stateless draws, so
    that one seed gives one order in any process (`Dataset.shuffle`'s order
    depends on the passes made before, and takes no tensor seed)."""
    import tensorflow as tf

    seed = tf.cast(seed, tf.int64)
    permuted = tf.autograph.experimental.do_not_convert(
        lambda index, chunk: tf.random.experimental.stateless_shuffle(
            chunk, seed=tf.stack([seed, index])
        )
    )
    return lines.batch(size).enumerate().map(permuted).unbatch()


def _stateless_seeds(seed, width=2):
    """An endless dataset of `[seed, width * i + k for k < width]`-style
    seeds (`width` stateless seeds of 2 numbers each, side by side) for the
    i-th element."""
    import tensorflow as tf

    seed = tf.cast(seed, tf.int64)
    return tf.data.Dataset.range(2**62).map(
        tf.autograph.experimental.do_not_convert(
            lambda i: tf.reshape(
                tf.stack([tf.fill([width], seed), width * i + tf.range(width, dtype=tf.int64)], 1),
                [2 * width],
            )
        )
    )


def _with_draws(lines, extra_path, draws, kept, seed, stateless=False):
    """`lines` (`kept` pairs) and `draws` lines drawn at random from
    `extra_path`, a new draw every epoch, mixed at random; `stateless`: the
    draw and the mix a function of `seed` alone (an int64 scalar tensor)."""
    import tensorflow as tf

    share = draws / (kept + draws)
    if stateless:
        extra = _shuffled(tf.data.TextLineDataset(extra_path), seed + 1, 1_000_000).take(draws)
        choices = _stateless_seeds(seed, 1).map(
            tf.autograph.experimental.do_not_convert(
                lambda s: tf.cast(tf.random.stateless_uniform([], s) < share, tf.int64)
            )
        )
        return tf.data.Dataset.choose_from_datasets(
            [lines, extra], choices, stop_on_empty_dataset=False
        )
    extra = (
        tf.data.TextLineDataset(extra_path)
        .shuffle(1_000_000, seed=seed + 1, reshuffle_each_iteration=True)
        .take(draws)
    )
    return tf.data.Dataset.sample_from_datasets(
        [lines, extra], weights=[1 - share, share], seed=seed
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


def _with_word_dropout(batched, word_dropout, seed, stateless=False):
    """`batched` with each piece of `source` and `target_in` replaced by
    `[UNK]` with probability `word_dropout`; `[PAD]`, `[START]` and `[END]`
    stay, and `target_out` is never changed. `stateless`: the draws a
    function of `seed` (an int64 scalar tensor) and the batch alone."""
    import tensorflow as tf

    from keras_attention.tokenizers import UNK

    def dropped(ids, seed):
        kept = tf.random.stateless_uniform(tf.shape(ids), seed) >= word_dropout
        return tf.where(kept | (ids <= UNK), ids, tf.cast(UNK, ids.dtype))

    # Stateless draws seeded from a stream of `seed`: the same noise
    # for the same batches, whatever the parallelism.
    if stateless:
        seeds = _stateless_seeds(seed + 2)
    else:
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
    # No autotuning: Keras drops an epoch's iterator when the next begins,
    # and that drop waits for the autotuner's tf.data thread, which can
    # hold every core idle for seconds at an epoch boundary (docs/archive/
    # benchmarks-history.md, "The stalls between epochs"). Untuned, the
    # maps run min(16, cores) calls at once and the prefetch grows its own
    # buffer, and the pipeline, a small share of an epoch, costs less CPU.
    options.autotune.enabled = False
    return batched.prefetch(tf.data.AUTOTUNE).with_options(options)
