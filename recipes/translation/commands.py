"""The recipe's commands other than `train` (`training.py`) and `tune`
(`hyperparameter_search.py`): evaluate, translate, average, export,
convert and the demo, and the table of them all. Each takes a validated
`TranslationConfig` and a `log`, and the commands that decode a run are
thin calls on its `TrainedRun` (`trained_run.py`).
"""

import importlib.util
import os
import time

import numpy as np

from keras_attention.seq2seq.plotting import plot_attention

from .. import run_files, run_folders, runs
from ..runs import UsageError, flag
from .averaging import average_run
from .config import recorded_defaults, upgrade
from .corpus import read_pairs
from .data import graph_tokenizers
from .hyperparameter_search import tune
from .members import train_members
from .scores import corpus_scores, test_set_name, write_scores
from .text_io import read_pair_file, reads_lines, translate_file
from .trained_run import REMEDY, TrainedRun, decoding_settings, finished, load_run
from .training import train, train_settings
from .workers import train_workers

# The demo's export: a SavedModel (its --overwrite retrains the run; an
# export adds a version and never replaces one).
DEMO_EXPORT = dict(
    command="export",
    export_dir="saved_models",
    model_name="translator",
    format="saved_model",
    overwrite=False,
)
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
    run = TrainedRun(config)  # its record and settled settings; the model loads later
    config = run.config
    test_file = config.test  # the user's test file, read before the model
    pairs = read_pair_file(test_file, "--test", log) if test_file else None
    if "ensemble" in run.record:  # the run's files are checked here, before its split is read
        log(f"ensemble: {config.output} and {', '.join(run.record['ensemble'])}")
    own_split = os.path.join(config.output, "data", "test.tsv")
    test_set = None  # the run's own test split
    if test_file and os.path.realpath(test_file) != os.path.realpath(own_split):
        test_set = test_set_name(test_file, config.output)
    if not test_file:
        test_file = own_split
        pairs = read_pairs(test_file)
    if config.limit_test:
        pairs = pairs[: config.limit_test]
    log(f"translating the {len(pairs)} test sentences (beam search, width {config.beam_width}) ...")
    started = time.perf_counter()
    scores, hypotheses = run.evaluate(pairs)
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
    sources = [pair[0] for pair in pairs]
    for source, (_, reference), hypothesis in list(zip(sources, pairs, hypotheses))[
        : config.samples
    ]:
        log(f"\n  source:     {source}\n  reference:  {reference}\n  model:      {hypothesis}")
    if not run.has_attention:
        log("\n(no heatmaps: the bottleneck baseline has no attention)")
    elif not graph_tokenizers():
        log("\n(no heatmaps: they are drawn from the graph Translator's, which needs TensorFlow)")
    else:
        folder = os.path.join(config.output, "attention", *([test_set] if test_set else []))
        plot_heatmaps(run, sources[: config.samples], folder)
        log(f"\nattention heatmaps: {folder}/sample*.png")
    scores = {**scores, "test": os.path.abspath(test_file)}
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


def plot_heatmaps(run, sources, folder):
    """`folder/sample<i>.png`: the attention of the `TrainedRun` `run`
    translating each of `sources` (`TrainedRun.attention`)."""
    os.makedirs(folder, exist_ok=True)
    for index, alignment in enumerate(run.attention(sources)):
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
    run = TrainedRun(config)
    config = run.config
    if reads_lines(config):  # a line out for each line in: files, pipes, --output-file
        return translate_file(config, lambda: run.lines(config.nbest))
    if not config.text:
        raise UsageError(
            "give the text to translate, e.g. "
            'translate --output runs/translate "Ich habe keine Zeit."'
        )
    if config.nbest:
        for line in run.nbest(config.text, config.nbest):
            log(line)
        return
    for text, translation in zip(config.text, run.translate(config.text)):
        log(f"{text}\n  -> {translation}")


def average_command(config, log=print):
    """Replace the run's model by the mean of checkpoints (`averaging.py`)."""
    return average_run(config, load_run(config.output), log)


def export_command(config, log=print):
    """Write the trained model as the next version of a TF Serving model,
    or with `--format ctranslate2` as the CTranslate2 model folder
    `<export-dir>/<model-name>` (`write_ctranslate2`)."""
    from keras_attention.serving.versions import check_model_name

    try:  # before the model is loaded and its signatures traced
        check_model_name(config.model_name)
    except ValueError as error:
        raise UsageError(f"--model-name: {error}") from None
    if os.path.exists(config.export_dir) and not os.path.isdir(config.export_dir):
        raise UsageError(f"--export-dir {config.export_dir} is a file; expected a folder")
    if config.format == "ctranslate2":
        directory = os.path.join(config.export_dir, config.model_name)
        return write_ctranslate2(config, directory, "export_dir", log)
    runs.check_export_folder("export_dir", config.export_dir, config.model_name)
    run = TrainedRun(config)
    if config.quantize is not None:
        from keras_attention.serving.records import quantization_of

        if quantization_of(run.model):
            raise UsageError(
                f"--output {config.output} holds a model quantized already "
                f"({quantization_of(run.model)}): drop --quantize to export it as it is, or "
                "export a float run with --quantize"
            )
    check_shortlist_size(config, run)
    path = run.export(
        config.export_dir,
        config.model_name,
        warmup_requests(run),
        config.quantize,
        config.xla,
        config.shortlist,
    )
    log(
        f"exported {path} (signatures: serving_default, greedy, attention, tokens, nbest, "
        f"constrained, decoding_options); {export_sizes(path)}"
    )
    return path


def check_shortlist_size(config, run):
    """`UsageError` for a `--shortlist` of a recurrent run or an ensemble,
    beyond the run's target vocabulary, or of a run without SentencePiece
    models (the table is learned with their Python twins)."""
    if config.shortlist is None:
        return
    family = run.record.get("family")
    if family == "rnn" or config.ensemble:
        holds = "an --ensemble" if config.ensemble else f"a --family {family} model"
        raise UsageError(
            f"--shortlist decodes one Transformer or ConvS2S over a shortlist; --output "
            f"{config.output} with these flags is {holds}: drop --shortlist"
        )
    if not os.path.exists(os.path.join(config.output, "target.spm")):
        raise UsageError(
            f"--shortlist needs a run trained with --tokenizer sentencepiece; {config.output} "
            "uses WordPiece vocabularies"
        )
    pieces = run.tokenizers[1].vocab_size
    if config.shortlist > pieces:
        raise UsageError(
            f"--shortlist {config.shortlist} is more than the run's {pieces} target pieces; give "
            f"at most {pieces}, or drop it to decode over the whole vocabulary"
        )


def warmup_requests(run):
    """The export's warm-up requests: real test sentences of the run, for
    every signature (not `decoding_options`: it returns constants, and a
    request without inputs is an odd warm-up)."""
    source_tokenizer = run.tokenizers[0]  # the run checked and loaded before its files are read
    test = read_pairs(os.path.join(run.output, "data", "test.tsv"))[:4]
    text = np.array([pair[0] for pair in test] or ["Ich habe keine Zeit."], dtype=object)
    ids = source_tokenizer.encode(text, run.max_length)[0].numpy()
    return [
        ("serving_default", {"text": text}),
        ("greedy", {"text": text}),
        ("attention", {"text": text[:1]}),
        ("tokens", {"token_ids": ids, "lengths": (ids > 0).sum(1).astype("int32")}),
        ("nbest", {"text": text}),
        ("constrained", {"text": text[:1], "prefix": np.array([""], dtype=object)}),
    ]


def convert_command(config, log=print):
    """`convert --to ctranslate2 --dir OUT`: `export --format ctranslate2`
    into the folder OUT (`write_ctranslate2`), kept as an alias until 0.4.0."""
    return write_ctranslate2(config, config.dir, "dir", log)


def write_ctranslate2(config, directory, name, log=print):
    """Write the trained model as the CTranslate2 model folder `directory`
    (named by the flag `name` in messages), with the run's SentencePiece
    models beside it and its search as CTranslate2's options
    (`TrainedRun.convert`); every check runs before anything is written."""
    run = TrainedRun(config)  # the flags checked, the run's record read; not yet its model
    config = run.config
    check_convert_dir(config, directory, name)
    if importlib.util.find_spec("ctranslate2") is None:
        raise UsageError(
            "a CTranslate2 model needs the ctranslate2 package: pip install ctranslate2 "
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
    check_convertible_run(config.output, run.record)
    if config.beam_width > 1 and config.alpha and config.length_penalty is None:
        raise UsageError(
            f"alpha {config.alpha} (the run's beam search, or --alpha: GNMT's length penalty, "
            "((5 + length) / 6)^alpha) has no equal in CTranslate2, which divides by length^P: "
            "give --length-penalty P (CTranslate2's; 1.0 ranks by the mean log-probability), "
            "or --alpha 0"
        )
    from keras_attention.serving.records import quantization_of

    if quantization_of(run.model):
        raise UsageError(
            f"--output {config.output} holds a model quantized in place "
            f"({quantization_of(run.model)}); CTranslate2 quantizes float weights itself: convert "
            "a float run and add --quantization int8"
        )
    check_shortlist_size(config, run)
    path = run.convert(
        directory, config.quantization, config.length_penalty, config.overwrite, config.shortlist
    )
    if run.numbers is not None:
        log(
            "note: this run protects numbers (digit groups become the placeholder U+E000 "
            "before translation and are copied back after it): see docs/deploying.md"
        )
    files = ", ".join(sorted(os.listdir(path)))
    log(
        f"converted {config.output} to CTranslate2 ({config.quantization or 'float32'}, "
        f"{flag(name)} {directory}): {files}"
    )
    return path


def check_convert_dir(config, directory, name="dir"):
    """`UsageError` naming `--dir` (or the flag `name`) before any work, for
    the CTranslate2 model folder `directory` when `convert` (`export
    --format ctranslate2`)
    may not write: an empty path (the current folder), a file, the run's
    folder or one that holds it, a folder that holds a run, an existing
    folder without `--overwrite`, and with it any non-empty folder that is
    not a CTranslate2 model `convert` wrote (`not_replaceable`): so
    `--overwrite` never deletes anything else."""
    option = flag(name)
    if not directory:
        raise UsageError(
            f"{option} is empty (that would be the current folder): name a new folder for the "
            f"CTranslate2 model, e.g. {option} ct2_model"
        )
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise UsageError(f"{option} {directory} is a file; expected a folder to write")
    target, run = os.path.realpath(directory), os.path.realpath(config.output)
    if target == run or run.startswith(target.rstrip(os.sep) + os.sep):
        raise UsageError(
            f"{option} {directory} is "
            + (
                "--output's run folder"
                if target == run
                else f"a folder that holds --output {config.output}"
            )
            + f": choose another {option} (a new folder) for the CTranslate2 model"
        )
    if not os.path.isfile(os.path.join(target, run_folders.RUN_FILE)):  # a run's own: below
        runs.check_outside_runs(name, directory)
    if not os.path.isdir(target):
        return
    if not config.overwrite:
        raise UsageError(f"{option} {directory} exists: choose another folder or add --overwrite")
    marks = [
        name
        for name in (run_folders.RUN_FILE, "model.keras", run_folders.LOCK_FILE)
        if os.path.exists(os.path.join(target, name))
    ]
    if marks:
        raise UsageError(
            f"{option} {directory} holds a run ({', '.join(marks)}): --overwrite replaces only a "
            f"CTranslate2 model that convert wrote; choose another {option}"
        )
    from keras_attention.serving.ctranslate2 import not_replaceable

    why = not_replaceable(target)
    if why:
        why = why.replace("convert_to_ctranslate2", "convert")
        raise UsageError(
            f"{option} {directory} {why}: --overwrite replaces only an empty folder or a "
            f"CTranslate2 model that convert wrote; choose another {option}"
        )


def check_convertible_run(output, run_config):
    """`UsageError` in flag words, before the model is loaded, for a run
    CTranslate2 cannot express (its `config.json`: the family,
    `--position alibi`, `--sliding-window`); the library's own check
    (`check_convertible`) stays behind it."""
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
    wrote (`serving.records.export_record`): `variables/ 1,234,567
    bytes`, and for a quantized export `variables/ 345,678 bytes (int8;
    float32: 1,234,567 bytes, 3.57x smaller)`; an XLA export adds its
    programs, buckets and the server flag it needs."""
    from keras_attention.serving.records import export_record

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
    run_config = run_files.read_json(path, "the trained model's settings", remedy=REMEDY)
    if isinstance(run_config, dict) and "decoding" not in run_config:
        run_files.write_json_atomically(path, {**run_config, "decoding": decoding_settings(config)})


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
        run_folders.claim(
            config.output, settings, defaults=recorded_defaults(settings), upgrade=upgrade
        )
        log(f"{config.output} holds the trained demo model: evaluating it (--overwrite retrains)")
        record_decoding(config)
    else:
        train(config, log_and_mark)
    scores = evaluate(config.replace(command="evaluate"), log)
    translate_command(config.replace(command="translate", text=list(DEMO_SENTENCES)), log)
    path = export_command(config.replace(**DEMO_EXPORT), log)
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
