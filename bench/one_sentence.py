"""Where the time of translating one sentence from a shell goes.

Each repeat runs in a fresh interpreter (as `keras-attention-translate
translate --output RUN "..."` does) and times its stages, wall clock and
CPU (all threads): importing TensorFlow, Keras and the library, loading
the tokenizers and `model.keras` (compiled as 0.2.x did, and with
`compile=False` as the recipe now does), building the `Translator`, tracing
its `serving_default` search, the first call (TensorFlow optimises the
graph then) and a second call of 64 sentences. Medians over `--repeats`.

    python bench/one_sentence.py --output runs/demo [--repeats 5]

The end-to-end command is timed separately with the shell's `time`
(BENCHMARKS.md, "Translating one sentence").
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCE = "Ich habe keine Zeit."


def stages(output, compile_model):
    """One fresh process's stages: [(name, wall s, cpu s)]."""
    marks, last = [], [time.perf_counter(), time.process_time()]

    def mark(name):
        now = [time.perf_counter(), time.process_time()]
        marks.append((name, now[0] - last[0], now[1] - last[1]))
        last[:] = now

    from keras_attention_recipes.runs import import_tensorflow_quietly

    import_tensorflow_quietly()
    mark("import tensorflow")
    import keras

    import keras_attention  # noqa: F401

    mark("import keras + keras_attention")
    from keras_attention_recipes.translation import trained_run
    from keras_attention_recipes.translation.config import TranslationConfig
    from keras_attention_recipes.translation.data import load_tokenizers

    source, target = load_tokenizers(output)
    mark("load tokenizers")
    model = keras.saving.load_model(os.path.join(output, "model.keras"), compile=compile_model)
    mark(f"load model.keras (compile={compile_model})")
    with open(os.path.join(output, "config.json"), encoding="utf-8") as handle:
        run_config = json.load(handle)
    search = trained_run.search_from_config(TranslationConfig(command="translate"))
    translator = trained_run.translator_for(
        model,
        source,
        target,
        run_config["max_length"],
        search,
        numbers=trained_run.number_protection(run_config),
    )
    mark("Translator()")
    translator.function("serving_default")
    mark("trace serving_default")
    translator.translate([SENTENCE])
    mark("first call (1 sentence)")
    translator.translate([SENTENCE] * 64)
    mark("second call (64 sentences)")
    return marks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="a trained run of the recipe")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", choices=["compiled", "uncompiled"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(stages(args.output, args.child == "compiled")))
        return
    results = {"compiled": [], "uncompiled": []}
    for _ in range(args.repeats):
        for kind in results:  # alternating
            done = subprocess.run(
                [sys.executable, __file__, "--output", args.output, "--child", kind],
                capture_output=True,
                text=True,
                check=True,
            )
            results[kind].append(json.loads(done.stdout.splitlines()[-1]))
    for kind, runs in results.items():
        print(f"\n{kind}: median of {len(runs)} fresh processes")
        print(f"{'stage':38s} {'wall s':>7s} {'cpu s':>7s}")
        for index, (name, _, _) in enumerate(runs[0]):
            wall = statistics.median(run[index][1] for run in runs)
            cpu = statistics.median(run[index][2] for run in runs)
            print(f"{name:38s} {wall:7.2f} {cpu:7.2f}")
        totals = [sum(stage[1] for stage in run[:-1]) for run in runs]
        print(f"{'total to the first translation':38s} {statistics.median(totals):7.2f}")


if __name__ == "__main__":
    main()
