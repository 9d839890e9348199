"""Parallel corpora for the translation recipes: the Ding dictionary's
German-English example sentences (Debian package `trans-de-en`) or any TSV
file, a deterministic train/validation/test split, and `tf.data` pipelines
with in-graph tokenisation.

Bad input never stops a run with a traceback. A malformed line (no tab, an
empty side, bytes that are not UTF-8, a carriage return inside the line) is
skipped, and reported with its line number. Every reader splits lines on
`\\n` only, the rule `tf.data.TextLineDataset` follows (which also drops
every `\\r`; the split files hold none), so the split files and the
pipelines agree on what a line is. A corpus too small for the
split stops the run with a message saying so.
"""

import hashlib
import itertools
import os
import random
import re
import shutil
import sys
import time

from .. import runs
from .config import DING, TOKENIZERS, UsageError, corpus_key

DING_HINT = "install it with: sudo apt-get install -y trans-de-en (make demo and make test do this)"
SPLITS = ("train", "valid", "test")
MIN_PAIRS = {"train": 10, "valid": 1, "test": 1}
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>")


class CorpusError(Exception):
    """A problem with the user's corpus, reported as a message."""


BOM = "\ufeff"  # a UTF-8 byte order mark, which some editors write first: stripped on read


def check_file(path, flag, error=CorpusError):
    """`error` naming `flag` unless `path` is a file that can be read: no
    such file, a directory (not the raw `[Errno 21] Is a directory`)."""
    if os.path.isdir(path):
        raise error(f"{flag} {path} is a directory; expected a file")
    if not os.path.exists(path):
        raise error(f"{flag} {path}: no such file")


def warn(log=print):
    """Where warnings go: standard error from the command line (`log` is
    `print`: standard output is for results, e.g. translations), else the
    caller's `log` (a list the tests read, a logger)."""
    if log is print:
        return lambda message: print(message, file=sys.stderr, flush=True)
    return log


def report_skipped(problems, log=print):
    """Warn of the first 10 `problems` (skipped lines), and how many more."""
    say = warn(log)
    for problem in problems[:10]:
        say(f"warning: {problem}")
    if len(problems) > 10:
        say(f"warning: ... and {len(problems) - 10} more lines skipped")


def report_replaced(where, lines, log=print):
    """Warn, in one line, that `lines` (line numbers) of `where` (a flag
    and its file) held bytes that are not UTF-8, replaced by U+FFFD."""
    if lines:
        shown = ", ".join(str(number) for number in lines[:5]) + (", ..." if len(lines) > 5 else "")
        warn(log)(
            f"warning: {where}: {len(lines)} line{'s' if len(lines) > 1 else ''} held bytes "
            f"that are not UTF-8 (line{'s' if len(lines) > 1 else ''} {shown}); each such "
            "byte was replaced by U+FFFD"
        )


def _clean(text):
    return re.sub(r"\s+", " ", _ANNOTATION.sub("", text)).strip()


def _is_sentence(text):
    return len(text.split()) >= 3 and text[:1].isupper() and text[-1:] in ".!?"


def ding_pairs(path=DING):
    """(German, English) sentence pairs of the Ding dictionary.

    Lines are `German :: English`; ` | ` separates aligned sub-entries, `;`
    alternatives (the first is kept), and `{...}`, `[...]`, `<...>` are
    annotations (removed). A pair is kept when both sides are sentences:
    three or more words, a capital first letter, and a final `.`, `!` or `?`.
    """
    if not os.path.exists(path):
        raise CorpusError(
            f"the Ding corpus {path} is missing; {DING_HINT}, or pass --corpus FILE.tsv"
        )
    for first, _ in ding_alternative_pairs(path):
        yield first


def _ding_entries(path, every=False):
    """The first alternative of each German and English sub-entry of the
    Ding file, as written (`ding_alternative_pairs` keeps the sentences,
    `ding_dictionary_pairs` the rest); with `every`, the lists of all the
    alternatives of each side instead."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="\n") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            german, english = line.rstrip("\n").split(" :: ", 1)
            german, english = german.split(" | "), english.split(" | ")
            if len(german) != len(english):
                continue
            for de, en in zip(german, english):
                de, en = de.split("; "), en.split("; ")
                yield (de, en) if every else (de[0], en[0])


def ding_alternative_pairs(path=DING):
    """`((German, English), others)` for each pair of `ding_pairs`, in its
    order (`ding_pairs` is the first of each, so a `--limit` slice of one is
    that of the other): `others` pairs every German sentence of its
    sub-entry with every English one, the first pair left out ("Bei meinem
    Handy war der Akku leer.; Das Handy hatte keinen Akku mehr." :: "My
    phone had ran out of battery.; My phone had run out of power." gives
    three more). Alternatives that are not sentences (`ding_pairs`' rule)
    are left out."""
    for german, english in _ding_entries(path, every=True):
        first = _clean(german[0]), _clean(english[0])
        if not (_is_sentence(first[0]) and _is_sentence(first[1])):
            continue
        german = [first[0], *map(_clean, german[1:])]
        english = [first[1], *map(_clean, english[1:])]
        others = [
            (de, en)
            for de in german
            if _is_sentence(de)
            for en in english
            if _is_sentence(en) and (de, en) != first
        ]
        yield first, others


_GLOSSES = re.compile(r"\([^)]*\)|(?:^|\s)/[^/]+/(?=\s|$)")  # and /abbreviations/
_WORDS = re.compile(r"\w+")


def ding_dictionary_pairs(path=DING):
    """(German, English) word and phrase entries of the Ding dictionary: the
    sub-entries that `ding_pairs` leaves out because neither side is a
    sentence ("Bahnhof" :: "station", "Bahnhöfe" :: "stations", "zur
    Sache kommen" :: "to come to the point"). The first alternative of each
    side is kept, without annotations, parenthesised glosses or
    abbreviations (`Bahnhof {m} /Bhf./` is "Bahnhof")."""
    for de, en in _ding_entries(path):
        de, en = _clean(_GLOSSES.sub("", de)), _clean(_GLOSSES.sub("", en))
        if de and en and not (_is_sentence(de) or _is_sentence(en)):
            yield de, en


def _words(text):
    """What a sentence says, for leak checks: its lower-cased words."""
    return " ".join(_WORDS.findall(text.lower()))


def tsv_pairs(path, problems, flag="--corpus", replaced=None):
    """`source<TAB>target` pairs of a TSV file, streamed; each skipped line
    appends a message to `problems`. A byte order mark before the first
    line is not part of it. A line that is not UTF-8 is skipped, or, given
    the list `replaced`, kept with each invalid byte as U+FFFD and its
    line number appended to `replaced` (a user's `--test` and `--valid`
    files, as `translate --input` reads)."""
    check_file(path, flag)
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError as error:
                if replaced is None:
                    problems.append(
                        f"{path}:{number}: not valid UTF-8 "
                        f"({error.reason} at byte {error.start}); skipped"
                    )
                    continue
                replaced.append(number)
                line = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
            if number == 1:
                line = line.removeprefix(BOM)
            if not line.strip():
                continue  # blank lines are allowed and ignored
            if "\r" in line:
                problems.append(
                    f"{path}:{number}: a carriage return (\\r) inside the line "
                    "(lines end with \\n or \\r\\n); skipped"
                )
                continue
            if "\t" not in line:
                problems.append(
                    f"{path}:{number}: expected 'source<TAB>target', found no tab; skipped"
                )
                continue
            source, target = (part.strip() for part in line.split("\t", 1))
            if not source or not target or "\t" in target:
                problems.append(
                    f"{path}:{number}: expected exactly one non-empty source and target; skipped"
                )
                continue
            yield source, target


def split_of(source):
    """90/5/5 by a hash of the source sentence: adding data never moves a
    pair to another split, and every translation of one source sentence
    lands in the same split."""
    bucket = int(hashlib.sha1(source.encode("utf-8")).hexdigest()[:8], 16) % 100
    return "train" if bucket < 90 else ("valid" if bucket < 95 else "test")


def prepare(
    output, corpus=None, reverse=False, limit=None, dictionary=False, alternatives=False, log=print
):
    """Write `<output>/data/{train,valid,test}.tsv` once (reused by later
    commands on the same output); returns `{split: path}`.

    With `alternatives` (the Ding corpus only), `train.tsv` also holds the
    other sentences of its pairs' Ding sub-entries (`ding_alternative_pairs`),
    after the pairs themselves; validation and test are unchanged, and an
    alternative whose words are those of a held-out sentence is left out.

    With `dictionary` (the Ding corpus only), also `dictionary.tsv`: the
    dictionary's word and phrase entries (`ding_dictionary_pairs`) in a
    fixed random order, training data besides the sentences. An entry
    whose words are those of a held-out sentence (either side, case and
    punctuation ignored) is left out, so nothing held out leaks in."""
    data_dir = os.path.join(output, "data")
    meta_path = os.path.join(data_dir, "meta.json")
    meta = {
        "corpus": corpus_key(corpus),
        "reverse": reverse,
        "limit": limit,
        **({"dictionary": True} if dictionary else {}),  # runs made before it: no key
        **({"alternatives": True} if alternatives else {}),
    }
    if dictionary and corpus:
        raise CorpusError("the dictionary entries are the Ding corpus's: leave out --corpus")
    if alternatives and corpus:
        raise CorpusError("--alternatives are the Ding corpus's: leave out --corpus")
    paths = {split: os.path.join(data_dir, f"{split}.tsv") for split in SPLITS}
    if dictionary:
        paths["dictionary"] = os.path.join(data_dir, "dictionary.tsv")
    if os.path.exists(meta_path):
        if runs.read_json(meta_path, "the data split's record") == meta:
            return paths
    if corpus:
        check_file(corpus, "--corpus")
    problems = []
    pairs = tsv_pairs(corpus, problems) if corpus else ding_pairs()
    os.makedirs(data_dir, exist_ok=True)
    # Unique temporaries (`runs.temporary_path`), renamed into place at the end.
    written = [name for name in (*SPLITS, "dictionary") if name in paths]
    temporaries = {name: runs.temporary_path(paths[name]) for name in written}
    try:
        counts, sources, held_out, leaked = _write_splits(pairs, temporaries, reverse, limit)
        report_skipped(problems, log)
        short = [s for s in SPLITS if counts[s] < MIN_PAIRS[s]]
        if short:
            raise CorpusError(_too_small(counts, short, sources))
        if alternatives or dictionary:
            held_out_words = {_words(text) for _, *texts in held_out for text in texts}
        if alternatives:
            added = _add_alternatives(temporaries["train"], held_out_words, reverse, limit)
            log(f"alternatives: {added} more training pairs from the entries' other sentences")
        if dictionary:
            entries = [
                (target, source) if reverse else (source, target)
                for source, target in ding_dictionary_pairs()
                if _words(source) not in held_out_words and _words(target) not in held_out_words
            ]
            random.Random(0).shuffle(entries)
            with open(temporaries["dictionary"], "w", encoding="utf-8") as handle:
                handle.writelines(f"{source}\t{target}\n" for source, target in entries)
            log(f"dictionary: {len(entries)} word and phrase entries as extra training pairs")
        for name in written:
            os.replace(temporaries[name], paths[name])
    finally:
        for temporary in temporaries.values():
            if os.path.exists(temporary):
                os.remove(temporary)
    runs.write_json_atomically(meta_path, meta)
    log(
        f"corpus: {counts['train']} train, {counts['valid']} validation, "
        f"{counts['test']} test pairs"
        + (f" ({leaked} held-out pairs dropped: their sentence is in train)" if leaked else "")
        + (f", {len(problems)} lines skipped" if problems else "")
    )
    return paths


def _write_splits(pairs, temporaries, reverse, limit):
    """Write the pairs' splits (`split_of`) to the `temporaries`; a held-out
    pair whose source or target is in train is dropped. Returns `(counts,
    distinct sources, held-out pairs, dropped)`."""
    counts = dict.fromkeys(SPLITS, 0)
    seen_train, sources = set(), set()
    held_out = []
    with open(temporaries["train"], "w", encoding="utf-8") as train:
        for index, (source, target) in enumerate(pairs):
            if limit is not None and index >= limit:
                break
            if reverse:
                source, target = target, source
            sources.add(source)
            split = split_of(source)
            if split == "train":
                train.write(f"{source}\t{target}\n")
                seen_train.update((("s", source), ("t", target)))
                counts["train"] += 1
            else:
                held_out.append((split, source, target))
    leaked = 0
    with (
        open(temporaries["valid"], "w", encoding="utf-8") as valid,
        open(temporaries["test"], "w", encoding="utf-8") as test,
    ):
        outputs = {"valid": valid, "test": test}
        for split, source, target in held_out:
            if ("s", source) in seen_train or ("t", target) in seen_train:
                leaked += 1  # the same sentence is in train: drop it from evaluation
                continue
            outputs[split].write(f"{source}\t{target}\n")
            counts[split] += 1
    return counts, len(sources), held_out, leaked


def _add_alternatives(train_path, held_out_words, reverse, limit):
    """Append to `train_path` the `ding_alternative_pairs` of the pairs it
    holds, among the corpus's first `limit` pairs (as the split read them),
    each once, none already there and none whose words (either side) are in
    `held_out_words`; returns how many."""
    train = set(read_pairs(train_path))
    have, added = set(train), []
    for first, others in itertools.islice(ding_alternative_pairs(), limit):
        if (first[::-1] if reverse else first) not in train:
            continue
        for pair in others:
            pair = pair[::-1] if reverse else pair
            if pair in have or {_words(pair[0]), _words(pair[1])} & held_out_words:
                continue
            have.add(pair)
            added.append(pair)
    with open(train_path, "a", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in added)
    return len(added)


def _too_small(counts, short, sources):
    """Why the splits `short` got too few pairs: too few pairs, or (the
    real cause when the corpus repeats itself) too few distinct sentences,
    since every copy of a source sentence lands in the same split."""
    total = sum(counts.values())
    needs = (
        f"the {'/'.join(short)} split needs at least {', '.join(str(MIN_PAIRS[s]) for s in short)}"
    )
    if sources < total:
        return (
            f"the corpus gave {total} usable pairs ({counts}) but only {sources} distinct "
            f"source sentence{'s' if sources != 1 else ''}, and {needs}: every copy of a "
            "sentence lands in the same split (so that no held-out sentence is trained on), "
            "so duplicates all land in one split; use a corpus with more different sentences"
        )
    return (
        f"the corpus gave {total} usable pairs ({counts}); {needs} (about 90/5/5 of the pairs "
        "go to train/valid/test): use a larger corpus or a larger --limit"
    )


def read_pairs(path):
    """The `(source, target)` pairs of a split file, lines split on `\n` only."""
    with open(path, encoding="utf-8-sig", newline="\n") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if line.strip()]


PROTECTED_SHARE = 0.5  # of the training pairs with numbers, for protection to be learned


def numbers_to_protect(config, train_path, log=print):
    """The `NumberProtection` a run trains and translates with: None with
    `--no-protect-numbers`, and None when fewer than `PROTECTED_SHARE` of
    the training pairs with numbers hold the same numbers on both sides
    (spelled-out dates -> ISO dates: `22 juin 1975` -> `1975-06-22`), since
    a model that never saw the placeholder cannot place it. Logs which."""
    from keras_attention.tokenizers.numbers import NumberProtection, numbers_in, same_number

    if not config.protect_numbers:
        return None
    with_numbers = protectable = 0
    for source, target in read_pairs(train_path):
        found = numbers_in(source), numbers_in(target)
        if found[0] or found[1]:
            with_numbers += 1
            protectable += len(found[0]) == len(found[1]) and all(map(same_number, *found))
    if with_numbers == 0:
        return None
    share = protectable / with_numbers
    if share < PROTECTED_SHARE:
        log(
            f"numbers: not protected: only {protectable} of the {with_numbers} training pairs "
            "with digits hold the same numbers on both sides"
        )
        return None
    log(
        f"numbers: protected in {protectable} of the {with_numbers} training pairs with digits, "
        "and copied from the source when translating"
    )
    return NumberProtection(swap_separators=True)


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

    Returns `(dataset, kept, total)`: the pairs of `path` that fit, counted
    first, and all of them. The dataset knows its length in batches (Keras
    then knows an epoch's length): exact without `extra_path`; with it, the
    expected number, each epoch cut or topped up to that number."""
    import numpy as np
    import tensorflow as tf

    def encode(lines, sampling=0.0):
        parts = tf.strings.split(lines, "\t", maxsplit=1).to_tensor("", shape=[None, 2])
        sources, targets = parts[:, 0], parts[:, 1]
        if numbers is not None:
            sources, targets = numbers.protect_pairs(sources, targets)
        source, source_cut = source_tokenizer.encode(sources, max_length, sampling)
        target, target_cut = target_tokenizer.encode(targets, max_length + 1, sampling)
        return source, target, tf.logical_not(tf.logical_or(source_cut, target_cut))

    def lengths(path, limit=None):
        """The bucketing lengths of the pairs among the first `limit` lines
        of `path` that fit, and how many lines. Eager, 1024 lines a call
        (the file streamed): a `tf.data` map here traced `encode` first,
        most of the count's time for a small file, for the same numbers.
        Lines are TextLineDataset's: split on `\\n`, every `\\r` dropped."""
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

    boundaries = bucket_boundaries(max_length)
    sizes = bucket_batch_sizes(boundaries, batch_size, batch_tokens)

    def expected_batches(per_bucket):
        return int(sum(np.ceil(n / size) for n, size in zip(per_bucket, sizes) if n > 0))

    found, total = lengths(path)
    kept = len(found)
    per_bucket = np.bincount(np.searchsorted(boundaries, found, side="right"), minlength=len(sizes))
    lines = tf.data.TextLineDataset(path)
    if shuffle:
        lines = lines.shuffle(50_000, seed=seed, reshuffle_each_iteration=True)
    batches = expected_batches(per_bucket)
    if extra_path is not None and extra_ratio > 0:
        draws = int(round(extra_ratio * kept))
        sample, sample_lines = lengths(extra_path, 20_000)
        if sample_lines:
            share = np.bincount(
                np.searchsorted(boundaries, sample, side="right"), minlength=len(sizes)
            )
            batches = expected_batches(per_bucket + draws * share / sample_lines)
        extra = (
            tf.data.TextLineDataset(extra_path)
            .shuffle(1_000_000, seed=seed + 1, reshuffle_each_iteration=True)
            .take(draws)
        )
        lines = tf.data.Dataset.sample_from_datasets(
            [lines, extra], weights=[kept / (kept + draws), draws / (kept + draws)], seed=seed
        )

    # The pipeline's functions are TensorFlow ops with Python-level `if`s
    # only: tf.data would run AutoGraph over each (and everything they call,
    # the tokenizers' and NumberProtection's methods included) for nothing:
    # about 1.5 s of a recipe process's start, in every process.
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
    pairs = pairs.map(unpadded, num_parallel_calls=tf.data.AUTOTUNE)
    pairs = pairs.bucket_by_sequence_length(
        graph_only(lambda source, target: tf.maximum(tf.size(source), tf.size(target))),
        boundaries,
        sizes,
        pad_to_bucket_boundary=True,
    )
    if shuffle:  # an epoch of exactly `batches` batches, whatever the draw
        pairs = pairs.repeat().take(batches)
    pairs = pairs.apply(tf.data.experimental.assert_cardinality(batches))
    batched = pairs.map(
        graph_only(lambda source, target: ((source, target[:, :-1]), target[:, 1:])),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    if word_dropout > 0:
        from keras_attention.tokenizers import UNK

        def dropped(ids, seed):
            kept = tf.random.stateless_uniform(tf.shape(ids), seed) >= word_dropout
            return tf.where(kept | (ids <= UNK), ids, tf.cast(UNK, ids.dtype))

        # Stateless draws seeded from a stream of `seed`: the same noise
        # for the same batches, whatever the parallelism.
        seeds = tf.data.Dataset.random(seed=seed + 2).batch(4, drop_remainder=True)
        batched = tf.data.Dataset.zip(batched, seeds).map(
            graph_only(
                lambda batch, s: (
                    (dropped(batch[0][0], s[:2]), dropped(batch[0][1], s[2:])),
                    batch[1],
                )
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
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
    return batched.prefetch(tf.data.AUTOTUNE).with_options(options), kept, total


# -- vocabularies and datasets of a run ---------------------------------------------
def vocabulary_paths(output, tokenizer=None):
    """The source and target vocabulary files of a run: those of
    `tokenizer`, or (None) of whichever kind `output` holds."""
    if tokenizer is None:
        found = [
            name
            for name, suffix in TOKENIZERS.items()
            if os.path.exists(os.path.join(output, f"source.{suffix}"))
        ]
        tokenizer = found[0] if found else "sentencepiece"
    return [
        os.path.join(output, f"{side}.{TOKENIZERS[tokenizer]}") for side in ("source", "target")
    ]


def load_tokenizers(output, paths=None, vocab_size=8000, log=print, tokenizer=None, shared=False):
    """The run's source and target tokenizers. With `paths` (the data
    split), a missing vocabulary of `tokenizer` is first learned from the
    training split's side, or with `shared` from both sides at once (one
    vocabulary, written as both files)."""
    from keras_attention.tokenizers import build_vocabulary, load_tokenizer, train_sentencepiece

    tokenizers = []
    files = vocabulary_paths(output, tokenizer)
    for column, path in enumerate(files):
        learned = [other for other in files if os.path.exists(other)]
        if shared and learned and not os.path.exists(path):  # (killed between the two files)
            temporary = runs.temporary_path(path)
            shutil.copyfile(learned[0], temporary)
            os.replace(temporary, path)
        if not os.path.exists(path):
            if paths is None:
                raise UsageError(f"{path} is missing: train a model into --output {output} first")
            pairs = read_pairs(paths["train"])
            texts = [pair[column] for pair in pairs]
            side = ("source", "target")[column]
            if shared:  # both sides: each pair's two sentences
                texts = [text for pair in pairs for text in pair]
                side = "shared (source and target)"
            sentencepiece = path.endswith(".spm")
            learn = train_sentencepiece if sentencepiece else build_vocabulary
            log(f"learning the {side} vocabulary from {len(texts)} training sentences ...")
            started = time.perf_counter()
            try:
                size = learn(texts, path, vocab_size)
            except ValueError as error:
                raise UsageError(f"{error}: raise --vocab-size") from None
            unit = "SentencePiece (unigram) pieces" if sentencepiece else "WordPiece tokens"
            what = f"{size} {unit} from {len(texts)} texts"
            seconds = time.perf_counter() - started
            log(f"{side} vocabulary: {what} ({seconds:.0f}s) -> {path}")
        try:
            with runs.stderr_silenced():  # SentencePiece's C++ log says it uses identity rules
                tokenizers.append(load_tokenizer(path))
        except (ValueError, UnicodeDecodeError) as error:
            raise UsageError(
                f"{path} is not a vocabulary ({str(error).splitlines()[0]}): it is damaged; "
                f"train again with --overwrite"
            ) from None
    return tokenizers


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
    `subword_sampling` are the training batches' (`make_dataset`)."""
    made = []
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
