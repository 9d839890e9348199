"""A run's vocabularies and tokenizers (`load_tokenizers`) and whether its
numbers are protected (`numbers_to_protect`). Its corpus is read by
`corpus.py`, split by `splits.py` (`prepare`) and batched by `inputs.py`
(`datasets`, `validation_batches`).
"""

import os
import random
import shutil
import time

from .. import run_files, runs
from ..runs import UsageError
from .settings import TOKENIZERS

PROTECTED_SHARE = 0.5  # of the training pairs with numbers, for protection to be learned
# SentencePiece's threads: 1 for a sample of at most `ONE_THREAD_SENTENCES`
# texts (the file every earlier version learned from them), else a fixed 16
# on any machine: the thread count changes the file (`train_sentencepiece`).
ONE_THREAD_SENTENCES = 100_000
VOCABULARY_THREADS = 16


def graph_tokenizers():
    """Whether Keras runs on TensorFlow (`runs.keras_backend`) and
    TensorFlow Text is installed: a run then tokenises and protects
    numbers in the graph (`tf.data`, the exports), else with their Python
    twins (`SentencePieceEncoder`, `NumberRules`), which give the same ids
    and texts (on JAX or PyTorch, whether or not TensorFlow is there too)."""
    import importlib.util

    return runs.keras_backend() == "tensorflow" and all(
        importlib.util.find_spec(name) for name in ("tensorflow", "tensorflow_text")
    )


def number_rules():
    """The run's number protection where it protects numbers: the graph's
    `NumberProtection`, or (`graph_tokenizers` False) its twin `NumberRules`,
    both with `swap_separators`."""
    if not graph_tokenizers():
        from keras_attention.tokenizers.number_rules import NumberRules

        return NumberRules(swap_separators=True)
    from keras_attention.tokenizers.numbers import NumberProtection

    return NumberProtection(swap_separators=True)


def numbers_to_protect(config, train_path, log=print):
    """The `NumberProtection` a run trains and translates with: None with
    `--no-protect-numbers`, and None when fewer than `PROTECTED_SHARE` of
    the training pairs with numbers hold the same numbers on both sides
    (spelled-out dates -> ISO dates: `22 juin 1975` -> `1975-06-22`), since
    a model that never saw the placeholder cannot place it. Logs which.
    The counts are kept for the next start (`_number_counts`)."""
    if not config.protect_numbers:
        return None
    with_numbers, protectable = _number_counts(train_path)
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
    return number_rules()


def _number_counts(train_path):
    """`(training pairs with digits, pairs of them with the same numbers on
    both sides)` of `train_path`, counted once and kept beside it in
    `numbers-<hash of the file>.json` for the next start."""
    from keras_attention.tokenizers.number_rules import numbers_in, same_number

    digest = run_files.file_digest(train_path)
    folder = os.path.dirname(os.path.abspath(train_path))
    record = os.path.join(folder, f"numbers-{digest.hexdigest()[:16]}.json")
    if os.path.exists(record):
        try:
            counts = run_files.read_json(record, "the number count", required=("with", "same"))
            return counts["with"], counts["same"]
        except ValueError:
            pass  # damaged: counted again
    with_numbers = protectable = 0
    for source, target in _streamed_pairs(train_path):
        found = numbers_in(source), numbers_in(target)
        if found[0] or found[1]:
            with_numbers += 1
            protectable += len(found[0]) == len(found[1]) and all(map(same_number, *found))
    run_files.write_json_atomically(record, {"with": with_numbers, "same": protectable})
    return with_numbers, protectable


def _streamed_pairs(path):
    """`read_pairs`'s pairs of a split file, one at a time."""
    with open(path, encoding="utf-8-sig", newline="\n") as handle:
        for line in handle:
            if line.strip():
                yield tuple(line.rstrip("\n").split("\t", 1))


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


def vocabulary_sample(train_path, size, seed=0):
    """The `(source, target)` pairs a run's vocabularies learn from, and how
    many the split holds: every pair of `train_path` when it holds at most
    `size` (in file order), else a uniform sample of `size` of them
    (reservoir sampling with `random.Random(seed)`, the file streamed once,
    the sample kept in file order). The same file gives the same sample."""
    rng = random.Random(seed)
    kept, total = [], 0
    with open(train_path, encoding="utf-8-sig", newline="\n") as handle:
        for line in handle:
            if not line.strip():
                continue
            if len(kept) < size:
                kept.append((total, line))
            else:
                slot = rng.randrange(total + 1)
                if slot < size:
                    kept[slot] = (total, line)
            total += 1
    kept.sort()
    return [tuple(line.rstrip("\n").split("\t", 1)) for _, line in kept], total


def _learn_vocabulary(path, texts, vocab_size, of, side, log):
    """Learn the vocabulary at `path` (its suffix says which kind) from
    `texts`, `of` the split's texts; logs and returns how it went."""
    from keras_attention.tokenizers.pieces import train_sentencepiece

    sentencepiece = path.endswith(".spm")
    sampled = f" (a sample of {of})" if of > len(texts) else ""
    log(f"learning the {side} vocabulary from {len(texts)} training sentences{sampled} ...")
    started = time.perf_counter()
    try:
        if sentencepiece:
            threads = 1 if len(texts) <= ONE_THREAD_SENTENCES else VOCABULARY_THREADS
            size = train_sentencepiece(texts, path, vocab_size, num_threads=threads)
        else:
            from keras_attention.tokenizers import build_vocabulary  # TensorFlow Text's

            size = build_vocabulary(texts, path, vocab_size)
    except ValueError as error:
        raise UsageError(f"{error}: raise --vocab-size") from None
    unit = "SentencePiece (unigram) pieces" if sentencepiece else "WordPiece tokens"
    seconds = time.perf_counter() - started
    log(f"{side} vocabulary: {size} {unit} from {len(texts)} texts ({seconds:.0f}s) -> {path}")


def load_tokenizers(
    output, paths=None, vocab_size=8000, log=print, tokenizer=None, shared=False, sample=None
):
    """The run's source and target tokenizers. With `paths` (the data
    split), a missing vocabulary of `tokenizer` is first learned from the
    training split's side, or with `shared` from both sides at once (one
    vocabulary, written as both files): from `vocabulary_sample`'s
    `sample` pairs (`sample // 2` with `shared`: as many sentences), or
    every pair with None."""
    tokenizers, drawn = [], None
    files = vocabulary_paths(output, tokenizer)
    for column, path in enumerate(files):
        if not path.endswith(".spm") and not graph_tokenizers():
            raise UsageError(
                f"{path} is a WordPiece vocabulary, which tokenises in TensorFlow alone: "
                "install tensorflow and tensorflow-text"
            )
        learned = [other for other in files if os.path.exists(other)]
        if shared and learned and not os.path.exists(path):  # (killed between the two files)
            temporary = run_files.temporary_path(path)
            shutil.copyfile(learned[0], temporary)
            os.replace(temporary, path)
        if not os.path.exists(path):
            if paths is None:
                raise UsageError(f"{path} is missing: train a model into --output {output} first")
            if drawn is None:  # one sample for both sides
                pairs = None if sample is None else (sample // 2 if shared else sample)
                drawn = vocabulary_sample(paths["train"], float("inf") if pairs is None else pairs)
            pairs, total = drawn
            texts, side, of = [pair[column] for pair in pairs], ("source", "target")[column], total
            if shared:  # both sides: each pair's two sentences
                texts, side, of = (
                    [t for pair in pairs for t in pair],
                    "shared (source and target)",
                    2 * total,
                )
            _learn_vocabulary(path, texts, vocab_size, of, side, log)
        try:
            with runs.stderr_silenced():  # SentencePiece's C++ log says it uses identity rules
                tokenizers.append(_load_tokenizer(path))
        except (ValueError, UnicodeDecodeError) as error:
            raise UsageError(
                f"{path} is not a vocabulary ({str(error).splitlines()[0]}): it is damaged; "
                f"train again with --overwrite"
            ) from None
    return tokenizers


def _load_tokenizer(path):
    """The tokenizer of a vocabulary file: the graph's (`load_tokenizer`),
    or without TensorFlow (`graph_tokenizers`) SentencePiece's Python twin
    (WordPiece has none: `load_tokenizers` says so first)."""
    if graph_tokenizers():
        from keras_attention.tokenizers import load_tokenizer

        return load_tokenizer(path)
    from keras_attention.tokenizers.pieces import SentencePieceEncoder

    return SentencePieceEncoder(path)
