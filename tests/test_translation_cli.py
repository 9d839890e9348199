"""The translation recipe's command line: bad input, error lines, run
settings, interruptions and the help.

The trained run and its export (`trained`, `exported`) are made once per
test session (`tests/conftest.py`)."""

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from keras_attention_recipes import runs, translate
from keras_attention_recipes.translation import trained_run
from keras_attention_recipes.translation.settings import DING
from keras_attention_recipes.translation.splits import SPLITS

from tests.translation_helpers import (
    ROOT,
    TINY,
    cli,
    killed_during_final_save,
    message_line,
    run,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


def test_a_carriage_return_inside_a_line_is_reported_and_skipped(tmp_path):
    """Text-mode reading took a bare \\r for a line end while the TSV reader
    did not: the split file then held a line without a tab (IndexError)."""
    from keras_attention_recipes.translation.corpus import read_pairs
    from keras_attention_recipes.translation.splits import prepare

    path = tmp_path / "corpus.tsv"
    good = "".join(f"Satz Nummer {i}.\tSentence number {i}.\r\n" for i in range(300))
    path.write_bytes(b"Hallo\rWelt.\tHello world.\n" + good.encode())
    log = []
    paths = prepare(str(tmp_path / "run"), str(path), log=log.append)
    assert any(":1: a carriage return" in line and "skipped" in line for line in log), log
    pairs = [pair for split in SPLITS for pair in read_pairs(paths[split])]
    assert len(pairs) == 300 and all(len(pair) == 2 for pair in pairs)
    assert all("\r" not in source + target for source, target in pairs)


def test_too_small_corpus_stops_with_a_message(tmp_path, capsys):
    path = tmp_path / "corpus.tsv"
    path.write_text("".join(f"Satz {i}.\tSentence {i}.\n" for i in range(8)), encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        translate.main(["train", "--corpus", str(path), "--output", str(tmp_path / "run")])
    assert stop.value.code == 2
    assert re.search(
        r"^error: the corpus gave 8 usable pairs .* needs at least", capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--family", "lstm"], "invalid choice: 'lstm'"),
        (["train", "--epochs", "0"], "error: --epochs must be >= 1; got 0"),
        (
            ["train", "--family", "convs2s", "--attention", "additive"],
            "error: --attention chooses the recurrent model",
        ),
        (
            ["train", "--corpus", "/nonexistent.tsv"],
            "error: --corpus /nonexistent.tsv: no such file",
        ),
        (
            ["evaluate", "--output", "/nonexistent-run"],
            "error: no trained model in /nonexistent-run",
        ),
        (["translate", "--output", "/nonexistent-run"], "error: give the text to translate"),
        (
            ["export", "--quantize", "int4"],
            "error: --quantize must be one of ['int8'] (weight-only int8); got 'int4'",
        ),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(tmp_path, capsys, monkeypatch, argv, message):
    argv = argv + (["--output", str(tmp_path)] if "--output" not in argv else [])
    # `translate` reads a standard input that is not a terminal: an empty one.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
    status, _, err = cli(capsys, *argv)
    assert status == 2 and message in err and "Traceback" not in err, err[-1500:]
    if message.startswith("error:"):
        assert err == message_line(err)


def test_a_cli_error_in_a_fresh_process_is_its_one_line(tmp_path):
    """What a user's shell shows: the `error:` line alone, exit status 2, no
    TensorFlow start-up noise (cuInit, oneDNN) before it, though TensorFlow
    was imported to look for the run. (The other mistakes are checked in
    process above: the same `main`.)"""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention_recipes.translate",
            "evaluate",
            "--output",
            "/nonexistent-run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr[-1500:]
    assert result.stderr.startswith("error: no trained model in /nonexistent-run")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.large(
    reason=(
        "three runs' data built and trained; "
        "test_resuming_with_other_flags_says_what_differs checks the refusal in `make "
        "test`"
    )
)
def test_a_run_refuses_other_data_settings_and_overwrite_rebuilds(tmp_path):
    """A second `train` with `--reverse` kept the first run's vocabularies
    (and reported validation loss 0.000); now it is refused with the
    differences, and `--overwrite` builds the run again from the reversed
    data: its source vocabulary is learned from the English side. The
    first run has `--alternatives` (recorded, and a difference too)."""
    from keras_attention_recipes.translation.corpus import read_pairs

    from keras_attention.tokenizers import train_sentencepiece

    output = str(tmp_path / "run")
    log = run(
        "train", "--output", output, "--family", "rnn", "--epochs", "1", "--alternatives", *TINY
    )
    assert re.search(r"alternatives: [1-9]\d* more training pairs", log), log
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["alternatives"] is True
    assert json.load(open(os.path.join(output, "data", "meta.json")))["alternatives"] is True
    english = {target for _, target in read_pairs(os.path.join(output, "data", "train.tsv"))}
    with pytest.raises(ValueError) as refused:
        run("train", "--output", output, "--family", "rnn", "--epochs", "1", "--reverse", *TINY)
    assert "reverse: False in the run, True now" in str(refused.value)
    assert "alternatives: True in the run, False now" in str(refused.value)
    assert "--overwrite" in str(refused.value)
    flags = ("--family", "rnn", "--epochs", "1", "--reverse", "--overwrite", *TINY)
    log = run("train", "--output", output, *flags)
    assert "deleted the earlier run" in log
    # The vocabulary is the one the reversed split gives (the split hashes
    # the source side, so its pairs differ from the first run's too).
    pairs = read_pairs(os.path.join(output, "data", "train.tsv"))
    assert sum(source in english for source, _ in pairs) > len(pairs) // 2  # English sources
    train_sentencepiece([source for source, _ in pairs], str(tmp_path / "expected.spm"), 400)
    assert (
        open(os.path.join(output, "source.spm"), "rb").read()
        == open(tmp_path / "expected.spm", "rb").read()
    )
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["reverse"] is True


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--max-length", "2"], "error: no train pair fits --max-length 2"),
        (["--learning-rate", "-1"], "error: --learning-rate must be > 0; got -1.0"),
        (["--learning-rate", "nan"], "error: --learning-rate must be a finite number; got nan"),
        (["--dropout", "1.5"], "error: --dropout must be in [0, 1); got 1.5"),
        (["--label-smoothing", "1.0"], "error: --label-smoothing must be in [0, 1); got 1.0"),
        (["--word-dropout", "-0.1"], "error: --word-dropout must be in [0, 1); got -0.1"),
        (["--subword-sampling", "-1"], "error: --subword-sampling must be >= 0; got -1.0"),
        (
            ["--tokenizer", "wordpiece", "--subword-sampling", "0.3"],
            "error: --subword-sampling needs --tokenizer sentencepiece",
        ),
        (["--family", "transformer", "--embed-dim", "8"], "error: --embed-dim does not apply"),
        (
            ["--family", "rnn", "--num-heads", "2"],
            "error: --num-heads does not apply to the rnn family",
        ),
        (
            ["--family", "rnn", "--position", "rope"],
            "error: --position does not apply to the rnn family",
        ),
        (
            ["--family", "convs2s", "--num-key-value-heads", "1"],
            "error: --num-key-value-heads does not apply",
        ),
        (
            ["--family", "convs2s", "--sliding-window", "4"],
            "error: --sliding-window does not apply",
        ),
        (
            ["--num-heads", "4", "--num-key-value-heads", "3"],
            "error: --num-key-value-heads 3 must divide --num-heads 4",
        ),
        (["--num-key-value-heads", "0"], "error: --num-key-value-heads must be >= 1; got 0"),
        (["--sliding-window", "0"], "error: --sliding-window must be >= 1; got 0"),
        (["evaluate", "--samples", "-1"], "error: --samples must be >= 0; got -1"),
    ],
)
def test_bad_numbers_and_empty_splits_stop_with_an_error(tmp_path, capsys, flags, message):
    command = ["train", *TINY] if flags[0] != "evaluate" else []
    status, out, err = cli(capsys, *command, *flags, "--output", str(tmp_path / "run"))
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, (out, err)
    assert not os.path.exists(tmp_path / "run" / "model.keras")


def test_a_diverging_run_stops_and_saves_nothing(tmp_path, capsys):
    flags = ["--family", "rnn", "--epochs", "1", "--learning-rate", "1e30", *TINY]
    flags += ["--batch-size", "4"]  # several steps: the first update makes the weights huge
    status, out, err = cli(capsys, "train", "--output", str(tmp_path), *flags)
    assert status == 2 and err.startswith("error: training diverged"), (out, err)
    assert not os.path.exists(tmp_path / "model.keras")
    assert not os.path.exists(tmp_path / "backup" / "latest.weights.h5")


@pytest.mark.large
def test_a_kill_during_the_final_save_loses_nothing(tmp_path, monkeypatch):
    """The old code deleted the backup before saving, and `model.save` left
    a 0-byte file: the run was lost. Now the re-run finds the last epoch
    done, trains nothing, evaluates and saves."""
    output = str(tmp_path)
    flags = ("--family", "rnn", "--epochs", "2", *TINY)
    killed_during_final_save(monkeypatch, output, *flags)
    assert not os.path.exists(tmp_path / "model.keras")
    assert os.path.exists(tmp_path / "backup" / "latest.weights.h5")
    log = run("train", "--output", output, *flags)
    assert "resuming an interrupted run after its epoch 2 of 2" in log
    config = json.load(open(tmp_path / "config.json"))
    assert np.isfinite(config["val_loss"]) and config["val_loss"] > 0
    assert not os.path.exists(tmp_path / "backup")
    model, *_ = trained_run.load_run(output)  # the saved model loads
    assert model.count_params() > 0


def test_resuming_with_other_flags_says_what_differs(tmp_path, monkeypatch):
    output = str(tmp_path)
    flags = ("--family", "rnn", "--epochs", "2", *TINY)
    killed_during_final_save(monkeypatch, output, *flags)
    with pytest.raises(ValueError) as refused:
        run("train", "--output", output, *flags, "--hidden-dim", "64")
    message = str(refused.value)
    assert "hidden_dim: 32 in the run, 64 now" in message
    assert "repeat the run's settings, pass --overwrite" in message
    with pytest.raises(translate.UsageError, match="2 epochs of the run .* are done"):
        run("train", "--output", output, *flags, "--epochs", "1")
    assert os.path.exists(tmp_path / "backup" / "latest.weights.h5")  # kept


def test_cli_mistakes_are_error_lines(trained, tmp_path, capsys):
    """Each gave a traceback before."""
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    hyperparameters = tmp_path / "hp.json"
    hyperparameters.write_text('{"units": "many"}')  # 0.2.0's name of --hidden-dim
    cases = [
        (["train", "--output", str(a_file)], "error: --output "),
        (["export", "--output", output, "--export-dir", str(a_file)], "error: --export-dir "),
        (
            ["train", "--output", str(tmp_path / "new"), "--hyperparameters", str(hyperparameters)],
            "error: --hidden-dim must be an integer; got 'many'",
        ),
    ]
    for argv, message in cases:
        status, out, err = cli(capsys, *argv)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, (argv, err)
    for name, message in (("config.json", "is not valid JSON"), ("source.spm", "is damaged")):
        with open(os.path.join(output, name), "w") as handle:
            handle.write("{ damaged")
        status, out, err = cli(capsys, "translate", "--output", output, "Hallo.")
        assert status == 2 and err.startswith("error: ") and message in err, err
        assert err.count("\n") == 1
        shutil.copy(os.path.join(trained[0], name), os.path.join(output, name))


def test_interrupting_an_export_says_nothing_was_kept(monkeypatch, capsys):
    from keras_attention_recipes.translation import commands

    def interrupted(config, log=print):
        raise KeyboardInterrupt

    monkeypatch.setitem(commands.COMMANDS, "export", interrupted)
    with pytest.raises(SystemExit) as stop:
        translate.main(["export", "--output", "runs/none"])
    assert "nothing was kept" in str(stop.value.code)
    assert "resume" not in str(stop.value.code)


def test_help_shows_every_default_and_every_flag_has_help():
    main = translate.parser()
    (subcommands,) = [a for a in main._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in subcommands.choices.items():
        for action in command._actions:
            assert action.help, (name, action.option_strings)
        text = command.format_help()
        for action in command._actions:
            if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
                assert f"default: {action.default}" in " ".join(text.split()), (name, action)


def test_old_flag_spellings_still_work_with_a_note_and_are_hidden(capsys):
    """0.2.0's flags (`--units`, `--kv-heads`, `--window`, ...) set the renamed
    settings, print one deprecation line each to stderr, and stay out of --help."""
    args = translate.parser().parse_args(
        ["train", "--units", "64", "--layers", "1", "--heads", "4", "--kv-heads", "2"]
        + ["--window", "3"]
    )
    config = translate.check(args)
    assert (config.hidden_dim, config.num_layers, config.num_heads) == (64, 1, 4)
    assert (config.num_key_value_heads, config.sliding_window) == (2, 3)
    err = capsys.readouterr().err.splitlines()
    removed = "is deprecated and will be removed in keras_attention 0.4.0"
    assert err[0] == f"note: --units {removed}; use --hidden-dim" and len(err) == 5
    help_text = translate.parser()._subparsers._group_actions[0].choices["train"].format_help()
    assert "--kv-heads" not in help_text and "--num-key-value-heads" in help_text


def test_no_repeat_ngram_takes_the_librarys_name_and_the_old_one_with_a_note(capsys):
    """The flag is BeamSearch's `no_repeat_ngram_size`; `--no-repeat-ngram`
    (what it was called before) sets the same setting with a note, hidden
    from --help, and a run that recorded the old key decodes with it."""
    from keras_attention_recipes.translation.config import TranslationConfig
    from keras_attention_recipes.translation.trained_run import settle_decoding

    for command in ("train", "translate", "export"):
        config = translate.check(translate.parser().parse_args([command, "--no-repeat-ngram", "3"]))
        assert config.no_repeat_ngram_size == 3
        err = capsys.readouterr().err.splitlines()
        assert err == [
            "note: --no-repeat-ngram is deprecated and will be removed in keras_attention 0.4.0; "
            "use --no-repeat-ngram-size"
        ]
        help_text = translate.parser()._subparsers._group_actions[0].choices[command].format_help()
        assert "--no-repeat-ngram-size" in help_text and "--no-repeat-ngram " not in help_text
    config = TranslationConfig(command="translate")  # no decoding flag given
    old_run = {"decoding": {"no_repeat_ngram": 3, "alpha": 1.2}}  # recorded before the rename
    assert settle_decoding(config, old_run).no_repeat_ngram_size == 3
    given = config.replace(no_repeat_ngram_size=2)
    assert settle_decoding(given, old_run).no_repeat_ngram_size == 2


def test_every_decoding_option_of_beam_search_is_a_flag_and_reaches_the_export():
    """Each of `BeamSearch.decoding_options()` (every key of its config but
    `NOT_DECODING_OPTIONS`) is a flag of train (recorded), translate and
    export, named as the argument, and reaches the search, the recorded
    settings and the export's `decoding_options` (and 0.2.0's function of
    that name): a new BeamSearch argument fails here until it has a flag or
    is declared not a decoding option."""
    from keras_attention_recipes.runs import flag
    from keras_attention_recipes.translation import trained_run
    from keras_attention_recipes.translation.trained_run import decoding_settings

    from keras_attention.seq2seq import BeamSearch
    from keras_attention.serving import export
    from keras_attention.serving.graph import beam_options

    search = BeamSearch()
    defaults = search.decoding_options()
    assert set(defaults) | set(BeamSearch.NOT_DECODING_OPTIONS) == set(search.get_config())
    chosen = {  # a value of its own for each, within every range
        name: value + (1 if isinstance(value, int) else 0.5) for name, value in defaults.items()
    }
    flags = [part for name, value in chosen.items() for part in (flag(name), str(value))]
    expected = {"beam_width": chosen["beam_width"], "num_hypotheses": chosen["beam_width"]}
    for command in ("train", "translate", "export"):
        config = translate.check(translate.parser().parse_args([command, *flags]))
        assert decoding_settings(config) == chosen  # what train records
        search = trained_run.search_from_config(config)
        assert search.decoding_options() == chosen, command
        assert beam_options(search) == {**expected, **chosen}  # the exported signature's
    assert export.decoding_options(**chosen) == {**expected, **chosen}


def test_the_command_line_is_made_from_the_settings_declarations():
    """Each command's flags are the settings that name it, with their
    declared help (`settings.setting`), and nothing else; the 0.2.0
    spellings hidden beside them."""
    from keras_attention_recipes.translation.command_settings import FIELDS
    from keras_attention_recipes.translation.settings import COMMANDS

    subcommands = translate.parser()._subparsers._group_actions[0].choices
    assert list(subcommands) == list(COMMANDS)
    for name, command in subcommands.items():
        shown = {
            action.dest: action
            for action in command._actions
            if action.help not in (None, argparse.SUPPRESS) and action.dest != "help"
        }
        declared = {
            key for key, field in FIELDS.items() if name in field.metadata.get("commands", ())
        }
        assert set(shown) == declared, name
        for key, action in shown.items():
            metadata = FIELDS[key].metadata
            assert action.help.startswith(metadata["help_for"].get(name, metadata["help"]))
            assert action.option_strings[:1] in ([f"--{key.replace('_', '-')}"], [])


def test_every_declared_check_refuses_a_value_out_of_its_range():
    """A value just outside each setting's declared check is refused by
    `validate` with an error naming the flag and the bound; the lists of
    the checks (`POSITIVE`, `COUNTS`) are made from the declarations."""
    from keras_attention_recipes.translation import config
    from keras_attention_recipes.translation.command_settings import FIELDS
    from keras_attention_recipes.translation.settings import CHECKS

    checked = {key: field.metadata.get("check") for key, field in FIELDS.items()}
    checked = {key: check for key, check in checked.items() if check}
    positive = {k for k, c in checked.items() if config.check_kind(c) == CHECKS["positive"]}
    assert set(config.POSITIVE) == positive
    assert {"epochs", "beam_width", "nbest", "hidden_dim"} <= set(config.POSITIVE)
    assert {"samples", "min_length", "no_repeat_ngram_size"} <= set(config.COUNTS)
    assert {"save_every", "validate_every"} <= set(config.COUNTS)
    for key, check in checked.items():
        cases = []
        if check.get("low") is not None:
            step = 1 if check.get("integer") else 0.001
            bad = check["low"] - (0 if check.get("low_included") is False else step)
            cases.append((bad, "must be"))
        if check.get("at_most") is not None:
            cases.append((check["at_most"] * 2, f"must be at most {check['at_most']}"))
        if check.get("below") is not None:
            cases.append((check["below"], f"must be in [{check['low']}, {check['below']})"))
        assert cases, key
        for bad, message in cases:
            with pytest.raises(config.UsageError, match=re.escape(f"{config.flag(key)} {message}")):
                config.TranslationConfig(command="train", **{key: bad}).validate()


def test_the_model_and_data_keys_are_what_a_run_records():
    from keras_attention_recipes.translation import config

    settings = config.model_settings(config.TranslationConfig(family="transformer"))
    assert set(settings) - {config.WINDOW_RULE} == set(config.MODEL_KEYS)
    assert set(config.DATA_KEYS) < set(config.TranslationConfig().data_settings())


def test_a_0_2_0_record_with_old_key_names_loads_under_the_new_names():
    from keras_attention_recipes.translation.config import upgrade

    old = {"units": 64, "layers": 1, "heads": 4, "kv_heads": 2, "window": None, "family": "rnn"}
    assert upgrade(old) == {
        "hidden_dim": 64,
        "num_layers": 1,
        "num_heads": 4,
        "num_key_value_heads": 2,
        "sliding_window": None,
        "family": "rnn",
    }


def test_a_0_2_0_run_json_with_old_names_resumes_under_the_new_ones(tmp_path):
    """run.json written by 0.2.0 names the model settings `units`, `kv_heads`,
    ...: the run resumes with today's flags, its record rewritten under
    today's names, and a real difference is still refused by its new name."""
    from keras_attention_recipes import run_folders
    from keras_attention_recipes.translation.config import RENAMED, recorded_defaults, upgrade
    from keras_attention_recipes.translation.training import train_settings

    def settings(*flags):
        # a run from before presets: trained with the flags' own defaults
        args = translate.parser().parse_args(
            ["train", "--output", str(tmp_path), "--preset", "none", *flags]
        )
        return train_settings(translate.check(args))[0]

    new = settings("--family", "transformer", "--num-key-value-heads", "2")
    old_names = {new_name: old for old, new_name in RENAMED.items()}
    old = {old_names.get(key, key): value for key, value in new.items()}
    assert "kv_heads" in old and "num_key_value_heads" not in old
    output = str(tmp_path / "old")
    os.makedirs(output)
    with open(os.path.join(output, "run.json"), "w") as handle:
        json.dump({"settings": old}, handle)
    run_folders.claim(output, new, defaults=recorded_defaults(new), upgrade=upgrade)  # resumes
    assert json.load(open(os.path.join(output, "run.json")))["settings"] == new
    with open(os.path.join(output, "run.json"), "w") as handle:
        json.dump({"settings": {**old, "kv_heads": 1}}, handle)
    with pytest.raises(ValueError, match="num_key_value_heads: 1 in the run, 2 now"):
        run_folders.claim(output, new, defaults=recorded_defaults(new), upgrade=upgrade)


def test_the_decoding_flags_become_one_search():
    """`trained_run.search_from_config` is the one place the flags turn into a
    search object, by generation's names; the flags' defaults are
    BeamSearch's own, and the demo's alpha is its own."""
    import keras
    from keras_attention_recipes.translation import trained_run

    from keras_attention.seq2seq import BeamSearch

    flags = ["--beam-width", "3", "--num-hypotheses", "2", "--alpha", "1.5", "--min-length", "2"]
    flags += [
        "--no-repeat-ngram-size",
        "3",
        "--repetition-penalty",
        "1.2",
        "--coverage-penalty",
        "0.1",
    ]
    config = translate.check(translate.parser().parse_args(["export", *flags]))
    search = trained_run.search_from_config(config, num_hypotheses=config.num_hypotheses)
    assert isinstance(search, BeamSearch)
    assert {
        name: search.get_config()[name]
        for name in (
            "beam_width",
            "alpha",
            "min_length",
            "no_repeat_ngram_size",
            "repetition_penalty",
            "coverage_penalty",
            "num_hypotheses",
        )
    } == {
        "beam_width": 3,
        "alpha": 1.5,
        "min_length": 2,
        "no_repeat_ngram_size": 3,
        "repetition_penalty": 1.2,
        "coverage_penalty": 0.1,
        "num_hypotheses": 2,
    }
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(search))
    assert restored.get_config() == search.get_config()
    plain = translate.check(translate.parser().parse_args(["translate", "x"]))
    assert trained_run.search_from_config(plain).get_config() == BeamSearch().get_config()
    demo = translate.check(translate.parser().parse_args(["demo"]))
    assert trained_run.search_from_config(demo).get_config() == BeamSearch(alpha=1.2).get_config()


@pytest.mark.parametrize(
    "module, argv",
    [
        ("keras_attention_recipes.translate", ["--help"]),
        ("keras_attention_recipes.translate", ["translate", "--help"]),
        ("keras_attention_recipes.translate", ["convert", "--help"]),
        ("keras_attention_recipes.translate", ["train", "--no-such-flag"]),
        ("keras_attention_recipes.attention_demo", ["--help"]),
        ("keras_attention_recipes.bottleneck", ["--help"]),
        ("keras_attention_recipes.results", ["--help"]),
        ("keras_attention_recipes.distributed_tuning", ["--help"]),
        ("keras_attention_recipes.serving_client", ["--help"]),
        ("keras_attention_recipes.spatial_transformer_digits", ["--help"]),
    ],
)
def test_help_and_flag_mistakes_answer_before_tensorflow_is_imported(module, argv):
    """`--help` took 4-8 s: TensorFlow was imported before the arguments
    were parsed. In a fresh interpreter, parsing them imports neither
    TensorFlow nor Keras nor the library."""
    code = (
        "import importlib, sys\n"
        f"module = importlib.import_module({module!r})\n"
        "try:\n"
        f"    module.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('tensorflow', 'keras', 'keras_attention', 'jax', 'torch')\n"
        "print('IMPORTED', sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.splitlines()[-1] == "IMPORTED []", (done.stdout[-300:], done.stderr[-500:])
    assert "usage:" in done.stdout + done.stderr


def test_a_command_whose_packages_are_missing_says_so_before_writing(tmp_path, monkeypatch, capsys):
    """Where a package a command needs is not installed, the command is one
    `error:` line naming what is missing, before its run folder exists:
    not a traceback from an import halfway through. Without TensorFlow
    Text, `export` needs it and the commands that train run on the
    tokenizers' Python twins, which need SentencePiece (and `tune`,
    KerasTuner)."""
    import importlib.util

    from keras_attention_recipes import translate

    found = importlib.util.find_spec
    absent = {"tensorflow_text", "keras_tuner", "sentencepiece"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else found(name, *a)
    )
    for command, named in (
        ("export", "TensorFlow Text"),
        ("train", "SentencePiece"),
        ("average", "SentencePiece"),
        ("tune", "SentencePiece and KerasTuner"),
    ):
        output = tmp_path / command
        with pytest.raises(SystemExit) as stopped:
            translate.main(
                [command, "--output", str(output), *(["--last", "2"] * (command == "average"))]
            )
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: {command} needs {named}, not installed here: pip install")
        assert not output.exists()


def test_without_tensorflow_a_keras_that_would_load_it_is_one_error_line(
    tmp_path, monkeypatch, capsys
):
    """`translate` and `evaluate` run without TensorFlow on Keras's JAX or
    PyTorch backend: where Keras would load TensorFlow (no `KERAS_BACKEND`,
    no `keras.json`), one line says to set it."""
    from keras_attention_recipes import translate

    monkeypatch.setattr(translate, "graph_tokenizers", lambda: False)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert runs.keras_backend() == "tensorflow"
    with pytest.raises(SystemExit) as stopped:
        translate.main(["translate", "--output", str(tmp_path / "run"), "Hallo."])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err == (
        "error: translate without TensorFlow runs on Keras's JAX or PyTorch backend: "
        "set KERAS_BACKEND=jax (or torch)\n"
    )
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert runs.keras_backend() == "jax"
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert runs.keras_backend() == "torch"


def test_command_line_tables_are_the_librarys():
    """The command line's copies of the library's tables (the settings'
    declarations and runs.py parse without importing the library) are the
    library's."""
    from keras_attention_recipes.translation import command_settings, settings

    from keras_attention.registry import names
    from keras_attention.seq2seq import BeamSearch
    from keras_attention.seq2seq.transformer import POSITIONS
    from keras_attention.serving.ctranslate2 import QUANTIZATIONS

    assert runs.LIBRARY_ATTENTION == names()
    assert settings.ATTENTION == names() + ("none",)
    assert settings.POSITIONS == POSITIONS
    assert command_settings.CT2_QUANTIZATIONS == QUANTIZATIONS
    assert command_settings.BEAM_DEFAULTS == BeamSearch().decoding_options()  # all of them
    from keras_attention.seq2seq.search import MAX_BEAM_WIDTH

    assert command_settings.MAX_BEAM == MAX_BEAM_WIDTH
    for name in ("beam_width", "nbest", "num_hypotheses"):
        check = command_settings.FIELDS[name].metadata["check"]
        assert check["at_most"] == MAX_BEAM_WIDTH, name
    from keras_attention.serving.records import QUANTIZATIONS

    assert command_settings.QUANTIZATIONS == QUANTIZATIONS


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--time-budget", "1e308"], "error: --time-budget must be at most 525600; got 1e+308"),
        (["--time-budget", "inf"], "error: --time-budget must be a finite number; got inf"),
        (["--time-budget", "nan"], "error: --time-budget must be a finite number; got nan"),
        (["--dictionary", "1e308"], "error: --dictionary must be at most 100.0; got 1e+308"),
        (["--alpha", "1e308"], "error: --alpha must be at most 10.0; got 1e+308"),
        (["--coverage-penalty", "inf"], "error: --coverage-penalty must be a finite number"),
        (
            ["--repetition-penalty", "1e-300"],
            "error: --repetition-penalty must be >= 0.01; got 1e-300",
        ),
        (["--subword-sampling", "1e308"], "error: --subword-sampling must be at most 10.0"),
        (["--members", "1000"], "error: --members must be at most 8 (each member is a"),
    ],
)
def test_real_valued_settings_and_members_are_bounded_before_any_work(
    tmp_path, capsys, flags, message
):
    """`--time-budget 1e308` passed, trained an epoch and ended in "cannot
    convert float NaN to integer"; `--members 1000` started 999 processes."""
    status, out, err = cli(capsys, "train", *TINY, *flags, "--output", str(tmp_path / "run"))
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, (out, err)
    assert not os.path.exists(tmp_path / "run")


def test_help_says_the_bounds_of_members_and_time_budget(capsys):
    with pytest.raises(SystemExit):
        translate.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default 1; at most 8)" in text and "(at most 525600, a year;" in text


@pytest.mark.parametrize("flag", ["--output", "--export-dir", "--dir"])
def test_an_empty_folder_flag_is_refused_not_taken_for_the_current_folder(
    tmp_path, capsys, monkeypatch, flag
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    argv = {
        "--output": ["train", *TINY, "--overwrite"],
        "--export-dir": ["export", "--output", "run"],
        "--dir": ["convert", "--output", "run", "--to", "ctranslate2", "--overwrite"],
    }[flag]
    status, _, err = cli(capsys, *argv, flag, "")
    assert status == 2 and err == (
        f"error: {flag} is empty (that would be the current folder): name a folder\n"
    ), err
    assert os.listdir(tmp_path) == ["notes.txt"]


@pytest.mark.parametrize("command", ["translate", "evaluate", "export"])
def test_a_run_named_twice_in_ensemble_is_refused(trained, tmp_path, capsys, command):
    """`translate --ensemble RUN RUN/` decoded with one model counted twice."""
    other = str(tmp_path / "other")
    shutil.copytree(trained[0], other)
    link = tmp_path / "link"
    link.symlink_to(other)
    text = ["Hallo."] if command == "translate" else []
    for ensemble, message in (
        ([other, other + "/"], f"--ensemble names one run twice ({other} and {other}/)"),
        ([other, str(link)], f"--ensemble names one run twice ({other} and {link})"),
        ([other, trained[0] + "/"], f"--ensemble {trained[0]}/ is --output itself"),
    ):
        status, _, err = cli(
            capsys, command, "--output", trained[0], *text, "--ensemble", *ensemble
        )
        assert status == 2 and err.startswith(f"error: {message}"), err
        assert err.count("\n") == 1, err


def test_a_teacher_named_twice_in_distill_from_is_refused(trained, tmp_path, capsys):
    student = tmp_path / "student"
    status, _, err = cli(
        capsys, "train", *TINY, "--output", str(student),
        "--distill-from", trained[0], trained[0] + "/",
    )  # fmt: skip
    assert status == 2 and err == (
        f"error: --distill-from names one run twice ({trained[0]} and {trained[0]}/): it would "
        "count its model twice; name each run once\n"
    ), err
    assert not student.exists()


def test_a_saved_model_is_made_with_keras_on_tensorflow(tmp_path, monkeypatch, capsys):
    """`export`, `convert` and the demo run `keras_attention.serving` (a
    SavedModel, CTranslate2's converter): with Keras set to another
    backend, one line says to set TensorFlow's, before anything is read or
    written."""
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    for command, flags in (("export", []), ("convert", ["--to", "ctranslate2", "--dir", "x"])):
        output = tmp_path / command
        with pytest.raises(SystemExit) as stopped:
            translate.main([command, "--output", str(output), *flags])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err == (
            f"error: {command} runs with Keras on TensorFlow (keras_attention.serving); Keras "
            "runs on jax here: set KERAS_BACKEND=tensorflow (a run trained on any backend works)\n"
        )
        assert not output.exists()
