"""The data split of a run: `<output>/data/{train,valid,test}.tsv`, made
once from the corpus (`prepare`) by a hash of each source sentence
(`split_of`), with the Ding corpus's alternatives and dictionary entries
as extra training data. A corpus too small for the split stops the run
with a message saying so.
"""

import array
import hashlib
import itertools
import os
import random

from .. import run_files
from .corpus import (
    CorpusError,
    check_file,
    ding_alternative_pairs,
    ding_dictionary_pairs,
    ding_pairs,
    read_pairs,
    report_skipped,
    tsv_pairs,
    words_of,
)
from .settings import DING, corpus_key

SPLITS = ("train", "valid", "test")
MIN_PAIRS = {"train": 10, "valid": 1, "test": 1}
# `data/meta.json`'s record of the corpus file's bytes (`corpus_fingerprint`);
# a split made before it has none, and its corpus is not checked.
CORPUS_FILE = "corpus_file"


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
        recorded = run_files.read_json(
            meta_path,
            "the data split's record",
            remedy=f"delete {data_dir} to prepare the same seeded split again from the corpus",
        )
        if {key: value for key, value in recorded.items() if key != CORPUS_FILE} == meta:
            _check_unchanged(corpus, recorded, meta_path, output)
            return paths
    if corpus:
        check_file(corpus, "--corpus")
    if os.path.isfile(corpus or DING):  # fingerprinted before it is read: a later edit shows
        meta[CORPUS_FILE] = corpus_fingerprint(corpus or DING)
    problems = []

    def pairs(problems):
        return tsv_pairs(corpus, problems) if corpus else ding_pairs()

    os.makedirs(data_dir, exist_ok=True)
    # Unique temporaries (`run_files.temporary_path`), renamed into place at the end.
    written = [name for name in (*SPLITS, "dictionary") if name in paths]
    temporaries = {name: run_files.temporary_path(paths[name]) for name in written}
    try:
        counts, leaked = _write_data(
            pairs, problems, temporaries, reverse, limit, dictionary, alternatives, log
        )
        for name in written:
            os.replace(temporaries[name], paths[name])
    finally:
        for temporary in temporaries.values():
            if os.path.exists(temporary):
                os.remove(temporary)
    run_files.write_json_atomically(meta_path, meta)
    log(
        f"corpus: {counts['train']} train, {counts['valid']} validation, "
        f"{counts['test']} test pairs"
        + (f" ({leaked} held-out pairs dropped: their sentence is in train)" if leaked else "")
        + (f", {len(problems)} lines skipped" if problems else "")
    )
    return paths


def corpus_fingerprint(path):
    """What `data/meta.json` records of the corpus file at `path`: its
    size, modification time and the SHA-256 of its bytes (one streamed
    pass, about a second for a million pairs)."""
    status = os.stat(path)
    digest = run_files.file_digest(path).hexdigest()
    return {"size": status.st_size, "mtime_ns": status.st_mtime_ns, "sha256": digest}


def _check_unchanged(corpus, recorded, meta_path, output):
    """`CorpusError` when the corpus (`corpus`, else Ding's) is not the
    file the run's split was made from (`recorded`: its `meta.json`): the
    split would be the old file's, without a word. The bytes are hashed
    only when the size is the same and the time is not (a file touched or
    restored keeps its split; its new time is recorded). A split recorded
    without the fingerprint, or a corpus that is gone, is not checked."""
    path = corpus or DING
    before = recorded.get(CORPUS_FILE)
    if not isinstance(before, dict) or not os.path.isfile(path):
        return
    status = os.stat(path)
    if (status.st_size, status.st_mtime_ns) == (before.get("size"), before.get("mtime_ns")):
        return
    if status.st_size == before.get("size"):
        now = corpus_fingerprint(path)
        if now["sha256"] == before.get("sha256"):
            run_files.write_json_atomically(meta_path, {**recorded, CORPUS_FILE: now})
            return
    name = f"--corpus {corpus}" if corpus else f"the Ding corpus {DING} (Debian's trans-de-en)"
    raise CorpusError(
        f"{name} changed since the run in {output} prepared its data from it (its size or "
        f"bytes differ from those recorded in {meta_path}): the run would train on the old "
        "file's split; pass --overwrite to prepare the data again from the file as it is "
        "(the run starts over), or restore the file to resume the run"
    )


def _write_data(pairs, problems, temporaries, reverse, limit, dictionary, alternatives, log):
    """Write the split of `pairs` to the `temporaries` (`_write_splits`),
    then warn of the `problems` its reading met, refuse splits that came out
    too small, and add the alternatives to train and the dictionary entries
    (`dictionary` and `alternatives` as `prepare` takes them). Returns
    `(counts, held-out pairs dropped)`.

    `pairs` is a function giving a new iterator of the corpus's pairs: the
    distinct sources that explain a split too small are counted by
    reading the corpus again, only then."""
    held_out_path = run_files.temporary_path(temporaries["train"])
    try:
        counts, leaked = _write_splits(pairs(problems), temporaries, reverse, limit, held_out_path)
        report_skipped(problems, log)
        short = [s for s in SPLITS if counts[s] < MIN_PAIRS[s]]
        if short:
            sources = _distinct_sources(pairs, reverse, limit)
            raise CorpusError(_too_small(counts, short, sources, leaked))
        if alternatives or dictionary:
            held_out_words = {
                words_of(text) for _, *texts in _held_out(held_out_path) for text in texts
            }
    finally:
        os.remove(held_out_path)
    if alternatives:
        added = _add_alternatives(temporaries["train"], held_out_words, reverse, limit)
        log(f"alternatives: {added} more training pairs from the entries' other sentences")
    if dictionary:
        entries = _write_dictionary(temporaries["dictionary"], held_out_words, reverse)
        log(f"dictionary: {entries} word and phrase entries as extra training pairs")
    return counts, leaked


def _write_dictionary(path, held_out_words, reverse):
    """Write to `path` the `ding_dictionary_pairs` in a fixed random order,
    none whose words (either side) are in `held_out_words`; returns how many."""
    entries = [
        (target, source) if reverse else (source, target)
        for source, target in ding_dictionary_pairs()
        if words_of(source) not in held_out_words and words_of(target) not in held_out_words
    ]
    random.Random(0).shuffle(entries)
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in entries)
    return len(entries)


def sentence_hash(text):
    """A 64-bit hash of a sentence (the leak check's: sets of these instead
    of the sentences)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def _first(pairs, reverse, limit):
    """The first `limit` of `pairs`, each `(target, source)` with `reverse`."""
    for source, target in itertools.islice(pairs, limit):
        yield (target, source) if reverse else (source, target)


def _write_splits(pairs, temporaries, reverse, limit, held_out_path):
    """Write the pairs' splits (`split_of`) to the `temporaries`, streamed:
    train as it comes, the held-out pairs first to `held_out_path`
    (`split<TAB>source<TAB>target`), then, once every train target is
    known, to valid and test, each dropped whose target is a train target
    (its source cannot be a train source: the split is by source). Only
    the train targets' 64-bit hashes (`sentence_hash`) are kept, in a
    NumPy array. Returns `(counts, held-out pairs dropped)`."""
    import numpy as np

    counts = dict.fromkeys(SPLITS, 0)
    train_targets = array.array("Q")
    with (
        open(temporaries["train"], "w", encoding="utf-8") as train,
        open(held_out_path, "w", encoding="utf-8") as held_out,
    ):
        for source, target in _first(pairs, reverse, limit):
            split = split_of(source)
            if split == "train":
                train.write(f"{source}\t{target}\n")
                train_targets.append(sentence_hash(target))
                counts["train"] += 1
            else:
                held_out.write(f"{split}\t{source}\t{target}\n")
    train_targets = np.unique(np.frombuffer(train_targets, np.uint64))
    leaked = 0
    with (
        open(temporaries["valid"], "w", encoding="utf-8") as valid,
        open(temporaries["test"], "w", encoding="utf-8") as test,
    ):
        outputs = {"valid": valid, "test": test}
        for split, source, target in _held_out(held_out_path):
            found = np.searchsorted(train_targets, np.uint64(sentence_hash(target)))
            if found < len(train_targets) and train_targets[found] == sentence_hash(target):
                leaked += 1  # the same sentence is in train: drop it from evaluation
                continue
            outputs[split].write(f"{source}\t{target}\n")
            counts[split] += 1
    return counts, leaked


def _held_out(path):
    """The `(split, source, target)` of `_write_splits`'s held-out file."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        for line in handle:
            yield tuple(line.rstrip("\n").split("\t", 2))


def _distinct_sources(pairs, reverse, limit):
    """How many distinct source sentences the corpus's first `limit` pairs
    hold (their hashes counted), read again."""
    return len({sentence_hash(source) for source, _ in _first(pairs([]), reverse, limit)})


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
            if pair in have or {words_of(pair[0]), words_of(pair[1])} & held_out_words:
                continue
            have.add(pair)
            added.append(pair)
    with open(train_path, "a", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in added)
    return len(added)


def _too_small(counts, short, sources, leaked=0):
    """Why the splits `short` got too few pairs, with the numbers: all the
    pairs have one source sentence; held-out pairs were dropped since their
    target is a training target (`leaked` of them); or too few distinct
    source sentences (every copy of one lands in the same split, so a
    split gets about 5% of the distinct ones, not of the pairs)."""
    total = sum(counts.values()) + leaked  # the usable pairs read
    needs = (
        f"the {'/'.join(short)} split needs at least {', '.join(str(MIN_PAIRS[s]) for s in short)}"
    )
    if sources == 1 and total > 1:
        return (
            f"the corpus gave {total} usable pairs ({counts}) but only 1 distinct source "
            f"sentence, and {needs}: all {total} pairs have the same source sentence, and every "
            "copy of a sentence lands in the same split (so that no held-out sentence is "
            "trained on), so the duplicates all land in one split; use a corpus of different "
            "sentences"
        )
    repeats = f", {total - sources} of them repeating a source sentence" if sources < total else ""
    gave = (
        f"the corpus gave {total} usable pairs with {sources} distinct source "
        f"sentence{'s' if sources != 1 else ''}{repeats}, split {counts}"
    )
    if leaked:
        return (
            f"{gave} after {leaked} held-out pair{'s' if leaked != 1 else ''} "
            f"{'were' if leaked != 1 else 'was'} dropped since their target sentence is also a "
            f"training pair's (so that no held-out sentence is trained on), and {needs}: use a "
            "corpus with more different target sentences"
        )
    return (
        f"{gave}, and {needs}: the split is by source sentence, about 90/5/5 of the distinct "
        f"ones to train/valid/test (every copy of one to the same split), so {sources} are too "
        "few: use a corpus with more different sentences (a few hundred or more) or a larger "
        "--limit"
    )
