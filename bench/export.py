"""What an export costs: `Translator.export` of the demo's model, with each
signature traced once (`traced_once`, the library's way) against the plain
`tf.function` endpoints that Keras's `ExportArchive` documents, which
`tf.saved_model.save` traces a second time.

Both write the same seven signatures of the same randomly initialised model
(the recipe's `build_model` of `demo`'s settings and `--flags`; tracing
does not depend on the weights) over a word vocabulary of the run's size.
Each export is a fresh `Translator`, so each traces from nothing; the two
ways alternate (which goes first alternates too), `--repeats` rounds, and
the report gives medians and the median of the paired ratios, with the
size of `saved_model.pb` and the median time of `tf.saved_model.load` of
each export in a fresh process and of its `serving_default` on 16
sentences there (the same weights, so the same translations).

    python bench/export.py [--repeats 3] [--flags="--family transformer"]
"""

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import keras

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# In a fresh process: the seconds of `tf.saved_model.load`, then the median
# seconds of `serving_default` on 16 sentences (after a first call, in which
# TensorFlow optimises the graph).
LOAD = """
import statistics, sys, time, tensorflow as tf, tensorflow_text
start = time.perf_counter()
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
loaded = time.perf_counter() - start
text = tf.constant([f"w{i} w{i + 1} w{i + 2}" for i in range(16)])
serve(text=text)
calls = []
for _ in range(15):
    start = time.perf_counter()
    serve(text=text)["translation"].numpy()
    calls.append(time.perf_counter() - start)
print(loaded, statistics.median(calls))
"""


@contextlib.contextmanager
def saved_twice():
    """The export as it was before `traced_once`: the endpoints are the
    traced `tf.function`s themselves, which the save traces again."""
    from keras_attention.serving import translator

    def plain(function):
        function.get_concrete_function()
        return function

    kept, translator.traced_once = translator.traced_once, plain
    try:
        yield
    finally:
        translator.traced_once = kept


def translator_of(flags, directory):
    """A `Translator` of the demo's model (with `flags`) and its search."""
    from keras_attention_recipes import translate
    from keras_attention_recipes.translation.model import build_model
    from keras_attention_recipes.translation.trained_run import search_from_config
    from keras_attention_recipes.translation.training import train_settings

    from keras_attention.serving import Translator
    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    config = translate.check(translate.parser().parse_args(["demo", *flags]))
    size = int(config.vocab_size)
    vocabulary = os.path.join(directory, "vocab.txt")
    if not os.path.exists(vocabulary):
        with open(vocabulary, "w") as handle:
            handle.write("\n".join(RESERVED + [f"w{i}" for i in range(size - len(RESERVED))]))
    tokenizer = SubwordTokenizer(vocabulary)
    keras.utils.set_random_seed(0)  # the same weights for both ways: the same translations
    _, spec = train_settings(config)
    spec["total_steps"] = 1000  # a cosine schedule's end; not used here
    model = build_model(spec, size, size)
    search = search_from_config(config)
    return Translator(model, tokenizer, tokenizer, search, max_source_length=config.max_length)


def one_export(flags, directory, name):
    """(seconds, saved_model.pb bytes, path) of one fresh Translator's export."""
    translator = translator_of(flags, directory)
    start = time.perf_counter()
    path = translator.export(os.path.join(directory, "exports"), name)
    seconds = time.perf_counter() - start
    return seconds, os.path.getsize(os.path.join(path, "saved_model.pb")), path


def load_and_serve_seconds(path):
    """(load s, median s of a 16-sentence `serving_default` call) of the
    export at `path`, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", LOAD, path], capture_output=True, text=True, check=True
    )
    loaded, served = result.stdout.split()[-2:]
    return float(loaded), float(served)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flags", default="", help="more `demo` flags, e.g. '--hidden-dim 256'")
    args = parser.parse_args()
    from keras_attention_recipes.runs import import_tensorflow_quietly

    import_tensorflow_quietly()
    flags = shlex.split(args.flags)
    # Each way: (its export's model name, the context it exports in).
    ways = {
        "traced once": ("once", contextlib.nullcontext),
        "saved twice (before)": ("twice", saved_twice),
    }
    rows = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as directory:
        for repeat in range(args.repeats):
            for way in list(ways)[:: 1 if repeat % 2 else -1]:
                model_name, context = ways[way]
                with context():
                    rows[way].append(one_export(flags, directory, model_name))
        if rows["traced once"][-1][1] == rows["saved twice (before)"][-1][1]:
            raise SystemExit("the two ways wrote the same saved_model.pb: the patch did not apply")
        report = {"flags": flags, "repeats": args.repeats}
        for name, runs in rows.items():
            timings = [load_and_serve_seconds(r[2]) for r in runs]
            report[name] = {
                "export s (median)": round(statistics.median(r[0] for r in runs), 2),
                "export s (each)": [round(r[0], 2) for r in runs],
                "saved_model.pb bytes": runs[-1][1],
                "load s in a fresh process (median)": round(
                    statistics.median(timing[0] for timing in timings), 2
                ),
                "serving_default s, 16 sentences (median)": round(
                    statistics.median(timing[1] for timing in timings), 3
                ),
            }
        once, twice = rows["traced once"], rows["saved twice (before)"]
        report["export time, before / now (median of paired ratios)"] = round(
            statistics.median(b[0] / a[0] for a, b in zip(once, twice)), 2
        )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
