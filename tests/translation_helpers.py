"""Shared helpers of the translation recipe's tests (`tests/test_translation_*.py`):
the tiny settings, the in-process CLI, and the one trained run and export
`tests/conftest.py` makes once per test session."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import warnings

import numpy as np
import pytest
from keras_attention_recipes import translate
from keras_attention_recipes.translation import commands, trained_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


TINY = [
    "--preset",  # the flags' own defaults, not the small preset's (its batches, dictionary)
    "none",
    "--limit",
    "200",
    "--vocab-size",
    "400",
    "--hidden-dim",
    "32",
    "--num-layers",
    "1",
    "--max-length",
    "24",
    "--batch-size",
    "32",
    "--verbose",
    "0",
]


def run(*argv):
    """Run the CLI in process, returning what it printed."""
    lines = []
    translate.run(translate.parser().parse_args(list(argv)), log=lines.append)
    return "\n".join(str(line) for line in lines)


# The fixture run's own validation file (`--valid`): one bad line, reported.
VALID = (
    "Ich habe keine Zeit.\tI have no time.\nkein Tab hier\n"
    "Wo ist der Bahnhof?\tWhere is the station?\nDas ist gut.\tThat is good.\n"
)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def message_line(stderr):
    return stderr.splitlines()[-1] + "\n"


def check_export(output, tmp_path, exported=None):
    """The exported translator runs in a fresh process that imports only
    tensorflow and tensorflow_text, from a moved directory, and gives the
    in-process model's tokens and scores; an empty request gives empty
    outputs from every signature. `exported`: the run's export with beam
    width 2 made already (the session's `exported`), copied instead of
    exporting again; it was written into `atomic_version_dir`'s staging
    folder, gone since, so it loads from a folder it was not written in
    as a moved one does."""
    import tensorflow as tf

    from keras_attention.seq2seq.generation import greedy_search

    moved = tmp_path / "moved"
    if exported is not None:
        shutil.copytree(exported, moved)
    else:
        path = export_via_cli(
            translate.parser().parse_args(
                [
                    "export",
                    "--output",
                    output,
                    "--export-dir",
                    str(tmp_path / "exports"),
                    "--beam-width",
                    "2",
                ]
            ),
            log=lambda _: 0,
        )
        shutil.move(path, moved)  # assets must be relative
    texts = [
        "Ich habe keine Zeit.",
        "Wo ist der Bahnhof?",
        "",
        "Das ist ein sehr langer Satz " * 10,
    ]
    model, config, source_tokenizer, target_tokenizer = trained_run.load_run(output)
    source, _ = source_tokenizer.encode(tf.constant(texts), config["max_length"])
    expected = greedy_search(model, source, config["max_length"] + 1)
    expected_text = [t.decode() for t in target_tokenizer.decode(expected["tokens"]).numpy()]
    script = f"""
import json, sys, tensorflow as tf, tensorflow_text
assert "keras_attention" not in sys.modules
loaded = tf.saved_model.load({str(moved)!r})
out = loaded.signatures["greedy"](text=tf.constant({texts!r}))
beam = loaded.signatures["serving_default"](text=tf.constant({texts!r}))
att = loaded.signatures["attention"](text=tf.constant({texts[:1]!r}))
none = tf.constant([], tf.string)
empty = {{name: loaded.signatures[name](text=none)
         for name in ("serving_default", "greedy", "attention", "nbest")}}
empty["constrained"] = loaded.signatures["constrained"](text=none, prefix=none)
empty["tokens"] = loaded.signatures["tokens"](
    token_ids=tf.zeros([0, 5], tf.int32), lengths=tf.zeros([0], tf.int32))
print(json.dumps({{"translation": [t.decode() for t in out["translation"].numpy()],
                  "empty": {{name: {{key: value.shape[0] for key, value in outputs.items()}}
                            for name, outputs in empty.items()}},
                  "score": out["score"].numpy().tolist(),
                  "truncated": beam["truncated"].numpy().tolist(),
                  "beam": [t.decode() for t in beam["translation"].numpy()],
                  "attention": list(att["attention"].shape),
                  "signatures": sorted(loaded.signatures)}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["signatures"] == [
        "attention",
        "constrained",
        "decoding_options",
        "greedy",
        "nbest",
        "serving_default",
        "tokens",
    ]
    assert (
        got["translation"][:2] == expected_text[:2]
        and got["translation"][2] == ""
        and got["beam"][2] == ""
    )
    np.testing.assert_allclose(got["score"][:2], np.asarray(expected["scores"])[:2], atol=1e-5)
    assert got["truncated"] == [False, False, False, True]
    assert got["attention"][0] == 1
    # An empty request gets empty outputs from every signature (ConvS2S's
    # convolutions fail on a batch of 0 on AVX-512 CPUs without the guard).
    assert sorted(got["empty"]) == [
        "attention",
        "constrained",
        "greedy",
        "nbest",
        "serving_default",
        "tokens",
    ]
    assert {rows for outputs in got["empty"].values() for rows in outputs.values()} == {0}


# -- the CLI in process ------------------------------------------------------------------
def cli(capsys, *argv):
    """Run the CLI in process: (exit status, stdout, stderr)."""
    try:
        translate.main(list(argv))
        status = 0
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


class Killed(BaseException):
    """What `kill -9` does to the process, at a chosen point."""


def killed_during_final_save(monkeypatch, output, *flags):
    """Train, and stop the process as `kill -9` would after `model.keras`
    is written (to its temporary name) and before anything else."""
    from keras_attention_recipes import run_files

    write_atomically = run_files.write_atomically

    def write_then_die(path, write):
        if path.endswith("model.keras"):
            write(run_files.temporary_path(path))
            raise Killed
        write_atomically(path, write)

    with monkeypatch.context() as patch:
        patch.setattr(run_files, "write_atomically", write_then_die)
        with pytest.raises(Killed):
            run("train", "--output", output, *flags)


def encoded_rows(tokenizer, texts, length):
    """Each text's ids, unpadded, and whether it was cut (the reference)."""
    import tensorflow as tf

    ids, cut = tokenizer.encode(tf.constant(texts), length)
    return [tuple(int(i) for i in row if i) for row in ids.numpy()], list(cut.numpy())


def epoch_pairs(data):
    """The (source, target) id tuples of one pass over `make_dataset`'s
    batches, unpadded, with the batch shapes."""
    pairs, shapes = [], []
    for (source, target_in), target_out in data.as_numpy_iterator():
        shapes.append((source.shape, target_in.shape, target_out.shape))
        for s, t_in, t_out in zip(source, target_in, target_out):
            target = (int(t_in[0]), *[int(i) for i in t_out if i])  # [START] y [END]
            pairs.append((tuple(int(i) for i in s if i), target))
    return pairs, shapes


def weight_arrays(path, optimizer=False):
    """The datasets of a Keras `.weights.h5` file, by path: the model's
    (and, with `optimizer`, the optimizer's only; with None, every one)."""
    import h5py

    def kept(name):
        return optimizer is None or name.startswith("optimizer/") == optimizer

    arrays = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(
            lambda name, item: (
                arrays.__setitem__(name, item[()])
                if isinstance(item, h5py.Dataset) and kept(name)
                else None
            )
        )
    return arrays


def export_via_cli(args, log):
    """`export` of parsed arguments, checked as the command line checks them."""
    return commands.export_command(translate.check(args), log)


def train_shared_run(folder):
    """The tests' one trained run, in `folder/run`: an rnn trained 2 epochs on
    the tiny slice, validated on `VALID`, with validation BLEU each epoch
    and the mean of its 2 epochs saved as the model (`--valid`,
    `--bleu-every` and `--average-last` ride on the one run the tests
    share). Returns what training printed."""
    output = str(folder / "run")
    valid = str(folder / "valid.tsv")
    with open(valid, "w", encoding="utf-8") as handle:
        handle.write(VALID)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = run(
            "train",
            "--output",
            output,
            "--family",
            "rnn",
            "--attention",
            "additive",
            "--epochs",
            "2",
            "--valid",
            valid,
            "--bleu-every",
            "1",
            "--bleu-sentences",
            "2",
            "--average-last",
            "2",
            *TINY,
        )
    # Keras warns when fit is given `shuffle` with a dataset or a dataset of
    # unknown length: neither is the user's business.
    noise = [str(w.message) for w in caught if re.search("shuffle|ran out of data", str(w.message))]
    assert not noise, noise
    return log


def export_shared_run(output, folder):
    """The shared run exported with beam width 2 into `folder`; returns the
    version's path relative to `folder`."""
    path = export_via_cli(
        translate.parser().parse_args(
            ["export", "--output", output, "--export-dir", str(folder), "--beam-width", "2"]
        ),
        log=lambda _: 0,
    )
    return os.path.relpath(path, folder)


# -- ensembles --------------------------------------------------------------------
TEXTS = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?", "Das ist gut.", "Wir gehen nach Hause."]


def translations(log):
    return [line.split("-> ", 1)[1] for line in log.splitlines() if "-> " in line]


def perturbed_copy(output, folder, seed):
    """A copy of the run whose model's weights are moved by noise: another
    model of the same vocabulary, without training one."""
    shutil.copytree(output, folder, ignore=shutil.ignore_patterns("backup", "checkpoints"))
    import keras

    model = keras.saving.load_model(os.path.join(folder, "model.keras"), compile=False)
    generator = np.random.default_rng(seed)
    model.set_weights(
        [w + generator.normal(0, 0.3 * (np.std(w) + 1e-3), w.shape) for w in model.get_weights()]
    )
    model.save(os.path.join(folder, "model.keras"))
    return str(folder)


# `train` in a process that kills itself (SIGKILL, no clean-up of any
# kind) at step `KILL_AT` of epoch 2, one step after the backup written at
# step `KILL_AT - 1` (`--save-every` of the command line).
KILLED_TRAIN = """
import os, signal, sys
from keras_attention_recipes import runs, translate

made = runs.resilient_backup
KILL_AT = int(sys.argv[1])

def resilient_backup(*args, **kwargs):
    backup = made(*args, **kwargs)
    step_end = backup.on_train_batch_end

    def on_train_batch_end(batch, logs=None):
        step_end(batch, logs)
        if backup.epoch == 1 and backup.steps == KILL_AT:
            os.kill(os.getpid(), signal.SIGKILL)

    backup.on_train_batch_end = on_train_batch_end
    return backup

runs.resilient_backup = resilient_backup
translate.main(sys.argv[2:])
"""
