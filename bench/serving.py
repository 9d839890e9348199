"""Latency and throughput of an exported translator against the in-process
Keras model, in one run.

The exported `serving_default` (beam search) and `greedy` signatures are
loaded with `tf.saved_model.load`, as TF Serving would run them. The
in-process peer is the same model and tokenizers called from Python the way
the `translate` recipe does (tokenise, search, detokenise), once eagerly
and once wrapped in a `tf.function`. Batches of 1 and 32 real test
sentences, `--repeats` calls per contender, alternating; p50/p95 latency
and sentences per second.

    python bench/serving.py --output runs/demo [--repeats 20]

(`--output` is a trained run of `python -m recipes.translate`.)
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras_attention_recipes.translation.commands import export_command  # noqa: E402
from keras_attention_recipes.translation.config import TranslationConfig  # noqa: E402
from keras_attention_recipes.translation.corpus import read_pairs
from keras_attention_recipes.translation.trained_run import load_run  # noqa: E402

from keras_attention.seq2seq.generation import beam_search, greedy_search


def in_process(model, source_tokenizer, target_tokenizer, max_length, beam_width, greedy):
    def run(text):
        source, _ = source_tokenizer.encode(text, max_length)
        if greedy:
            tokens = greedy_search(model, source, max_length + 1)["tokens"]
        else:
            tokens = beam_search(model, source, max_length + 1, beam_width=beam_width)["tokens"][
                :, 0
            ]
        return target_tokenizer.decode(tokens)

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--output", default="runs/demo", help="a trained translate run")
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    export_dir = tempfile.mkdtemp()
    path = export_command(
        TranslationConfig.for_command(
            "export", output=args.output, export_dir=export_dir, beam_width=args.beam_width
        ).validate(),
        log=lambda _: None,
    )
    served = tf.saved_model.load(path)
    sentences = [pair[0] for pair in read_pairs(os.path.join(args.output, "data", "test.tsv"))]
    print(
        f"tensorflow {tf.__version__}, {os.cpu_count()} CPUs, "
        f"GPU: {bool(tf.config.list_physical_devices('GPU'))}; "
        f"{config['family']} from {args.output}, beam {args.beam_width}, "
        f"{args.repeats} calls each\n"
    )
    print(
        f"{'search':<8s} {'batch':>5s} {'path':<22s} "
        f"{'p50 ms':>8s} {'p95 ms':>8s} {'sent/s':>8s} {'ratio':>7s}"
    )
    for name, greedy in (("beam", False), ("greedy", True)):
        signature = served.signatures["greedy" if greedy else "serving_default"]
        eager = in_process(
            model, source_tokenizer, target_tokenizer, config["max_length"], args.beam_width, greedy
        )
        contenders = {
            "exported signature": lambda text, signature=signature: signature(text=text)[
                "translation"
            ],
            "in-process, eager": eager,
            "in-process, tf.function": tf.function(eager, autograph=False),
        }
        for batch in (1, 32):
            text = tf.constant(sentences[:batch])
            times = {key: [] for key in contenders}
            for fn in contenders.values():
                fn(text).numpy()  # trace / warm up
            for _ in range(args.repeats):
                for key, fn in contenders.items():
                    start = time.perf_counter()
                    fn(text).numpy()
                    times[key].append(time.perf_counter() - start)
            exported_p50 = statistics.median(times["exported signature"])
            for key, values in times.items():
                p50, p95 = statistics.median(values), float(np.percentile(values, 95))
                print(
                    f"{name:<8s} {batch:5d} {key:<22s} "
                    f"{p50 * 1e3:8.1f} {p95 * 1e3:8.1f} {batch / p50:8.1f} "
                    f"{p50 / exported_p50:7.2f}"
                )
    print("\nratio: the path's p50 latency / the exported signature's (> 1: the export is faster)")


if __name__ == "__main__":
    main()
