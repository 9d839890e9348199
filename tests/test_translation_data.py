"""The translation recipe's data and tokenizers, user files, validation
BLEU, checkpoint averaging, the results tables and --alpha.

The trained run and its export (`trained`, `exported`) are made once per
test session (`tests/conftest.py`)."""

import itertools
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
from keras_attention_recipes import translate
from keras_attention_recipes.translation import config as settings_module
from keras_attention_recipes.translation import model as model_module
from keras_attention_recipes.translation import trained_run, training
from keras_attention_recipes.translation.corpus import CorpusError
from keras_attention_recipes.translation.settings import DING, MAX_EPOCHS
from keras_attention_recipes.translation.splits import prepare

from keras_attention.seq2seq import BeamSearch
from tests.translation_helpers import (
    TINY,
    cli,
    run,
    weight_arrays,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


# -- positions, key/value heads and windows --------------------------------------------
def test_a_run_recorded_before_the_position_flags_resumes_with_their_defaults(tmp_path):
    """run.json of a run trained before --position, --kv-heads and --window
    lacks them: it was a sinusoidal, full multi-head transformer (an rnn or
    convs2s run, none of them), and is resumed as one; another position is
    refused with the difference."""
    from keras_attention_recipes import run_folders

    def settings(*flags):
        # a run from before presets: trained with the flags' own defaults
        args = translate.parser().parse_args(
            ["train", "--output", str(tmp_path), "--preset", "none", *flags]
        )
        return training.train_settings(translate.check(args))[0]

    for family in ("transformer", "rnn"):
        output = str(tmp_path / family)
        old = settings("--family", family)
        assert old["position"] == ("sinusoidal" if family == "transformer" else None)
        assert old["num_key_value_heads"] is None and old["sliding_window"] is None
        os.makedirs(output)
        recorded = {
            k: v
            for k, v in old.items()
            if k not in ("position", "num_key_value_heads", "sliding_window")
        }
        with open(os.path.join(output, "run.json"), "w") as handle:
            json.dump({"settings": recorded}, handle)
        run_folders.claim(output, old, defaults=settings_module.recorded_defaults(old))  # resumes
        assert json.load(open(os.path.join(output, "run.json")))["settings"] == old
        with open(os.path.join(output, "run.json"), "w") as handle:
            json.dump({"settings": recorded}, handle)
        if family == "transformer":
            new = settings("--family", family, "--position", "rope", "--kv-heads", "2")
            with pytest.raises(ValueError) as refused:
                run_folders.claim(output, new, defaults=settings_module.recorded_defaults(new))
            assert "position: 'sinusoidal' in the run, 'rope' now" in str(refused.value)
            assert "num_key_value_heads: None in the run, 2 now" in str(refused.value)


def test_a_window_recorded_by_0_2_is_read_as_the_same_window(tmp_path):
    """0.2.x's `--sliding-window w` kept |i - j| <= w; the flag now means
    Keras's |i - j| < w. A run recorded then (run.json, config.json) is read
    as w + 1: it resumes with `--sliding-window 3`, is refused with 2, and
    its model is rebuilt with the same window."""
    from keras_attention_recipes import run_folders

    def settings(*flags):
        # a run from before presets: trained with the flags' own defaults
        args = translate.parser().parse_args(
            ["train", "--output", str(tmp_path), "--preset", "none", *flags]
        )
        return training.train_settings(translate.check(args))[0]

    new = settings("--family", "transformer", "--sliding-window", "3")
    assert (new["sliding_window"], new["sliding_window_rule"]) == (3, "keras")
    old = {k: v for k, v in new.items() if k not in ("sliding_window", "sliding_window_rule")}
    old["window"] = 2  # 0.2.0's name and meaning
    output = str(tmp_path / "run")
    os.makedirs(output)
    with open(os.path.join(output, "run.json"), "w") as handle:
        json.dump({"settings": old}, handle)
    defaults = settings_module.recorded_defaults(new)
    with pytest.raises(ValueError, match="sliding_window: 3 in the run, 2 now"):
        narrower = settings("--family", "transformer", "--sliding-window", "2")
        run_folders.claim(output, narrower, defaults=defaults, upgrade=settings_module.upgrade)
    run_folders.claim(output, new, defaults=defaults, upgrade=settings_module.upgrade)  # resumes
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["sliding_window"] == 3
    spec = settings_module.upgrade({**old, "hidden_dim": 8, "num_heads": 2})
    model = model_module.build_model(spec, 9, 9)
    assert model.sliding_window == 3
    # A hyperparameters file is today's: its window is taken as written.
    tuned = settings_module.model_settings(new, {"sliding_window": 2})
    assert tuned["sliding_window"] == 2


# -- translating files, validation and averaging ---------------------------------------
@pytest.mark.large(
    reason=(
        "eight translate commands on the shared run; the other translate tests read its "
        "arguments in `make test`"
    )
)
def test_translate_reads_lines_from_a_file_or_stdin_and_keeps_every_line(
    trained, tmp_path, capsys, monkeypatch
):
    """One output line per input line, empty lines empty, `\r\n` read as
    `\n`; the translations are those of the sentences given as arguments;
    standard input (not a terminal) and `--input -` read the same; the
    output file is written whole, nothing on stdout."""
    import io

    sentences = ["Ich habe keine Zeit.", "", "Wo ist der Bahnhof?", "   ", "Danke."]
    data = ("\r\n".join(sentences[:3]) + "\n" + "\n".join(sentences[3:])).encode()
    path = tmp_path / "in.txt"
    path.write_bytes(data)  # no newline after the last line
    flags = ["--output", trained[0], "--beam-width", "2"]
    _, by_arguments, _ = cli(capsys, "translate", *flags, *sentences)
    expected = [line.split("-> ", 1)[1] for line in by_arguments.splitlines()[1::2]]
    # (the tiny model may also give "" for a sentence; blank lines must)
    assert len(expected) == 5 and expected[1] == expected[3] == ""
    status, out, err = cli(capsys, "translate", *flags, "--input", str(path))
    assert status == 0 and out.splitlines() == expected and out.endswith("\n"), err
    for extra in ([], ["--input", "-"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        status, out, err = cli(capsys, "translate", *flags, *extra)
        assert status == 0 and out.splitlines() == expected, (extra, err)
    written = tmp_path / "out.txt"
    status, out, err = cli(
        capsys, "translate", *flags, "--input", str(path), "--output-file", str(written)
    )
    assert status == 0 and out == "" and f"translated 5 lines -> {written}" in err
    assert written.read_text(encoding="utf-8").splitlines() == expected
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]  # no temporary left
    status, out, err = cli(capsys, "translate", *flags, "--input", str(path), "--nbest", "2")
    _, by_arguments, _ = cli(capsys, "translate", *flags, "--nbest", "2", *sentences)
    assert status == 0 and out == by_arguments and len(out.splitlines()) == 10, err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--input", "/nonexistent.txt"], "error: --input /nonexistent.txt: no such file"),
        (["--input", "-", "Hallo."], "error: give the sentences either as arguments or"),
        (["--output-file", "/nonexistent/out.txt", "Hallo."], "error: --output-file /nonexist"),
    ],
)
def test_translate_file_mistakes_are_error_lines(tmp_path, capsys, argv, message):
    status, out, err = cli(capsys, "translate", "--output", str(tmp_path), *argv)
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_bytes_that_are_not_utf8_are_replaced_alike_in_input_and_test_files(
    trained, tmp_path, capsys
):
    """`translate --input` refused the whole file for one such byte, while
    `evaluate --test` skipped the line and the docs said they are replaced:
    both replace them by U+FFFD and say on stderr how many lines held one."""
    from keras_attention_recipes.translation.text_io import read_pair_file

    path = tmp_path / "in.txt"
    path.write_bytes(b"Hallo.\nkaputt \xff\nWelt \xfe\xff.\n")
    flags = ("--output", trained[0], "--beam-width", "1")
    status, out, err = cli(capsys, "translate", *flags, "--input", str(path))
    assert status == 0, err
    assert len(out.splitlines()) == 3
    assert err.strip() == (
        f"warning: --input {path}: 2 lines held bytes that are not UTF-8 (lines 2, 3); "
        "each such byte was replaced by U+FFFD"
    )
    test = tmp_path / "test.tsv"
    test.write_bytes(b"Hallo.\tHello.\nkaputt \xff\tbroken\n")
    warnings = []
    assert read_pair_file(str(test), "--test", warnings.append) == [
        ("Hallo.", "Hello."),
        ("kaputt \ufffd", "broken"),
    ]
    assert warnings == [
        f"warning: --test {test}: 1 line held bytes that are not UTF-8 (line 2); "
        "each such byte was replaced by U+FFFD"
    ]
    status, out, err = cli(capsys, "evaluate", *flags, "--test", str(test), "--samples", "0")
    assert status == 0 and "2 sentences" in out, err
    assert f"warning: --test {test}: 1 line held bytes that are not UTF-8 (line 2)" in err


def test_progress_goes_to_stderr_a_line_every_n_or_redrawn_on_a_terminal():
    import io

    from keras_attention_recipes.translation.text_io import Progress

    log = io.StringIO()
    progress = Progress(2500, stream=log, every=1000, quiet_below=0)
    for done in range(64, 2500, 64):
        progress.update(done)
    progress.update(2500)
    progress.close()
    counts = [
        int(re.match(r"translated (\d+)/2500 sentences", line)[1])
        for line in log.getvalue().splitlines()
    ]
    assert counts == [1024, 2048, 2500]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    progress = Progress(200, stream=screen, quiet_below=0)
    progress.update(64)
    progress.update(200)
    progress.close()
    assert re.fullmatch(r"\rtranslated 64/200 .*\rtranslated 200/200 .*\n", screen.getvalue())
    quiet = io.StringIO()
    Progress(100, stream=quiet).update(100)  # small inputs: nothing
    assert quiet.getvalue() == ""


def test_train_validates_on_the_given_file_and_logs_bleu_accuracy_and_perplexity(trained):
    """The fixture trained with `--valid VALID --bleu-every 1`: its
    validation is the user's file (the bad line reported), and TensorBoard
    holds token accuracy and perplexity for training and validation, and
    validation BLEU, for both epochs."""
    import tensorflow as tf

    output, log = trained
    assert "valid.tsv:2: expected 'source<TAB>target', found no tab; skipped" in log
    assert re.search(r"^valid: \d of 3 pairs fit", log, re.M), log
    bleu = re.findall(r"^epoch \d: validation BLEU \d+\.\d\d \(greedy, 2 sentences", log, re.M)
    assert len(bleu) == 2, log

    def scalars(folder):
        found = {}
        for name in os.listdir(folder):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
                for value in event.summary.value:
                    found.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
        return found

    train_scalars = scalars(os.path.join(output, "logs", "train"))
    valid_scalars = scalars(os.path.join(output, "logs", "validation"))
    for found in (train_scalars, valid_scalars):
        assert len(found["epoch_perplexity"]) == 2 and min(found["epoch_perplexity"]) > 1.0
        assert all(0.0 <= value <= 1.0 for value in found["epoch_token_accuracy"])
        # The loss is label-smoothed: exp(loss) is not the perplexity.
        assert not np.allclose(np.exp(found["epoch_loss"]), found["epoch_perplexity"])
    assert len(valid_scalars["epoch_bleu"]) == 2
    assert all(0.0 <= value <= 100.0 for value in valid_scalars["epoch_bleu"])


def test_evaluate_scores_a_given_test_file_and_records_the_signatures(trained, tmp_path, capsys):
    """`scores.json` holds BLEU and chrF as sacrebleu computes them for the
    translations `translate` gives, the sentence count, beam width, test
    file and the exact signatures (also printed)."""
    import sacrebleu

    output, _ = trained
    test = str(tmp_path / "my-test.tsv")
    pairs = [
        ("Ich habe keine Zeit.", "I have no time."),
        ("Wo ist der Bahnhof?", "Where is the station?"),
        ("Das ist gut.", "That is good."),
    ]
    with open(test, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{s}\t{t}\n" for s, t in pairs[:2]) + "bad line\n")
        handle.write(f"{pairs[2][0]}\t{pairs[2][1]}\n")
    flags = ["--output", output, "--beam-width", "2"]
    status, out, err = cli(capsys, "evaluate", *flags, "--test", test, "--samples", "0")
    assert status == 0, err
    scores = json.load(open(os.path.join(output, "scores.my-test.json")))
    _, translated, _ = cli(capsys, "translate", *flags, *[source for source, _ in pairs])
    hypotheses = [line.split("-> ", 1)[1] for line in translated.splitlines()[1::2]]
    references = [[target for _, target in pairs]]
    version = re.escape(sacrebleu.__version__)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, references).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, references).score, 2)
    assert re.fullmatch(
        rf"nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:{version}",
        scores["bleu_signature"],
    )
    assert re.fullmatch(
        rf"nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:{version}",
        scores["chrf_signature"],
    )
    assert (scores["sentences"], scores["beam_width"]) == (3, 2)
    assert scores["test"] == os.path.abspath(test)
    assert scores["bleu_signature"] in out
    assert "my-test.tsv:3: expected" in err and "my-test.tsv:3" not in out  # warnings: stderr


@pytest.mark.large(reason="two evaluations of the shared run beside the ones `make test` runs")
def test_evaluate_of_another_test_file_keeps_the_run_s_own_results(trained, tmp_path, capsys):
    """`evaluate --test small.tsv` replaced the run's `scores.json` (960
    sentences, BLEU 8.46) by a 2-sentence BLEU 71.44, and its heatmaps."""
    from keras_attention_recipes import run_files, run_folders

    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    own = {"bleu": 8.46, "sentences": 960}
    run_files.write_json_atomically(os.path.join(output, "scores.json"), own)
    os.makedirs(os.path.join(output, "attention"), exist_ok=True)
    heatmap = os.path.join(output, "attention", "sample0.png")
    with open(heatmap, "wb") as handle:
        handle.write(b"the run's own heatmap")
    small = tmp_path / "small.tsv"
    small.write_text("Ich habe keine Zeit.\tI have no time.\nDas ist gut.\tThat is good.\n")
    status, out, err = cli(
        capsys, "evaluate", "--output", output, "--test", str(small), "--samples", "1",
        "--beam-width", "1",
    )  # fmt: skip
    assert status == 0, err
    assert json.load(open(os.path.join(output, "scores.json"))) == own
    assert open(heatmap, "rb").read() == b"the run's own heatmap"
    scores = json.load(open(os.path.join(output, "scores.small.json")))
    assert scores["sentences"] == 2 and scores["test"] == str(small)
    assert os.path.getsize(os.path.join(output, "attention", "small", "sample0.png")) > 1000
    assert f"scores: {os.path.join(output, 'scores.small.json')}" in out
    # Another file of the same name: kept beside the first, not over it.
    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "small.tsv"
    other.write_text("Wo ist der Bahnhof?\tWhere is the station?\n")
    evaluate = ("evaluate", "--output", output, "--samples", "1", "--beam-width", "1")
    status, out, err = cli(capsys, *evaluate, "--test", str(other))
    assert status == 0, err
    assert f"scores: {os.path.join(output, 'scores.small-2.json')}" in out
    assert json.load(open(os.path.join(output, "scores.small-2.json")))["test"] == str(other)
    assert json.load(open(os.path.join(output, "scores.small.json")))["test"] == str(small)
    assert os.path.isdir(os.path.join(output, "attention", "small-2"))
    status, out, err = cli(capsys, *evaluate, "--test", str(small))  # its own name again
    assert status == 0 and f"scores: {os.path.join(output, 'scores.small.json')}" in out, err
    run_folders.delete_run(output)  # what --overwrite deletes: these too
    assert not os.path.exists(os.path.join(output, "scores.small.json"))
    assert not os.path.exists(os.path.join(output, "scores.small-2.json"))


@pytest.mark.parametrize("flag", ["--test", "--valid"])
def test_a_missing_or_empty_user_file_is_an_error_line(tmp_path, capsys, flag):
    empty = tmp_path / "empty.tsv"
    empty.write_text("only a line without a tab\n")
    command = ["evaluate"] if flag == "--test" else ["train", *TINY]
    for path, message in (
        (tmp_path / "none.tsv", f"error: {flag} {tmp_path / 'none.tsv'}: no such file"),
        (empty, f"error: {flag} {empty} holds no source<TAB>target pairs (1 lines skipped"),
    ):
        argv = [*command, "--output", str(tmp_path / "run"), flag, str(path)]
        status, out, err = cli(capsys, *argv)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_the_saved_model_is_the_mean_of_the_last_epochs(trained, tmp_path):
    """`train --average-last 2`: model.keras holds the elementwise mean of
    the two kept epoch files (read with h5py), the optimizer's iteration
    count is the last epoch's, and config.json records both losses."""
    output, log = trained
    epochs = [os.path.join(output, "checkpoints", f"epoch-000{e}.weights.h5") for e in (1, 2)]
    first, second = weight_arrays(epochs[0]), weight_arrays(epochs[1])
    model, *_ = trained_run.load_run(output)
    model.save_weights(str(tmp_path / "saved.weights.h5"))
    saved = weight_arrays(str(tmp_path / "saved.weights.h5"))
    assert saved.keys() == first.keys() == second.keys() and len(saved) > 5
    assert any(not np.array_equal(first[name], second[name]) for name in saved)
    for name in saved:
        np.testing.assert_allclose(
            saved[name], np.mean([first[name], second[name]], axis=0), rtol=1e-6, atol=1e-7
        )
    iterations = "optimizer/vars/0"  # Adam's step counter: an integer, not averaged
    last = weight_arrays(epochs[1], optimizer=True)[iterations]
    counted = weight_arrays(str(tmp_path / "saved.weights.h5"), optimizer=True)[iterations]
    assert last.dtype.kind == "i" and counted == last
    config = json.load(open(os.path.join(output, "config.json")))
    assert config["averaged"]["epochs"] == [1, 2]
    assert np.isfinite(config["averaged"]["val_loss_last"]) and np.isfinite(config["val_loss"])
    assert "averaged the weights of epoch 1 to epoch 2 (2 checkpoints): validation loss" in log


def test_average_command_writes_the_mean_of_the_given_checkpoints(trained, tmp_path, capsys):
    """`average --checkpoints A B` and `--last 2` give the same model as
    the training's own average; the model translates."""
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    folder = os.path.join(output, "checkpoints")
    epochs = [os.path.join(folder, f"epoch-000{e}.weights.h5") for e in (1, 2)]
    # Start from the second epoch's weights, so that an average is visible.
    model, *_ = trained_run.load_run(output)
    model.load_weights(epochs[1])
    model.save(os.path.join(output, "model.keras"))
    expected = {
        name: np.mean([weight_arrays(path)[name] for path in epochs], axis=0)
        for name in weight_arrays(epochs[0])
    }
    for flags in (["--checkpoints", *epochs], ["--last", "2"]):
        status, out, err = cli(capsys, "average", "--output", output, *flags)
        assert status == 0 and "averaged 2 checkpoints: validation loss" in out, err
        model, *_ = trained_run.load_run(output)
        model.save_weights(str(tmp_path / "check.weights.h5"))
        got = weight_arrays(str(tmp_path / "check.weights.h5"))
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-7)
    status, out, err = cli(capsys, "translate", "--output", output, "Ich habe keine Zeit.")
    assert status == 0 and out.splitlines()[1].startswith("  -> "), err
    link = tmp_path / "link.weights.h5"
    link.symlink_to(epochs[0])
    for flags, message in (
        (["--last", "3"], f"error: --last 3: {folder} holds 2 epoch checkpoints; "),
        (["--last", "1"], "error: --last must be >= 2; got 1"),
        (["--checkpoints", str(tmp_path / "none.weights.h5")], "error: --checkpoints "),
        (["--checkpoints", *epochs, epochs[0]], "error: --checkpoints names one file twice"),
        (["--checkpoints", epochs[0], str(link)], "error: --checkpoints names one file twice"),
    ):
        status, out, err = cli(capsys, "average", "--output", output, *flags)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, err
    # A run trained with --save-every keeps step checkpoints: named as such.
    for path in epochs:
        os.replace(path, os.path.join(folder, "step-00000010.weights.h5"))
    status, out, err = cli(capsys, "average", "--output", output, "--last", "2")
    assert status == 2 and err.startswith(
        f"error: --last 2: {folder} holds 1 step checkpoint; train with --average-last 2"
    ), err


@pytest.mark.large(
    reason=(
        "an average measured beside the one "
        "test_average_command_writes_the_mean_of_the_given_checkpoints makes in `make "
        "test`"
    )
)
def test_average_measures_the_validation_loss_as_training_does(trained, tmp_path, capsys):
    """`average` reports the loss that training's validation pipeline gives
    the averaged model: the run's batching (recorded in config.json) and
    number protection, not batches of its own (the loss is a mean of batch
    means, so batching moves it). The tiny model's loss is nearly the same
    on every pair, so here the protected numbers are what tell the two
    measures apart (5.9732 before this was fixed, against 5.9729)."""
    from keras_attention_recipes.translation.inputs import datasets

    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    recorded = json.load(open(os.path.join(output, "config.json")))
    assert (recorded["batch_size"], recorded["batch_tokens"]) == (32, None)  # TINY's
    # Short pairs (they fit the tiny model's --max-length), several with
    # numbers, more of a length than one batch holds.
    train_path = os.path.join(output, "data", "train.tsv")
    pairs = [
        "Ich habe keine Zeit.\tI have no time.",
        "Wo ist der Bahnhof?\tWhere is the station?",
        "Es kostet 12 Euro.\tIt costs 12 euros.",
        "Er kommt um 7 Uhr.\tHe comes at 7 o'clock.",
        "Sie ist 30 Jahre alt.\tShe is 30 years old.",
        "Danke schön.\tThank you very much.",
    ] * 8
    valid = tmp_path / "valid.tsv"
    valid.write_text("\n".join(pairs) + "\n", encoding="utf-8")
    status, out, err = cli(
        capsys, "average", "--output", output, "--last", "2", "--valid", str(valid)
    )
    assert status == 0, err
    reported = json.load(open(os.path.join(output, "config.json")))["val_loss"]
    model, run_config, source_tokenizer, target_tokenizer = trained_run.load_run(output)
    _, valid_data = datasets(
        {"train": train_path, "valid": str(valid)},
        source_tokenizer,
        target_tokenizer,
        run_config["max_length"],
        run_config["batch_size"],
        0,
        lambda line: None,
        batch_tokens=run_config["batch_tokens"],
        numbers=trained_run.number_protection(run_config),
    )
    assert len(list(valid_data)) > 1  # several batches (length buckets): their sizes weigh in
    assert reported == pytest.approx(model.evaluate(valid_data, verbose=0)[0], abs=6e-5)


@pytest.mark.large
def test_averaging_reports_the_last_epoch_beside_the_average_not_the_best(
    tmp_path, monkeypatch, capsys
):
    """When an epoch before the last was the best, "(epoch N alone: X)"
    and config.json's `val_loss_last` are the last epoch's loss; they were
    the best epoch's. Here the best-weights callback is told that the first
    epoch scored 0.5, so it keeps that epoch as the best."""
    made = training.best_weights

    def first_looks_best(path, log=print):
        callback = made(path, log)
        record = callback.on_epoch_end

        def on_epoch_end(epoch, logs=None):
            record(epoch, {**(logs or {}), **({"val_loss": 0.5} if epoch == 0 else {})})

        callback.on_epoch_end = on_epoch_end
        return callback

    monkeypatch.setattr(training, "best_weights", first_looks_best)
    output = str(tmp_path / "run")
    flags = [*TINY[:-2], "--verbose", "2", "--family", "rnn", "--attention", "dot"]
    log = run("train", "--output", output, "--epochs", "2", "--average-last", "2", *flags)
    assert "keeping epoch 1's weights, the best on validation loss (0.500)" in log
    last = float(re.findall(r"val_loss: ([0-9.]+)", capsys.readouterr().out)[-1])  # Keras's line
    # Keras prints 4 decimals and the log 3: both round the same loss
    alone = float(re.search(r"\(epoch 2 alone: ([0-9.]+)\)", log).group(1))
    assert alone == pytest.approx(last, abs=5.5e-4)
    recorded = json.load(open(os.path.join(output, "config.json")))["averaged"]["val_loss_last"]
    assert recorded == pytest.approx(last, abs=1e-4)


def test_results_rewrites_its_table_and_keeps_what_was_written_by_hand(tmp_path):
    from keras_attention_recipes.results import write_generated_part

    path = str(tmp_path / "RESULTS.md")
    write_generated_part(path, "| table 1 |\n")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n## Reading the table\n\nby hand\n")
    write_generated_part(path, "| table 2 |\n")
    text = open(path, encoding="utf-8").read()
    assert "| table 2 |" in text and "| table 1 |" not in text
    assert text.endswith("\n## Reading the table\n\nby hand\n")


def test_kept_epochs_include_the_one_a_resumed_backup_restores(tmp_path):
    """A kill after the backup saved epoch 2 and before epoch 2 was kept:
    the resumed training starts after epoch 2 and keeps it from the
    restored weights (the average missed the last epoch before); later
    epochs keep only the newest `keep`."""
    import keras
    from keras_attention_recipes.translation.averaging import KeepLastEpochs, kept_checkpoints

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text('{"epoch": 2, "batch": 0}')
    folder = str(tmp_path / "checkpoints")
    keep = KeepLastEpochs(folder, 2, str(backup))
    keep.set_model(model)
    keep.on_train_begin()
    assert [epoch for epoch, _ in kept_checkpoints(folder)] == [2]
    kernel = weight_arrays(kept_checkpoints(folder)[0][1])
    assert any(np.array_equal(value, model.get_weights()[0]) for value in kernel.values())
    keep.on_epoch_end(2, {"loss": 1.0})
    keep.on_epoch_end(3, {"loss": float("nan")})  # diverged: not kept
    keep.on_epoch_end(3, {"loss": 0.5})
    assert [epoch for epoch, _ in kept_checkpoints(folder)] == [3, 4]


def test_cosine_decay_warms_up_to_the_peak_and_ends_at_zero_on_the_last_step():
    """`--decay cosine`: linear warm-up to --learning-rate, then half a
    cosine down to 0 at `total_steps` (epochs x batches), against the
    formula written out here."""
    args = translate.parser().parse_args(
        ["train", "--warmup", "10", "--decay", "cosine", "--learning-rate", "2e-3", *TINY]
    )
    config = {**settings_module.model_settings(translate.check(args)), "total_steps": 50}
    schedule = model_module.learning_rate(config)
    for step in (0, 5, 10, 20, 30, 49, 50):
        if step <= 10:
            expected = 2e-3 * step / 10
        else:
            expected = 2e-3 * 0.5 * (1 + np.cos(np.pi * (step - 10) / 40))
        assert float(schedule(step)) == pytest.approx(expected, abs=1e-9), step
    with pytest.raises(translate.UsageError, match="--decay cosine needs more training steps"):
        model_module.learning_rate({**config, "total_steps": 10})
    # the default stays what runs recorded before the flag used
    config = settings_module.model_settings(
        translate.check(
            translate.parser().parse_args(["train", "--preset", "none", "--warmup", "10"])
        )
    )
    assert config["decay"] == "rsqrt"
    assert float(model_module.learning_rate(config)(39)) == pytest.approx(1e-3 * 0.5)


def test_results_tables_bleu_by_length_and_plots_it(tmp_path):
    """The per-length table has a column per bucket seen in any run,
    shortest first, a dash where a run has no sentence of that length, and
    the plot is a PNG."""
    from keras_attention_recipes.results import length_table, plot_by_length

    rows = [
        (
            "RNN, no attention (bottleneck)",
            {"1-5": {"bleu": 3.5, "sentences": 250}, "6-10": {"bleu": 1.25, "sentences": 538}},
        ),
        (
            "Transformer",
            {
                "26+": {"bleu": 2.0, "sentences": 3},
                "1-5": {"bleu": 9.0, "sentences": 250},
                "6-10": {"bleu": 7.5, "sentences": 538},
            },
        ),
    ]
    table = length_table(rows).splitlines()
    assert "| model | 1-5 (250) | 6-10 (538) | 26+ (3) |" in table
    assert "| RNN, no attention (bottleneck) | 3.50 | 1.25 | — |" in table
    assert "| Transformer | 9.00 | 7.50 | 2.00 |" in table
    assert length_table([("x", {})]) == ""
    path = tmp_path / "by_length.png"
    plot_by_length(rows, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_alpha_reaches_the_search_of_translate_and_evaluate(trained, capsys, tmp_path):
    """`--alpha` (GNMT's length penalty) is the search's: `translate`
    prints what `translate_texts` with `BeamSearch(alpha=...)` gives, for two alphas, and
    `evaluate` records the alpha it scored with."""
    model, config, source, target = trained_run.load_run(trained[0])
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?"]
    for alpha in ("0", "3"):
        status, out, err = cli(
            capsys, "translate", "--output", trained[0], "--alpha", alpha, *texts
        )
        assert status == 0, err
        expected = trained_run.translate_texts(
            model,
            source,
            target,
            texts,
            config["max_length"],
            BeamSearch(beam_width=4, alpha=float(alpha)),
        )
        assert [line.split("-> ", 1)[1] for line in out.splitlines()[1::2]] == expected
    test = tmp_path / "test.tsv"
    test.write_text("Ich habe keine Zeit.\tI have no time.\n", encoding="utf-8")
    status, out, err = cli(
        capsys, "evaluate", "--output", trained[0], "--test", str(test), "--alpha", "1.5"
    )
    assert status == 0, err
    # The shared run may hold another test.tsv's scores.test.json: the path said is this one's.
    path = out.rsplit("scores: ", 1)[1].strip()
    assert os.path.basename(path).startswith("scores.test")
    scores = json.loads(open(path).read())
    assert scores["alpha"] == 1.5 and scores["beam_width"] == 4 and scores["test"] == str(test)


@pytest.mark.parametrize("family", ["convs2s", "transformer", "rnn"])
def test_the_demo_defaults_pass_the_checks_for_every_family(family):
    """`make demo` runs `demo` with its defaults (a ConvS2S model), and
    `demo --family F` must start too: the checks run before any work, so
    a default that does not apply to a family would stop the job at once."""
    args = translate.check(translate.parser().parse_args(["demo", "--family", family]))
    config = settings_module.model_settings(args)
    # the small preset of each family; the budget alone ends training
    assert config["family"] == family and args.alpha == 1.2 and args.epochs == MAX_EPOCHS
    assert args.preset == "small" and args.batch_tokens == 1536
    assert args.time_budget == 8.0
    assert config["hidden_dim"] == 128 and args.average_last == 3
    assert translate.check(translate.parser().parse_args(["demo"])).family == "convs2s"


# -- one vocabulary and one embedding table ------------------------------------------
# A run of its own: large (`make test-large`).
@pytest.mark.large
def test_a_shared_vocabulary_is_learned_from_both_sides_into_one_table(tmp_path):
    """`--shared-vocabulary --tie-embeddings`: one SentencePiece model of
    both sides, written as both vocabulary files (a run killed between the
    two copies them again, never learning a one-sided one), and a ConvS2S
    whose encoder, decoder and output projection read one table."""
    import keras
    from keras_attention_recipes.translation.data import load_tokenizers, vocabulary_paths

    output = tmp_path / "shared"
    flags = ["--family", "convs2s", "--shared-vocabulary", "--tie-embeddings", "--embed-dim", "32"]
    log = run("train", "--output", str(output), *flags, "--epochs", "1", *TINY)
    assert "shared (source and target) vocabulary: " in log, log
    source, target = vocabulary_paths(str(output))
    assert open(source, "rb").read() == open(target, "rb").read()
    tokenizer = load_tokenizers(str(output))[0]
    # German and English words are whole pieces of the one vocabulary
    ids = tokenizer.pieces(["der die das the of"])[0]
    pieces = [piece.decode() for piece in tokenizer.tokens(ids).numpy()]
    assert {"▁die", "▁das", "▁the", "▁of"} <= set(pieces), pieces
    settings = json.load(open(output / "run.json"))["settings"]
    assert settings["shared_vocabulary"] is True and settings["tie_embeddings"] is True
    model = keras.saving.load_model(output / "model.keras", compile=False)
    assert model.share_embeddings and model.tie_embeddings
    assert model.encoder.token_embedding.table_layer() is model.decoder.token_embedding
    assert "Guten Morgen.\n  -> " in run("translate", "--output", str(output), "Guten Morgen.")
    os.remove(target)  # killed between the two files
    load_tokenizers(str(output), {"train": str(output / "data" / "train.tsv")}, shared=True)
    assert open(source, "rb").read() == open(target, "rb").read()


@pytest.mark.large(reason="builds a run's data for each refusal")
def test_shared_vocabulary_and_tied_embeddings_are_refused_where_they_do_not_apply(
    tmp_path, capsys
):
    for flag in ("--shared-vocabulary", "--tie-embeddings"):
        status, _, err = cli(capsys, "train", "--output", str(tmp_path), "--family", "rnn", flag)
        assert status == 2, err
        assert err.startswith(f"error: {flag} does not apply to the rnn family "), err
        assert "(only to transformer and convs2s)" in err
    status, _, err = cli(
        capsys,
        "train",
        "--output",
        str(tmp_path),
        "--family",
        "convs2s",
        "--tie-embeddings",
        "--embed-dim",
        "64",
        "--hidden-dim",
        "32",
    )
    assert status == 2 and err.count("\n") == 1, err
    assert "--tie-embeddings with convs2s needs --embed-dim equal to --hidden-dim" in err
    assert err.rstrip().endswith("got 64 and 32"), err


def test_a_convs2s_run_recorded_before_the_tying_flags_resumes(tmp_path):
    """run.json of a ConvS2S run of the rounds before recorded
    `tie_embeddings: null` and no `shared_vocabulary`: it resumes (both
    are read as off), and `--shared-vocabulary` is refused naming the
    difference."""
    from keras_attention_recipes import run_folders

    def settings(*flags):
        # a run from before presets: trained with the flags' own defaults
        args = translate.parser().parse_args(
            ["train", "--output", str(tmp_path), "--preset", "none", *flags]
        )
        return training.train_settings(translate.check(args))[0]

    new = settings("--family", "convs2s")
    assert new["tie_embeddings"] is False and new["shared_vocabulary"] is False
    # a tuning run's record (data settings, no family) lacking it: False as well
    assert settings_module.recorded_defaults({"corpus": DING})["shared_vocabulary"] is False
    # the vocabulary is learned from the flag: a hyperparameters file cannot share it
    tuned = settings_module.model_settings(new, {"shared_vocabulary": True})
    assert tuned["shared_vocabulary"] is False
    old = {k: v for k, v in new.items() if k != "shared_vocabulary"}
    old["tie_embeddings"] = None
    output = str(tmp_path / "run")
    os.makedirs(output)
    for write in (True, False):
        with open(os.path.join(output, "run.json"), "w") as handle:
            json.dump({"settings": old}, handle)
        defaults = settings_module.recorded_defaults(new)
        if write:
            run_folders.claim(output, new, defaults=defaults, upgrade=settings_module.upgrade)
            assert json.load(open(os.path.join(output, "run.json")))["settings"] == new
        else:
            shared = settings("--family", "convs2s", "--shared-vocabulary")
            with pytest.raises(ValueError, match="shared_vocabulary: False in the run, True now"):
                run_folders.claim(
                    output, shared, defaults=defaults, upgrade=settings_module.upgrade
                )


# -- the Ding entries' other sentences --------------------------------------------------
DING_LINES = (
    "# a comment line\n"
    "Akku {m} | Bei meinem Handy war der Akku leer.; Das Handy hatte keinen Akku mehr. :: "
    "battery | My phone had ran out of battery.; My phone had run out of power.\n"
    "Er kommt heute. :: He is coming today.; He comes today.; coming\n"
    "Er kommt. :: He comes.; He is coming.\n"
    "kurz; knapp :: short; brief\n"
)


def test_ding_alternatives_pair_every_german_sentence_with_every_english_one(tmp_path):
    from keras_attention_recipes.translation.corpus import ding_alternative_pairs, ding_pairs

    path = tmp_path / "de-en"
    path.write_text(DING_LINES, encoding="utf-8")
    found = list(ding_alternative_pairs(str(path)))
    assert [first for first, _ in found] == list(ding_pairs(str(path)))
    # "coming" is not a sentence; nor is "Er kommt." (two words), so its entry gives nothing.
    assert found == [
        (
            ("Bei meinem Handy war der Akku leer.", "My phone had ran out of battery."),
            [
                ("Bei meinem Handy war der Akku leer.", "My phone had run out of power."),
                ("Das Handy hatte keinen Akku mehr.", "My phone had ran out of battery."),
                ("Das Handy hatte keinen Akku mehr.", "My phone had run out of power."),
            ],
        ),
        (("Er kommt heute.", "He is coming today."), [("Er kommt heute.", "He comes today.")]),
    ]


# A run of its own: large (`make test-large`); tests/test_translation_cli.py
# trains with --alternatives in `make test`.
@pytest.mark.large
def test_alternatives_add_training_pairs_and_leave_the_held_out_splits_alone(tmp_path):
    from keras_attention_recipes.translation.corpus import (
        ding_alternative_pairs,
        read_pairs,
        words_of,
    )

    entries = list(itertools.islice(ding_alternative_pairs(), 3000))  # the split's pairs
    plain = prepare(str(tmp_path / "plain"), limit=3000, log=lambda line: None)
    lines = []
    more = prepare(str(tmp_path / "more"), alternatives=True, limit=3000, log=lines.append)
    base, train = read_pairs(plain["train"]), read_pairs(more["train"])
    added = train[len(base) :]
    assert train[: len(base)] == base and len(added) > 100
    # (No held-out pair of this slice is dropped as a leak, so its held-out
    # words are those of the valid and test files below.)
    assert "dropped" not in lines[1], lines
    assert (
        lines[0]
        == f"alternatives: {len(added)} more training pairs from the entries' other sentences"
    )
    for split in ("valid", "test"):
        assert read_pairs(more[split]) == read_pairs(plain[split])
    held_out = {
        words_of(text)
        for split in ("valid", "test")
        for pair in read_pairs(more[split])
        for text in pair
    }
    leaks = lambda pair: bool({words_of(pair[0]), words_of(pair[1])} & held_out)  # noqa: E731
    assert not any(leaks(pair) for pair in added)
    assert len(set(added)) == len(added) and not set(added) & set(base)
    # Exactly the other sentences of the training pairs' entries, less leaks and repeats.
    base_set = set(base)
    allowed = {pair for first, others in entries if first in base_set for pair in others}
    assert set(added) == {pair for pair in allowed - base_set if not leaks(pair)}
    # --reverse: English -> German, the alternatives too.
    lines = []
    reverse = prepare(
        str(tmp_path / "reverse"), alternatives=True, reverse=True, limit=3000, log=lines.append
    )
    added = int(lines[0].split()[1])
    every = {pair for first, others in entries for pair in (first, *others)}
    assert added > 100 and all((t, s) in every for s, t in read_pairs(reverse["train"]))


def test_alternatives_are_the_ding_corpus_s_only(tmp_path, capsys):
    """(Recorded and compared as a data setting of the run: the refusal test
    of `tests/test_translation_cli.py`.)"""
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("Ich habe Zeit.\tI have time.\n", encoding="utf-8")
    other = str(tmp_path / "other")
    status, _, err = cli(
        capsys, "train", "--output", other, "--alternatives", "--corpus", str(corpus)
    )
    assert status == 2 and not os.path.exists(other)
    assert err == "error: --alternatives are the Ding corpus's: leave out --corpus\n"
    # tune too, before it claims the folder (it claimed it, then failed)
    status, _, err = cli(
        capsys, "tune", "--output", other, "--alternatives", "--corpus", str(corpus)
    )
    assert status == 2 and not os.path.exists(other)
    assert err == "error: --alternatives are the Ding corpus's: leave out --corpus\n"
    with pytest.raises(CorpusError, match="--alternatives are the Ding corpus's"):
        prepare(other, corpus=str(corpus), alternatives=True)


# -- reading a user's text files: bounded lines, compressed files, the split's message ---------
def _pairs_text(count, start=0):
    return "".join(f"Satz Nummer {i}.\tSentence number {i}.\n" for i in range(start, count))


class _EndlessLine:
    """A binary stream of one line without end (as `/dev/zero` is), which
    records the most bytes a read asked for: a reader that asks for all
    (`-1`, `None`) or for more than the bound is not bounded."""

    def __init__(self, then=b""):
        import io

        self.asked, self.given, self.then = [], 0, io.BytesIO(then)

    def readline(self, size=-1):
        self.asked.append(size)
        if size is None or size < 0 or size > 10_000:
            raise AssertionError(f"an unbounded read: readline({size})")
        if self.given >= 1_000_000:  # the line ends after 1 MB, then the lines of `then`
            return self.then.readline(size)
        self.given += size
        return b"x" * size


def test_a_line_over_the_bound_is_read_in_chunks_dropped_and_reported(tmp_path, monkeypatch):
    from keras_attention_recipes.translation import corpus
    from keras_attention_recipes.translation.corpus import bounded_lines, tsv_pairs
    from keras_attention_recipes.translation.text_io import read_pair_file

    stream = _EndlessLine(then=b"\nHallo.\tHello.\n")
    lines = list(bounded_lines(stream, "endless", "--corpus", limit=1000))
    assert lines == [(1, None), (2, b"Hallo.\tHello.\n")]
    assert max(stream.asked) <= 1001
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 64)
    path = tmp_path / "long.tsv"
    path.write_text(_pairs_text(2) + "x" * 65 + "\tlong\n" + _pairs_text(4, 2), encoding="utf-8")
    problems = []
    assert len(list(tsv_pairs(str(path), problems))) == 4
    assert problems == [
        f"{path}:3: longer than 64 bytes (a line holds one source<TAB>target pair); skipped"
    ]
    log = []
    assert len(read_pair_file(str(path), "--test", log.append)) == 4
    assert log == [f"warning: {problems[0]}"]


def test_translate_input_refuses_a_line_over_the_bound_naming_it(tmp_path, monkeypatch):
    """Skipped, it would shift every later translation a line up."""
    import io

    from keras_attention_recipes.translation import corpus
    from keras_attention_recipes.translation.text_io import read_sentences

    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 64)
    path = tmp_path / "in.txt"
    path.write_bytes(b"\xef\xbb\xbfHallo.\n" + b"x" * 65 + b"\nWelt.\n")
    with pytest.raises(ValueError, match=f"^--input {path}:2: longer than 64 bytes; expected one"):
        read_sentences(str(path))
    stdin = io.BytesIO(b"\xef\xbb\xbfHallo.\r\n\nWelt.")  # still read as before
    assert read_sentences("-", stdin) == ["Hallo.", "", "Welt."]
    assert read_sentences("-", io.BytesIO(b"\xef\xbb\xbf")) == []


def test_dev_zero_as_the_corpus_is_refused_at_once_in_bounded_memory(tmp_path):
    """`train --corpus /dev/zero` grew to 2.66 GB in 13 s; the child's
    address space is capped, so a reader that keeps the line fails fast."""
    import subprocess

    script = f"""
import resource
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from keras_attention_recipes.translation.corpus import CorpusError
from keras_attention_recipes.translation.splits import prepare
try:
    prepare({str(tmp_path / "run")!r}, "/dev/zero", log=print)
except CorpusError as error:
    print("refused:", error)
# (VmHWM, this process's peak; ru_maxrss would count the parent's, kept across exec)
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print("rss_kib:", int(peak[0].split()[1]) if peak else 0)
"""
    from tests.translation_helpers import ROOT

    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: --corpus /dev/zero holds NUL bytes: it is not UTF-8 text" in done.stdout
    rss = int(done.stdout.split("rss_kib:")[1])
    assert rss < 300 * 1024, done.stdout


def test_carriage_returns_alone_as_line_breaks_are_named(tmp_path, monkeypatch, capsys):
    from keras_attention_recipes.translation import corpus
    from keras_attention_recipes.translation.corpus import tsv_pairs
    from keras_attention_recipes.translation.text_io import read_sentences

    small = tmp_path / "mac.tsv"
    small.write_bytes(_pairs_text(300).replace("\n", "\r").encode())
    named = "uses carriage returns (CR, old Mac line endings) alone as line breaks; convert it with"
    status, _, err = cli(capsys, "train", "--corpus", str(small), "--output", str(tmp_path / "r"))
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --corpus {small} {named}: tr '\\r' '\\n' < {small}"), err
    with pytest.raises(ValueError, match=f"--input {small} uses carriage returns"):
        read_sentences(str(small))
    monkeypatch.setattr(corpus, "MAX_LINE_BYTES", 64)  # a file larger than the bound
    with pytest.raises(CorpusError, match=re.escape(named)):
        list(tsv_pairs(str(small), []))
    crlf = tmp_path / "crlf.tsv"  # \r\n line ends and a last line without one are fine
    crlf.write_bytes(b"Hallo.\tHello.\r\nWelt.\tWorld.\r")
    assert list(tsv_pairs(str(crlf), [])) == [("Hallo.", "Hello."), ("Welt.", "World.")]


def test_a_line_blank_on_both_sides_is_reported_and_counted(tmp_path):
    from keras_attention_recipes.translation.corpus import tsv_pairs

    path = tmp_path / "blank.tsv"
    path.write_text(_pairs_text(150) + " \t \n\n   \n" + _pairs_text(300, 150), encoding="utf-8")
    problems = []
    assert len(list(tsv_pairs(str(path), problems))) == 300
    assert problems == [
        f"{path}:151: expected exactly one non-empty source and target; skipped"
    ]  # the blank lines without a tab (152, 153) are no pairs and no mistakes
    log = []
    prepare(str(tmp_path / "run"), str(path), log=log.append)
    assert f"warning: {problems[0]}" in log
    assert log[-1].endswith(", 1 lines skipped"), log


def test_a_gzip_corpus_is_read_as_its_text_and_other_compressions_are_named(tmp_path, capsys):
    import bz2
    import gzip
    import lzma

    from keras_attention_recipes.translation.corpus import read_pairs
    from keras_attention_recipes.translation.text_io import read_pair_file, read_sentences

    text = _pairs_text(300)
    plain, packed = tmp_path / "corpus.tsv", tmp_path / "corpus.tsv.gz"
    plain.write_text(text, encoding="utf-8")
    packed.write_bytes(gzip.compress(text.encode()))
    log = []
    split = prepare(str(tmp_path / "plain"), str(plain), log=log.append)
    zipped = prepare(str(tmp_path / "gz"), str(packed), log=log.append)
    assert not [line for line in log if "warning" in line], log
    for name in ("train", "valid", "test"):
        assert read_pairs(zipped[name]) == read_pairs(split[name])
    assert read_pair_file(str(packed), "--test", log.append)[:1] == [
        ("Satz Nummer 0.", "Sentence number 0.")
    ]
    assert read_sentences(str(packed))[:1] == ["Satz Nummer 0.\tSentence number 0."]
    damaged = tmp_path / "damaged.tsv.gz"
    damaged.write_bytes(gzip.compress(text.encode())[:200])
    with pytest.raises(CorpusError, match=f"^--corpus {damaged}: damaged gzip data"):
        prepare(str(tmp_path / "damaged"), str(damaged), log=log.append)
    for name, data in (
        ("bzip2", bz2.compress(text.encode())),
        ("xz", lzma.compress(text.encode())),
        ("zstd", b"\x28\xb5\x2f\xfd" + bytes(20)),
    ):
        path = tmp_path / f"corpus.{name}"
        path.write_bytes(data)
        run_dir = str(tmp_path / name)
        status, _, err = cli(capsys, "train", "--corpus", str(path), "--output", run_dir)
        assert status == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: --corpus {path} is {name}-compressed, which is not read")
        assert f"({name} -dc {path} > corpus.tsv)" in err
    word = tmp_path / "word.tsv"  # text that begins like bzip2's magic is text
    word.write_text("BZh9 ist kein Wort.\tBZh9 is no word.\n", encoding="utf-8")
    assert read_pair_file(str(word), "--test") == [("BZh9 ist kein Wort.", "BZh9 is no word.")]


def _sources(split, count, prefix="Satz"):
    """`count` source sentences that `split_of` puts in `split`."""
    from keras_attention_recipes.translation.splits import split_of

    found = (f"{prefix} {i}." for i in itertools.count())
    return list(itertools.islice((s for s in found if split_of(s) == split), count))


def _refused_split(tmp_path, name, pairs):
    """The message of the `CorpusError` that preparing a run from `pairs`
    (written as `<name>.tsv`) ends in."""
    path = tmp_path / f"{name}.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    with pytest.raises(CorpusError) as refused:
        prepare(str(tmp_path / name), str(path), log=lambda line: None)
    return str(refused.value)


def test_a_split_too_small_says_what_happened_with_its_numbers(tmp_path):
    # 12 different sentences, one of them twice, all in train: too few
    # distinct sentences, not duplicates, left the held-out splits empty.
    sources = _sources("train", 12)
    pairs = [(s, s.replace("Satz", "Sentence")) for s in sources + sources[:1]]
    message = _refused_split(tmp_path, "few", pairs)
    assert message.startswith(
        "the corpus gave 13 usable pairs with 12 distinct source sentences, 1 of them "
        "repeating a source sentence, split {'train': 13, 'valid': 0, 'test': 0}, and the "
        "valid/test split needs at least 1, 1: the split is by source sentence"
    ), message
    assert "so 12 are too few" in message and "duplicates" not in message
    # Different sentences with one translation: the held-out pairs are dropped.
    sources = _sources("train", 20) + _sources("valid", 2) + _sources("test", 2)
    message = _refused_split(tmp_path, "one-target", [(s, "Hello.") for s in sources])
    assert message.startswith(
        "the corpus gave 24 usable pairs with 24 distinct source sentences, split "
        "{'train': 20, 'valid': 0, 'test': 0} after 4 held-out pairs were dropped since their "
        "target sentence is also a training pair's"
    ), message
    assert "duplicates" not in message and "too few" not in message
