"""`train --time-budget` (`recipes/translation/budget.py`): on a scripted
clock, training ends at the step after which one more step and the
epoch's end would overrun the budget, inside an epoch or at its end, so
that it ends within a step of the budget; the cosine's end follows the
plan in steps; the planned cosine equals Keras's `CosineDecay` for the
same end; an interrupted run resumes with the time it had spent; and a
real tiny run records what fit."""

import json
import os
import re

import keras
import numpy as np
import pytest
from keras_attention_recipes.translation import budget
from keras_attention_recipes.translation.settings import DING, MAX_EPOCHS

from keras_attention.seq2seq import PlannedCosineDecay
from tests.translation_helpers import TINY, run


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class FakeModel:
    stop_training = False


def drive(callback, clock, epoch_seconds, steps_per_epoch, end_seconds=0.0):
    """Run `callback` through `fit`'s calls, each step taking its epoch's
    seconds / steps and each epoch's end (validation) `end_seconds`, until
    it stops training (or the epochs run out)."""
    model = FakeModel()
    callback.set_model(model)
    callback.on_train_begin()
    for epoch, seconds in enumerate(epoch_seconds):
        callback.on_epoch_begin(epoch)
        for step in range(steps_per_epoch):
            clock.now += seconds / steps_per_epoch
            callback.on_train_batch_end(step)
            if model.stop_training:
                break
        clock.now += end_seconds
        callback.on_epoch_end(epoch, {"val_loss": 3.0})
        if model.stop_training:
            break
    return callback


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budget.time, "perf_counter", clock)
    return clock


def test_training_ends_within_a_step_of_the_budget_inside_an_epoch(tmp_path, clock):
    """Epochs of 10 steps of 3 s and 2 s of validation (32 s), a budget of
    110 s: after 3 epochs (96 s) 14 s are left, room for 4 steps and the
    epoch's end (12 + 2); a fifth step would end at 113 s."""
    schedule = PlannedCosineDecay(1e-3, 5, total_steps=500)
    lines = []
    callback = budget.TimeBudget(110, 10, 50, str(tmp_path), schedule=schedule, log=lines.append)
    drive(callback, clock, [30.0] * 50, 10, end_seconds=2.0)
    assert callback.record(110 / 60) == {
        "minutes": 110 / 60,
        "epochs": 4,
        "steps": 34,
        "epoch_steps": 10,
        "seconds": 110.0,
        "ended_by": "time budget (mid-epoch)",
    }
    # planned after the first epoch: 78 s left, 2 whole epochs (64 s) and 4 steps
    assert lines == [
        "time budget 1.8 min: an epoch takes 32s (2s of it validating), so 3.4 epochs "
        "(34 steps) fit"
    ]
    assert float(keras.ops.convert_to_numpy(schedule.total_steps)) == 34.0
    saved = json.load(open(tmp_path / budget.RECORD))
    assert saved["epoch_seconds"] == [32.0, 32.0, 32.0, 14.0]
    assert (saved["step_seconds"], saved["end_seconds"]) == (3.0, 2.0)
    # 96 s of whole epochs leave 4 s: no step and its end (5 s) fit, so the
    # third epoch's end is the last
    at_an_end = drive(budget.TimeBudget(100, 10, 50, str(tmp_path)), clock, [30.0] * 50, 10, 2.0)
    record = at_an_end.record(100 / 60)
    assert (record["epochs"], record["steps"], record["seconds"]) == (3, 30, 96.0)
    assert record["ended_by"] == "time budget"


def test_the_old_rule_s_lost_half_budget_is_spent(tmp_path, clock):
    """An epoch of 248 s and a budget of 480 s: a whole-epoch rule stopped
    after the first (1 of them fit); by steps the run trains into the
    second epoch until the budget's end, less its validation."""
    callback = budget.TimeBudget(480, 100, 10, str(tmp_path))
    drive(callback, clock, [240.0] * 10, 100, end_seconds=8.0)
    record = callback.record(8)
    # 248 s, then 232 s left: 93 steps of 2.4 s (223.2) and the 8 s end fit, a 94th would not
    assert (record["epochs"], record["steps"]) == (2, 193)
    assert 480 - 2.4 < record["seconds"] <= 480


def test_averaging_takes_at_most_the_second_half_of_the_epochs_that_ran(tmp_path, clock):
    # 100 s at 30 s an epoch: 3 epochs and 3 steps of a fourth ran, so two are half of them.
    four = drive(budget.TimeBudget(100, 10, 50, str(tmp_path)), clock, [30.0] * 50, 10)
    assert len(four.epoch_seconds) == 4 and four.steps == 33
    assert [four.epochs_to_average(n) for n in (2, 5)] == [2, 2]
    eleven = drive(budget.TimeBudget(110, 10, 50, str(tmp_path)), clock, [10.0] * 50, 10)
    assert len(eleven.epoch_seconds) == 11
    assert [eleven.epochs_to_average(n) for n in (3, 5, 20)] == [3, 5, 5]


def test_an_epoch_longer_than_the_budget_ends_at_the_last_step_that_fits(tmp_path, clock):
    callback = drive(budget.TimeBudget(100, 10, 50, str(tmp_path)), clock, [150.0], 10)
    record = callback.record(100 / 60)
    # steps of 15 s: after the 6th (90 s) a 7th would end at 105 s
    assert record["epochs"] == 1 and record["steps"] == 6 and record["seconds"] == 90.0
    assert record["ended_by"] == "time budget (mid-epoch)"
    # before a step is measured (the first may trace), only an overrun stops
    slow = drive(budget.TimeBudget(100, 10, 50, str(tmp_path)), clock, [1500.0], 10)
    assert slow.record(1)["steps"] == 1


def test_the_epochs_ceiling_and_a_resumed_run_s_spent_time(tmp_path, clock):
    fast = drive(budget.TimeBudget(100, 4, 3, str(tmp_path)), clock, [10.0] * 3, 4)
    assert fast.record(1)["epochs"] == 3 and fast.record(1)["ended_by"] == "--epochs"
    # A run interrupted after 2 epochs of 40 s (its record has a third, and
    # no step rates: a record from before them) resumes with 80 s of its 130
    # spent: 50 s are left, an epoch and 1 step of the next at 10 s a step.
    (tmp_path / budget.RECORD).write_text(json.dumps({"epoch_seconds": [40.0, 40.0, 40.0]}))
    spent = budget.spent(str(tmp_path), 2)
    assert spent == {"epoch_seconds": [40.0, 40.0], "epochs": [{}, {}]}
    schedule = PlannedCosineDecay(1e-3, 0, total_steps=200)  # as build_model makes it
    resumed = budget.TimeBudget(130, 4, 50, str(tmp_path), spent, schedule=schedule)
    assert not resumed.exhausted()
    resumed.set_model(FakeModel())
    resumed.on_train_begin()  # resumed: the plan of the steps done, 8 + 4 + 1
    assert float(keras.ops.convert_to_numpy(schedule.total_steps)) == 13.0
    drive(resumed, clock, [15.0] * 10, 4)
    # 3.75 s a step now: 80 + 3 x 15 = 125, then one more step (128.75)
    assert resumed.record(1)["epochs"] == 6 and resumed.record(1)["steps"] == 21
    assert float(keras.ops.convert_to_numpy(schedule.total_steps)) == 21.0
    record = json.load(open(tmp_path / budget.RECORD))
    assert record["epochs"] == [{}, {}] + [{"val_loss": 3.0}] * 4
    assert record["step_seconds"] == 3.75
    assert budget.spent(str(tmp_path / "none"), 2) == {"epoch_seconds": [], "epochs": []}
    # A run stopped by its budget (130 s), then killed while saving: no more training.
    done = budget.spent(str(tmp_path), 6)
    assert done["step_seconds"] == 3.75
    assert budget.TimeBudget(130, 4, 50, str(tmp_path), done).exhausted()
    # A kill between the backup and the record lost the last epoch's entry.
    lost = budget.spent(str(tmp_path), 7)
    assert lost["epoch_seconds"][-2:] == [3.75, 3.75] and len(lost["epochs"]) == 7


def test_a_run_resumed_mid_epoch_counts_the_epoch_s_steps_and_seconds_before(tmp_path, clock):
    """With --save-every, each backup mid-epoch records the epoch's steps
    and seconds so far: resumed after a kill, an epoch longer than the
    budget still ends at the last step the whole budget has room for."""
    first = budget.TimeBudget(100, 10, 5, str(tmp_path))
    first.set_model(FakeModel())
    first.on_train_begin()
    first.on_epoch_begin(0)
    for step in range(5):  # 15 s a step; a backup after 4 steps, killed after 5
        clock.now += 15.0
        first.on_train_batch_end(step)
        if step == 3:
            first.backed_up(0, 4)
    spent = budget.spent(str(tmp_path), 0, 4)
    assert spent["partial"] == {"steps": 4, "seconds": 60.0}
    assert budget.spent(str(tmp_path), 0, 2)["partial"] == {"steps": 2, "seconds": 30.0}
    resumed = budget.TimeBudget(100, 10, 5, str(tmp_path), spent)
    model = FakeModel()
    resumed.set_model(model)
    resumed.on_train_begin()
    resumed.on_epoch_begin(0)
    for step in range(6):  # the epoch's steps 5-10
        clock.now += 15.0
        resumed.on_train_batch_end(step)
        if model.stop_training:
            break
    resumed.on_epoch_end(0, {"val_loss": 3.0})
    # 60 s before the kill, then 2 steps: a 7th would end at 105 s.
    assert resumed.record(100 / 60) == {
        "minutes": 100 / 60,
        "epochs": 1,
        "steps": 6,
        "epoch_steps": 10,
        "seconds": 90.0,
        "ended_by": "time budget (mid-epoch)",
    }
    assert "partial" not in json.load(open(tmp_path / budget.RECORD))


def test_the_planned_cosine_is_keras_s_cosine_decay_for_the_same_end():
    planned = PlannedCosineDecay(2e-3, 10, total_steps=1000)
    reference = keras.optimizers.schedules.CosineDecay(
        0.0, 990, warmup_target=2e-3, warmup_steps=10
    )
    steps = [0, 1, 5, 10, 11, 200, 500, 989, 1000, 1200]
    got = [float(keras.ops.convert_to_numpy(planned(s))) for s in steps]
    expected = [float(keras.ops.convert_to_numpy(reference(s))) for s in steps]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-9)
    planned.total_steps.assign(500.0)  # the plan moved: the cosine ends at step 500
    assert float(keras.ops.convert_to_numpy(planned(500))) == pytest.approx(0.0, abs=1e-9)
    restored = PlannedCosineDecay.from_config(planned.get_config())
    moved = float(keras.ops.convert_to_numpy(planned(250)))
    assert moved == pytest.approx(1e-3 * (1 + np.cos(np.pi * 240 / 490)), rel=1e-5)
    assert float(keras.ops.convert_to_numpy(restored(250))) == pytest.approx(moved, rel=1e-6)


@pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing")
def test_a_run_with_a_time_budget_records_what_fit(tmp_path):
    flags = ("--family", "rnn", "--epochs", "200", "--time-budget", "0.15")
    log = run(
        "train",
        "--output",
        str(tmp_path),
        *flags,
        "--decay",
        "cosine",
        "--average-last",
        "20",
        *TINY,
    )
    run_record = json.load(open(tmp_path / "config.json"))
    record = run_record["time_budget"]
    assert 1 <= record["epochs"] < 200 and record["ended_by"].startswith("time budget")
    # (When it stops, to the step, the scripted-clock tests above check: a
    # wall-clock bound here would fail on a loaded machine.)
    # The first plan counts the first epoch's tracing: later epochs are faster.
    assert re.search(r"an epoch takes \d+s \(\d+s of it validating\), so [\d.]+ epochs", log)
    assert "for 0.15 minutes (at most 200 epochs)" in log
    assert re.search(r"trained in \d+s \(0\.\d of the budget's 0.15 minutes: [\d.]+ epochs", log)
    # Averaged: the second half of the epochs that ran, not the 20 asked for.
    half = record["epochs"] // 2
    assert f"{record['epochs']} epochs fit the time budget, so the last {half}" in log
    averaged = run_record.get("averaged", {})
    epochs, steps = record["epochs"], record["steps"]
    if steps < epochs * record["epoch_steps"]:  # the last epoch cut short: a step checkpoint
        assert averaged.get("steps", []) == ([steps] if half >= 2 else [])
        whole = list(range(epochs - half + 1, epochs))
    else:
        whole = list(range(epochs - half + 1, epochs + 1))
    assert averaged.get("epochs", []) == (whole if half >= 2 else [])


@pytest.mark.large(
    reason=(
        "trains a run to show 0 turns the budget off; "
        "test_a_run_with_a_time_budget_records_what_fit trains with one in `make test`"
    )
)
def test_a_time_budget_must_be_0_or_more_and_0_turns_it_off(capsys):
    from keras_attention_recipes import translate

    with pytest.raises(SystemExit) as exit_info:
        translate.main(["train", "--time-budget", "-1", "--output", "unused"])
    assert exit_info.value.code == 2
    assert "--time-budget must be >= 0; got -1.0" in capsys.readouterr().err
    demo = translate.check(translate.parser().parse_args(["demo", "--time-budget", "0"]))
    assert demo.time_budget == 0 and demo.epochs == 10  # --epochs decide: their default
    budgeted = translate.check(translate.parser().parse_args(["train", "--time-budget", "8"]))
    assert budgeted.epochs == MAX_EPOCHS  # the budget alone ends training
    given = ["train", "--time-budget", "8", "--epochs", "12"]
    assert translate.check(translate.parser().parse_args(given)).epochs == 12


def test_a_time_budget_is_refused_for_a_cluster_s_workers(monkeypatch, capsys):
    from keras_attention_recipes import translate

    cluster = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cluster))
    with pytest.raises(SystemExit) as exit_info:
        translate.main(["train", "--time-budget", "5", "--output", "unused"])
    assert exit_info.value.code == 2
    assert "--time-budget trains in one process" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text", ["{not json", "[]", '{"epoch_seconds": "x"}', '{"epoch_seconds": [1], "partial": 5}']
)
def test_a_damaged_budget_record_is_said_and_the_budget_counts_from_now(tmp_path, text):
    """A damaged `budget.json` was dropped without a word (and a `partial`
    that is no object raised AttributeError): the resumed run is told that
    the minutes spent before are not known."""
    (tmp_path / budget.RECORD).write_text(text)
    lines = []
    empty = {"epoch_seconds": [], "epochs": []}
    assert budget.spent(str(tmp_path), 1, 2, log=lines.append) == empty
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{tmp_path / budget.RECORD} (the time budget's record) is damaged")
    assert lines[0].endswith("so --time-budget counts from now")
