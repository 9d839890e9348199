"""BLEU, chrF and number consistency of an exported translator on TSV test
sets, through the SavedModel's `serving_default` in plain TensorFlow
(what TF Serving runs), not through the recipe's in-process Translator.

    python bench/export_scores.py --export saved_models/translator/1 \\
        recipes/translation/testsets/everyday.tsv recipes/translation/testsets/numbers.tsv

Prints one line per file and the sentences whose numbers did not all come
through; `--json FILE` writes the scores.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="a translator's SavedModel folder")
    parser.add_argument("tests", nargs="+", help="TSV files of source<TAB>reference lines")
    parser.add_argument("--json", help="write the scores here")
    args = parser.parse_args(argv)

    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_attention.serving.numbers import numbers_in
    from recipes.translation.scores import corpus_scores, number_consistency
    from recipes.translation.text_io import read_pair_file

    serve = tf.saved_model.load(args.export).signatures["serving_default"]
    results = {}
    for path in args.tests:
        pairs = read_pair_file(path, "test", log=print)
        sources = [source for source, _ in pairs]
        translations = []
        for start in range(0, len(sources), 64):
            batch = tf.constant(sources[start : start + 64])
            translations += [t.decode("utf-8") for t in serve(text=batch)["translation"].numpy()]
        scores = {
            **corpus_scores(translations, [reference for _, reference in pairs]),
            **number_consistency(sources, translations),
            "sentences": len(pairs),
        }
        results[path] = scores
        consistency = scores["number_consistency"]
        print(
            f"{path}: {len(pairs)} sentences, BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}"
            + (
                f", numbers {scores['numbers_kept']}/{scores['number_groups']} ({consistency:.1f}%)"
                if consistency is not None
                else ""
            )
        )
        for source, translation in zip(sources, translations):
            lost = [
                n
                for n in numbers_in(source)
                if number_consistency([n], [translation])["numbers_kept"] == 0
            ]
            if lost:
                print(f"    numbers lost {lost}: {source} -> {translation}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
