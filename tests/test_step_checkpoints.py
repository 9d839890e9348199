"""Training that lives through long epochs (`train --save-every`,
`--validate-every`, `--average-last` of step checkpoints, a time budget
that ends mid-epoch), on the 200-pair slice of the Ding corpus with tiny
models (`TINY`, in batches of 4: several steps an epoch)."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from keras_attention_recipes.translation import averaging
from keras_attention_recipes.translation.batches import epoch_seed
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import KILLED_TRAIN, ROOT, TINY, run, weight_arrays

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)

STEPS = [*TINY, "--family", "rnn", "--batch-size", "4", "--limit", "80", "--max-length", "48"]


def iterations(path):
    """The optimizer's update count in a `.weights.h5` file (its one
    integer scalar)."""
    (count,) = [
        int(value)
        for value in weight_arrays(path, optimizer=True).values()
        if value.shape == () and value.dtype.kind == "i"
    ]
    return count


# A second process killed with SIGKILL and a resumed run: large
# (`make test-large`); test_a_step_backup_falls_back_... below reads a
# step backup in process.
@pytest.mark.large
def test_a_run_killed_mid_epoch_resumes_at_its_last_step_backup(tmp_path):
    """A kill -9 one step after a mid-epoch backup loses that step only: the
    resumed run starts at the backup's step, trains none of the epoch's
    batches before it again, and ends with the uninterrupted run's update
    count and (each epoch's batches in the same order) its weights."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # dropout and word dropout: their draws resume as they were
    flags = [
        "--epochs",
        "2",
        *STEPS,
        "--dropout",
        "0.2",
        "--word-dropout",
        "0.1",
        "--save-every",
        "2",
    ]
    run("train", "--output", str(whole), *flags)
    process = subprocess.run(
        [sys.executable, "-c", KILLED_TRAIN, "3", "train", "--output", str(killed), *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    metadata = json.load(open(killed / "backup" / "training_metadata.json"))
    assert (metadata["epoch"], metadata["steps"]) == (1, 2)
    # resumed with another --save-every: the backups' spacing is no setting of the run
    log = run("train", "--output", str(killed), *flags[:-1], "3")
    assert "resuming an interrupted run at step 2 of its epoch 2 of 2" in log
    ours, theirs = killed / "final.weights.h5", whole / "final.weights.h5"
    assert iterations(ours) == iterations(theirs) > 6  # 2 epochs of more than 3 steps
    for name, value in weight_arrays(theirs).items():
        np.testing.assert_allclose(weight_arrays(ours)[name], value, rtol=1e-5, atol=1e-6)


def epoch_batches(stream, count):
    return [
        [np.asarray(part) for part in (source, target_in, target_out)]
        for (source, target_in), target_out in stream.dataset.take(count).as_numpy_iterator()
    ]


def test_an_epoch_s_batches_are_a_function_of_the_seed_and_the_epoch(trained):
    """Built again, from its first epoch or from its own, or in the middle
    of it, an epoch has the same batches; another epoch or seed has others."""
    from keras_attention_recipes.translation.data import load_tokenizers
    from keras_attention_recipes.translation.pipeline import make_dataset

    output, _ = trained
    path = os.path.join(output, "data", "train.tsv")
    tokenizers = load_tokenizers(output)

    def streams(seed, epochs):
        return make_dataset(path, *tokenizers, 24, 8, True, seed, epochs=epochs, word_dropout=0.1)[
            0
        ]

    (whole,) = streams(0, (0, 3, 0))
    batches = whole.steps
    assert (whole.first, whole.last) == (0, 3) and batches > 3
    everything = epoch_batches(whole, 3 * batches)
    (second,) = streams(0, (1, 3, 0))
    partial, rest = streams(0, (1, 3, 2))
    assert (partial.first, partial.last, partial.steps) == (1, 2, batches - 2)
    assert (rest.first, rest.last, rest.steps) == (2, 3, batches)

    def same(first, other):
        assert len(first) == len(other)
        for a, b in zip(first, other):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y)

    same(epoch_batches(second, 2 * batches), everything[batches:])
    same(epoch_batches(partial, batches), everything[batches + 2 : 2 * batches])
    same(epoch_batches(rest, batches), everything[2 * batches :])
    first_pairs = sorted(str(batch[0].tolist()) for batch in everything[:batches])
    assert [str(b[0].tolist()) for b in everything[:batches]] != [
        str(b[0].tolist()) for b in everything[batches : 2 * batches]
    ]
    other = epoch_batches(streams(1, (0, 1, 0))[0], batches)
    assert sorted(str(batch[0].tolist()) for batch in other) != first_pairs or len(other) < 2
    assert epoch_seed(3, 1) != epoch_seed(3, 2) != epoch_seed(4, 1)


@pytest.mark.large(
    reason=(
        "four CLI runs of a training validated and saved by steps; "
        "test_translation_budget.py averages the step checkpoints a budget keeps in `make "
        "test`"
    )
)
def test_validation_every_n_steps_and_the_average_of_the_last_step_checkpoints(tmp_path):
    """--validate-every 3 logs the validation loss and BLEU at steps 3, 6,
    ... (in validation_steps.jsonl, TensorBoard and the log); --average-last
    3 with --save-every 2 keeps the last 3 backups as step checkpoints and
    the model is their mean (and `average --last` averages them again)."""
    log = run(
        "train",
        "--output",
        str(tmp_path),
        "--epochs",
        "1",
        *STEPS,
        "--limit",
        "40",  # 34 training pairs: 12 steps, 4 validations, 6 step backups
        "--save-every",
        "2",
        "--validate-every",
        "3",
        "--average-last",
        "3",
        "--bleu-sentences",
        "5",
    )
    record = json.load(open(tmp_path / "config.json"))
    records = [json.loads(line) for line in open(tmp_path / "validation_steps.jsonl")]
    total = records and max(r["step"] for r in records)
    assert [r["step"] for r in records] == list(range(3, total + 1, 3)) and len(records) >= 2
    assert all(np.isfinite(r["val_loss"]) and 0 <= r["val_bleu"] <= 100 for r in records)
    # the record rounds the loss to 4 decimals and the log to 3
    said = float(re.search(r"step 3 \(epoch 1\): validation loss ([0-9.]+), BLEU", log).group(1))
    assert said == pytest.approx(records[0]["val_loss"], abs=5.5e-4)
    assert os.listdir(tmp_path / "logs" / "steps")  # TensorBoard's events
    kept = averaging.kept_checkpoints(str(tmp_path / averaging.FOLDER), steps=True)
    assert len(kept) == 3 and record["averaged"]["steps"] == [step for step, _ in kept]
    files = [weight_arrays(path) for _, path in kept]
    for name, value in weight_arrays(tmp_path / "final.weights.h5").items():
        if np.issubdtype(value.dtype, np.floating):
            mean = np.mean([np.asarray(f[name], "float64") for f in files], axis=0)
            np.testing.assert_allclose(value, mean, rtol=1e-5, atol=1e-6)
    assert not os.path.exists(tmp_path / "backup")  # deleted once the model is saved
    # `average --last` takes the kept step checkpoints too
    assert "averaged 2 checkpoints" in run("average", "--output", str(tmp_path), "--last", "2")


# A run of its own: large (`make test-large`); tests/test_translation_budget.py
# checks the budget's stop to the step with a scripted clock.
@pytest.mark.large
def test_a_budget_shorter_than_an_epoch_ends_at_a_step_and_records_its_steps(tmp_path):
    """--time-budget shorter than an epoch ends the first epoch at the step
    that overruns it; the record says how many steps of how many ran."""
    run(
        "train",
        "--output",
        str(tmp_path),
        *STEPS,
        "--epochs",
        "3",
        "--time-budget",
        "0.0001",  # 6 ms: the first step overruns it
        "--save-every",
        "2",
    )
    budget = json.load(open(tmp_path / "config.json"))["time_budget"]
    assert budget["ended_by"] == "time budget (mid-epoch)"
    assert budget["epochs"] == 1 and 1 <= budget["steps"] < budget["epoch_steps"]


def test_an_epoch_the_budget_cut_short_is_kept_as_a_step_and_averaged_last(tmp_path):
    """`KeepLastEpochs` with 10 steps an epoch: epochs 1-4 whole, the 5th
    stopped after 3 steps (the time budget's stop) is kept as the run's
    step 43 beside the 2 newest epochs; `average_last_epochs` takes those 3
    in the order of their steps, and the model holds their mean."""
    import keras
    from keras_attention_recipes.translation.averaging import KeepLastEpochs, in_order, label

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    folder = tmp_path / averaging.FOLDER
    keep = KeepLastEpochs(str(folder), 3, steps_per_epoch=10)
    keep.set_model(model)
    keep.on_train_begin()
    weights = []
    for epoch, steps in enumerate((10, 10, 10, 10, 3)):
        keep.on_epoch_begin(epoch)
        for step in range(steps):
            keep.on_train_batch_end(step)
        model.set_weights(
            [np.full(w.shape, float(epoch + 1), "float32") for w in model.get_weights()]
        )
        weights.append(epoch + 1.0)
        keep.on_epoch_end(epoch, {"loss": 1.0})
    names = sorted(os.listdir(folder))
    assert names == ["epoch-0003.weights.h5", "epoch-0004.weights.h5", "step-00000043.weights.h5"]
    ordered = in_order(str(folder), 10)
    assert [step for step, _ in ordered] == [30, 40, 43]
    assert [label(path) for _, path in ordered] == ["epoch 3", "epoch 4", "step 43"]
    import tensorflow as tf

    data = tf.data.Dataset.from_tensors((np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32")))
    lines = []
    record = averaging.average_last_epochs(
        model, str(tmp_path), 3, data, 0.5, lines.append, steps_per_epoch=10
    )
    assert (record["epochs"], record["steps"]) == ([3, 4], [43])
    for value in model.get_weights():  # the mean of 3.0, 4.0 and 5.0
        np.testing.assert_allclose(value, 4.0)
    assert lines[0].startswith("averaged the weights of epoch 3 to step 43 (3 checkpoints)")


@pytest.mark.parametrize(
    "flag", ["--save-every", pytest.param("--validate-every", marks=pytest.mark.large)]
)
def test_a_negative_step_count_is_refused_naming_its_flag(flag, capsys):
    from keras_attention_recipes import translate

    with pytest.raises(SystemExit) as stopped:
        translate.main(["train", flag, "-1", "--output", "unused"])
    assert stopped.value.code == 2
    assert f"{flag} must be >= 0; got -1" in capsys.readouterr().err


def test_a_step_backup_falls_back_to_the_one_before_with_its_position_and_random_state(tmp_path):
    """`runs.resilient_backup(save_every=2)` on a tiny model with dropout (4
    steps an epoch): backups at steps 2 and 4 and the epoch's end; the
    latest truncated, `restore()` takes the one before (step 4 of epoch 1)
    with its dropout seeds, and says so."""
    import keras
    from keras_attention_recipes import runs

    def model():
        built = keras.Sequential([keras.Input((3,)), keras.layers.Dropout(0.5, seed=1)])
        built.add(keras.layers.Dense(1))
        built.compile("sgd", "mse")
        return built

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    backup, trained = str(tmp_path / "backup"), model()
    positions = []
    callback = runs.resilient_backup(backup, save_every=2, moves_fit=False)
    callback.saved.append(lambda *position: positions.append(position))
    seeds = []

    class Seeds(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):  # after the backup's
            seeds.append([np.array(v) for v in runs._seed_states(self.model)])

    trained.fit(x, x[:, :1], batch_size=4, epochs=1, verbose=0, callbacks=[callback, Seeds()])
    assert positions == [(0, 2), (0, 4), (1, 0)]
    assert runs.backup_position(backup) == (1, 0)
    latest = os.path.join(backup, "latest.weights.h5")
    with open(latest, "r+b") as handle:
        handle.truncate(os.path.getsize(latest) // 2)
    messages, resumed = [], model()
    restoring = runs.resilient_backup(backup, messages.append, moves_fit=False)
    restoring.set_model(resumed)
    assert restoring.restore() == (0, 4)
    assert "the last backup did not load" in messages[0]
    for ours, theirs in zip(runs._seed_states(resumed), seeds[3]):
        np.testing.assert_array_equal(np.array(ours), theirs)
    assert not all(np.array_equal(a, b) for a, b in zip(seeds[1], seeds[3]))


# -- damaged backups ---------------------------------------------------------------------
# A run of 2 epochs of 4 steps, backed up every 3 steps, stopped (as by kill
# -9) once its first epoch's backup is written: the latest backup is after
# epoch 1, the one before (`.bkp`) at step 3 of it.
DAMAGED_RUN = [*TINY, "--family", "rnn", "--epochs", "2", "--save-every", "3"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """The stopped run's folder; each test damages a copy."""
    from keras_attention_recipes import runs

    from tests.translation_helpers import Killed

    output = str(tmp_path_factory.mktemp("interrupted") / "run")
    made = runs.resilient_backup

    def stopped_after_epoch_1(*args, **kwargs):
        backup = made(*args, **kwargs)
        epoch_end = backup.on_epoch_end

        def on_epoch_end(epoch, logs=None):
            epoch_end(epoch, logs)
            raise Killed

        backup.on_epoch_end = on_epoch_end
        return backup

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runs, "resilient_backup", stopped_after_epoch_1)
        with pytest.raises(Killed):
            run("train", "--output", output, *DAMAGED_RUN)
    backup = os.path.join(output, "backup")
    assert runs.backup_position(backup) == (1, 0)
    assert json.load(open(os.path.join(backup, "training_metadata.json.bkp")))["steps"] == 3
    return output


def damaged_copy(interrupted, tmp_path, damage):
    """A copy of the stopped run with `damage(backup folder)` done."""
    import shutil

    output = tmp_path / "run"
    shutil.copytree(interrupted, output)
    damage(str(output / "backup"))
    return output


def flip_a_bit(path, offset=128):
    """Flip the bits of one byte of `path`, its size unchanged: at 128 in a
    `.weights.h5` file, its root group's local heap (h5py: RuntimeError)."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ 0xFF]))


def truncate(path):
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) // 2)


def write_record(text, name="training_metadata.json"):
    def damage(backup):
        with open(os.path.join(backup, name), "w") as handle:
            handle.write(text)

    return damage


LATEST_DAMAGED = {
    "weights-bit-flip": ("latest.weights.h5", lambda b: flip_a_bit(f"{b}/latest.weights.h5")),
    "random-truncated": ("random.npz", lambda b: truncate(f"{b}/random.npz")),
    "record-not-json": ("training_metadata.json", write_record('{"epoch": 1,')),
    "record-string-epoch": ("training_metadata.json", write_record('{"epoch": "1", "steps": 0}')),
    "record-negative-epoch": ("training_metadata.json", write_record('{"epoch": -1, "steps": 0}')),
    "record-steps-beyond-the-epoch": (
        "training_metadata.json",
        write_record('{"epoch": 1, "batch": 999, "steps": 1000}'),
    ),
}


# `make test` resumes from one damaged file (HDF5 weights); `make test-large`
# from the others (the JSON record's among them).
DAMAGED_IN_MAKE_TEST = ("weights-bit-flip",)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=() if case in DAMAGED_IN_MAKE_TEST else pytest.mark.large)
        for case in LATEST_DAMAGED
    ],
)
def test_a_damaged_file_of_the_latest_backup_resumes_from_the_one_before(
    interrupted, tmp_path, case
):
    """A bit flipped in the weights (h5py's RuntimeError), a truncated
    random state (BadZipFile), a record that does not parse, of the wrong
    kind or out of range (a FailedPreconditionError in `fit`): the run
    says which file did not load and resumes from the backup before, all
    three of its files (the optimizer's update count is the uninterrupted
    run's: not the latest weights with the earlier position)."""
    name, damage = LATEST_DAMAGED[case]
    output = damaged_copy(interrupted, tmp_path, damage)
    log = run("train", "--output", str(output), *DAMAGED_RUN)
    assert f"the last backup did not load: {output / 'backup' / name}" in log, log
    assert "resuming from the one before it, at step 3 of epoch 1" in log, log
    assert os.path.exists(output / "model.keras") and not os.path.exists(output / "backup")
    assert iterations(output / "final.weights.h5") == 8  # 2 epochs of 4 steps


BOTH_DAMAGED = {
    "weights-truncated": (
        lambda b: (truncate(f"{b}/latest.weights.h5"), truncate(f"{b}/latest.weights.h5.bkp")),
        ("latest.weights.h5", "latest.weights.h5.bkp"),
    ),
    "record-and-random": (
        lambda b: (write_record("[]")(b), truncate(f"{b}/random.npz.bkp")),
        ("training_metadata.json", "random.npz.bkp"),
    ),
}


@pytest.mark.parametrize("case", list(BOTH_DAMAGED))
def test_both_backups_damaged_is_one_error_line_naming_the_files(
    interrupted, tmp_path, capsys, case
):
    """Neither backup loads: one `error:` line (exit status 2, no
    traceback) naming the damaged file of each and what to do; the files
    are left as they were."""
    from tests.translation_helpers import cli

    damage, names = BOTH_DAMAGED[case]
    output = damaged_copy(interrupted, tmp_path, damage)
    backup = output / "backup"
    before = {name: (backup / name).read_bytes() for name in os.listdir(backup)}
    status, _, err = cli(capsys, "train", "--output", str(output), *DAMAGED_RUN)
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: no backup in {backup} loads: {backup / names[0]} "), err
    assert f"; {backup / names[1]} " in err, err
    assert err.endswith(
        f": delete {backup} to train again from the first epoch, or start the run anew with "
        "--overwrite\n"
    ), err
    assert {name: (backup / name).read_bytes() for name in os.listdir(backup)} == before


def test_a_backup_whose_optimizer_state_does_not_load_falls_back(tmp_path):
    """Keras only warns when a weights file's optimizer variables do not fit
    the optimizer (and goes on with a fresh one): a backup without them is
    damaged, and the one before is restored, optimizer state included."""
    import h5py
    import keras
    from keras_attention_recipes import runs

    def model():
        built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        built.compile("adam", "mse")
        return built

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    backup = str(tmp_path / "backup")
    callback = runs.resilient_backup(backup, moves_fit=False)
    model().fit(x, x[:, :1], batch_size=4, epochs=2, verbose=0, callbacks=[callback])
    with h5py.File(os.path.join(backup, "latest.weights.h5"), "r+") as handle:
        del handle["optimizer/vars/1"]
    messages, resumed = [], model()
    restoring = runs.resilient_backup(backup, messages.append, moves_fit=False)
    restoring.set_model(resumed)
    assert restoring.restore() == (1, 0)
    assert messages[0].startswith(
        f"the last backup did not load: {backup}/latest.weights.h5 does not load (ValueError: "
    ), messages
    assert int(resumed.optimizer.iterations) == 4
    # the one before is in place of the latest: a second resume finds it whole
    again = runs.resilient_backup(backup, messages.append, moves_fit=False)
    again.set_model(model())
    assert again.restore() == (1, 0) and len(messages) == 1


def test_averaging_a_damaged_checkpoint_is_one_error_naming_it(tmp_path):
    """`average` (and `train --average-last`) over a checkpoint with a
    flipped bit: a `ValueError` naming it (one `error:` line), not h5py's
    RuntimeError."""
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    damaged = str(tmp_path / "epoch-0001.weights.h5")
    model.save_weights(damaged)
    flip_a_bit(damaged)
    with pytest.raises(ValueError, match=f"^{damaged} does not load into the run's model"):
        averaging.load_checkpoint(model, damaged)


def test_a_model_keras_with_a_flipped_bit_is_one_error_line(trained, tmp_path, capsys):
    """A bit flipped in `model.keras`'s `config.json` (zipfile's BadZipFile,
    its CRC) when `translate` loads it: one `error:` line naming the file,
    as for a truncated one."""
    import shutil
    import struct
    import zipfile

    from tests.translation_helpers import cli

    output = tmp_path / "run"
    shutil.copytree(trained[0], output)
    path = output / "model.keras"
    with zipfile.ZipFile(path) as archive:
        member = archive.getinfo("config.json")
    with open(path, "rb") as handle:  # the member's data: after its local header
        handle.seek(member.header_offset + 26)
        start = member.header_offset + 30 + sum(struct.unpack("<HH", handle.read(4)))
    flip_a_bit(path, start + member.compress_size // 2)
    status, _, err = cli(capsys, "translate", "--output", str(output), "Hallo.")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {path} does not load (") and "it is damaged" in err, err
