"""The in-process `Translator` against its own export, on a whole test split.

`keras_attention.serving.Translator.translate` (what `keras-attention-translate
translate` and `evaluate` print) and the exported `serving_default` signature,
reloaded with `tf.saved_model.load` as TF Serving runs it, must give the same
strings: both run the Translator's one graph function. This script checks it
on every sentence of a run's test split (the demo's: 960 Ding sentences) and
prints the number of sentences that differ (expected: 0) and both timings.

    python bench/translator_parity.py --output runs/demo --export saved_models/translator/1

`--alpha` and `--beam-width` must be the ones the export was written with
(the demo's: 1.2 and 4); the script reads them from the export's
`decoding_options` signature when not given.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402, F401  (the tokenizers' ops)
from keras_attention_recipes.translation.corpus import read_pairs
from keras_attention_recipes.translation.trained_run import (  # noqa: E402
    load_run,  # noqa: E402
    number_protection,
    translator_for,
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", required=True, help="a trained run (runs/demo)")
    parser.add_argument("--export", required=True, help="a version folder of its export")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args(argv)

    exported = tf.saved_model.load(args.export)
    recorded = exported.signatures["decoding_options"]()
    search = keras.saving.deserialize_keras_object(json.loads(recorded["search"].numpy()))
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    texts = [pair[0] for pair in read_pairs(os.path.join(args.output, "data", "test.tsv"))]
    translator = translator_for(
        model,
        source_tokenizer,
        target_tokenizer,
        config["max_length"],
        search,
        args.batch_size,
        number_protection(config),
    )

    started = time.perf_counter()
    in_process = translator.translate(texts)
    in_process_seconds = time.perf_counter() - started
    started = time.perf_counter()
    served = []
    for start in range(0, len(texts), args.batch_size):
        batch = tf.constant(texts[start : start + args.batch_size])
        result = exported.signatures["serving_default"](text=batch)
        served += [t.decode("utf-8") for t in result["translation"].numpy()]
    served_seconds = time.perf_counter() - started

    differ = [(t, a, b) for t, a, b in zip(texts, in_process, served) if a != b]
    print(f"search: {json.dumps(search.get_config(), sort_keys=True)}")
    print(
        f"{len(texts)} test sentences: {len(differ)} differ between Translator.translate "
        f"({in_process_seconds:.0f} s) and the export's serving_default ({served_seconds:.0f} s)"
    )
    for text, a, b in differ[:10]:
        print(f"  {text}\n    in process: {a}\n    exported:   {b}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
