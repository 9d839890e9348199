"""BLEU, chrF and number consistency of an exported translator on TSV test
sets, through the SavedModel's `serving_default` in plain TensorFlow
(what TF Serving runs), not through the recipe's in-process Translator.

    python bench/export_scores.py --export saved_models/translator/1 \\
        recipes/translation/testsets/everyday.tsv recipes/translation/testsets/numbers.tsv

Prints one line per file and the sentences whose numbers did not all come
through; `--json FILE` writes the scores. `--compare OTHER` scores a second
export (e.g. the int8 export of the same run) on the same files and prints
its BLEU/chrF difference and how many translations are identical:

    python bench/export_scores.py --export saved_models/translator/1 \\
        --compare saved_models/translator/2 runs/demo/data/test.tsv
"""

import argparse
import json


def saved_model_translator(export, signature="serving_default", batch_size=64):
    """`translate(texts) -> translations` through a translator export's
    text `signature` (loaded with `tf.saved_model.load`), in batches."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    serve = tf.saved_model.load(export).signatures[signature]

    def translate(texts):
        translations = []
        for start in range(0, len(texts), batch_size):
            batch = tf.constant(texts[start : start + batch_size])
            translations += [t.decode() for t in serve(text=batch)["translation"].numpy()]
        return translations

    return translate


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", required=True, help="a translator's SavedModel folder")
    parser.add_argument("tests", nargs="+", help="TSV files of source<TAB>reference lines")
    parser.add_argument("--json", help="write the scores here")
    parser.add_argument(
        "--compare", help="a second SavedModel: its scores, differences and identical translations"
    )
    args = parser.parse_args(argv)

    from keras_attention_recipes.translation.scores import corpus_scores, number_consistency
    from keras_attention_recipes.translation.text_io import read_pair_file

    from keras_attention.tokenizers.number_rules import numbers_in

    translate = saved_model_translator(args.export)
    other = saved_model_translator(args.compare) if args.compare else None
    results = {}
    for path in args.tests:
        pairs = read_pair_file(path, "test", log=print)
        sources = [source for source, _ in pairs]
        references = [reference for _, reference in pairs]
        translations = translate(sources)
        if other is not None:
            others = other(sources)
            base = corpus_scores(translations, references)
            second = corpus_scores(others, references)
            same = sum(a == b for a, b in zip(translations, others))
            results[f"{path} (compare)"] = {**second, "identical": same, "sentences": len(pairs)}
            print(
                f"{path}: --compare BLEU {second['bleu']:.2f} "
                f"({second['bleu'] - base['bleu']:+.2f}), "
                f"chrF {second['chrf']:.2f} ({second['chrf'] - base['chrf']:+.2f}), identical "
                f"translations {same}/{len(pairs)} ({100 * same / max(len(pairs), 1):.1f}%)"
            )
        scores = {
            **corpus_scores(translations, references),
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
