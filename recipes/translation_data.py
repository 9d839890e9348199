"""Parallel corpora for the translation recipes: the Ding dictionary's
German-English example sentences (Debian package `trans-de-en`) or any TSV
file, a deterministic train/validation/test split, and `tf.data` pipelines
with in-graph tokenisation.

Bad input never stops a run with a traceback. A malformed line (no tab, an
empty side, bytes that are not UTF-8, a carriage return inside the line) is
skipped, and reported with its line number. Every reader splits lines on
`\n` only, the rule `tf.data.TextLineDataset` follows, so the split files
and the pipelines agree on what a line is. A corpus too small for the
split stops the run with a message saying so.
"""

import hashlib
import json
import os
import re

DING = "/usr/share/trans/de-en"
DING_HINT = "install it with: sudo apt-get install -y trans-de-en (make demo and make test do this)"
SPLITS = ("train", "valid", "test")
MIN_PAIRS = {"train": 10, "valid": 1, "test": 1}
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>")


class CorpusError(Exception):
    """A problem with the user's corpus, reported as a message."""


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
    with open(path, encoding="utf-8", errors="replace", newline="\n") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            german, english = line.rstrip("\n").split(" :: ", 1)
            german, english = german.split(" | "), english.split(" | ")
            if len(german) != len(english):
                continue
            for de, en in zip(german, english):
                de, en = _clean(de.split("; ")[0]), _clean(en.split("; ")[0])
                if _is_sentence(de) and _is_sentence(en):
                    yield de, en


def tsv_pairs(path, problems):
    """`source<TAB>target` pairs of a TSV file, streamed; each skipped line
    appends a message to `problems`."""
    if not os.path.exists(path):
        raise CorpusError(f"--corpus {path}: no such file")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError as error:
                problems.append(
                    f"{path}:{number}: not valid UTF-8 "
                    f"({error.reason} at byte {error.start}); skipped"
                )
                continue
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


def prepare(output, corpus=None, reverse=False, limit=None, log=print):
    """Write `<output>/data/{train,valid,test}.tsv` once (reused by later
    commands on the same output); returns `{split: path}`."""
    data_dir = os.path.join(output, "data")
    meta_path = os.path.join(data_dir, "meta.json")
    meta = {
        "corpus": os.path.abspath(corpus) if corpus else DING,
        "reverse": reverse,
        "limit": limit,
    }
    paths = {split: os.path.join(data_dir, f"{split}.tsv") for split in SPLITS}
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as handle:
            if json.load(handle) == meta:
                return paths
    problems = []
    pairs = tsv_pairs(corpus, problems) if corpus else ding_pairs()
    os.makedirs(data_dir, exist_ok=True)
    counts = dict.fromkeys(SPLITS, 0)
    seen_train = set()
    held_out = []
    with open(paths["train"] + ".tmp", "w", encoding="utf-8") as train:
        for index, (source, target) in enumerate(pairs):
            if limit is not None and index >= limit:
                break
            if reverse:
                source, target = target, source
            split = split_of(source)
            if split == "train":
                train.write(f"{source}\t{target}\n")
                seen_train.update((("s", source), ("t", target)))
                counts["train"] += 1
            else:
                held_out.append((split, source, target))
    outputs = {
        split: open(paths[split] + ".tmp", "w", encoding="utf-8") for split in ("valid", "test")
    }
    leaked = 0
    for split, source, target in held_out:
        if ("s", source) in seen_train or ("t", target) in seen_train:
            leaked += 1  # the same sentence is in train: drop it from evaluation
            continue
        outputs[split].write(f"{source}\t{target}\n")
        counts[split] += 1
    for handle in outputs.values():
        handle.close()
    for problem in problems[:10]:
        log(f"warning: {problem}")
    if len(problems) > 10:
        log(f"warning: ... and {len(problems) - 10} more lines skipped")
    short = [s for s in SPLITS if counts[s] < MIN_PAIRS[s]]
    if short:
        total = sum(counts.values())
        raise CorpusError(
            f"the corpus gave {total} usable pairs ({counts}); "
            f"the {'/'.join(short)} split needs at least "
            f"{', '.join(str(MIN_PAIRS[s]) for s in short)} (about 90/5/5 of the pairs go to "
            "train/valid/test): use a larger corpus or a larger --limit"
        )
    for split in SPLITS:
        os.replace(paths[split] + ".tmp", paths[split])
    with open(meta_path, "w", encoding="utf-8") as handle:
        json.dump(meta, handle)
    log(
        f"corpus: {counts['train']} train, {counts['valid']} validation, "
        f"{counts['test']} test pairs"
        + (f" ({leaked} held-out pairs dropped: their sentence is in train)" if leaked else "")
        + (f", {len(problems)} lines skipped" if problems else "")
    )
    return paths


def read_pairs(path):
    """The `(source, target)` pairs of a split file, lines split on `\n` only."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if line.strip()]


def make_dataset(
    path, source_tokenizer, target_tokenizer, max_length, batch_size, shuffle=False, seed=0
):
    """`((source, target_in), target_out)` batches from a split file,
    tokenised in the graph: `target_in = [START] y`, `target_out = y [END]`.
    A pair longer than `max_length` pieces (either side) is left out.

    Returns `(dataset, kept, total)`: the pairs that fit are counted first,
    and the dataset carries that count as its cardinality (Keras then knows
    an epoch's length)."""
    import tensorflow as tf

    def encode(lines):
        parts = tf.strings.split(lines, "\t", maxsplit=1).to_tensor("", shape=[None, 2])
        source, source_cut = source_tokenizer.encode(parts[:, 0], max_length)
        target, target_cut = target_tokenizer.encode(parts[:, 1], max_length + 1)
        return source, target, tf.logical_not(tf.logical_or(source_cut, target_cut))

    lines = tf.data.TextLineDataset(path).batch(1024)
    kept, total = lines.map(encode).reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda counts, encoded: (
            counts[0] + tf.reduce_sum(tf.cast(encoded[2], tf.int64)),
            counts[1] + tf.cast(tf.size(encoded[2]), tf.int64),
        ),
    )
    kept, total = int(kept), int(total)

    def fitting(lines):
        source, target, keep = encode(lines)
        return tf.boolean_mask(source, keep), tf.boolean_mask(target, keep)

    pairs = lines.map(fitting, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    pairs = pairs.apply(tf.data.experimental.assert_cardinality(kept))
    if shuffle:
        pairs = pairs.shuffle(50_000, seed=seed, reshuffle_each_iteration=True)
    batches = pairs.batch(batch_size).map(
        lambda source, target: ((source, target[:, :-1]), target[:, 1:]),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    options = tf.data.Options()
    # One file per split: several workers shard it by element, not by file.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options), kept, total
