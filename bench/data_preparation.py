"""The translation recipe's data preparation on large corpora: everything
`keras-attention-translate train --corpus FILE` does before its first
training step (the split, both SentencePiece vocabularies from their
sample, the number check, the training shards and both datasets), timed
on synthetic corpora of each size.

The corpora are made from the Ding dictionary's word and phrase entries
(`ding_dictionary_pairs`): one to three entries joined per line, at most
20 words a side, drawn with a fixed seed. Each size is prepared in a fresh
process, which reports its wall time, its CPU time (`getrusage`, itself
and its children), its peak resident memory (`ru_maxrss`) and the shards'
bytes; a second process then starts again on the prepared run (what every
resume, tuning trial and worker does). CPU time and memory do not depend
on what else the machine runs; the wall time does, so the load average
is reported beside it.

    python bench/data_preparation.py [--sizes 100000 1000000] [--work DIR]
"""

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_corpus(path, pairs, seed=0):
    """Write `pairs` synthetic lines (see the module's docstring) to `path`."""
    from keras_attention_recipes.translation.corpus import ding_dictionary_pairs

    entries = list(ding_dictionary_pairs())
    rng = random.Random(seed)
    temporary = path + ".partial"
    with open(temporary, "w", encoding="utf-8") as handle:
        for _ in range(pairs):
            chosen = [entries[rng.randrange(len(entries))] for _ in range(rng.randint(1, 3))]
            sides = [
                " ".join(" ".join(entry[side] for entry in chosen).split()[:20]) for side in (0, 1)
            ]
            handle.write(f"{sides[0]}\t{sides[1]}\n")
    os.replace(temporary, path)


def prepare_once(corpus, output, vocab_size, max_length, batch_tokens):
    """What `train` does before its first step, with its defaults; returns
    the seconds of each part."""
    from keras_attention_recipes.runs import import_tensorflow_quietly

    import_tensorflow_quietly()
    from keras_attention_recipes.translation.config import TranslationConfig
    from keras_attention_recipes.translation.data import load_tokenizers, numbers_to_protect
    from keras_attention_recipes.translation.inputs import datasets
    from keras_attention_recipes.translation.splits import prepare

    config = TranslationConfig(corpus=corpus, output=output)
    seconds, started = {}, time.perf_counter()

    def lap(name):
        nonlocal started
        now = time.perf_counter()
        seconds[name] = round(now - started, 1)
        started = now

    paths = prepare(output, corpus, log=lambda *_: None)
    lap("split")
    tokenizers = load_tokenizers(output, paths, vocab_size, print, sample=config.vocab_sample)
    lap("vocabularies")
    numbers = numbers_to_protect(config, paths["train"], print)
    lap("numbers")
    args = (paths, *tokenizers, max_length, 64, 0, print)
    datasets(*args, batch_tokens=batch_tokens, numbers=numbers)
    lap("shards and datasets")
    return seconds


def child(args):
    """Prepare one corpus in this process and print its measurements."""
    started = time.perf_counter()
    seconds = prepare_once(args.corpus, args.output, args.vocab_size, 32, args.batch_tokens)
    wall = time.perf_counter() - started
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    data = os.path.join(args.output, "data")
    shard_bytes = sum(
        os.path.getsize(os.path.join(folder, name))
        for folder in (os.path.join(data, entry) for entry in os.listdir(data))
        if os.path.isdir(folder) and os.path.basename(folder).startswith("shards-")
        for name in os.listdir(folder)
    )
    print(
        "RESULT "
        + json.dumps(
            {
                "wall_s": round(wall, 1),
                "cpu_s": round(sum(u.ru_utime + u.ru_stime for u in usage), 1),
                "peak_rss_mb": round(usage[0].ru_maxrss / 1024),
                "shard_bytes": shard_bytes,
                "parts_s": seconds,
                "load": open("/proc/loadavg").read().split()[:3],
            }
        ),
        flush=True,
    )


def measure(corpus, output, args):
    """Run `child` in a fresh process; its measurements."""
    command = [sys.executable, __file__, "--child", "--corpus", corpus, "--output", output]
    command += ["--vocab-size", str(args.vocab_size), "--batch-tokens", str(args.batch_tokens)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not found:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return json.loads(found[-1][len("RESULT ") :])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--work", default="/tmp/data-preparation-bench")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-tokens", type=int, default=2048)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    os.makedirs(args.work, exist_ok=True)
    avx512 = "avx512f" in open("/proc/cpuinfo").read()
    print(f"{os.cpu_count()} CPUs, AVX-512: {'yes' if avx512 else 'no'}", flush=True)
    print(
        "| pairs | wall s | CPU s | peak RSS MB | shard MB | parts (s) | load before, after | "
        "again: wall s, CPU s, parts (s) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        corpus = os.path.join(args.work, f"corpus-{size}.tsv")
        if not os.path.exists(corpus):
            make_corpus(corpus, size)
        output = os.path.join(args.work, f"run-{size}")
        subprocess.run(["rm", "-rf", output], check=True)
        load = open("/proc/loadavg").read().split()[0]
        first = measure(corpus, output, args)
        again = measure(corpus, output, args)
        parts, again_parts = (
            ", ".join(f"{name} {value}" for name, value in run["parts_s"].items())
            for run in (first, again)
        )
        print(
            f"| {size:,} | {first['wall_s']} | {first['cpu_s']} | {first['peak_rss_mb']} | "
            f"{first['shard_bytes'] / 1e6:.0f} | {parts} | {load}, {first['load'][0]} | "
            f"{again['wall_s']}, {again['cpu_s']}, {again_parts} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
