"""The translation recipe's decoding options, n-best lists, the
recorded position settings and their exports, and data batching.

The trained run and its export (`trained`, `exported`) are made once per
test session (`tests/conftest.py`)."""

import json
import os
import re
import shutil

import numpy as np
import pytest
from keras_attention_recipes import translate
from keras_attention_recipes.translation import config as settings_module
from keras_attention_recipes.translation import data as data_module
from keras_attention_recipes.translation import scores, trained_run, training
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import (
    TEXTS,
    TINY,
    check_export,
    cli,
    encoded_rows,
    epoch_pairs,
    perturbed_copy,
    run,
    translations,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


# -- n-best, forced prefixes, decoding options -----------------------------------------
def test_translate_nbest_prints_the_exported_nbest(trained, exported, capsys):
    """`--nbest 2`: two `score<TAB>translation` lines per sentence, best
    first, the same as the export's `nbest` signature (beam 2)."""
    import tensorflow as tf

    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?"]
    flags = ["--output", trained[0], "--beam-width", "2", "--nbest", "2"]
    status, out, err = cli(capsys, "translate", *flags, *texts)
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) == 4 and all(re.fullmatch(r"-?\d+\.\d{4}\t.*", line) for line in lines)
    scores = [float(line.split("\t")[0]) for line in lines]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]
    served = tf.saved_model.load(exported).signatures["nbest"](text=tf.constant(texts))
    assert [line.split("\t", 1)[1] for line in lines] == [
        t.decode() for t in served["translations"].numpy().reshape(-1)
    ]
    np.testing.assert_allclose(scores, served["scores"].numpy().reshape(-1), atol=1e-4)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["translate", "--beam-width", "2", "--nbest", "3"], "error: --nbest must be at most"),
        (["translate", "--nbest", "0"], "error: --nbest must be >= 1; got 0"),
        (["translate", "--min-length", "-1"], "error: --min-length must be >= 0; got -1"),
        (
            ["translate", "--no-repeat-ngram-size", "-2"],
            "error: --no-repeat-ngram-size must be >= 0",
        ),
        (
            ["translate", "--repetition-penalty", "0"],
            "error: --repetition-penalty must be >= 0.01; got 0.0",
        ),
        (["export", "--coverage-penalty", "-1"], "error: --coverage-penalty must be >= 0"),
        (["export", "--coverage-penalty", "nan"], "error: --coverage-penalty must be a finite"),
        (["export", "--num-hypotheses", "5"], "error: --num-hypotheses must be at most"),
        (["evaluate", "--alpha", "-0.5"], "error: --alpha must be >= 0; got -0.5"),
        (["demo", "--alpha", "inf"], "error: --alpha must be a finite number"),
    ],
)
def test_decoding_flags_are_checked_before_any_work(tmp_path, capsys, argv, message):
    text = ["Hallo."] if argv[0] == "translate" else []
    status, out, err = cli(capsys, *argv, "--output", str(tmp_path / "none"), *text)
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, (out, err)


def test_translate_applies_the_decoding_options_with_and_without_nbest(trained, capsys):
    """The best translation under the decoding flags is the first of
    `--nbest`'s lines under the same flags, and the flags change it (here
    --min-length forces a longer output)."""
    text = "Ich habe keine Zeit."
    flags = ["--output", trained[0], "--beam-width", "2"]
    options = ["--min-length", "12", "--no-repeat-ngram-size", "2", "--coverage-penalty", "0.2"]
    _, plain, _ = cli(capsys, "translate", *flags, text)
    status, best, err = cli(capsys, "translate", *flags, *options, text)
    assert status == 0, err
    status, nbest, err = cli(capsys, "translate", *flags, *options, "--nbest", "1", text)
    assert status == 0, err
    best = best.splitlines()[1].split("-> ", 1)[1]
    assert nbest.splitlines()[0].split("\t", 1)[1] == best
    assert best != plain.splitlines()[1].split("-> ", 1)[1]


# -- SentencePiece -----------------------------------------------------------------------
def test_a_run_recorded_before_the_tokenizer_flag_is_a_wordpiece_run(tmp_path):
    """run.json of a run made before --tokenizer lacks it: the run used
    WordPiece. It resumes with `--tokenizer wordpiece`, its `.vocab` files
    load as WordPiece tokenizers, and the new default is refused with the
    difference."""
    import tensorflow as tf
    from keras_attention_recipes import run_folders

    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    def settings(*flags):
        # a run from before presets: trained with the flags' own defaults
        args = translate.parser().parse_args(
            ["train", "--output", str(tmp_path), "--preset", "none", *flags]
        )
        return training.train_settings(translate.check(args))[0]

    new, old = settings(), settings("--tokenizer", "wordpiece")
    assert (new["tokenizer"], old["tokenizer"]) == ("sentencepiece", "wordpiece")
    output = str(tmp_path / "old")
    os.makedirs(output)
    recorded = {key: value for key, value in old.items() if key != "tokenizer"}
    with open(os.path.join(output, "run.json"), "w") as handle:
        json.dump({"settings": recorded}, handle)
    with pytest.raises(ValueError) as refused:
        run_folders.claim(output, new, defaults=settings_module.recorded_defaults(new))
    assert "tokenizer: 'wordpiece' in the run, 'sentencepiece' now" in str(refused.value)
    run_folders.claim(output, old, defaults=settings_module.recorded_defaults(old))  # resumes
    assert json.load(open(os.path.join(output, "run.json")))["settings"] == old
    for side in ("source", "target"):
        with open(os.path.join(output, f"{side}.vocab"), "w") as handle:
            handle.write("\n".join(RESERVED + ["ich", "zeit"]) + "\n")
    tokenizers = data_module.load_tokenizers(output)
    assert all(isinstance(tokenizer, SubwordTokenizer) for tokenizer in tokenizers)
    assert tokenizers[0].encode(tf.constant(["ich zeit"]), 5)[0].numpy().tolist() == [
        [1, 4, 5, 2, 0]
    ]


# Large: a whole run trained and exported (the default transformer's export
# and op check: tests/test_export.py's int8_transformer).
@pytest.mark.large
def test_export_of_a_rope_multi_query_windowed_transformer(tmp_path):
    """The transformer family exports, with a position scheme and head
    layout other than the default: the TensorFlow-only process gives the
    in-process translations, and the graph holds only ops every TF Serving
    release with an op list has. (The sinusoidal default's decoding graph is
    exported by `tests/test_bench_decoding.py`'s SavedModel, and every
    family's by `make serving-check`.)"""
    from keras_attention.serving.check import check_export as serving_problems

    output = str(tmp_path / "run")
    flags = (
        "--family",
        "transformer",
        "--position",
        "rope",
        "--num-key-value-heads",
        "1",
        "--sliding-window",
        "4",
    )
    run("train", "--output", output, *flags, "--epochs", "1", *TINY)
    config = json.load(open(os.path.join(output, "config.json")))
    assert (config["position"], config["num_key_value_heads"], config["sliding_window"]) == (
        "rope",
        1,
        4,
    )
    model, *_ = trained_run.load_run(output)
    assert (model.position, model.num_key_value_heads, model.sliding_window) == ("rope", 1, 4)
    check_export(output, tmp_path)
    problems = serving_problems(str(tmp_path / "moved"))
    assert problems and not any(problems.values()), problems


def test_batches_are_bucketed_by_length_and_hold_every_pair_once(trained):
    from keras_attention_recipes.translation.batches import bucket_boundaries
    from keras_attention_recipes.translation.corpus import read_pairs
    from keras_attention_recipes.translation.pipeline import make_dataset

    output, _ = trained
    source_tokenizer, target_tokenizer = data_module.load_tokenizers(output)
    path = os.path.join(output, "data", "train.tsv")
    data, kept, total = make_dataset(
        path, source_tokenizer, target_tokenizer, 48, 8, shuffle=True, batch_tokens=200
    )
    pairs = read_pairs(path)
    sources, source_cut = encoded_rows(source_tokenizer, [p[0] for p in pairs], 48)
    targets, target_cut = encoded_rows(target_tokenizer, [p[1] for p in pairs], 49)
    fits = [(s, t) for s, t, a, b in zip(sources, targets, source_cut, target_cut) if not (a or b)]
    assert total == len(pairs) and kept == len(fits) > 100
    seen, shapes = epoch_pairs(data)
    widths = {b - 1 for b in bucket_boundaries(48)}
    for source, target_in, target_out in shapes:
        assert source[1] in widths and target_in[1] == target_out[1] == source[1] - 1
        assert source[0] == 1 or source[0] * source[1] <= 200  # the token budget
    assert len(shapes) == int(data.cardinality())
    assert sorted(seen) == sorted(fits)  # every pair that fits, once
    # Each pair is padded only to its bucket's width, not to max_length.
    bucket_width = [
        min(b for b in bucket_boundaries(48) if b > max(len(s), len(t))) - 1 for s, t in fits
    ]
    assert sum(s[0] * s[1] for s, _, _ in shapes) == sum(bucket_width) < len(fits) * 48
    # Untuned: dropping an autotuned epoch's iterator stalled training for
    # 15-30 s at some epoch boundaries (docs/archive/benchmarks-history.md,
    # "The stalls between epochs").
    assert data.options().autotune.enabled is False


def test_the_count_of_pairs_reads_lines_as_the_pipeline_does(trained, tmp_path):
    """`make_dataset` counts the pairs that fit before it builds the pipeline
    (the dataset's length); it reads the file itself, and must read the
    lines `tf.data.TextLineDataset` reads: split on `\\n` only, every `\\r`
    dropped. A file with CRLF endings and carriage returns inside lines
    gives the counts and the pairs of the same file without them."""
    from keras_attention_recipes.translation.pipeline import make_dataset

    output, _ = trained
    tokenizers = data_module.load_tokenizers(output)
    with open(os.path.join(output, "data", "train.tsv"), "rb") as handle:
        lines = handle.read().splitlines()[:150]
    clean, messy = tmp_path / "clean.tsv", tmp_path / "messy.tsv"
    clean.write_bytes(b"\n".join(lines))  # no final newline
    # every third line's first space becomes "\r " (kept, the \r changes
    # its pieces, so what fits), and every line ends in \r\n
    messy.write_bytes(
        b"\r\n".join(
            line.replace(b" ", b"\r ", 1) if i % 3 == 0 else line for i, line in enumerate(lines)
        )
        + b"\r"
    )
    results = [make_dataset(str(path), *tokenizers, 24, 8) for path in (clean, messy)]
    (data, kept, total), (messy_data, messy_kept, messy_total) = results
    assert (messy_kept, messy_total) == (kept, total) == (kept, 150) and 0 < kept < 150
    seen, _ = epoch_pairs(messy_data)  # the pipeline's length matches the count
    assert sorted(seen) == sorted(epoch_pairs(data)[0]) and len(seen) == kept


def test_word_dropout_replaces_input_pieces_by_unk_and_never_the_scored_targets(trained):
    from keras_attention_recipes.translation.pipeline import make_dataset

    from keras_attention.tokenizers import UNK

    output, _ = trained
    tokenizers = data_module.load_tokenizers(output)
    path = os.path.join(output, "data", "train.tsv")

    def batches(rate, seed=0):
        data, _, _ = make_dataset(path, *tokenizers, 48, 16, seed=seed, word_dropout=rate)
        return [
            (source, target_in, target_out)
            for (source, target_in), target_out in data.as_numpy_iterator()
        ]

    clean, noisy = batches(0.0), batches(0.3)
    assert len(clean) == len(noisy) > 5
    counts = {"pieces": 0, "dropped": 0}
    for batch, noisy_batch in zip(clean, noisy):
        for ids, noisy_ids in zip(batch[:2], noisy_batch[:2]):
            changed = ids != noisy_ids
            assert (noisy_ids[changed] == UNK).all()  # a dropped piece becomes [UNK]
            assert (ids[changed] > UNK).all()  # [PAD], [START], [END] stay
            counts["pieces"] += int((ids > UNK).sum())
            counts["dropped"] += int(changed.sum())
        np.testing.assert_array_equal(batch[2], noisy_batch[2])  # the scored targets
    assert counts["pieces"] > 2000
    assert abs(counts["dropped"] / counts["pieces"] - 0.3) < 0.03
    # Source and decoder input draw apart; a run's seed gives its noise again.
    source, target_in, _ = noisy[0]
    assert not np.array_equal(source[:, :5] == UNK, target_in[:, :5] == UNK)
    again = batches(0.3)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(noisy, again))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(noisy, batches(0.3, seed=1)))


def test_subword_sampling_segments_each_epoch_anew_into_the_same_sentences(trained):
    """`subword_sampling`: the training batches hold other segmentations of
    the same sentences each epoch, which decode to the same texts (a pair
    whose draw is longer than `max_length` sits the epoch out); the decoder's
    input and the scored targets stay one piece apart."""
    from keras_attention_recipes.translation.pipeline import make_dataset

    output, _ = trained
    tokenizers = data_module.load_tokenizers(output)
    path = os.path.join(output, "data", "train.tsv")

    def epoch(data):
        """(source text, target text, source pieces) of every pair of an epoch."""
        found = []
        for (source, target_in), target_out in data.as_numpy_iterator():
            np.testing.assert_array_equal(target_in[:, 1:], target_out[:, :-1])
            texts = [
                tokenizer.decode(ids).numpy()
                for tokenizer, ids in zip(tokenizers, (source, target_out))
            ]
            found += [(s, t, tuple(row[row > 0])) for s, t, row in zip(*texts, source)]
        return sorted(found)

    best = epoch(make_dataset(path, *tokenizers, 48, 16, shuffle=True)[0])
    sampled = make_dataset(path, *tokenizers, 48, 16, shuffle=True, subword_sampling=0.3)[0]
    first, second = epoch(sampled), epoch(sampled)
    assert len(best) > 100
    # The same sentences, less the few whose drawn segmentation is too long.
    for drawn in (first, second):
        assert {(s, t) for s, t, _ in drawn} <= {(s, t) for s, t, _ in best}
        assert len(drawn) > 0.9 * len(best)
    best, first, second = (
        {(s, t): pieces for s, t, pieces in found} for found in (best, first, second)
    )
    shared = best.keys() & first.keys() & second.keys()
    assert np.mean([best[k] != first[k] for k in shared]) > 0.2  # other than the best
    assert np.mean([first[k] != second[k] for k in shared]) > 0.2  # and drawn anew


def test_dictionary_entries_are_extra_pairs_and_never_a_held_out_sentence(tmp_path, trained):
    from keras_attention_recipes.translation.corpus import read_pairs, words_of
    from keras_attention_recipes.translation.pipeline import make_dataset
    from keras_attention_recipes.translation.splits import prepare

    paths = prepare(str(tmp_path / "run"), limit=300, dictionary=True, log=lambda line: None)
    entries = read_pairs(paths["dictionary"])
    assert len(entries) > 300_000
    assert ("Bahnhof", "railway station") in entries and ("Bahnhöfe", "railway stations") in entries
    held_out = {
        words_of(text)
        for split in ("valid", "test")
        for pair in read_pairs(paths[split])
        for text in pair
    }
    assert not any(words_of(s) in held_out or words_of(t) in held_out for s, t in entries)
    # Each epoch: the sentence pairs plus `extra_ratio` x as many entries, a new draw.
    extra = str(tmp_path / "entries.tsv")
    with open(extra, "w", encoding="utf-8") as handle:
        handle.writelines(f"{s}\t{t}\n" for s, t in entries[:1000])
    source_tokenizer, target_tokenizer = data_module.load_tokenizers(trained[0])
    data, kept, _ = make_dataset(
        paths["train"],
        source_tokenizer,
        target_tokenizer,
        48,
        16,
        shuffle=True,
        extra_path=extra,
        extra_ratio=0.5,
    )
    first, shapes = epoch_pairs(data)
    second, _ = epoch_pairs(data)
    assert len(shapes) == int(data.cardinality())
    entry_sources = set(encoded_rows(source_tokenizer, [s for s, _ in entries[:1000]], 48)[0])
    sentences = read_pairs(paths["train"])
    sentence_sources = set(encoded_rows(source_tokenizer, [s for s, _ in sentences], 48)[0])
    drawn = [s for s, _ in first if s in entry_sources - sentence_sources]
    # About half as many as the sentences; an epoch cut or topped up to its
    # expected number of batches (16 pairs each) may hold a few more or less.
    assert 0.5 * kept - 2 * 16 < len(drawn) < 0.5 * kept + 2 * 16
    assert {s for s, _ in first} != {s for s, _ in second}  # a new draw each epoch


def test_bleu_by_source_length_scores_each_bucket_on_its_own_sentences():
    short = ["Ich bin hier.", "Das ist gut so."]  # 3 and 4 words
    long = ["Wir haben gestern den ganzen Tag im Garten gearbeitet."]  # 9 words
    references = ["I am here now.", "That is fine as it is.", "We worked in the garden all day."]
    hypotheses = [references[0], references[1], "No."]
    table = scores.bleu_by_length(short + long, hypotheses, references)
    assert list(table) == ["1-5", "6-10"]  # empty buckets are left out
    assert table["1-5"] == {"bleu": 100.0, "sentences": 2}
    assert table["6-10"]["sentences"] == 1 and table["6-10"]["bleu"] < 1.0


def test_a_run_records_its_decoding_settings_and_the_commands_use_them(
    trained, tmp_path, capsys, monkeypatch
):
    """The demo evaluated and exported with --alpha 1.2, but translate and
    evaluate on the same run used 0.6: a run records its decoding settings
    when it trains, and evaluate, translate and export use them unless a
    flag says otherwise."""
    from keras_attention_recipes.translation.command_settings import BEAM_DEFAULTS
    from keras_attention_recipes.translation.trained_run import decoding_settings

    recorded = json.load(open(os.path.join(trained[0], "config.json")))["decoding"]
    assert recorded == {  # the shared run trained without decoding flags
        "beam_width": 4,
        "alpha": 0.6,
        "min_length": 0,
        "no_repeat_ngram_size": 0,
        "repetition_penalty": 1.0,
        "coverage_penalty": 0.0,
    }
    assert BEAM_DEFAULTS["alpha"] == 0.6
    train = translate.check(translate.parser().parse_args(["train", "--alpha", "1.2"]))
    assert decoding_settings(train) == {**recorded, "alpha": 1.2}  # what train records
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    path = os.path.join(output, "config.json")
    run_config = json.load(open(path))
    json.dump(
        {**run_config, "decoding": {**recorded, "alpha": 1.2, "beam_width": 2}}, open(path, "w")
    )

    searches = []

    def capture(run, *args, **kwargs):
        searches.append(run.search.get_config())
        raise KeyboardInterrupt  # enough: the search is chosen

    for name in ("translate", "export"):
        monkeypatch.setattr(trained_run.TrainedRun, name, capture)
    for argv in (["translate", "Hallo."], ["export", "--export-dir", str(tmp_path / "x")]):
        cli(capsys, *argv, "--output", output)
    cli(capsys, "translate", "--output", output, "--alpha", "0.3", "Hallo.")
    assert [(s["alpha"], s["beam_width"]) for s in searches] == [(1.2, 2), (1.2, 2), (0.3, 2)]
    status, _, err = cli(capsys, "translate", "--output", output, "--nbest", "3", "Hallo.")
    assert status == 2 and err == "error: --nbest must be at most --beam-width 2; got 3\n"
    monkeypatch.undo()
    status, _, err = cli(
        capsys, "evaluate", "--output", output, "--limit-test", "2", "--samples", "0"
    )
    assert status == 0, err
    scores = json.load(open(os.path.join(output, "scores.json")))
    assert (scores["alpha"], scores["beam_width"]) == (1.2, 2)


def test_decoding_commands_load_the_model_without_its_training_state(trained, capsys, monkeypatch):
    """translate, evaluate and export only decode: the model loads without
    its loss, metrics and optimizer (faster, and no optimizer warning);
    `average`, which evaluates and saves the model, still loads it compiled."""

    models = []

    def capture(run, *args, **kwargs):
        models.append(run.model)
        raise KeyboardInterrupt  # enough: the model is loaded

    monkeypatch.setattr(trained_run.TrainedRun, "translate", capture)
    monkeypatch.setattr(trained_run.TrainedRun, "export", capture)
    for argv in (["translate", "Hallo."], ["export", "--export-dir", "unused"]):
        cli(capsys, *argv, "--output", trained[0])
    assert len(models) == 2 and all(not model.compiled for model in models)
    assert trained_run.load_run(trained[0])[0].compiled


def test_export_says_each_step_on_stderr(trained, tmp_path, capsys, monkeypatch):
    """`export` ran 48 s in silence: it now names each step on stderr
    (stdout keeps only the result)."""
    from keras_attention.serving import Translator
    from keras_attention.serving.exporters import SavedModelExporter
    from keras_attention.serving.graph import SIGNATURES
    from keras_attention.serving.records import write_export_record

    traced = []
    monkeypatch.setattr(Translator, "function", lambda self, name: traced.append(name))

    def export(self, translator, *args, **kwargs):  # a version holding only its record
        path = tmp_path / "translator" / "1"
        (path / "variables").mkdir(parents=True)
        write_export_record(str(path), translator)
        return str(path)

    monkeypatch.setattr(SavedModelExporter, "export", export)
    status, out, err = cli(capsys, "export", "--output", trained[0], "--export-dir", str(tmp_path))
    assert status == 0, err
    assert traced == list(SIGNATURES)
    lines = err.splitlines()
    assert lines[: len(SIGNATURES) + 1] == [
        f"export: tracing signature {index}/{len(SIGNATURES)} ({name}) ..."
        for index, name in enumerate(SIGNATURES, 1)
    ] + ["export: writing the SavedModel and its warm-up requests ..."]
    assert re.fullmatch(r"export: done in \d+s", lines[len(SIGNATURES) + 1])
    assert out.startswith("exported ") and "tracing" not in out
    assert out.rstrip().endswith("; variables/ 0 bytes")  # float32: no second size


def test_each_decoding_command_reads_the_runs_config_once(trained, tmp_path, capsys, monkeypatch):
    """A command's `TrainedRun` settles the decoding settings against the
    run's config.json, and the model is loaded with what it read: evaluate,
    translate and export read the file once (the decoding options reach
    their search all the same)."""
    from keras_attention_recipes import run_files

    reads, searches = [], []
    read_json = run_files.read_json

    def counted(path, *args, **kwargs):
        if os.path.basename(path) == "config.json":
            reads.append(path)
        return read_json(path, *args, **kwargs)

    def capture(run, *args, **kwargs):
        searches.append(run.search.alpha)
        raise KeyboardInterrupt  # enough: the search is chosen and the model loaded

    run = str(tmp_path / "run")  # evaluate writes its scores there
    shutil.copytree(trained[0], run)
    monkeypatch.setattr(run_files, "read_json", counted)
    output = ["--output", run, "--alpha", "1.1"]
    status, out, err = cli(capsys, "translate", *output, "Hallo.")
    assert status == 0 and len(reads) == 1, (reads, err)
    status, out, err = cli(capsys, "evaluate", *output, "--limit-test", "2", "--samples", "1")
    assert status == 0 and len(reads) == 2, (reads, err)
    monkeypatch.setattr(trained_run.TrainedRun, "export", capture)
    cli(capsys, "export", *output, "--export-dir", str(tmp_path / "x"))
    assert len(reads) == 3 and searches == [1.1], reads


def test_the_demo_records_its_decoding_on_a_run_trained_before_runs_did(trained, tmp_path):
    """`make demo` on a finished demo run from before runs recorded their
    decoding evaluated with alpha 1.2 while translate used 0.6: the demo
    records its settings there (once; a recorded run keeps its own)."""
    from keras_attention_recipes.translation import commands

    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    path = os.path.join(output, "config.json")
    old = json.load(open(path))
    del old["decoding"]
    json.dump(old, open(path, "w"))
    demo = translate.check(translate.parser().parse_args(["demo", "--output", output]))
    commands.record_decoding(demo)
    assert json.load(open(path))["decoding"]["alpha"] == 1.2
    translating = trained_run.TrainedRun(
        translate.check(translate.parser().parse_args(["translate", "--output", output, "Hallo."]))
    ).config
    assert (translating.alpha, translating.beam_width) == (1.2, 4)
    commands.record_decoding(demo.replace(alpha=2.0))  # already recorded: kept
    assert json.load(open(path))["decoding"]["alpha"] == 1.2


JAX_PYTHON = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-jax", "bin", "python"
)


@pytest.mark.skipif(not os.path.exists(JAX_PYTHON), reason="make test makes .venv-jax")
def test_a_run_translates_alike_in_a_virtualenv_without_tensorflow(trained, tmp_path):
    """`translate --input` of the trained run here (TensorFlow: the graph's
    Translator) and in the JAX virtualenv, which has no TensorFlow
    (`TextTranslator`, the tokenizers' Python twins, the model on JAX):
    the same lines, with the run's beam; and the same `evaluate` scores."""
    import subprocess

    output, _ = trained
    with open(os.path.join(output, "data", "test.tsv"), encoding="utf-8") as handle:
        sources = [line.split("\t")[0] for line in handle][:40]
    sources += ["Das kostet 49 Euro.", "Gleis 3,5 um 14:35.", "", "  "]
    given = tmp_path / "in.txt"
    given.write_text("\n".join(sources) + "\n", encoding="utf-8")
    here, there = tmp_path / "tensorflow.txt", tmp_path / "jax.txt"
    translate.main(
        ["translate", "--output", output, "--input", str(given), "--output-file", str(here)]
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    without = (
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is not None)"
    )
    assert subprocess.run([JAX_PYTHON, "-c", without]).returncode == 0  # no TensorFlow there
    command = [
        JAX_PYTHON,
        "-m",
        "keras_attention_recipes.translate",
        "translate",
        "--output",
        output,
    ]
    done = subprocess.run(
        [*command, "--input", str(given), "--output-file", str(there)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    expected = here.read_text(encoding="utf-8").splitlines()
    assert len(expected) == len(sources) and expected[-2:] == ["", ""]
    assert len(set(expected)) > 10  # the tiny model's translations differ by sentence
    assert there.read_text(encoding="utf-8").splitlines() == expected
    # `--nbest 2` there: the same hypotheses, the same scores within 1e-4
    nbest = ["--nbest", "2", "--input", str(given), "--output-file"]
    translate.main(["translate", "--output", output, *nbest, str(here)])
    done = subprocess.run(
        [*command, *nbest, str(there)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = {
        name: [line.split("\t", 1) for line in path.read_text(encoding="utf-8").splitlines()]
        for name, path in (("tensorflow", here), ("jax", there))
    }
    assert len(lines["jax"]) == 2 * len(sources)
    assert [text for _, text in lines["jax"]] == [text for _, text in lines["tensorflow"]]
    np.testing.assert_allclose(
        [float(score) for score, _ in lines["jax"]],
        [float(score) for score, _ in lines["tensorflow"]],
        atol=1e-4,
    )
    # `evaluate` there (a copy of the run: it writes its scores): the same scores.
    scored = {}
    for name in ("tensorflow", "jax"):
        copy = str(tmp_path / f"run-{name}")
        shutil.copytree(output, copy)
        evaluated = ["evaluate", "--output", copy]
        if name == "tensorflow":
            translate.main(evaluated)
        else:
            done = subprocess.run(
                [JAX_PYTHON, "-m", "keras_attention_recipes.translate", *evaluated],
                capture_output=True, text=True, env=env, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
        with open(os.path.join(copy, "scores.json"), encoding="utf-8") as handle:
            scores = json.load(handle)  # sacrebleu's signatures name each virtualenv's version
        del scores["test"]  # the copy's path
        scored[name] = {key: value for key, value in scores.items() if "signature" not in key}
    assert scored["jax"] == scored["tensorflow"] and scored["jax"]["chrf"] > 0


def test_an_ensemble_translates_alike_with_the_tokenizers_python_twins(
    trained, tmp_path, monkeypatch
):
    """`translate --ensemble` (the run and another model of its vocabulary:
    its weights, perturbed) with the graph's Translator, and where
    TensorFlow is missing (the tokenizers' Python twins, `TextTranslator`,
    the same `Ensemble`): the same translations, with the run's beam and
    `--nbest 2`."""
    output, _ = trained
    other = perturbed_copy(output, tmp_path / "other", seed=1)
    flags = ["translate", "--output", output, *TEXTS, "--ensemble", other]
    graph = translations(run(*flags)), run(*flags, "--nbest", "2")
    alone = translations(run("translate", "--output", output, *TEXTS))
    for module in (data_module, trained_run):
        monkeypatch.setattr(module, "graph_tokenizers", lambda: False)
    twins = translations(run(*flags)), run(*flags, "--nbest", "2")
    assert twins[0] == graph[0] and len(graph[0]) == len(TEXTS) and graph[0] != alone
    rows = [[line.split("\t") for line in lines.splitlines()] for lines in (twins[1], graph[1])]
    assert [text for _, text in rows[0]] == [text for _, text in rows[1]]
    np.testing.assert_allclose(
        [float(score) for score, _ in rows[0]], [float(score) for score, _ in rows[1]], atol=1e-4
    )
