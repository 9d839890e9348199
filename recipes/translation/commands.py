"""The recipe's commands other than `train` (`training.py`) and `tune`
(`hyperparameter_search.py`): evaluate, translate, average, export,
convert and the demo, and the table of them all. Each takes a validated
`TranslationConfig` and a `log`; searches and the export go through
`decoding.py`.
"""

import importlib.util
import os
import time

import numpy as np

from keras_attention.seq2seq.plotting import plot_attention

from .. import runs
from .averaging import average_run
from .config import (
    UsageError,
    decoding_settings,
    flag,
    recorded_defaults,
    run_decoding,
    upgrade,
)
from .data import read_pairs
from .decoding import (
    attention_maps,
    export_translator,
    line_translator,
    nbest_lines,
    number_protection,
    settled_search,
    translate_texts,
)
from .hyperparameter_search import tune
from .members import train_members
from .scores import bleu_by_length, corpus_scores, number_consistency, test_set_name, write_scores
from .text_io import read_pair_file, reads_lines, translate_file
from .trained_run import REMEDY, finished, load_decoder, load_run
from .training import train, train_settings
from .workers import train_workers

DEMO_SENTENCES = (
    "Ich habe keine Zeit.",
    "Wo ist der Bahnhof?",
    "Bei meinem Handy war der Akku leer.",
)


def evaluate(config, log=print):
    """BLEU and chrF of the run's model on the test split (or `config.test`),
    samples, attention heatmaps and BLEU by source length; writes and
    returns the scores: the test split's in `scores.json` and
    `attention/`, a `--test` file's beside them, in
    `scores.<name>.json` and `attention/<name>/` (`test_set_name`), so
    that the run's own results are never replaced by another set's."""
    test_file = config.test  # the user's test file, read before the model
    pairs = read_pair_file(test_file, "--test", log) if test_file else None
    model, run_config, source_tokenizer, target_tokenizer = load_decoder(config)
    config, search = settled_search(config, run_config)
    own_split = os.path.join(config.output, "data", "test.tsv")
    test_set = None  # the run's own test split
    if test_file and os.path.realpath(test_file) != os.path.realpath(own_split):
        test_set = test_set_name(test_file, config.output)
    if not test_file:
        test_file = own_split
        pairs = read_pairs(test_file)
    if config.limit_test:
        pairs = pairs[: config.limit_test]
    sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
    if "ensemble" in run_config:
        log(f"ensemble: {config.output} and {', '.join(run_config['ensemble'])}")
    log(f"translating the {len(pairs)} test sentences (beam search, width {config.beam_width}) ...")
    started = time.perf_counter()
    common = (model, source_tokenizer, target_tokenizer)
    numbers = number_protection(run_config)
    hypotheses = translate_texts(
        *common, sources, run_config["max_length"], search, numbers=numbers
    )
    scores = {**corpus_scores(hypotheses, references), **number_consistency(sources, hypotheses)}
    log(
        f"test set: {test_file}, {len(pairs)} sentences, beam {config.beam_width}, "
        f"{time.perf_counter() - started:.0f}s"
    )
    log(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}")
    if scores["number_groups"]:
        log(
            f"numbers: {scores['numbers_kept']} of the sources' {scores['number_groups']} digit "
            f"groups are in the translations ({scores['number_consistency']:.1f}%)"
        )
    log(f"signatures: BLEU {scores['bleu_signature']}, chrF {scores['chrf_signature']}")
    samples = list(zip(sources, references, hypotheses))[: config.samples]
    for source, reference, hypothesis in samples:
        log(f"\n  source:     {source}\n  reference:  {reference}\n  model:      {hypothesis}")
    if run_config["family"] == "rnn" and run_config["attention"] == "none":
        log("\n(no heatmaps: the bottleneck baseline has no attention)")
    else:
        folder = os.path.join(config.output, "attention", *([test_set] if test_set else []))
        texts = sources[: config.samples]
        plot_heatmaps(common, texts, run_config["max_length"], search, numbers, folder)
        log(f"\nattention heatmaps: {folder}/sample*.png")
    scores = {
        **scores,
        "sentences": len(pairs),
        "beam_width": config.beam_width,
        "alpha": config.alpha,
        "bleu_by_source_length": bleu_by_length(sources, hypotheses, references),
        "test": os.path.abspath(test_file),
        **({"ensemble": run_config["ensemble"]} if "ensemble" in run_config else {}),
    }
    log(
        "BLEU by source length (words): "
        + ", ".join(
            f"{bucket}: {row['bleu']:.1f} ({row['sentences']})"
            for bucket, row in scores["bleu_by_source_length"].items()
        )
    )
    path = write_scores(config.output, scores, test_set)
    log(f"scores: {path}")
    return scores


def plot_heatmaps(common, sources, max_length, search, numbers, folder):
    """`folder/sample<i>.png`: the attention of `common` (model, source and
    target tokenizers) translating each of `sources` (`attention_maps`)."""
    os.makedirs(folder, exist_ok=True)
    maps = attention_maps(*common, sources, max_length, search, numbers)
    for index, alignment in enumerate(maps):
        plot_attention(
            alignment["weights"],
            alignment["source_tokens"],
            alignment["target_tokens"],
            os.path.join(folder, f"sample{index}.png"),
            title=sources[index],
        )


def translate_command(config, log=print):
    """Translate `config.text` (or lines: `--input`, standard input) with
    the run's model; `config.nbest` prints N scored lines per sentence."""

    def translator():
        model, run_config, source_tokenizer, target_tokenizer = load_decoder(config)
        return line_translator(
            model,
            source_tokenizer,
            target_tokenizer,
            run_config["max_length"],
            settled_search(config, run_config)[1],
            config.nbest,
            number_protection(run_config),
        )

    if reads_lines(config):  # a line out for each line in: files, pipes, --output-file
        return translate_file(config, translator)
    if not config.text:
        raise UsageError(
            "give the text to translate, e.g. "
            'translate --output runs/translate "Ich habe keine Zeit."'
        )
    model, run_config, source_tokenizer, target_tokenizer = load_decoder(config)
    config, search = settled_search(config, run_config)
    common = (model, source_tokenizer, target_tokenizer, config.text, run_config["max_length"])
    numbers = number_protection(run_config)
    if config.nbest:
        for line in nbest_lines(*common, search, config.nbest, numbers=numbers):
            log(line)
        return
    translations = translate_texts(*common, search, numbers=numbers)
    for text, translation in zip(config.text, translations):
        log(f"{text}\n  -> {translation}")


def average_command(config, log=print):
    """Replace the run's model by the mean of checkpoints (`averaging.py`)."""
    return average_run(config, load_run(config.output, config), log)


def export_command(config, log=print):
    """Write the trained model as the next version of a TF Serving model."""
    from keras_attention.serving.versions import check_model_name

    try:  # before the model is loaded and its signatures traced
        check_model_name(config.model_name)
    except ValueError as error:
        raise UsageError(f"--model-name: {error}") from None
    if os.path.exists(config.export_dir) and not os.path.isdir(config.export_dir):
        raise UsageError(f"--export-dir {config.export_dir} is a file; expected a folder")
    runs.check_export_folder("export_dir", config.export_dir, config.model_name)
    model, run_config, source_tokenizer, target_tokenizer = load_decoder(config)
    config, search = settled_search(config, run_config, num_hypotheses=config.num_hypotheses)
    if config.quantize is not None:
        from keras_attention.serving.translator import quantization_of

        if quantization_of(model):
            raise UsageError(
                f"--output {config.output} holds a model quantized already "
                f"({quantization_of(model)}): drop --quantize to export it as it is, or "
                "export a float run with --quantize"
            )
    max_length = run_config["max_length"]
    # Warm-up requests: real test sentences, for every signature.
    test = read_pairs(os.path.join(config.output, "data", "test.tsv"))[:4]
    text = np.array([pair[0] for pair in test] or ["Ich habe keine Zeit."], dtype=object)
    ids = source_tokenizer.encode(text, max_length)[0].numpy()
    warmup = [
        ("serving_default", {"text": text}),
        ("greedy", {"text": text}),
        ("attention", {"text": text[:1]}),
        ("tokens", {"token_ids": ids, "lengths": (ids > 0).sum(1).astype("int32")}),
        ("nbest", {"text": text}),
        ("constrained", {"text": text[:1], "prefix": np.array([""], dtype=object)}),
    ]  # not decoding_options: constants, and a request without inputs is an odd warm-up
    path = export_translator(
        model,
        source_tokenizer,
        target_tokenizer,
        max_length,
        search,
        config.export_dir,
        config.model_name,
        warmup,
        number_protection(run_config),
        config.quantize,
        config.xla,
    )
    log(
        f"exported {path} (signatures: serving_default, greedy, attention, tokens, nbest, "
        f"constrained, decoding_options); {export_sizes(path)}"
    )
    return path


def convert_command(config, log=print):
    """Write the trained model as a CTranslate2 model folder (`--to
    ctranslate2`), with the run's SentencePiece models beside it; every
    check runs before anything is written."""
    check_convert_dir(config)
    if importlib.util.find_spec("ctranslate2") is None:
        raise UsageError(
            "convert --to ctranslate2 needs the ctranslate2 package: pip install ctranslate2 "
            "(or keras_attention[recipes])"
        )
    spm = [os.path.join(config.output, f"{side}.spm") for side in ("source", "target")]
    if not all(os.path.exists(path) for path in spm) and os.path.exists(
        os.path.join(config.output, "source.vocab")
    ):
        raise UsageError(
            f"{config.output} uses WordPiece vocabularies, which CTranslate2 users cannot "
            "tokenize without TensorFlow Text; convert a run trained with "
            "--tokenizer sentencepiece (the default)"
        )
    check_convertible_run(config.output, config.recorded)
    model, run_config, _, _ = load_run(config.output, config, compile=False)
    config = run_decoding(config, run_config)
    from keras_attention.serving.ctranslate2 import convert_to_ctranslate2
    from keras_attention.serving.translator import quantization_of

    if quantization_of(model):
        raise UsageError(
            f"--output {config.output} holds a model quantized in place "
            f"({quantization_of(model)}); CTranslate2 quantizes float weights itself: convert "
            "a float run and add --quantization int8"
        )

    max_length = run_config["max_length"]
    translate_options = {  # ctranslate2.Translator.translate_batch's names
        "beam_size": config.beam_width,
        "length_penalty": config.alpha,
        "coverage_penalty": config.coverage_penalty,
        "repetition_penalty": config.repetition_penalty,
        "no_repeat_ngram_size": config.no_repeat_ngram_size,
        "min_decoding_length": config.min_length,
        "max_input_length": max_length,
        "max_decoding_length": max_length + 1,
    }
    metadata = {
        "converted_from": os.path.abspath(config.output),
        "translate_batch": translate_options,
        "length_penalty_note": (
            "ours is GNMT's ((5 + |Y|) / 6)^alpha, CTranslate2's |Y|^length_penalty: "
            "the same alpha is not the same penalty (docs/deploying.md)"
        ),
        "protect_numbers": bool(run_config.get("protect_numbers", False)),
    }
    path = convert_to_ctranslate2(
        model,
        config.dir,
        quantization=config.quantization,
        source_spm=spm[0],
        target_spm=spm[1],
        metadata=metadata,
        overwrite=config.overwrite,
    )
    if metadata["protect_numbers"]:
        log(
            "note: this run protects numbers (digit groups become the placeholder U+E000 "
            "before translation and are copied back after it): see docs/deploying.md"
        )
    files = ", ".join(sorted(os.listdir(path)))
    log(
        f"converted {config.output} to CTranslate2 ({config.quantization or 'float32'}, "
        f"{flag('dir')} {config.dir}): {files}"
    )
    return path


def check_convert_dir(config):
    """`UsageError` naming `--dir` before any work, for a folder `convert`
    may not write: an empty path (the current folder), a file, the run's
    folder or one that holds it, a folder that holds a run, an existing
    folder without `--overwrite`, and with it any non-empty folder that is
    not a CTranslate2 model `convert` wrote (`not_replaceable`): so
    `--overwrite` never deletes anything else."""
    directory = config.dir
    if not directory:
        raise UsageError(
            "--dir is empty (that would be the current folder): name a new folder for the "
            "CTranslate2 model, e.g. --dir ct2_model"
        )
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--dir {directory} is a file; expected a folder to write")
    target, run = os.path.realpath(directory), os.path.realpath(config.output)
    if target == run or run.startswith(target.rstrip(os.sep) + os.sep):
        raise UsageError(
            f"--dir {directory} is "
            + (
                "--output's run folder"
                if target == run
                else f"a folder that holds --output {config.output}"
            )
            + ": choose another --dir (a new folder) for the CTranslate2 model"
        )
    if not os.path.isfile(os.path.join(target, runs.RUN_FILE)):  # a run's own: below
        runs.check_outside_runs("dir", directory)
    if not os.path.isdir(target):
        return
    if not config.overwrite:
        raise UsageError(f"--dir {directory} exists: choose another folder or add --overwrite")
    marks = [
        name
        for name in (runs.RUN_FILE, "model.keras", runs.LOCK_FILE)
        if os.path.exists(os.path.join(target, name))
    ]
    if marks:
        raise UsageError(
            f"--dir {directory} holds a run ({', '.join(marks)}): --overwrite replaces only a "
            "CTranslate2 model that convert wrote; choose another --dir"
        )
    from keras_attention.serving.ctranslate2 import not_replaceable

    why = not_replaceable(target)
    if why:
        why = why.replace("convert_to_ctranslate2", "convert")
        raise UsageError(
            f"--dir {directory} {why}: --overwrite replaces only an empty folder or a "
            "CTranslate2 model that convert wrote; choose another --dir"
        )


def check_convertible_run(output, run_config=None):
    """`UsageError` in flag words, before the model is loaded, for a run
    CTranslate2 cannot express (its `config.json`, or `run_config` when the
    command line read it: the family, `--position alibi`,
    `--sliding-window`); the library's own check (`check_convertible`)
    stays behind it."""
    path = os.path.join(output, "config.json")
    if run_config is None:
        if not os.path.exists(path):
            return  # load_run says what is missing
        run_config = upgrade(runs.read_json(path, "the trained model's settings", remedy=REMEDY))
    family = run_config.get("family", "rnn")
    if family != "transformer":
        raise UsageError(
            f"--output {output} holds a --family {family} model: convert --to ctranslate2 "
            "converts the transformer family only (CTranslate2 has no spec for ConvS2S or "
            "the recurrent models); train one with --family transformer"
        )
    if run_config.get("position") == "alibi":
        raise UsageError(
            f"--output {output} was trained with --position alibi: CTranslate2's ALiBi is "
            "causal and decoder-only; convert a run trained with --position sinusoidal, "
            "learned, relative or rope"
        )
    if run_config.get("sliding_window") is not None:
        raise UsageError(
            f"--output {output} was trained with --sliding-window: CTranslate2's window "
            "bounds the decoder's key/value cache, not the encoder's and decoder's "
            "attention; convert a run trained without --sliding-window"
        )


def export_sizes(path):
    """What the export's last line says of its size, from the record it
    wrote (`serving.translator.export_record`): `variables/ 1,234,567
    bytes`, and for a quantized export `variables/ 345,678 bytes (int8;
    float32: 1,234,567 bytes, 3.57x smaller)`; an XLA export adds its
    programs, buckets and the server flag it needs."""
    from keras_attention.serving.translator import export_record

    record = export_record(path)
    line = f"variables/ {record['variables_bytes']:,} bytes"
    if record["quantization"] is not None:
        float32 = record["float32_variables_bytes"]
        ratio = float32 / max(record["variables_bytes"], 1)
        line += f" ({record['quantization']}; float32: {float32:,} bytes, {ratio:.2f}x smaller)"
    xla = record.get("xla")
    if xla:
        line += (
            f"; XLA: {xla['programs']} programs (batch sizes {xla['batch_sizes']}, source widths "
            f"{xla['source_lengths']}), served with {' '.join(xla['server_flags'])}"
        )
    return line


def record_decoding(config):
    """Record the demo's decoding settings in a run trained before runs
    recorded them, so that translate and evaluate on it decode as the demo
    did (they used 0.6 where the demo's alpha is 1.2)."""
    path = os.path.join(config.output, "config.json")
    run_config = runs.read_json(path, "the trained model's settings", remedy=REMEDY)
    if isinstance(run_config, dict) and "decoding" not in run_config:
        runs.write_json_atomically(path, {**run_config, "decoding": decoding_settings(config)})


def demo(config, log=print):
    """The main job: train a ConvS2S model (`--family` for another) on the
    Ding corpus, report BLEU and samples, draw an attention heatmap,
    translate a sentence, export it. Each step runs on its own copy of
    `config` (`TranslationConfig.replace`)."""
    log("== keras_attention demo: German -> English on the Ding dictionary's example sentences")
    started, marks = time.perf_counter(), {}

    def log_and_mark(line):  # the time of train's "training ..." line: its first step
        if str(line).startswith("training ") and "training" not in marks:
            marks["training"] = time.perf_counter()
        log(line)

    settings, _ = train_settings(config)
    if finished(config.output) and not config.overwrite:
        # refuses other settings
        runs.claim(config.output, settings, defaults=recorded_defaults(settings), upgrade=upgrade)
        log(f"{config.output} holds the trained demo model: evaluating it (--overwrite retrains)")
        record_decoding(config)
    else:
        train(config, log_and_mark)
    scores = evaluate(config.replace(command="evaluate"), log)
    translate_command(config.replace(command="translate", text=list(DEMO_SENTENCES)), log)
    path = export_command(
        config.replace(command="export", export_dir="saved_models", model_name="translator"), log
    )
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    served = serve(text=tf.constant(DEMO_SENTENCES[:1]))
    log(
        f"through the exported model: {DEMO_SENTENCES[0]} -> "
        f"{served['translation'].numpy()[0].decode()}"
    )
    everyday = everyday_scores(serve, log)
    now = time.perf_counter()
    since_training = (
        f" ({(now - marks['training']) / 60:.1f} from the first training step)" if marks else ""
    )
    log(
        f"== done in {(now - started) / 60:.1f} minutes{since_training}: test BLEU "
        f"{scores['bleu']:.2f}, chrF {scores['chrf']:.2f} on {scores['sentences']} sentences; "
        f"everyday set BLEU {everyday['bleu']:.2f}, chrF {everyday['chrf']:.2f}"
    )


EVERYDAY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testsets", "everyday.tsv")


def everyday_scores(serve, log=print):
    """BLEU and chrF of an export's `serve` (its loaded `serving_default`
    signature) on the hand-written everyday set (`testsets/everyday.tsv`,
    written for this project, none of it from Ding), with a few of its
    translations."""
    import tensorflow as tf

    pairs = read_pair_file(EVERYDAY, "--test", log)
    sources = [source for source, _ in pairs]
    translations = [t.decode() for t in serve(text=tf.constant(sources))["translation"].numpy()]
    scores = corpus_scores(translations, [reference for _, reference in pairs])
    log(
        f"everyday set ({len(pairs)} hand-written sentences, through the export): "
        f"BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}"
    )
    for source, translation in list(zip(sources, translations))[:3]:
        log(f"  {source} -> {translation}")
    return scores


def train_command(config, log=print):
    """`train`, or with `--members N` its N members at once (`members.py`),
    or with `--workers N` in N local worker processes (`workers.py`)."""
    if config.workers > 1:
        return train_workers(config, log)
    return train_members(config, log) if config.members > 1 else train(config, log)


COMMANDS = {
    "train": train_command,
    "evaluate": evaluate,
    "translate": translate_command,
    "tune": tune,
    "demo": demo,
    "export": export_command,
    "convert": convert_command,
    "average": average_command,
}
