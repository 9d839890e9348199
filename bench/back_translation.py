"""Back-translation of the Ding dictionary's English side: the files of
the runs in RESULTS.md's earlier rounds ("Back-translating the dictionary"),
from a prepared demo run `runs/base` (its `data/{meta.json,train,valid,test,dictionary}.tsv`,
written at its first step). Seven steps; `reverse-corpus` and `dictionary`
are this script's, the others the recipe's own CLI:

    python bench/back_translation.py reverse-corpus --run runs/base \
        --held 40000 --out /tmp/bt/reverse.tsv
    keras-attention-translate train --output runs/reverse --corpus /tmp/bt/reverse.tsv ...
    keras-attention-translate translate --output runs/reverse --beam-width 1 \
        --input /tmp/bt/english.txt --output-file /tmp/bt/german.txt
    mkdir -p runs/bt/data
    cp runs/base/data/{meta.json,train.tsv,valid.tsv,test.tsv} runs/bt/data/
    python bench/back_translation.py dictionary --run runs/base \
        --translations /tmp/bt/german.txt --out runs/bt/data/dictionary.tsv
    keras-attention-translate demo --output runs/bt ...

`reverse-corpus` writes the English -> German corpus of the reverse model:
the run's training pairs and as many dictionary entries, each side
swapped, taken after the first `--held` entries (which it never sees), and
the English side of every dictionary entry, one a line, to `english.txt`
beside `--out`. `dictionary` writes the dictionary again with each German
side replaced by its back-translation (`--limit N`: the first N entries
only), blanks left out. The copied `meta.json` makes `demo` keep the
split and this dictionary (without it, `demo` writes the real one again).
The reverse model learns from the training split and the dictionary only,
never from a validation or test sentence: the recipe's split hashes the
source side, so `--reverse` on Ding would put some of the German ->
English test sentences in its training split.
"""

import argparse
import os

from keras_attention_recipes.translation.text_io import write_pair_file  # noqa: E402


def read_pairs(path):
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            pair = tuple(line.rstrip("\n").split("\t"))
            if len(pair) != 2:
                raise ValueError(
                    f"{path}:{number}: expected 'source<TAB>target'; received {line!r}"
                )
            pairs.append(pair)
    return pairs


def reverse_corpus(run, held, out):
    """The reverse model's corpus (see the module docstring); returns its
    pair count."""
    train = read_pairs(os.path.join(run, "data", "train.tsv"))
    dictionary = read_pairs(os.path.join(run, "data", "dictionary.tsv"))
    if held < 0 or held + len(train) > len(dictionary):
        raise ValueError(
            f"--held: expected 0 to {len(dictionary) - len(train)} (the dictionary's "
            f"{len(dictionary)} entries less the {len(train)} the reverse model learns from); "
            f"received {held}"
        )
    entries = dictionary[held : held + len(train)]
    pairs = [(english, german) for german, english in train + entries]
    write_pair_file(pairs, out)
    with open(os.path.join(os.path.dirname(out), "english.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{english}\n" for _, english in dictionary)
    return len(pairs)


def back_translated_dictionary(run, translations, out, limit=None):
    """The run's dictionary with back-translated German sides; returns
    `(pairs written, German sides the same as the real ones)`."""
    if limit is not None and limit < 1:
        raise ValueError(f"--limit: expected a positive number of entries; received {limit}")
    dictionary = read_pairs(os.path.join(run, "data", "dictionary.tsv"))
    with open(translations, encoding="utf-8") as handle:
        german = [line.rstrip("\n").strip() for line in handle]
    if limit is not None:
        dictionary, german = dictionary[:limit], german[:limit]
    if len(german) != len(dictionary):
        raise ValueError(
            f"--translations: expected a line for each of the {len(dictionary)} dictionary "
            f"entries; received {len(german)} lines in {translations}"
        )
    pairs = [(new, english) for new, (_, english) in zip(german, dictionary) if new]
    write_pair_file(pairs, out)
    return len(pairs), sum(new == old for new, (old, _) in zip(german, dictionary))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    corpus = commands.add_parser("reverse-corpus")
    corpus.add_argument("--run", required=True)
    corpus.add_argument("--held", type=int, default=40000)
    corpus.add_argument("--out", required=True)
    table = commands.add_parser("dictionary")
    table.add_argument("--run", required=True)
    table.add_argument("--translations", required=True)
    table.add_argument("--out", required=True)
    table.add_argument("--limit", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        if args.command == "reverse-corpus":
            count = reverse_corpus(args.run, args.held, args.out)
            print(f"{count} English -> German pairs -> {args.out}")
        else:
            count, same = back_translated_dictionary(
                args.run, args.translations, args.out, args.limit
            )
            print(f"{count} back-translated entries ({same} German sides unchanged) -> {args.out}")
    except (OSError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")


if __name__ == "__main__":
    main()
