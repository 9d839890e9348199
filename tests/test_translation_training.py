"""The translation recipe's training on a 200-pair slice of the Ding corpus:
a complete run, other families, resuming, distributed training and tuning.

The trained run and its export (`trained`, `exported`) are made once per
test session (`tests/conftest.py`)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from keras_attention_recipes import runs, translate
from keras_attention_recipes.translation import model as model_module
from keras_attention_recipes.translation import trained_run, training
from keras_attention_recipes.translation.corpus import tsv_pairs
from keras_attention_recipes.translation.settings import DING
from keras_attention_recipes.translation.splits import SPLITS, split_of

from keras_attention.seq2seq import BeamSearch
from tests.harness import BFLOAT16_CRASH, ONEDNN_CAPPED_BELOW_AVX512
from tests.translation_helpers import (
    ROOT,
    TINY,
    cli,
    free_port,
    run,
    weight_arrays,
)

# The tuner draws small models here: the trials test the search, not the sizes.
SMALL_SEARCH = json.dumps(
    {"embed_dim": [16], "hidden_dim": [32], "num_layers": [1], "num_heads": [2]}
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


def test_ding_corpus_has_the_expected_size():
    from keras_attention_recipes.translation.corpus import ding_pairs

    pairs = list(ding_pairs())
    assert 17_000 <= len(pairs) <= 20_000
    assert all(de and en and en[-1] in ".!?" for de, en in pairs[:100])


def test_split_is_deterministic_and_stable():
    assert [split_of(s) for s in ("Ich habe keine Zeit.", "Wo ist der Bahnhof?")] == [
        split_of(s) for s in ("Ich habe keine Zeit.", "Wo ist der Bahnhof?")
    ]
    shares = np.bincount([SPLITS.index(split_of(f"Satz Nummer {i}.")) for i in range(4000)]) / 4000
    np.testing.assert_allclose(shares, [0.90, 0.05, 0.05], atol=0.02)


def test_train_writes_a_complete_run(trained):
    output, log = trained
    for name in (
        "model.keras",
        "config.json",
        "source.spm",  # SentencePiece, the default --tokenizer
        "target.spm",
        "data/train.tsv",
        "data/test.tsv",
    ):
        assert os.path.exists(os.path.join(output, name)), name
    assert os.listdir(os.path.join(output, "logs"))  # TensorBoard
    assert "training rnn with additive attention" in log and "validation loss" in log
    assert re.search(r"source vocabulary: \d+ SentencePiece \(unigram\) pieces from \d+ texts", log)
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["tokenizer"] == (
        "sentencepiece"
    )


def test_evaluate_reports_bleu_samples_and_heatmaps(trained):
    output, _ = trained
    log = run("evaluate", "--output", output, "--samples", "2", "--beam-width", "2")
    scores = json.load(open(os.path.join(output, "scores.json")))
    assert 0.0 <= scores["bleu"] <= 100.0 and 0.0 <= scores["chrf"] <= 100.0
    assert "BLEU" in log and "reference:" in log
    assert os.path.getsize(os.path.join(output, "attention", "sample0.png")) > 1000


def test_translating_empty_text_gives_empty_text_as_the_export_does(trained):
    """`translate` prints each text and its translation; the export answers
    "" for empty or all-space text (`check_export`); the CLI printed
    whatever the model generated from `[START] [END]`."""
    output, _ = trained
    sentence = "Ich habe keine Zeit."
    log = run("translate", "--output", output, sentence, "", " \t ", sentence)
    assert log.startswith(f"{sentence}\n  -> ")
    lines = log.split("\n")
    assert lines[3] == "  -> " and lines[5] == "  -> ", lines
    # the sentence is translated as it is alone, before and after the blanks
    # (the tiny model may well write "" for it: what it writes is not tested)
    alone = run("translate", "--output", output, sentence).split("\n")
    assert lines[1] == lines[7] == alone[1], (lines, alone)


def test_translating_in_chunks_traces_the_search_once_and_agrees(trained):
    """A file is translated 64 lines at a time and validation BLEU once an
    epoch: the compiled search is reused, not traced again each call."""
    output, _ = trained
    model, config, source_tokenizer, target_tokenizer = trained_run.load_run(output)
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?", "Ja.", "", "Das ist gut."]
    common = (model, source_tokenizer, target_tokenizer, texts, config["max_length"])
    search = BeamSearch(beam_width=2)
    whole = trained_run.translate_texts(*common, search)
    again = trained_run.translate_texts(*common, BeamSearch(beam_width=2))  # an equal search
    in_pairs = trained_run.translate_texts(*common, search, batch_size=2)
    assert in_pairs == whole == again and whole[3] == ""
    translator = trained_run.translator_for(*common[:3], config["max_length"], search)
    assert translator.function("serving_default").experimental_get_tracing_count() == 1


# Large (make test-large): the recipe's default family, the Transformer,
# trains in `make test` wherever TINY gives no --family, and WordPiece
# vocabularies are learned in tests/test_data_preparation.py.
@pytest.mark.large
@pytest.mark.parametrize("family", ["transformer"])
def test_other_families_train(tmp_path, family):
    """(With WordPiece, the other --tokenizer: the other tests use SentencePiece.)"""
    flags = ("--family", family, "--epochs", "1", "--tokenizer", "wordpiece")
    log = run("train", "--output", str(tmp_path), *flags, *TINY)
    assert json.load(open(tmp_path / "config.json"))["family"] == family
    assert re.search(r"source vocabulary: \d+ WordPiece tokens from \d+ texts", log)
    assert os.path.exists(tmp_path / "target.vocab") and not os.path.exists(tmp_path / "source.spm")


@pytest.mark.large
def test_interrupted_training_resumes(tmp_path):
    command = [
        sys.executable,
        "-m",
        "keras_attention_recipes.translate",
        "train",
        "--output",
        str(tmp_path),
        "--family",
        "rnn",
        "--epochs",
        "4",
        *TINY,
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    backup = tmp_path / "backup"
    deadline = time.time() + 120
    while time.time() < deadline and not (backup / "training_metadata.json").exists():
        time.sleep(0.2)
    # Taken at the next step's boundary (after the backup is written whole),
    # while epochs 2-4 are left.
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=240)[0]  # a loaded CI machine
    assert "interrupted: re-run the same command to resume" in output, output[-2000:]
    assert "Traceback" not in output
    done = runs.backup_position(str(backup))[0]
    assert 1 <= done < 4
    log = run("train", "--output", str(tmp_path), "--family", "rnn", "--epochs", "4", *TINY)
    assert f"resuming an interrupted run after its epoch {done} of 4" in log
    assert os.path.exists(tmp_path / "model.keras")


@pytest.mark.large
def test_two_workers_train_to_identical_weights(tmp_path):
    """Into a fresh --output: the chief prepares the data and vocabularies,
    the other worker waits for them (both preparing at once crashed)."""
    prepared = tmp_path / "run"
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "keras_attention_recipes.translate",
                    "train",
                    "--output",
                    str(prepared),
                    "--family",
                    "rnn",
                    "--epochs",
                    "1",
                    "--seed",
                    "3",
                    *TINY,
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=240)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-2000:] + outputs[1][-2000:]
    assert "on 2 replica(s)" in outputs[0]
    worker_dirs = [d for d in os.listdir(prepared) if d.startswith("worker-")]
    assert len(worker_dirs) == 1

    chief = weight_arrays(str(prepared / "final.weights.h5"), optimizer=None)
    other = weight_arrays(str(prepared / worker_dirs[0] / "final.weights.h5"), optimizer=None)
    assert chief.keys() == other.keys() and len(chief) > 5
    for name in chief:
        np.testing.assert_array_equal(chief[name], other[name], err_msg=name)


@pytest.mark.large
def test_tuning_runs_resumes_and_writes_best_hyperparameters(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_ATTENTION_SEARCH_SPACE", SMALL_SEARCH)
    args = [
        "tune",
        "--output",
        str(tmp_path),
        "--algorithm",
        "random",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--families",
        "rnn",
        "transformer",
        "--bleu-trials",
        "1",
        "--limit",
        "200",
        "--vocab-size",
        "400",
        "--max-length",
        "24",
        "--verbose",
        "0",
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = run(*args)
    # A line per trial as it starts and ends (the search was silent), and
    # the best models load for their BLEU without Keras's optimizer warning.
    progress = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tune:")]
    assert re.fullmatch(r"tune: trial 1/2 \(random\): \{'family': .*\} \.\.\.", progress[0])
    assert re.fullmatch(r"tune: trial 1/2 done: val_perplexity \d+\.\d{4}", progress[1])
    assert progress[2].startswith("tune: trial 2/2 (random): ") and len(progress) == 4
    assert not [w for w in caught if "Skipping variable loading" in str(w.message)]
    best = json.load(open(tmp_path / "best_hyperparameters.json"))
    assert best["family"] in ("rnn", "transformer") and "learning_rate" in best
    # Only the transformer has heads, and its embedding width is its units.
    assert ("num_heads" in best) == (best["family"] == "transformer")
    transformer = best["family"] == "transformer"
    assert ("position" in best) == transformer
    # The preset chosen for the 200 pairs (small): a trial's settings, whose
    # key-value heads are left out when one per head (the preset's), and
    # its rate, not the searched factor.
    assert ("num_key_value_heads" in best) <= transformer and "learning_rate_scale" not in best
    assert ("embed_dim" in best) == (best["family"] != "transformer")
    assert "validation BLEU" in log
    trials = sorted(
        d for d in os.listdir(tmp_path / "tuning" / "translate") if d.startswith("trial_")
    )
    assert len(trials) == 2
    run(*args)  # resumes: nothing left to do
    assert (
        sorted(d for d in os.listdir(tmp_path / "tuning" / "translate") if d.startswith("trial_"))
        == trials
    )
    # Another algorithm cannot resume the search: KerasTuner's reload gave a
    # traceback; now the differences, as train says them.
    algorithm = args.index("--algorithm") + 1
    other = [*args[:algorithm], "bayesian", *args[algorithm + 1 :]]
    with pytest.raises(ValueError, match="algorithm: 'random' in the run, 'bayesian' now"):
        run(*other)
    # A tuning folder is not a training run's (nor the other way round).
    with pytest.raises(ValueError, match="holds a run of `tune`, not of `train`"):
        run("train", "--output", str(tmp_path), "--epochs", "1", *TINY)
    # train accepts the best hyperparameters: its model is the best trial's
    # (what train then does with its settings, every other train test runs).
    path = str(tmp_path / "best_hyperparameters.json")
    config = translate.check(translate.parser().parse_args(["train", "--hyperparameters", path]))
    _, spec = training.train_settings(config)
    shared = [key for key in best if key in spec]
    assert len(shared) >= 3 and {key: spec[key] for key in shared} == {
        key: best[key] for key in shared
    }
    assert spec["family"] == best["family"] and spec["hidden_dim"] == 32
    classes = {"rnn": "RecurrentSeq2Seq", "transformer": "TransformerSeq2Seq"}
    assert type(model_module.build_model(spec, 100, 120)).__name__ == classes[best["family"]]


def test_tune_has_its_own_folder_and_refuses_a_training_run(trained, tmp_path, capsys):
    """`tune` without --output wrote into `runs/translate` (train's folder)
    and exited 0 beside a finished training run."""
    assert translate.parser().parse_args(["tune"]).output == "runs/tune"
    assert translate.check(translate.parser().parse_args(["train"])).output == "runs/translate"
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    before = open(os.path.join(output, "run.json")).read()
    status, out, err = cli(capsys, "tune", "--output", output, "--limit", "200")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --output {output} holds a run of `train`, not of `tune`")
    assert open(os.path.join(output, "run.json")).read() == before
    assert not os.path.exists(os.path.join(output, "tuning"))


def test_tune_batches_by_its_batch_tokens_and_draws_its_dictionary(tmp_path, monkeypatch):
    """`tune --batch-tokens N --dictionary R` parsed both and trained its
    trials on 64-pair batches without dictionary entries: the flags were
    not handed to the data pipeline."""
    from keras_attention_recipes.translation import hyperparameter_search

    class Handed(Exception):
        pass

    def handed(*args, **kwargs):
        raise Handed(kwargs)

    monkeypatch.setattr(hyperparameter_search, "datasets", handed)
    argv = ["tune", "--output", str(tmp_path / "tune"), *TINY[2:6], "--batch-tokens", "512"]
    config = translate.check(translate.parser().parse_args([*argv, "--dictionary", "0.5"]))
    with pytest.raises(Handed) as stopped:
        hyperparameter_search.tune(config, log=lambda *_: None)
    kwargs = stopped.value.args[0]
    assert (kwargs["batch_tokens"], kwargs["dictionary"]) == (512, 0.5)


def test_a_chief_that_fails_ends_the_distributed_search_with_its_workers(tmp_path):
    """The launcher's chief prepares the search's data and serves its
    oracle: when it fails, the workers (which would wait for it) are
    stopped at once, and both are said to have failed."""
    from keras_attention_recipes import distributed_tuning

    def started(tuner_id, code):
        log = open(tmp_path / f"{tuner_id}.log", "w")
        return tuner_id, subprocess.Popen([sys.executable, "-c", code], stdout=log), log

    processes = [
        started("chief", "import sys, time; time.sleep(0.5); sys.exit(2)"),
        started("tuner0", "import time; time.sleep(120)"),
    ]
    began = time.perf_counter()
    assert distributed_tuning.supervise(processes, poll=0.1) == ["chief", "tuner0"]
    assert time.perf_counter() - began < 30
    # workers that all failed: the chief, which waits for them, is stopped too
    processes = [
        started("chief", "import time; time.sleep(120)"),
        started("tuner0", "import sys; sys.exit(3)"),
    ]
    began = time.perf_counter()
    assert distributed_tuning.supervise(processes, poll=0.1) == ["chief", "tuner0"]
    assert time.perf_counter() - began < 30


@pytest.mark.large
def test_distributed_tuning_stops_on_ctrl_c_and_resumes_to_run_every_trial_once(
    tmp_path, monkeypatch
):
    """Ctrl-C to the launcher's process group, as a terminal sends it, while
    the workers train: every process stops with its message, none with a
    traceback; the same command then finishes the search, each trial
    completed once."""
    monkeypatch.setenv("KERAS_ATTENTION_SEARCH_SPACE", SMALL_SEARCH)  # the workers inherit it
    output, logs = tmp_path / "tune", tmp_path / "logs"
    # The chief prepares the data and vocabularies once; the workers wait for them.
    tune = ["--output", str(output), "--algorithm", "random", "--trials", "3", "--epochs", "1"]
    tune += ["--families", "rnn", "--bleu-trials", "0", *TINY[2:6], "--max-length", "24"]

    def command():
        launcher = [
            "-m",
            "keras_attention_recipes.distributed_tuning",
            "--workers",
            "2",
            "--logs",
            str(logs),
        ]
        return [sys.executable, *launcher, "--port", str(free_port()), "--", *tune]

    process = subprocess.Popen(
        command(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and not (output / "tuning" / "translate" / "trial_0").exists():
        time.sleep(0.5)
    time.sleep(2.0)  # a worker builds and trains the first trial's model
    os.killpg(process.pid, signal.SIGINT)
    stderr = process.communicate(timeout=180)[1]
    assert process.returncode == 1, stderr[-3000:]
    assert stderr.splitlines() == [
        f"interrupted: re-run the same command to continue the search (logs in {logs})"
    ]
    for name in ("chief", "tuner0", "tuner1"):
        text = open(logs / f"{name}.log").read()
        assert "Traceback" not in text and text.splitlines()[-1].startswith("interrupted:"), text

    result = subprocess.run(command(), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trial_dirs = [d for d in os.listdir(output / "tuning" / "translate") if d.startswith("trial_")]
    assert len(trial_dirs) == 3
    statuses = [
        json.load(open(output / "tuning" / "translate" / d / "trial.json"))["status"]
        for d in trial_dirs
    ]
    assert statuses == ["COMPLETED"] * 3
    ran = sum(open(logs / f"tuner{i}.log").read().count("Search: Running Trial") for i in range(2))
    assert ran <= 3  # the second command's logs: no trial ran twice


# -- bad input -------------------------------------------------------------------------
def test_tsv_problems_are_reported_by_line(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(
        b"Hallo Welt.\tHello world.\n\nno tab here\n\xff\xfe broken\tbytes\n"
        b"\tempty source\nGut.\tGood.\n"
    )
    problems = []
    pairs = list(tsv_pairs(str(path), problems))
    assert pairs == [("Hallo Welt.", "Hello world."), ("Gut.", "Good.")]
    assert problems[0].endswith(":3: expected 'source<TAB>target', found no tab; skipped")
    assert (
        ":4: not valid UTF-8" in problems[1]
        and ":5: expected exactly one non-empty source and target" in problems[2]
    )


# A run of its own: large (`make test-large`).
@pytest.mark.large
@pytest.mark.skipif(ONEDNN_CAPPED_BELOW_AVX512, reason=BFLOAT16_CRASH)
def test_mixed_precision_training(tmp_path):
    import keras

    log = run(
        "train",
        "--output",
        str(tmp_path),
        "--family",
        "transformer",
        "--epochs",
        "1",
        "--mixed-precision",
        "bfloat16",
        *TINY,
    )
    assert "validation loss" in log and "nan" not in log.split("validation loss")[1]
    keras.mixed_precision.set_global_policy("float32")


def test_a_search_that_does_not_reload_is_one_error_naming_the_folder(tmp_path, capsys):
    """A search saved before run.json recorded the tuner's settings, re-run
    with another algorithm: KerasTuner's `RuntimeError: Error reloading
    Oracle` traceback became a `ValueError` saying what to do (recipes/tuning.py,
    shared with the digits recipe). Progress goes to stderr, a line per trial."""
    import keras
    from keras_attention_recipes.tuning import run_search

    def build(hp):
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(hp.Choice("units", [1]))])
        model.compile("sgd", "mse")
        return model

    data = (np.zeros((8, 2), "float32"), np.zeros((8, 1), "float32"))
    common = dict(max_trials=1, max_epochs=1, output=str(tmp_path), batch_size=8)
    run_search(build, data, data, algorithm="random", **common)
    err = capsys.readouterr().err
    assert "tune: trial 1/1 (random): {'units': 1} ..." in err.splitlines()
    with pytest.raises(ValueError, match=r"^--output .* holds a search that does not resume"):
        run_search(build, data, data, algorithm="hyperband", **common)


def test_training_says_when_its_last_batches_made_no_update():
    """With `--update-freq K`, the batches after the last full K of a run
    (its end, or where the time budget stopped) accumulate gradients that
    are never applied: said, not left silent. The count is the optimizer's,
    so a resumed run's batches before the backup count too."""
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(gradient_accumulation_steps=4), "mse")
    x, y = np.ones((6, 2), "float32"), np.ones((6, 1), "float32")
    model.fit(x, y, batch_size=1, epochs=1, verbose=0)  # 6 batches: one update, 2 left
    lines = []
    training._report_unapplied(model, 4, lines.append)
    assert lines == [
        "--update-freq 4: the last 2 batches, fewer than 4, made no update (training ended "
        "before their accumulation was complete)"
    ]
    model.fit(x[:2], y[:2], batch_size=1, epochs=1, verbose=0)  # 8: complete
    training._report_unapplied(model, 4, lines.append)
    assert len(lines) == 1


def test_a_damaged_best_epoch_keeps_the_last_epoch_s_weights_and_says_so(tmp_path):
    """A `best.weights.h5` that does not load gave a traceback at the end of
    training, after the model's weights were partly overwritten: the last
    epoch's weights are kept whole, and the log says why."""
    import keras
    from keras_attention_recipes.translation.callbacks import best_weights

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    path = str(tmp_path / "best.weights.h5")
    model.save_weights(path)
    with open(path, "r+b") as handle:  # the file cut in half
        handle.truncate(os.path.getsize(path) // 2)
    lines = []
    best = best_weights(path, lines.append)
    best.val_loss, best.epoch, best.last_val_loss = 1.0, 1, 2.0  # epoch 1 was the best
    last = [value.copy() for value in model.get_weights()]
    assert best.restore(model) is False
    for value, kept in zip(model.get_weights(), last):
        np.testing.assert_array_equal(value, kept)
    assert len(lines) == 1 and lines[0].startswith(f"{path} does not load (")
    assert lines[0].endswith(
        "it is damaged; keeping the last epoch's weights instead of the best epoch's"
    )
