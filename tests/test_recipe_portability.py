"""The translation recipe on a backend other than TensorFlow, without
TensorFlow: `make test` runs this file in the JAX virtualenv, where the
commands tokenise with the tokenizers' Python twins and read the shards
with `ShardBatches`. A tiny run trains, averages, translates and scores
(`make test`); a run killed mid-epoch resumes to the uninterrupted run's
weights, and `tune` searches and resumes (`make test-large`). On
TensorFlow the same commands are test_translation_*.py's, so the file
runs elsewhere only.
"""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras_attention_recipes.translation.averaging import FOLDER
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import KILLED_TRAIN, ROOT, TINY, run, weight_arrays

pytestmark = [
    pytest.mark.skipif(
        keras.config.backend() == "tensorflow",
        reason="the recipe on TensorFlow is test_translation_*.py's",
    ),
    pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing: make test installs it"),
]

SMALL = [*TINY, "--family", "transformer"]


def test_a_run_trains_averages_translates_and_scores_without_tensorflow(tmp_path):
    """`train --average-last 2` on this backend: the run records it, its
    model is the mean of the two epochs' checkpoints (read back from their
    files), `average --last 2` averages them again to the same validation
    loss, and `evaluate`'s BLEU is sacrebleu's of `translate`'s lines for
    the test split."""
    import sacrebleu

    output = str(tmp_path / "run")
    log = run("train", "--output", output, *SMALL, "--epochs", "2", "--average-last", "2")
    assert "training transformer for 2 epochs on 1 replica(s)" in log
    record = json.load(open(os.path.join(output, "config.json")))
    assert record["backend"] == keras.config.backend() and record["averaged"]["epochs"] == [1, 2]
    kept = sorted(os.listdir(os.path.join(output, FOLDER)))
    files = [weight_arrays(os.path.join(output, FOLDER, name)) for name in kept]
    mean = {name: np.mean([f[name] for f in files], axis=0) for name in files[0]}
    run_files = weight_arrays(os.path.join(output, "final.weights.h5"))
    assert mean.keys() == run_files.keys() and len(kept) == 2
    for name, value in mean.items():
        np.testing.assert_allclose(run_files[name], value, rtol=1e-5, atol=1e-7)
    log = run("average", "--output", output, "--last", "2")
    assert "averaged 2 checkpoints: validation loss" in log
    averaged = json.load(open(os.path.join(output, "config.json")))["val_loss"]
    assert averaged == pytest.approx(record["val_loss"], abs=1e-4)  # the same batches, mean

    with open(os.path.join(output, "data", "test.tsv"), encoding="utf-8") as handle:
        pairs = [line.rstrip("\n").split("\t") for line in handle if line.strip()]
    given, written = tmp_path / "in.txt", tmp_path / "out.txt"
    given.write_text("".join(source + "\n" for source, _ in pairs), encoding="utf-8")
    run("translate", "--output", output, "--input", str(given), "--output-file", str(written))
    lines = written.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(pairs)
    run("evaluate", "--output", output)
    scores = json.load(open(os.path.join(output, "scores.json")))
    reference = sacrebleu.corpus_bleu(lines, [[target for _, target in pairs]]).score
    assert scores["bleu"] == pytest.approx(reference, abs=0.005)  # scores.json: 2 decimals


@pytest.mark.large(reason="a second process, killed, and two runs")
def test_a_run_killed_mid_epoch_resumes_to_the_uninterrupted_runs_weights(tmp_path):
    """kill -9 one step after a mid-epoch backup: the resumed run starts at
    the backup's step and ends with the uninterrupted run's weights (each
    epoch's batches, dropout and word dropout drawn as they were)."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # a third epoch: the resumed run's second `fit` (the epochs after the one resumed)
    flags = [*SMALL, "--batch-size", "4", "--epochs", "3", "--dropout", "0.2"]
    flags += ["--word-dropout", "0.1", "--save-every", "2"]
    run("train", "--output", str(whole), *flags)
    process = subprocess.run(
        [sys.executable, "-c", KILLED_TRAIN, "3", "train", "--output", str(killed), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    log = run("train", "--output", str(killed), *flags)
    assert "resuming an interrupted run at step 2 of its epoch 2 of 3" in log
    ours = weight_arrays(killed / "final.weights.h5")
    for name, value in weight_arrays(whole / "final.weights.h5").items():
        np.testing.assert_allclose(ours[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.large(reason="a KerasTuner search of two trials, run twice")
def test_tune_searches_and_resumes_without_tensorflow(tmp_path, monkeypatch):
    """`tune` of two random trials of one epoch: both trials train, the
    best trial's settings are written and its BLEU said, and the same
    command again resumes with no trial to add."""
    monkeypatch.setenv(
        "KERAS_ATTENTION_SEARCH_SPACE",
        json.dumps({"embed_dim": [16], "hidden_dim": [32], "num_layers": [1], "num_heads": [2]}),
    )
    output = str(tmp_path / "tune")
    flags = ["--algorithm", "random", "--trials", "2", "--epochs", "1", "--families"]
    flags += ["transformer", "--bleu-trials", "1", "--limit", "200", "--vocab-size", "400"]
    flags += ["--max-length", "24", "--verbose", "0"]
    log = run("tune", "--output", output, *flags)
    best = json.load(open(os.path.join(output, "best_hyperparameters.json")))
    assert best["family"] == "transformer", best
    assert "validation BLEU of the 1 best trials" in log
    trials = os.path.join(output, "tuning", "translate")
    done = sorted(name for name in os.listdir(trials) if name.startswith("trial_"))
    assert len(done) == 2
    # The objective: the validation perplexity (unsmoothed), not the smoothed loss.
    trial = json.load(open(os.path.join(trials, done[0], "trial.json")))
    perplexity = trial["metrics"]["metrics"]["val_perplexity"]
    assert perplexity["direction"] == "min"
    assert trial["score"] == pytest.approx(perplexity["observations"][-1]["value"][0])
    run("tune", "--output", output, *flags)  # resumes: no trial is added
    assert sorted(n for n in os.listdir(trials) if n.startswith("trial_")) == done


@pytest.mark.large(reason="two runs, one in a process of two devices")
@pytest.mark.skipif(keras.config.backend() != "jax", reason="keras.distribution is JAX's")
def test_two_devices_train_the_model_one_device_trains(tmp_path):
    """`train` where JAX has two devices (XLA's host platform split in two,
    as two GPUs would be): Keras's `DataParallel` splits each batch, topped
    up with empty pairs to an even count, and the run ends with the
    weights of the same run on one device."""
    one, two = tmp_path / "one", tmp_path / "two"
    # batches sized in pieces: buckets of odd sizes (25, 16, 12, ... pairs) and their remainders
    flags = [*SMALL, "--epochs", "2", "--dropout", "0", "--batch-tokens", "175"]
    run("train", "--output", str(one), *flags)
    env = dict(os.environ)
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    command = [sys.executable, "-m", "keras_attention_recipes.translate", "train"]
    done = subprocess.run(
        [*command, "--output", str(two), *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "on 2 replica(s)" in done.stdout
    ours = weight_arrays(two / "final.weights.h5")
    for name, value in weight_arrays(one / "final.weights.h5").items():
        # the sums of a batch split in two differ in their last bits
        np.testing.assert_allclose(ours[name], value, rtol=1e-4, atol=1e-5)


@pytest.mark.large(reason="make gpu-check's steps on the CPU: a run, its scores, a search")
def test_the_gpu_check_prepares_here_and_trains_scores_and_tunes_there(tmp_path, monkeypatch):
    """`make gpu-check`'s two halves on this machine's CPU with a small
    model: the prepared run (split, vocabularies, settings claimed) trains,
    and the screen's figures are the run's own: its BLEU and validation
    loss, its epochs, two trials searched (on its splits as the corpus)."""
    from keras_attention_recipes import gpu_check

    monkeypatch.setenv(
        "KERAS_ATTENTION_SEARCH_SPACE",
        json.dumps({"embed_dim": [16], "hidden_dim": [32], "num_layers": [1], "num_heads": [2]}),
    )
    small = {"preset": "none", "limit": 1000, "vocab_size": 400, "max_length": 24}
    extra = {"train": {**small, "hidden_dim": 32, "num_layers": 1}, "tune": small}
    output = str(tmp_path / "check")
    gpu_check.prepare(output, 0.2, extra, log=lambda line: None)
    assert sorted(os.listdir(os.path.join(output, "prepared"))) == [
        "data", "run.json", "source.spm", "target.spm",
    ]  # fmt: skip
    found = gpu_check.check_gpus(output, 0.2, 0, extra)
    record = json.load(open(os.path.join(output, "train", "config.json")))
    scores = json.load(open(os.path.join(output, "train", "scores.json")))
    assert (found["bleu"], found["chrf"]) == (scores["bleu"], scores["chrf"])
    assert found["val_loss"] == record["val_loss"] and found["backend"] == keras.config.backend()
    assert found["epochs"] > 0 and found["target_pieces_per_second"] > 0
    trials = os.path.join(output, "tune", "tuning", "translate")
    assert len([name for name in os.listdir(trials) if name.startswith("trial_")]) == 2
    again = gpu_check.check_gpus(output, 0.2, 0, extra)  # a second check starts over
    assert again["epochs"] > 0 and os.path.exists(os.path.join(output, "prepared", "run.json"))
