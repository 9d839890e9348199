"""The training batches of a run on any Keras backend: the length buckets
every pipeline shares (`bucket_boundaries`, `bucket_batch_sizes`,
`epoch_seed`, `EpochStream`) and `ShardBatches`, a `keras.utils.PyDataset`
of a shard set (`shards.py`) that needs NumPy alone, where `pipeline.py`
makes the same batches with `tf.data`.

An epoch is planned as `tf.data`'s `bucket_by_sequence_length` forms it
from the pairs in the epoch's order (`epoch_batches`): a bucket's batch is
complete, and next in the epoch, when its last pair arrives; the buckets'
remainders come last, in bucket order. So an epoch in the split's order is
`pipeline.make_dataset`'s, batch for batch; a shuffled epoch's order is
drawn by NumPy from the run's seed and the epoch alone (`epoch_seed`), so
that a resumed run, a worker and a tuning trial see the same batches. It
is the pipeline's kind of order (the chunks in an order of the seed, each
chunk's pairs permuted), not its very order: `tf.data`'s stateless
shuffle is not NumPy's.
"""

import collections
import copy
from typing import Any, NamedTuple

import keras
import numpy as np

from keras_attention.tokenizers.characters import UNK

from ..runs import UsageError
from .shards import chunk_files, chunk_offsets, shard_folder, text_encoder, write_shards

# The chunks a `ShardBatches` keeps read (`_Pairs`): a million pairs' whole
# set, or a few of a larger one's.
HELD_BYTES = 256 * 2**20


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


def buckets_of(lengths, boundaries):
    """The bucket of each of `lengths` (a pair's longer side's pieces)."""
    return np.searchsorted(boundaries, lengths, side="right")


def expected_batches(per_bucket, sizes):
    """The batches of an epoch of `per_bucket` pairs in each bucket."""
    return int(sum(np.ceil(n / size) for n, size in zip(per_bucket, sizes) if n > 0))


def epoch_seed(seed, epoch):
    """The shuffle seed of `epoch` (from 0) of a run seeded `seed` (an int,
    or a scalar int64 tensor for `epoch`)."""
    return seed * 1_000_003 + epoch


class EpochStream(NamedTuple):
    """Batches for `fit(dataset, initial_epoch=first, epochs=last,
    steps_per_epoch=steps)`: epochs `first` to `last - 1`, `steps` batches each."""

    dataset: Any
    first: int
    last: int
    steps: int


def epoch_batches(order, buckets, sizes):
    """One epoch's batches, each an array of pair indices: the pairs
    `order` (indices) batched by bucket (`buckets[i]`: pair i's) as
    `tf.data`'s `bucket_by_sequence_length` does, `sizes[b]` pairs to a
    batch of bucket b, a batch complete when its last pair arrives, the
    buckets' remainders last in bucket order."""
    order = np.asarray(order, np.int64)
    in_order = buckets[order]
    keyed = []
    for bucket in np.unique(in_order):
        positions = np.flatnonzero(in_order == bucket)
        size = sizes[bucket]
        for start in range(0, len(positions), size):
            chunk = positions[start : start + size]
            done = chunk[-1] if len(chunk) == size else len(order) + bucket
            keyed.append((int(done), order[chunk]))
    keyed.sort(key=lambda item: item[0])
    return [indices for _, indices in keyed]


class ShardBatches(keras.utils.PyDataset):
    """`((source, target_in), target_out)` batches of a shard set for `fit`,
    epochs `first` to `last - 1` of `steps` batches each, one stream (the
    epochs' batches one after another, as `fit(steps_per_epoch=steps)`
    reads them), the first `skip` batches of epoch `first` left out (those
    a resumed run trained before).

    On the TensorFlow backend, `fit` takes a `PyDataset`'s shapes from its
    first two batches, which may share a bucket: TensorFlow reads the same
    files with `tf.data` (`pipeline.make_dataset`). Pass `fit(...,
    shuffle=False)`: each epoch's order is this object's own.

    Args:
        files: a shard set's chunk files (`shards.chunk_files`); the
            chunks read are held, up to `HELD_BYTES`.
        boundaries, sizes: the buckets (`bucket_boundaries`,
            `bucket_batch_sizes`).
        epochs: `(first, last, skip)`.
        seed: the run's seed; each epoch's order, draws and word dropout
            are a function of it and the epoch (`epoch_seed`).
        shuffle: each epoch in its own order (else the set's).
        extra: `(files, draws)`: each epoch also draws `draws` pairs of
            another shard set (the dictionary's entries), without
            replacement, mixed at random among the epoch's pairs.
        word_dropout: each piece of `source` and `target_in` becomes
            `[UNK]` with this probability; `target_out` is never changed.
        steps: batches an epoch is cut or topped up to (its first batches
            again); None: the pairs' own batches and the draws' expected
            share of each bucket, as `pipeline.make_dataset` counts them.
        replicas: each batch holds a multiple of this many rows, topped up
            with empty pairs (all padding, which the masked loss and
            metrics do not count), so that the devices of a data-parallel
            distribution each take as many (`replicas.KerasReplicas`).
        full: each batch topped up with empty pairs to its bucket's size
            (`sizes`), so that a bucket's batches share one shape: JAX
            compiles a program per shape, and a bucket's last, smaller
            batch would be one more.
    """

    def __init__(
        self,
        files,
        boundaries,
        sizes,
        epochs,
        seed=0,
        shuffle=True,
        extra=None,
        word_dropout=0.0,
        steps=None,
        replicas=1,
        full=False,
    ):
        super().__init__(workers=1, use_multiprocessing=False)
        self.replicas, self.full = replicas, full
        self.pairs, self.extra_pairs, self.draws = _Pairs(files), None, 0
        if extra is not None and extra[1] > 0:
            self.extra_pairs = _Pairs(extra[0])
            self.draws = min(int(extra[1]), len(self.extra_pairs))  # as many as there are
        self.kept = len(self.pairs)  # indices from `kept` on are the extra set's
        self.boundaries, self.sizes = list(boundaries), list(sizes)
        self.first, self.last, self.skip = epochs
        self.seed, self.shuffle, self.word_dropout = seed, shuffle, word_dropout
        self.buckets = np.concatenate(
            [
                buckets_of(pairs.longer, self.boundaries)
                for pairs in (self.pairs, self.extra_pairs)
                if pairs is not None
            ]
        )
        if steps is None:  # the pairs' own batches and the draws' expected share of each bucket
            own = np.bincount(self.buckets[: self.kept], minlength=len(sizes))
            per_bucket = own.astype(float)
            if self.draws:
                extra_buckets = np.bincount(self.buckets[self.kept :], minlength=len(sizes))
                per_bucket += self.draws * extra_buckets / len(self.extra_pairs)
            steps = expected_batches(per_bucket, sizes)
        self.steps = steps
        self._plan = (None, None)  # (epoch, its batches)

    @property
    def num_batches(self):
        return max(0, (self.last - self.first) * self.steps - self.skip)

    def take(self, count):
        """The first `count` batches of epoch `first` (all of them when it
        has fewer), as `tf.data.Dataset.take` gives the pipeline's."""
        taken = copy.copy(self)  # an epoch planned to fewer steps: its first batches
        taken.last, taken.skip, taken.steps = self.first + 1, 0, min(count, self.steps)
        return taken

    def __getitem__(self, index):
        position = index + self.skip
        epoch, step = self.first + position // self.steps, position % self.steps
        indices = self.batches(epoch)[step]
        source, target = self._padded(indices)
        inputs = (source, target[:, :-1])
        if self.word_dropout > 0:
            # a generator a side: a real row's draws, whatever rows pad the batch
            seeds = [[epoch_seed(self.seed, epoch), step, 2, side] for side in (0, 1)]
            inputs = tuple(
                self._dropped(ids, np.random.default_rng(seed)) for ids, seed in zip(inputs, seeds)
            )
        return inputs, target[:, 1:]

    def batches(self, epoch):
        """Epoch `epoch`'s batches (pair indices, the extra set's after the
        set's own), exactly `steps` of them."""
        if self._plan[0] != epoch:
            rng = np.random.default_rng(epoch_seed(self.seed, epoch))
            order = self.pairs.order(rng if self.shuffle else None)
            if self.draws:
                drawn = self.kept + rng.choice(len(self.extra_pairs), self.draws, replace=False)
                mixed = np.zeros(self.kept + self.draws, bool)
                mixed[rng.choice(len(mixed), self.draws, replace=False)] = True
                merged = np.empty(len(mixed), np.int64)
                merged[~mixed], merged[mixed] = order, drawn
                order = merged
            planned = epoch_batches(order, self.buckets, self.sizes)
            planned = [planned[i % len(planned)] for i in range(self.steps)]
            self._plan = (epoch, planned)
        return self._plan[1]

    def _padded(self, indices):
        """`(source, target)` int32 batches of pairs `indices`, padded to
        their bucket's boundary less one (the last bucket: to its longest),
        and with `full` and `replicas` topped up with rows of padding."""
        kept = self.kept
        pairs = [
            self.pairs.pair(i) if i < kept else self.extra_pairs.pair(i - kept) for i in indices
        ]
        bucket = int(self.buckets[indices[0]])
        count = max(len(pairs), self.sizes[bucket]) if self.full else len(pairs)
        count = -(-count // self.replicas) * self.replicas
        padded = []
        for side in (0, 1):
            rows = [pair[side] for pair in pairs]
            if bucket < len(self.boundaries):
                width = self.boundaries[bucket] - 1
            else:
                width = max(len(row) for row in rows)
            batch = np.zeros((count, width), np.int32)
            for row, ids in enumerate(rows):
                batch[row, : len(ids)] = ids
            padded.append(batch)
        return tuple(padded)

    def _dropped(self, ids, rng):
        kept = rng.random(ids.shape) >= self.word_dropout
        return np.where(kept | (ids <= UNK), ids, np.int32(UNK))


def report_split(split, kept, total, max_length, log):
    """Say how many of a split's `total` pairs fit `max_length` (`kept`);
    `UsageError` when none does."""
    log(
        f"{split}: {kept} of {total} pairs fit --max-length {max_length}"
        + (f" ({total - kept} longer ones left out)" if kept < total else "")
    )
    if kept == 0:
        raise UsageError(
            f"no {split} pair fits --max-length {max_length} ({total} pairs, each longer "
            "in subword pieces): raise --max-length or --vocab-size"
        )


def shard_datasets(
    paths,
    source_encoder,
    target_encoder,
    max_length,
    batch_size,
    seed,
    log,
    batch_tokens=None,
    dictionary=0.0,
    numbers=None,
    word_dropout=0.0,
    epochs=(0, 1, 0),
    replicas=1,
):
    """`inputs.datasets` without TensorFlow: the training `EpochStream`s
    (`ShardBatches` of epochs `first` to `last - 1`, the first `skip`
    batches of epoch `first` left out) and the validation batches (in the
    split's order), from shard sets of the splits written with the
    tokenizers' Python twins (`shards.text_encoder`), the same sets the
    graph's tokenizers write. `numbers`: a `NumberRules` (or None);
    `dictionary` > 0 draws that many of the dictionary's entries that fit
    per training pair each epoch (the pipeline draws lines, and leaves out
    those that do not fit); each split's pairs are
    counted, reported, and an empty split stops the run with a message.
    The training batches are `full` (one shape a bucket: the loss is a mean
    over a batch's tokens, which empty pairs do not change); the validation
    batches are not, since Keras's mean of their losses weighs each by its
    rows. Every batch holds a multiple of `replicas` rows (`ShardBatches`)."""
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    encoders = (source_encoder, target_encoder)
    files, pairs = {}, {}
    for split in ("train", "dictionary"):
        if split == "dictionary" and not (dictionary and paths.get("dictionary")):
            continue
        files[split], pairs[split], lines = _shard_set(
            paths[split], encoders, max_length, numbers, log
        )
        if split == "train":
            report_split(split, pairs[split], lines, max_length, log)
    valid, kept, total = split_batches(
        paths["valid"], *encoders, max_length, batch_size, log, batch_tokens, numbers, replicas
    )
    report_split("valid", kept, total, max_length, log)
    extra = None
    if "dictionary" in files:
        extra = (files["dictionary"], int(round(dictionary * pairs["train"])))
    options = dict(seed=seed, extra=extra, word_dropout=word_dropout, replicas=replicas, full=True)
    first, last, skip = epochs
    later = first + 1 if skip else first  # the first whole epoch
    whole = ShardBatches(files["train"], boundaries, sizes, (later, last, 0), **options)
    streams = []
    if skip:  # the resumed epoch's other batches, a stream of their own
        partial = ShardBatches(
            files["train"], boundaries, sizes, (first, first + 1, skip), **options
        )
        streams.append(EpochStream(partial, first, first + 1, whole.steps - skip))
    streams.append(EpochStream(whole, later, max(later, last), whole.steps))
    return streams, valid


def split_batches(
    path,
    source_encoder,
    target_encoder,
    max_length,
    batch_size,
    log=print,
    batch_tokens=None,
    numbers=None,
    replicas=1,
):
    """`pipeline.make_dataset`'s batches of a split in its order (the
    validation split's), without TensorFlow: `(ShardBatches, kept, total)`,
    the pairs of `path` that fit `max_length` and all of them, read from
    its shard set (written first when missing). `replicas`:
    `ShardBatches`'."""
    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)
    encoders = (source_encoder, target_encoder)
    files, kept, total = _shard_set(path, encoders, max_length, numbers, log)
    batches = ShardBatches(files, boundaries, sizes, (0, 1, 0), shuffle=False, replicas=replicas)
    return batches, kept, total


def _shard_set(path, encoders, max_length, numbers, log):
    """`(chunk files, pairs that fit, lines)` of the shard set of `path`
    with `encoders` (the tokenizers' Python twins), written first when
    missing (`shards.write_shards`)."""
    encode = text_encoder(*encoders, max_length, numbers is not None)
    folder = shard_folder(path, encoders, max_length, numbers)
    meta = write_shards(folder, path, encode, max_length, log=log)
    return chunk_files(folder, meta), meta["pairs"], meta["lines"]


class _Pairs:
    """The pairs of a shard set's chunk files: `pair(i)`, `order(rng)`,
    `longer` (each pair's longer side's pieces, from the files' counts),
    `len()`. The chunks read are kept, the least recently used let go
    beyond `held_bytes` (a chunk's pieces and two offsets a pair: about
    6 MB for 65,536 pairs): an epoch's order visits its chunks one after
    another, but the dictionary's draws come from anywhere in their set,
    and a set re-read for each batch stalled training."""

    def __init__(self, files, held_bytes=None):
        self.files, self.held_bytes = list(files), held_bytes or HELD_BYTES
        self._chunks, self._bytes = collections.OrderedDict(), 0
        counts, longer = [], []
        for path in self.files:
            values = np.load(path, mmap_mode="r")
            count = int(values[0])
            sides = np.asarray(values[1 : 1 + 2 * count]).reshape(2, count)
            counts.append(count)
            longer.append(sides.max(0))
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.longer = np.concatenate(longer) if longer else np.zeros(0, np.int64)

    def __len__(self):
        return int(self.starts[-1])

    def order(self, rng=None):
        """The pairs' indices: the set's order (`rng` None), or the chunks in
        an order drawn from `rng` and each chunk's pairs permuted."""
        if rng is None:
            return np.arange(len(self), dtype=np.int64)
        chunks = rng.permutation(len(self.files))
        return np.concatenate(
            [self.starts[c] + rng.permutation(self.starts[c + 1] - self.starts[c]) for c in chunks]
            or [np.zeros(0, np.int64)]
        )

    def pair(self, index):
        chunk = int(np.searchsorted(self.starts, index, side="right")) - 1
        if chunk not in self._chunks:
            self._chunks[chunk] = chunk_offsets(self.files[chunk])
            self._bytes += sum(array.nbytes for array in self._chunks[chunk])
            while self._bytes > self.held_bytes and len(self._chunks) > 1:
                _, dropped = self._chunks.popitem(last=False)
                self._bytes -= sum(array.nbytes for array in dropped)
        self._chunks.move_to_end(chunk)
        values, starts, ends = self._chunks[chunk]
        count, position = len(starts) // 2, index - int(self.starts[chunk])
        source, target = position, count + position
        return values[starts[source] : ends[source]], values[starts[target] : ends[target]]
