"""A run's training and validation batches (`datasets`, `validation_batches`)
from whichever tokenizers it has (`data.load_tokenizers`): `tf.data`
pipelines of the graph's tokenizers (`pipeline.py`), or, without
TensorFlow, `ShardBatches` of the same shard sets from the tokenizers'
Python twins (`batches.py`), which give the same batches.
"""

from keras_attention.tokenizers.pieces import SentencePieceEncoder

from ..runs import UsageError
from .batches import report_split, shard_datasets, split_batches
from .pipeline import make_dataset, reads_shards, training_shards


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
    epochs=None,
    replicas=1,
):
    """The training and validation data of a run; each split's pairs are counted
    after the `max_length` filter, reported, and an empty split stops the
    run with a message. With `dictionary` > 0, each training epoch adds that
    many dictionary entries per sentence pair; `numbers` protects the
    numbers of pairs that share them, and `word_dropout` and
    `subword_sampling` are the training batches' (`make_dataset`). The
    training split is tokenised once into shards (`training_shards`) and
    read from them, unless `subword_sampling` or the dictionary's draws
    need its text. With `epochs` (`(first, last, skip)`), the training data
    is `make_dataset`'s list of `EpochStream`s.

    Those are `tf.data` pipelines of the graph's tokenizers
    (`pipeline.py`); with the tokenizers' Python twins (no TensorFlow:
    `graph_tokenizers`), `ShardBatches` of the same shard sets, the same
    batches (`batches.shard_datasets`; they need `epochs`), each topped up
    to a multiple of `replicas` rows (Keras's data parallelism: a
    `tf.distribute` strategy splits the `tf.data` batches itself)."""
    if isinstance(source_tokenizer, SentencePieceEncoder):
        if subword_sampling:
            raise UsageError(
                f"--subword-sampling {subword_sampling} draws segmentations in the TensorFlow "
                "Text graph: install tensorflow and tensorflow-text, or leave it out"
            )
        return shard_datasets(
            paths,
            source_tokenizer,
            target_tokenizer,
            max_length,
            batch_size,
            seed,
            log,
            batch_tokens=batch_tokens,
            dictionary=dictionary,
            numbers=numbers,
            word_dropout=word_dropout,
            epochs=epochs or (0, 1, 0),
            replicas=replicas,
        )
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
            epochs=epochs if training else None,
        )
        report_split(split, kept, total, max_length, log)
        made.append(data)
    return made


def validation_batches(path, tokenizers, max_length, batch_size, batch_tokens=None, numbers=None):
    """`(batches, kept, total)`: the split file `path` batched in its order
    as training validates (`pipeline.make_dataset`, or without TensorFlow
    `batches.split_batches`), and its pairs that fit and all of them."""
    if isinstance(tokenizers[0], SentencePieceEncoder):
        return split_batches(
            path, *tokenizers, max_length, batch_size, lambda line: None, batch_tokens, numbers
        )
    return make_dataset(
        path, *tokenizers, max_length, batch_size, batch_tokens=batch_tokens, numbers=numbers
    )
