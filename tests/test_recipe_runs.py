"""What the recipes' training does when it is interrupted (`recipes/runs.py`):
Ctrl-C is taken only between two steps of `fit`, never inside a step or a
backup's write, and a backup that a kill truncated falls back to the epoch
before. Tiny Dense models on 16 rows: each fit takes well under a second."""

import os
import signal
import threading

import numpy as np
import pytest
from keras_attention_recipes.runs import CTRL_C_HELD, ctrl_c_between_steps, resilient_backup

X = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
Y = X.sum(1, keepdims=True)


def tiny_model(ctrl_c_at_steps=(), run_eagerly=False, ctrl_c_at_validation_steps=()):
    """A compiled one-unit regression; its layer sends this process a SIGINT
    in the middle of each training step whose index is in `ctrl_c_at_steps`,
    and of each validation step in `ctrl_c_at_validation_steps` (each
    counted from 0 over the whole fit, in the layer class's `calls`;
    `run_eagerly` runs the call in Python)."""
    import keras
    import tensorflow as tf

    class CtrlCInside(keras.layers.Layer):
        calls = {True: 0, False: 0}

        def call(self, inputs, training=False):
            if not tf.executing_eagerly():  # building the model: no step
                return inputs
            at = ctrl_c_at_steps if training else ctrl_c_at_validation_steps
            for _ in range(at.count(CtrlCInside.calls[bool(training)])):
                signal.raise_signal(signal.SIGINT)
            CtrlCInside.calls[bool(training)] += 1
            return inputs

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), CtrlCInside(), keras.layers.Dense(1)])
    model.compile("sgd", "mse", run_eagerly=run_eagerly)
    return model


def test_a_ctrl_c_inside_a_step_is_raised_once_the_step_is_done(capfd):
    model = tiny_model(ctrl_c_at_steps=[5], run_eagerly=True)
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            model.fit(X, Y, batch_size=4, epochs=3, verbose=0, callbacks=[ctrl_c])
    assert int(model.optimizer.iterations) == 6  # steps 0-5 done, step 5 whole
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert capfd.readouterr().err.count(CTRL_C_HELD + "\n") == 1  # said when it came


def test_a_ctrl_c_inside_a_validation_step_is_raised_before_the_next_one():
    """Validation on 8 rows in batches of 4: the Ctrl-C in epoch 1's first
    validation step ends the fit before its second (the epoch unfinished)."""
    model = tiny_model(ctrl_c_at_validation_steps=[0], run_eagerly=True)
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            model.fit(
                X, Y, validation_data=(X[:8], Y[:8]), batch_size=4, epochs=3, verbose=0,
                callbacks=[ctrl_c],
            )  # fmt: skip
    assert type(model.layers[0]).calls == {True: 4, False: 1}


def test_without_the_block_the_same_ctrl_c_breaks_the_step_off():
    """The reference for the test above: Python's own handler raises in the
    middle of step 5, before its update."""
    model = tiny_model(ctrl_c_at_steps=[5], run_eagerly=True)
    with pytest.raises(KeyboardInterrupt):
        model.fit(X, Y, batch_size=4, epochs=3, verbose=0)
    assert int(model.optimizer.iterations) == 5


def test_a_second_ctrl_c_is_raised_at_once():
    model = tiny_model(ctrl_c_at_steps=[5, 5], run_eagerly=True)
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            model.fit(X, Y, batch_size=4, epochs=3, verbose=0, callbacks=[ctrl_c])
    assert int(model.optimizer.iterations) == 5
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_while_an_epoch_is_backed_up_keeps_that_epoch(tmp_path):
    """The SIGINT comes at the end of epoch 2, before the backup is written:
    the backup is written whole, the interrupt comes at epoch 3's start,
    and a re-run resumes after epoch 2."""
    import keras
    from keras_attention_recipes.runs import backup_position

    class CtrlCAtEpochEnd(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                signal.raise_signal(signal.SIGINT)

    backup = str(tmp_path / "backup")
    model = tiny_model()
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            callbacks = [CtrlCAtEpochEnd(), resilient_backup(backup), ctrl_c]
            model.fit(X, Y, batch_size=4, epochs=5, verbose=0, callbacks=callbacks)
    assert backup_position(backup)[0] == 2
    history = tiny_model().fit(
        X, Y, batch_size=4, epochs=5, verbose=0, callbacks=[resilient_backup(backup)]
    )
    assert history.epoch == [2, 3, 4]


def test_a_ctrl_c_after_the_last_boundary_is_raised_when_the_block_ends():
    import keras

    class CtrlCAtTheEnd(keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            signal.raise_signal(signal.SIGINT)

    model = tiny_model()
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            model.fit(X, Y, batch_size=4, epochs=2, verbose=0, callbacks=[CtrlCAtTheEnd(), ctrl_c])
            finished.append(int(model.optimizer.iterations))
    assert finished == [8]
    with ctrl_c_between_steps() as ctrl_c:  # no Ctrl-C: nothing raised
        model.fit(X, Y, batch_size=4, epochs=1, verbose=0, callbacks=[ctrl_c])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.fixture
def sigint_handler():
    """Sets the SIGINT handler for the test (`sigint_handler(handler)`), and
    puts Python's back after it."""
    yield lambda handler: signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def test_where_ctrl_c_is_ignored_the_block_leaves_it_ignored(sigint_handler):
    """A job started in the background without job control ignores SIGINT
    (`SIG_IGN`): so it stays, and the fit runs to its end."""
    model = tiny_model(ctrl_c_at_steps=[2], run_eagerly=True)
    sigint_handler(signal.SIG_IGN)
    with ctrl_c_between_steps() as ctrl_c:
        model.fit(X, Y, batch_size=4, epochs=2, verbose=0, callbacks=[ctrl_c])
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert int(model.optimizer.iterations) == 8


def test_where_ctrl_c_was_the_system_s_a_second_one_raises_and_it_is_restored(sigint_handler):
    """Python's handler replaced by the system's (`SIG_DFL`, which kills
    the process): the second Ctrl-C raises `KeyboardInterrupt` instead."""
    model = tiny_model(ctrl_c_at_steps=[5, 5], run_eagerly=True)
    sigint_handler(signal.SIG_DFL)
    with pytest.raises(KeyboardInterrupt):
        with ctrl_c_between_steps() as ctrl_c:
            model.fit(X, Y, batch_size=4, epochs=3, verbose=0, callbacks=[ctrl_c])
    assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    assert int(model.optimizer.iterations) == 5


def test_outside_the_main_thread_the_block_leaves_signals_alone():
    """`signal.signal` works in the main thread only: in another thread
    (a user's training thread, say) the block yields its callback and
    changes nothing."""
    model, errors = tiny_model(), []

    def train():
        try:
            with ctrl_c_between_steps() as ctrl_c:
                model.fit(X, Y, batch_size=4, epochs=1, verbose=0, callbacks=[ctrl_c])
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    assert errors == [] and int(model.optimizer.iterations) == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_truncated_backup_falls_back_to_the_epoch_before(tmp_path):
    """A kill while the latest backup was written leaves a truncated file:
    training resumes from the previous epoch's backup and says so."""
    import keras

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = x.sum(1, keepdims=True)

    def model():
        keras.utils.set_random_seed(0)
        built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        built.compile("sgd", "mse")
        return built

    class StopAfterTwoEpochs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt

    backup = str(tmp_path / "backup")
    with pytest.raises(KeyboardInterrupt):
        model().fit(
            x, y, epochs=5, verbose=0, callbacks=[resilient_backup(backup), StopAfterTwoEpochs()]
        )
    latest = os.path.join(backup, "latest.weights.h5")
    assert os.path.exists(latest + ".bkp")  # the epoch before is kept
    with open(latest, "r+b") as handle:
        handle.truncate(os.path.getsize(latest) // 2)
    messages = []
    history = model().fit(
        x, y, epochs=5, verbose=0, callbacks=[resilient_backup(backup, messages.append)]
    )
    assert messages and "the last backup did not load" in messages[0]
    assert history.epoch == [1, 2, 3, 4]  # epoch 0 restored, epoch 1 trained again
