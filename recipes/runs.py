"""The recipes' shared plumbing (translation, digits, the bottleneck sweep,
the GPU check), in one import: what their command lines share (`UsageError`,
`flag`, `check_number`, `HelpFormatter`, `command_errors`,
`import_tensorflow_quietly`, the library's attention names, the checks of
`--output` and `--export-dir`) and what training shares (`resilient_backup`,
`ctrl_c_between_steps`). Below it: `run_files` (files written whole through
a temporary renamed into place, `replacing`; JSON records read back,
`read_json`) and `run_folders` (run folders: `run.json` and `claim`,
`delete_run`, the lock `locked`, `wait_for_run`), imported by their own
names. It imports no recipe and nothing heavier than the standard library.

Training backs up each epoch (`resilient_backup`) and takes Ctrl-C only
between two steps (`ctrl_c_between_steps`), so an interrupted run resumes.
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import shutil
import signal
import sys
import threading
import zipfile

from .run_files import read_json, replacing, write_atomically, write_json_atomically
from .run_folders import (
    RUN_FILE,
    enclosing_run,
    is_member_folder,
)

CTRL_C_HELD = "Ctrl-C: stopping before the next step (Ctrl-C again: at once)"


# The library's attention names (`keras_attention.registry.names()`), copied
# so that a command line is parsed before Keras and TensorFlow are imported
# (`--help` and a mistyped flag answer at once);
# tests/test_translation_cli.py::test_command_line_tables_are_the_librarys
# checks the copy.
LIBRARY_ATTENTION = ("dot", "scaled_dot", "general", "additive", "concat", "local", "multihead")


class UsageError(ValueError):
    """A user mistake: printed as `error: ...`, exit status 2."""


def flag(name):
    """The command-line flag of a setting: `num_heads` -> `--num-heads`."""
    return f"--{name.replace('_', '-')}"


def check_number(name, value, integer=False, low=None, high=None, low_included=True):
    """Raise `UsageError` unless `value` is a finite number (an integer when
    `integer`) with `low <= value < high` (`low < value` unless
    `low_included`); `name` is the setting (named by its flag)."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise UsageError(f"{flag(name)} must be {kind}; got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{flag(name)} must be a finite number; got {value}")
    if high is not None and not low <= value < high:
        raise UsageError(f"{flag(name)} must be in [{low}, {high}); got {value}")
    if low is not None and (value < low or (value == low and not low_included)):
        raise UsageError(f"{flag(name)} must be {'>=' if low_included else '>'} {low}; got {value}")


def unloadable_model(path, error, remedy):
    """The one-line `UsageError` for a `.keras` file at `path` that Keras
    would not load (`error`): a file refused by Keras's `safe_mode` holds
    Python code, which the recipes never save, so it may come from someone
    else and is said to be so; any other is damaged. `remedy` says what to
    do (`train again with --overwrite`)."""
    text = str(error)
    if "safe_mode" in text:
        return UsageError(
            f"{path} holds Python code (a Lambda layer or a function) that Keras does not load "
            "by default (safe_mode): the recipes never save code in a model, so the file may "
            f"come from someone else; {remedy} (load it yourself with safe_mode=False only if "
            "you trust who made it)"
        )
    first = text.splitlines()[0] if text.strip() else type(error).__name__
    return UsageError(f"{path} does not load ({first}): it is damaged; {remedy}")


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every flag's default (said in
    the help text where "None" would not tell it, and left out for switches)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == []:
            return action.help  # "not given", a switch off, no text
        if "default:" in action.help:
            return action.help
        return super()._get_help_string(action)


@contextlib.contextmanager
def stderr_silenced():
    """File descriptor 2 sent to /dev/null inside the block (C++ libraries
    write there directly, before any Python logging), restored after it."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def command_errors(interrupted, errors=(ValueError, OSError)):
    """The end of a command line: inside the block, one of `errors` (a user
    mistake, a file that cannot be read or written) becomes one `error:`
    line on stderr and exit status 2, and Ctrl-C (`KeyboardInterrupt`) the
    message `interrupted()` returns (exit status 1), never a traceback."""
    try:
        yield
    except errors as error:
        text = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"error: {text}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(interrupted())


@contextlib.contextmanager
def ctrl_c_between_steps():
    """Inside the block, Ctrl-C (SIGINT) is held instead of raising
    `KeyboardInterrupt` wherever the main thread happens to be: it says so
    on standard error (`CTRL_C_HELD`), and the Keras callback the block
    yields raises it when `fit`'s next step starts, training or validation.
    Raised in the middle of a TensorFlow trace it was seen to abort the
    process (`free(): invalid next size`, exit status -6), and in the
    middle of writing a backup to leave one that does not load. A second
    Ctrl-C raises at once; one held past `fit`'s last step raises when the
    block ends. Where Ctrl-C is ignored (`SIG_IGN`), or outside the main
    thread, the block changes nothing."""
    import keras

    held = []

    class RaiseHeldCtrlC(keras.callbacks.Callback):
        def _raise_if_held(self, *args, **kwargs):
            if held:
                raise KeyboardInterrupt

        # Step starts only: a batch-end hook turns Keras's asynchronous
        # dispatch of batch ends off.
        on_train_batch_begin = on_test_batch_begin = _raise_if_held

    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is signal.SIG_IGN:
        yield RaiseHeldCtrlC()
        return
    # What a second Ctrl-C does: the handler before the block where it is
    # Python's (it raises), `KeyboardInterrupt` where it was the system's.
    at_once = previous if callable(previous) else signal.default_int_handler

    def hold(signum, frame):
        held.append(signum)
        os.write(2, (b"\n" if os.isatty(2) else b"") + CTRL_C_HELD.encode() + b"\n")
        signal.signal(signal.SIGINT, at_once)

    signal.signal(signal.SIGINT, hold)
    try:
        yield RaiseHeldCtrlC()
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else at_once)
    if held:
        raise KeyboardInterrupt


# What reading a damaged file of a run raises: h5py's `OSError`, `RuntimeError`
# or `KeyError` (a truncated file, a flipped bit in its metadata), zipfile's
# `BadZipFile` (a `.keras` or `.npz` file, its CRC), NumPy's `EOFError`,
# Keras's `ValueError` or `TypeError` (a config that does not fit); caught
# where a run's model, checkpoint or backup is loaded, and said naming the file.
DAMAGED_FILE_ERRORS = (
    OSError, ValueError, RuntimeError, KeyError, TypeError, EOFError, zipfile.BadZipFile
)  # fmt: skip

# The files of one backup (Keras's two, the recipes' random state); the one
# before it has the same names ending in `.bkp`.
BACKUP_FILES = ("latest.weights.h5", "random.npz", "training_metadata.json")
BACKUPS = ("", ".bkp")  # the latest backup's suffix, then the one before's


def backup_files(directory, suffix=""):
    """`(weights, random state, record)` paths of the backup in `directory`
    whose names end in `suffix` (`BACKUPS`)."""
    return tuple(os.path.join(directory, name + suffix) for name in BACKUP_FILES)


def _recorded_position(directory, suffix="", steps_per_epoch=None):
    """`(epoch, steps)` that the record of the backup ending in `suffix`
    holds; None when there is no such backup. A backup without its weights
    or its record, or a record that does not parse, holds no integers,
    a number below 0 or (given `steps_per_epoch`) more steps than an
    epoch has, raises `ValueError` naming the file: it is damaged."""
    weights, _, record = backup_files(directory, suffix)
    if not os.path.exists(weights) and not os.path.exists(record):
        return None
    for path in (weights, record):
        if not os.path.exists(path):
            raise ValueError(f"{path} is missing")
    saved = read_json(record, "the backup's epoch", {"epoch": int, "steps": int})
    epoch, steps = saved.get("epoch", 0), saved.get("steps", 0)
    if epoch < 0 or steps < 0:
        raise ValueError(
            f"{record} (the backup's epoch) holds epoch {epoch} and steps {steps} (expected "
            "numbers from 0): it is damaged"
        )
    if steps_per_epoch is not None and steps > steps_per_epoch:
        # Batching is not part of a run's record: a run may resume with another.
        raise ValueError(
            f"{record} (the backup's epoch) holds step {steps} of epoch {epoch + 1}, more than "
            f"the {steps_per_epoch} batches an epoch has now: resume with the --batch-size "
            "and --batch-tokens it was interrupted with, or it is damaged"
        )
    return epoch, steps


def _unusable(directory, problems):
    """The one-line `ValueError` for a backup folder none of whose backups
    loads (`problems`: why each did not, naming its file)."""
    said = "; ".join(problems) + ("" if len(problems) > 1 else ", and there is no earlier one")
    return ValueError(
        f"no backup in {directory} loads: {said}: delete {directory} to train again from the "
        "first epoch, or start the run anew with --overwrite"
    )


def backup_position(directory, steps_per_epoch=None):
    """`(epoch, steps)` of the backup in `directory` that training resumes
    from: the epochs done, and the steps done of the next one (0 at an
    epoch end); `(0, 0)` without a backup. That is the latest backup's, or
    the one before's when the latest's record is damaged
    (`_recorded_position`); a `ValueError` naming the files when neither's
    reads. `restore()` of `resilient_backup` also loads the files, and may
    fall back further."""
    problems = []
    for suffix in BACKUPS:
        try:
            position = _recorded_position(directory, suffix, steps_per_epoch)
        except ValueError as error:
            problems.append(str(error).splitlines()[0])
            continue
        if position is not None:
            return position
    if problems:
        raise _unusable(directory, problems)
    return 0, 0


def resilient_backup(
    directory, log=print, save_every=0, position=(0, 0), moves_fit=True, steps_per_epoch=None
):
    """`BackupAndRestore` that keeps the two last backups and, when a file of
    the latest does not load (a kill while it was written leaves a
    truncated file, a disk a flipped bit), says so naming it and resumes
    from the one before, whose files are then put in place of the
    latest's; a one-line `ValueError` naming the files and what to do when
    neither loads (Keras itself falls back only on `OSError`). A backup's
    weights (with the optimizer's state), random state and record are
    loaded as one set, the latest's or the one before's, never mixed;
    `steps_per_epoch` bounds the steps a record may hold. An epoch with a
    non-finite loss or metric (stopped by `TerminateOnNaN`) is not backed
    up. The backup is kept at the end of `fit`: the caller deletes it once
    the trained model is saved, so that a kill in between loses nothing.

    A backup is written at every epoch end and, with `save_every` N > 0,
    every N steps within an epoch: the weights, the model's random state
    (`random.npz`, `save_random_state`) and `training_metadata.json`, the
    epochs done and the `steps` done of the next. It is restored when
    `fit` begins, or before by `restore()`, which returns that `(epoch,
    steps)`. With `moves_fit` (Keras's way), `fit` then starts at the
    backup's epoch, from its first batch; without, the caller starts `fit`
    where the backup is, the epoch's first `steps` batches left out.
    `position` is where training starts, for counting steps; each function
    of `saved` is called with `(epoch, steps)` after every backup written."""
    import keras

    class ResilientBackup(keras.callbacks.BackupAndRestore):
        def __init__(self):
            super().__init__(directory, double_checkpoint=True, delete_checkpoint=False)
            self.save_every, self.position, self.saved = save_every, tuple(position), []
            self.restored, self.epoch, self.steps, self.unsaved = False, 0, 0, 0
            self.random_path = os.path.join(directory, "random.npz")
            self.torch_seed = None  # on PyTorch, the seed of every step's (`_seed_torch`)
            if keras.config.backend() == "torch":
                import torch

                self.torch_seed = torch.initial_seed()  # `keras.utils.set_random_seed`'s

        @property
        def weights_path(self):
            """The latest backup's weights file (Keras's, which this class
            writes and restores): what `averaging.KeepLastSteps` copies."""
            return self._weights_path

        def on_train_begin(self, logs=None):
            if not self.restored:
                self.restore()

        def restore(self):
            """Load the backup (the one before when a file of the latest
            does not load) into the model; its `(epoch, steps)`, `(0, 0)`
            without a backup."""
            self.restored = True
            problems, position = [], None
            for suffix in BACKUPS:
                try:
                    position = self._load(suffix)
                except _Damaged as error:
                    problems.append(str(error))
                    continue
                if position is not None:
                    break
            if position is None and problems:
                raise _unusable(directory, problems)
            if problems:
                epoch, steps = position
                where = f"at step {steps} of epoch {epoch + 1}" if steps else f"after epoch {epoch}"
                log(
                    f"the last backup did not load: {problems[0]}; resuming from the one before "
                    f"it, {where} (its files now in place of the latest's)"
                )
            self.position = position or (0, 0)
            # Keras's load set `fit`'s first epoch; without `moves_fit`, fit's own decides
            self.model._initial_epoch = self.position[0] if moves_fit else None
            return self.position

        def _load(self, suffix):
            """Load the backup whose files end in `suffix` into the model
            and, the one before (`.bkp`), put its files in place of the
            latest's; its `(epoch, steps)`, None when there is none.
            `_Damaged` naming the file that does not load."""
            weights, random, record = backup_files(directory, suffix)
            try:
                position = _recorded_position(directory, suffix, steps_per_epoch)
            except ValueError as error:
                raise _Damaged(str(error).splitlines()[0]) from None
            if position is None:
                return None
            if self.model.optimizer is not None and not self.model.optimizer.built:
                self.model.optimizer.build(self.model.trainable_variables)

            def load(path):  # the weights, from `path`, then the random state
                _load_backup_file(weights, lambda: _load_weights(self.model, path))
                _load_backup_file(random, lambda: load_random_state(self.model, random))

            if not suffix:
                load(weights)
                return position
            # Keras loads only files named `.weights.h5`: the one before's through a
            # copy, renamed into place once the whole set has loaded. The latest's
            # record goes then, before the renaming, and the one before's comes
            # last, so that a kill in between leaves a latest set without its
            # record, which falls back again; a set that does not load changes
            # nothing.
            with replacing(self._weights_path) as copy:
                shutil.copyfile(weights, copy)
                load(copy)
                if os.path.exists(record[: -len(suffix)]):
                    os.remove(record[: -len(suffix)])
            for path in (random, record):
                if os.path.exists(path):
                    _copy_atomically(path, path[: -len(suffix)])
                elif os.path.exists(path[: -len(suffix)]):  # the set had none: not the latest's
                    os.remove(path[: -len(suffix)])
            return position

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self.steps = self.position[1] if epoch == self.position[0] else 0

        def on_train_batch_begin(self, batch, logs=None):
            if self.torch_seed is not None:
                _seed_torch(self.torch_seed, self.epoch, self.steps)

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            self.unsaved += 1
            if self.save_every and self.unsaved >= self.save_every:
                self.save(self.epoch, self.steps)

        def on_epoch_end(self, epoch, logs=None):
            if all(math.isfinite(value) for value in (logs or {}).values()):
                self.save(epoch + 1, 0)

        def save(self, epoch, steps):
            """Back up the model as `steps` steps after `epoch` epochs."""
            os.makedirs(directory, exist_ok=True)
            for path in (self._weights_path, self.random_path, self._training_metadata_path):
                if os.path.exists(path):
                    shutil.copy(path, f"{path}.bkp")  # Keras's names of the one before
            write_atomically(self._weights_path, self.model.save_weights)
            write_atomically(self.random_path, lambda path: save_random_state(self.model, path))
            write_json_atomically(
                self._training_metadata_path,
                {"epoch": epoch, "batch": max(0, steps - 1), "steps": steps},
            )
            self.position, self.unsaved = (epoch, steps), 0
            for saved in self.saved:
                saved(epoch, steps)

    return ResilientBackup()


def _seed_torch(seed, epoch, steps):
    """Seed PyTorch's global generator for step `steps` (done before it in
    its epoch) of `epoch`: a layer without a seed draws its dropout from
    it, and Keras's data loaders draw from it as they start (a resumed run
    starts more of them), so each step draws what its place gives."""
    import numpy as np
    import torch

    torch.manual_seed(int(np.random.SeedSequence([seed, epoch, steps]).generate_state(1)[0]))


class _Damaged(Exception):
    """A file of a backup that does not load; its message names it."""


def _load_backup_file(path, load):
    """Call `load()` (reading the backup file `path`); the error of a file
    that does not read (`DAMAGED_FILE_ERRORS`) becomes `_Damaged` naming
    `path`."""
    try:
        load()
    except DAMAGED_FILE_ERRORS as error:
        first = str(error).splitlines()[0] if str(error).strip() else ""
        raise _Damaged(
            f"{path} does not load ({type(error).__name__}{': ' if first else ''}{first})"
        ) from None


def _copy_atomically(source, target):
    """Copy `source` to `target`, put in place whole (`write_atomically`)."""
    write_atomically(target, lambda temporary: shutil.copyfile(source, temporary))


def _load_weights(model, path):
    """`model.load_weights(path)`, the optimizer's state included: where
    Keras only warns that this part does not fit (and would resume with a
    fresh optimizer), a `ValueError`."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Skipping variable loading for optimizer")
        try:
            model.load_weights(path)
        except UserWarning as warning:
            raise ValueError(str(warning)) from None


def _seed_states(model):
    """The model's random state: its `SeedGenerator`s' variables (dropout's
    seeds), which a `.weights.h5` file does not hold."""
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def save_random_state(model, path):
    """Write the model's random state (`_seed_states`) to `path` (`.npz`)."""
    import keras
    import numpy as np

    with open(path, "wb") as handle:
        np.savez(handle, *[keras.ops.convert_to_numpy(v) for v in _seed_states(model)])


def load_random_state(model, path):
    """Give the model the random state saved in `path`, when there is one
    of the model's shapes: a resumed run draws what the uninterrupted run
    would have (dropout's masks)."""
    import numpy as np

    if not os.path.exists(path):
        return
    with np.load(path) as saved:
        values = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    states = _seed_states(model)
    if [value.shape for value in values] == [tuple(state.shape) for state in states]:
        for state, value in zip(states, values):
            state.assign(value)


def keras_backend():
    """The backend Keras will load, read without importing it (Keras's
    order): `KERAS_BACKEND`, else `$KERAS_HOME/keras.json`'s (default
    `~/.keras`), else TensorFlow."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as handle:
            return json.load(handle).get("backend", "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def import_tensorflow_quietly():
    """Import TensorFlow with its load-time C++ messages (CUDA probing on a
    machine without a GPU, oneDNN notes) sent to /dev/null: they are written
    to file descriptor 2 before any log level applies and read like failures.
    The descriptor is restored afterwards, so later errors are seen. Without
    TensorFlow (a JAX or PyTorch environment reading the recipes' tables)
    there is nothing to import."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if importlib.util.find_spec("tensorflow") is None:
        return
    with stderr_silenced():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # the CUDA probe prints here


# The one rule for where a command writes: a folder or file that a command
# writes lies outside every run folder (a folder with a `RUN_FILE`, after
# resolving links). A run folder holds only what its own commands write
# there, its `RUN_ENTRIES`, which `--overwrite` deletes; anything else put
# inside it could be deleted with them, or be taken for the run's own. A
# run's folder (`--output` of train, tune and the digits recipe) is a run
# or a new folder, never inside another run, except the members
# `RUN/members/K` that `train --members` makes itself.
OUTSIDE_RUNS = "outputs go outside every run folder"


def check_outside_runs(name, path):
    """`UsageError` naming the flag `name` when `path`, a folder or file a
    command writes (an export, a converted model, translations, results),
    is a run's folder or lies inside one (`OUTSIDE_RUNS`)."""
    if os.path.isfile(os.path.join(path, RUN_FILE)):
        raise UsageError(
            f"{flag(name)} {path} is a run's folder: {OUTSIDE_RUNS} (a run holds only what "
            "its own commands write, and --overwrite deletes that); choose another folder"
        )
    inside = enclosing_run(path)
    if inside:
        raise UsageError(
            f"{flag(name)} {path} lies inside the run {inside}: {OUTSIDE_RUNS} (a run holds "
            "only what its own commands write, and --overwrite deletes that); choose a "
            "folder outside it"
        )


def check_output_folder(name, path):
    """`UsageError` naming the flag `name` for a folder that a run may not
    be written into: one inside another run's folder (`OUTSIDE_RUNS`; the
    members of `train --members` excepted) or one that holds runs in its
    subfolders (a folder of runs is not a run)."""
    inside = enclosing_run(path)
    if inside and not is_member_folder(path):
        raise UsageError(
            f"{flag(name)} {path} lies inside the run {inside}: {OUTSIDE_RUNS}, and a run "
            "needs a folder of its own (that run's --overwrite would delete it or its "
            "files); choose a folder outside it"
        )
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, RUN_FILE)):
        held = sorted(
            entry
            for entry in os.listdir(path)
            if os.path.isfile(os.path.join(path, entry, RUN_FILE))
        )
        if held:
            raise UsageError(
                f"{flag(name)} {path} holds runs ({', '.join(held[:3])}"
                f"{', ...' if len(held) > 3 else ''}): a run needs a folder of its own; choose "
                "a new folder, e.g. one inside it"
            )


def check_export_folder(name, path, model_name=None):
    """`UsageError` naming the flag `name` for an export folder that is a
    run's folder or lies inside one (`check_outside_runs`), whose
    `<path>/<model_name>` (where the versions go) is a run's folder, or
    that holds a CTranslate2 model (`model.bin`): exports go to a folder
    of their own."""
    check_outside_runs(name, path)
    served = os.path.join(path, model_name) if model_name else None
    if served and os.path.isfile(os.path.join(served, RUN_FILE)):
        raise UsageError(
            f"{flag(name)} {path} with --model-name {model_name} writes its versions into "
            f"{served}, a run's folder: {OUTSIDE_RUNS}; choose another --export-dir or "
            "--model-name"
        )
    if os.path.isfile(os.path.join(path, "model.bin")):
        raise UsageError(
            f"{flag(name)} {path} holds a CTranslate2 model (model.bin): exports go to a "
            "folder of their own (default saved_models)"
        )
