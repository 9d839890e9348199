"""The data of a run, in one import: its corpus (`corpus.py`: the Ding
dictionary or a TSV file), its split (`splits.py`: `prepare`), its
`tf.data` pipelines (`pipeline.py`: `make_dataset`, `datasets`), and, here,
its vocabularies and tokenizers (`load_tokenizers`) and whether its
numbers are protected (`numbers_to_protect`).
"""

import os
import shutil
import time

from .. import runs
from .config import DING, TOKENIZERS, UsageError  # noqa: F401  (DING: imported from here too)

# The names of the modules below that the recipe, bench/ and the tests import from here.
from .corpus import (  # noqa: F401
    BOM,
    CorpusError,
    check_file,
    ding_alternative_pairs,
    ding_pairs,
    read_pairs,
    report_replaced,
    report_skipped,
    tsv_pairs,
    words_of,
)
from .pipeline import bucket_boundaries, datasets, make_dataset  # noqa: F401
from .splits import SPLITS, prepare, split_of  # noqa: F401

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
