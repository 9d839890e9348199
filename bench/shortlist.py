"""A vocabulary shortlist against CTranslate2's vocabulary map, like for
like: speed on a random model, and what it costs a trained run.

Speed (default): the model of `--model` (as `bench/decoding.py`: `base`,
`demo-transformer` or `bench`), random weights, and a random table
(`--depth` candidates per source piece, the `--frequent` pieces always
listed). CTranslate2 runs the same weights (`convert_to_ctranslate2`,
sources without added `[START]`/`[END]`, the table as its `vmap.txt`); for
each cell (`--cells`, search:batch) our shortlist's size is the number of
pieces CTranslate2's map lists for that batch (its fixed pieces, the
frequent ones and every candidate of the batch's source pieces) plus
`<pad>`, so both decode over the same pieces (checked). Systems, each with
and without the shortlist: our XLA SavedModel searches (float32, and the
weight-only int8 copy), CTranslate2 float32 and int8. Every row generates
exactly `--length` tokens (as `bench/decoding.py`). Rounds alternate the
systems, `--repeats` of them, each at least `--min-seconds`; tok/s and
ratios are medians.

Quality (`--run FOLDER`, a trained Transformer or ConvS2S run of the
recipe): the run exported with and without `--shortlist` (`--sizes`), the
Ding test split (or the run's) translated through each SavedModel's
`serving_default` in requests of `--batch` texts; prints BLEU and chrF
(sacrebleu), the share of translations identical to the full export's, and
the hit rate: the share of the full export's output pieces that its
request's list holds.

    python bench/shortlist.py --model base [--cells greedy:1,beam4:32] [--repeats 5]
    python bench/shortlist.py --run runs/transformer [--sizes 500,1000]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attention.seq2seq import Shortlist  # noqa: E402
from keras_attention.serving.records import quantized_copy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from decoding import (  # noqa: E402
    MODELS,
    build_model,
    cpu_line,
    mean_per_round,
    parse_cells,
    timed,
    use_threads,
)
from decoding_searches import check_lengths, export_searches  # noqa: E402
from timing import median_ratio  # noqa: E402

RESERVED = 4


def random_table(vocab, depth, frequent, seed=0):
    """A `Shortlist`'s table over `vocab` pieces a side: `depth` random
    candidates per source piece, the frequency order a random permutation."""
    rng = np.random.default_rng(seed)
    candidates = rng.integers(RESERVED, vocab, (vocab, depth)).astype("int32")
    candidates[:RESERVED] = -1
    frequency = np.concatenate([np.arange(RESERVED), RESERVED + rng.permutation(vocab - RESERVED)])
    return candidates, frequency, frequent


def mapped_pieces(table, source):
    """The ids CTranslate2's vocabulary map lists for the batch `source`:
    `<s>`, `</s>`, `<unk>`, the frequent pieces and the candidates of every
    source piece, and `<pad>`, which our lists always hold."""
    candidates, frequency, frequent = table
    listed = set(range(RESERVED)) | set(frequency[:frequent].tolist())
    found = candidates[np.unique(source)]
    return listed | set(found[found >= 0].tolist())


def ct2_folder(model, table, directory):
    """Our model converted to CTranslate2, the table as its `vmap.txt`."""
    from keras_attention.serving.ctranslate2 import convert_to_ctranslate2

    shortlist = Shortlist(*table[:2], size=RESERVED + table[2] + 1, frequent=table[2])
    return convert_to_ctranslate2(model, directory, source_bos_eos=False, shortlist=shortlist)


def ct2_system(translator, tokens, search, length, vmap):
    beam = 1 if search == "greedy" else 4
    options = dict(beam_size=beam, min_decoding_length=length, max_decoding_length=length)

    def call():
        return translator.translate_batch(tokens, use_vmap=vmap, **options)

    return call


def speed(args):
    import ctranslate2

    from keras_attention.serving.ctranslate2_spec import default_vocabulary

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    rows = max(batch for _, batch in args.cells)
    source = rng.integers(RESERVED, args.vocab, (rows, args.source_length)).astype("int32")
    model = build_model(args)
    int8 = quantized_copy(model, "int8")
    table = random_table(args.vocab, args.depth, args.frequent)
    workdir = tempfile.mkdtemp(prefix="bench-shortlist-")
    try:
        folder = ct2_folder(model, table, os.path.join(workdir, "ct2"))
        names = default_vocabulary(args.vocab, {0: "[PAD]", 1: "[START]", 2: "[END]", 3: "[UNK]"})
        translators = {
            kind: ctranslate2.Translator(
                folder, device="cpu", compute_type=kind, intra_threads=args.threads
            )
            for kind in ("float32", "int8")
        }
        print(
            f"keras {keras.__version__}, tensorflow {tf.__version__}, ctranslate2 "
            f"{ctranslate2.__version__}, {cpu_line()}, {args.threads} threads each"
        )
        print(
            f"{args.model}: Transformer {args.layers}+{args.layers}, width {args.width}, "
            f"vocabulary {args.vocab}; source {args.source_length}, {args.length} tokens a row; "
            f"table: {args.depth} candidates a source piece, {args.frequent} always; "
            f"{args.repeats} repeats, medians\n"
        )
        for search, batch in args.cells:
            x = source[:batch]
            listed = mapped_pieces(table, x)
            shortlist = Shortlist(*table[:2], size=len(listed), frequent=table[2])
            columns = set(np.asarray(shortlist.columns(x)).tolist())
            if columns != listed:
                raise AssertionError(
                    f"ours list {len(columns)} pieces, CTranslate2's {len(listed)}"
                )
            systems, kept = {}, []
            for label, ours in (("ours", model), ("ours int8", int8)):
                for short in (None, shortlist):
                    path = os.path.join(workdir, f"{label}-{search}-{batch}-{short is not None}")
                    loaded = export_searches(ours, args.length, path, xla=True, shortlist=short)
                    fn = getattr(loaded, search)
                    check_lengths(label, fn(tf.constant(x)), batch, args.length, model)
                    name = f"{label} XLA SM" + (" shortlist" if short else "")
                    systems[name] = lambda fn=fn, x=x: fn(tf.constant(x)).numpy()
                    kept.append(loaded)  # its functions hold its variables weakly
            tokens = [[names[i] for i in row] for row in x]
            for kind, translator in translators.items():
                for vmap in (False, True):
                    call = ct2_system(translator, tokens, search, args.length, vmap)
                    hypothesis = call()[0].hypotheses[0]
                    if len(hypothesis) != args.length:
                        raise AssertionError(f"CTranslate2 wrote {len(hypothesis)} tokens")
                    systems[f"CT2 {kind}" + (" vmap" if vmap else "")] = call
            report(args, search, batch, len(listed), systems)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def report(args, search, batch, pieces, systems):
    """Time `systems` in alternating rounds; print tok/s, latency and ratios."""
    iters = {}
    for name, call in systems.items():
        call()
        start = time.perf_counter()
        call()
        iters[name] = max(1, round(args.min_seconds / (time.perf_counter() - start)))
    times = {name: [] for name in systems}
    for _ in range(args.repeats):
        for name, call in systems.items():
            times[name].append(timed(call, iters[name]))
    print(f"{search}, batch {batch}: the shortlist holds {pieces} of {args.vocab} pieces")
    for name in systems:
        seconds = statistics.median(mean_per_round(times[name]))
        p50 = 1e3 * np.percentile(np.concatenate(times[name]), 50)
        print(f"  {name:<28s} {batch * args.length / seconds:9.0f} tok/s   p50 {p50:9.2f} ms")
    pairs = [
        ("ours XLA SM shortlist", "ours XLA SM"),
        ("CT2 float32 vmap", "CT2 float32"),
        ("ours XLA SM", "CT2 float32"),
        ("ours XLA SM shortlist", "CT2 float32 vmap"),
        ("ours int8 XLA SM", "CT2 int8"),
        ("ours int8 XLA SM shortlist", "CT2 int8 vmap"),
        ("ours int8 XLA SM shortlist", "ours XLA SM shortlist"),
    ]
    for fast, slow in pairs:
        ratio = median_ratio(mean_per_round(times[slow]), mean_per_round(times[fast]))
        print(f"  speed {fast} / {slow}: {ratio:.2f}")
    print()


def quality(args):
    """BLEU, chrF, identical translations and hit rate of the run's
    shortlisted exports against its full export (see the module docstring)."""
    import subprocess

    import sacrebleu
    import tensorflow_text  # noqa: F401  (the tokenizers' ops)

    from keras_attention.tokenizers.pieces import read_model

    ids = [
        {
            piece: i
            for i, (piece, _) in enumerate(read_model(os.path.join(args.run, f"{side}.spm"))[1])
        }
        for side in ("source", "target")
    ]
    with open(os.path.join(args.run, "data", "test.tsv"), encoding="utf-8") as handle:
        pairs = [line.split("\t") for line in handle.read().splitlines()]
    texts, references = [p[0] for p in pairs], [p[1] for p in pairs]
    requests = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    workdir = tempfile.mkdtemp(prefix="bench-shortlist-run-")
    try:
        exports = os.path.join(workdir, "exports")
        command = [sys.executable, "-m", "keras_attention_recipes.translate", "export"]
        command += ["--output", args.run, "--export-dir", exports]
        subprocess.run(command + ["--model-name", "full"], check=True, capture_output=True)
        full = tf.saved_model.load(os.path.join(exports, "full", "1")).signatures
        expected = translations(full, requests)
        alignments = [full["attention"](text=tf.constant(chunk)) for chunk in requests]
        print(f"{args.run}: {len(texts)} test sentences, requests of {args.batch}; {cpu_line()}")
        print(f"  full vocabulary: {scores(sacrebleu, expected, references)}")
        for size in args.sizes:
            name = f"shortlist-{size}"
            flags = ["--model-name", name, "--shortlist", str(size)]
            subprocess.run(command + flags, check=True, capture_output=True)
            path = os.path.join(exports, name, "1")
            got = translations(tf.saved_model.load(path).signatures, requests)
            shortlist = Shortlist.load(os.path.join(path, "assets", "shortlist.npz"))
            hits = total = 0
            for result in alignments:
                source = np.vectorize(lambda p: ids[0][p.decode()])(result["source_tokens"].numpy())
                target = np.vectorize(lambda p: ids[1][p.decode()])(result["target_tokens"].numpy())
                listed = np.asarray(shortlist.columns(source))
                pieces = target[target >= RESERVED]
                hits, total = hits + int(np.isin(pieces, listed).sum()), total + pieces.size
            same = sum(a == b for a, b in zip(got, expected)) / len(texts)
            print(
                f"  shortlist {size}: {scores(sacrebleu, got, references)}; identical to the "
                f"full export's {same:.1%}; hit rate {hits / max(total, 1):.2%}"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def translations(signatures, requests):
    return [
        text.decode()
        for chunk in requests
        for text in signatures["serving_default"](text=tf.constant(chunk))["translation"].numpy()
    ]


def scores(sacrebleu, hypotheses, references):
    bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    chrf = sacrebleu.corpus_chrf(hypotheses, [references]).score
    return f"BLEU {bleu:.2f}, chrF {chrf:.2f}"


def parse(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=["bench", *MODELS], default="base")
    parser.add_argument("--cells", default="greedy:1,beam4:32")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=20)
    parser.add_argument("--depth", type=int, default=16, help="candidates per source piece")
    parser.add_argument("--frequent", type=int, default=256, help="pieces always listed")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--run", help="a trained run: the quality of its shortlisted exports")
    parser.add_argument("--sizes", default="500,1000", help="shortlist sizes for --run")
    parser.add_argument("--batch", type=int, default=32, help="texts per request for --run")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, one repeat")
    args = parser.parse_args(argv)
    args.family, args.vocab, args.width, args.layers, args.heads, args.ffn = MODELS.get(
        args.model
    ) or ("transformer", 8000, 256, 3, 4, 1024)
    if args.smoke:
        args.vocab, args.width, args.layers, args.heads, args.ffn = 200, 16, 1, 2, 32
        args.length, args.source_length, args.repeats, args.min_seconds = 4, 5, 1, 0.0
        args.depth, args.frequent, args.cells = 4, 16, "greedy:1,beam4:2"
    args.cells = parse_cells(parser, args.cells)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    return args


def main(argv=None):
    args = parse(argv)
    use_threads(args.threads)
    return quality(args) if args.run else speed(args)


if __name__ == "__main__":
    main()
