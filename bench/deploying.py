"""Tokens/s and BLEU of one trained run by deployment route (docs/deploying.md):

    python bench/deploying.py --output runs/translate [--int8-export DIR] [--repeats 5]

Routes, all on the same test file (default: the run's `data/test.tsv`):
- SavedModel float32: the run exported (`--export DIR`, a version folder;
  default: exported here) and loaded with `tf.saved_model.load`, its
  `serving_default` (beam) and `greedy` signatures;
- SavedModel int8: the same for `--int8-export DIR` (`export --quantize int8`), if given;
- CTranslate2 float32 and int8: the run converted (`convert --to
  ctranslate2`; `--ct2 DIR` / `--ct2-int8 DIR` or converted here), through
  `serving.ctranslate2.translate_with_ctranslate2` (SentencePiece in and out,
  numbers protected as the run does).

Settings: beam 4 (the run's alpha; CTranslate2 `length_penalty` = alpha, a
different formula: docs/deploying.md) and greedy, batches of 32. tokens/s
counts target pieces generated (the translations' SentencePiece pieces,
the same count for every route), median of `--repeats` timed passes after
one warm-up pass, all in this process, the routes taking turns; the
ratios to CTranslate2 are medians of each turn's ratio. BLEU and chrF:
sacrebleu against the references. `--smoke`: 8 sentences, one repeat (a
test runs it in seconds).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # export_scores


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the trained run's folder")
    parser.add_argument(
        "--test", help="TSV of source<TAB>reference (default: the run's test split)"
    )
    parser.add_argument("--export", help="a float32 SavedModel version folder (default: export)")
    parser.add_argument("--int8-export", help="an int8 SavedModel version folder (optional)")
    parser.add_argument("--ct2", help="a converted float32 CTranslate2 folder (default: convert)")
    parser.add_argument("--ct2-int8", help="a converted int8 CTranslate2 folder (default: convert)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per cell")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: default)")
    parser.add_argument("--smoke", action="store_true", help="8 sentences, one repeat")
    return parser.parse_args(argv)


def saved_model_route(path, batch_size):
    """`translate(texts, beam)` through the export's `serving_default`
    (beam) or `greedy` signature."""
    from export_scores import saved_model_translator

    searches = {
        True: saved_model_translator(path, "serving_default", batch_size),
        False: saved_model_translator(path, "greedy", batch_size),
    }
    return lambda texts, beam: searches[beam](texts)


def ct2_route(folder, compute_type, alpha, batch_size, threads):
    import ctranslate2

    from keras_attention.serving.ctranslate2 import translate_with_ctranslate2

    translator = ctranslate2.Translator(
        folder, device="cpu", compute_type=compute_type, intra_threads=threads
    )

    def translate(texts, beam):
        options = dict(beam_size=4, length_penalty=alpha) if beam else dict(beam_size=1)
        out = []
        for start in range(0, len(texts), batch_size):
            out += translate_with_ctranslate2(
                folder, texts[start : start + batch_size], translator=translator, **options
            )
        return out

    return translate


def main(argv=None):
    args = parse(argv)
    import sentencepiece
    from keras_attention_recipes import translate as cli
    from keras_attention_recipes.translation.command_settings import BEAM_DEFAULTS
    from keras_attention_recipes.translation.corpus import read_pairs
    from keras_attention_recipes.translation.scores import corpus_scores

    pairs = read_pairs(args.test or os.path.join(args.output, "data", "test.tsv"))
    if args.smoke:
        pairs, args.repeats = pairs[:8], 1
    sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
    scratch = tempfile.mkdtemp(prefix="bench-deploying-")
    quiet = lambda _: None  # noqa: E731

    def command(*argv):
        parsed = cli.parser().parse_args(list(argv))
        from keras_attention_recipes.translation.commands import COMMANDS

        return COMMANDS[parsed.command](cli.check(parsed), quiet)

    from keras_attention_recipes.run_files import read_json

    alpha = read_json(os.path.join(args.output, "config.json"), "settings").get("decoding", {})
    alpha = alpha.get("alpha", BEAM_DEFAULTS["alpha"])
    # CTranslate2's length penalty set to the run's alpha: the convention
    # this comparison uses (the two penalties differ; see the docstring).
    penalty = ["--length-penalty", str(alpha)]
    export = args.export or command(
        "export", "--output", args.output, "--export-dir", os.path.join(scratch, "export")
    )
    ct2 = args.ct2 or command(
        "convert", "--output", args.output, "--to", "ctranslate2", "--dir",
        os.path.join(scratch, "ct2"), *penalty,
    )  # fmt: skip
    ct2_int8 = args.ct2_int8 or command(
        "convert", "--output", args.output, "--to", "ctranslate2", "--dir",
        os.path.join(scratch, "ct2-int8"), "--quantization", "int8", *penalty,
    )  # fmt: skip
    routes = [("SavedModel float32", saved_model_route(export, args.batch_size))]
    if args.int8_export:
        routes.append(("SavedModel int8", saved_model_route(args.int8_export, args.batch_size)))
    routes += [
        ("CTranslate2 float32", ct2_route(ct2, "float32", alpha, args.batch_size, args.threads)),
        ("CTranslate2 int8", ct2_route(ct2_int8, "int8", alpha, args.batch_size, args.threads)),
    ]
    pieces = sentencepiece.SentencePieceProcessor(model_file=os.path.join(ct2, "target.spm"))
    cells = [(name, beam, translate) for name, translate in routes for beam in (True, False)]
    translations = {(name, beam): translate(sources, beam) for name, beam, translate in cells}
    seconds = {(name, beam): [] for name, beam, _ in cells}
    for _ in range(args.repeats):  # the routes take turns: a drift of the machine is shared
        for name, beam, translate in cells:
            started = time.perf_counter()
            translate(sources, beam)
            seconds[(name, beam)].append(time.perf_counter() - started)
    rows, tokens = [], {}
    for name, beam, _ in cells:
        scores = corpus_scores(translations[(name, beam)], references)
        count = sum(len(p) + 1 for p in pieces.encode(translations[(name, beam)]))  # + <eos>
        tokens[(name, beam)] = count
        speed = count / statistics.median(seconds[(name, beam)])
        rows.append((name, "beam 4" if beam else "greedy", speed, scores["bleu"], scores["chrf"]))
    print(f"{len(sources)} sentences, batch {args.batch_size}, median of {args.repeats} turns:")
    print("| route | search | tokens/s | BLEU | chrF |")
    print("|---|---|---:|---:|---:|")
    for name, search, speed, bleu, chrf in rows:
        print(f"| {name} | {search} | {speed:,.0f} | {bleu:.2f} | {chrf:.2f} |")
    for name in [name for name, _ in routes if not name.startswith("CTranslate2")]:
        peer = "CTranslate2 int8" if "int8" in name else "CTranslate2 float32"
        for beam in (True, False):
            ratios = [  # tokens per second, ours over theirs, turn by turn
                (tokens[(name, beam)] / ours) / (tokens[(peer, beam)] / theirs)
                for ours, theirs in zip(seconds[(name, beam)], seconds[(peer, beam)])
            ]
            search = "beam 4" if beam else "greedy"
            print(f"speed {name} / {peer}, {search}: {statistics.median(ratios):.2f} (same turns)")
    return rows


if __name__ == "__main__":
    main()
