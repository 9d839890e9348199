"""The recipes' shared plumbing (translation, digits, the bottleneck sweep,
the GPU check): run directories, and what their command lines share
(`UsageError`, `flag`, `check_number`, `HelpFormatter`, `command_errors`,
`import_tensorflow_quietly`, the library's attention names). It imports no
recipe and nothing heavier than the standard library.

A run directory (`--output`) records in `run.json` the settings its data,
vocabularies and model were built from. A later command compares its own
settings with that record: the same run is reused, another one is refused
with the list of differences (`reverse: False in the run, True now`), and
`--overwrite` deletes what the old run wrote and starts again. The files a
finished run keeps (`model.keras`, `config.json`) are written to a
temporary file of a unique name and renamed into place, so a kill never
leaves half of one (`replacing`). A process writing a run holds its lock
(`locked`); a damaged run file is a `ValueError` naming it (`read_json`).
Training backs up each epoch (`resilient_backup`) and takes Ctrl-C only
between two steps (`ctrl_c_between_steps`), so an interrupted run resumes.
"""

import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are not locked there
    fcntl = None

RUN_FILE = "run.json"
CTRL_C_HELD = "Ctrl-C: stopping before the next step (Ctrl-C again: at once)"
LOCK_FILE = ".run.lock"  # held (flock) by the process writing the run; says which one
# What a run writes into its folder; `--overwrite` deletes these and nothing
# else, so that a user's own files in the folder are never lost.
RUN_ENTRIES = (
    RUN_FILE,
    "data",
    "source.spm",
    "target.spm",
    "source.vocab",
    "target.vocab",
    "backup",
    "checkpoints",
    "logs",
    "model.keras",
    "config.json",
    "final.weights.h5",
    "best.weights.h5",
    "best.weights.h5.json",
    "scores.json",
    "members",  # train --members: the members after the first
    "attention",
    "tuning",
    "best_hyperparameters.json",
)


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


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every flag's default (said in
    the help text where "None" would not tell it, and left out for switches)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default:" in action.help:
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


def resilient_backup(directory, log=print):
    """`BackupAndRestore` that keeps the two last epochs and, when the latest
    backup does not load (a kill while it was written leaves a truncated
    file), says so and resumes from the one before; a `ValueError` when
    neither loads. Keras itself falls back only on `OSError`; a truncated
    HDF5 file raises `ValueError` too. An epoch with a non-finite loss or
    metric (stopped by `TerminateOnNaN`) is not backed up. The backup is
    kept at the end of `fit`: the caller deletes it once the trained
    model is saved, so that a kill in between loses nothing."""
    import keras

    class ResilientBackup(keras.callbacks.BackupAndRestore):
        def on_epoch_end(self, epoch, logs=None):
            if all(math.isfinite(value) for value in (logs or {}).values()):
                super().on_epoch_end(epoch, logs)

        def on_train_begin(self, logs=None):
            try:
                self._load_model()
            except (OSError, ValueError) as error:
                if not os.path.exists(self._prev_weights_path):
                    raise ValueError(
                        f"the backup in {directory} does not load ({str(error).splitlines()[0]}) "
                        "and there is no earlier one: remove that folder to start over"
                    ) from error
                log(
                    f"the last backup did not load ({type(error).__name__}); "
                    "resuming from the epoch before it"
                )
                shutil.copy(self._prev_weights_path, self._weights_path)
                if os.path.exists(self._prev_training_metadata_path):
                    shutil.copy(self._prev_training_metadata_path, self._training_metadata_path)
                self._load_model()

    return ResilientBackup(directory, double_checkpoint=True, delete_checkpoint=False)


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


def copy_missing(source, target, names, ignore=()):
    """Copy each entry of `names` (files or folders) from folder `source`
    into folder `target` where `target` lacks it, each put in place whole
    (a temporary renamed); folders are copied without the names matching
    `ignore`'s patterns. Entries `target` has are left as they are."""
    os.makedirs(target, exist_ok=True)
    for name in names:
        destination = os.path.join(target, name)
        if os.path.exists(destination):
            continue
        temporary = temporary_path(destination)
        if os.path.isdir(os.path.join(source, name)):
            os.remove(temporary)  # copytree makes the folder
            shutil.copytree(
                os.path.join(source, name), temporary, ignore=shutil.ignore_patterns(*ignore)
            )
        else:
            shutil.copyfile(os.path.join(source, name), temporary)
        os.replace(temporary, destination)


def temporary_path(path):
    """A new, empty file of a unique name beside `path`, with the same
    suffix (Keras checks `.keras` and `.weights.h5`): `model.keras` ->
    `.model.k2x9q_1.tmp.keras`. Unique, so that no file of the user's is
    replaced and two writers of one file never share a temporary; the
    caller renames it into place or removes it."""
    folder, name = os.path.split(path)
    stem, dot, suffix = name.partition(".")
    handle, temporary = tempfile.mkstemp(
        dir=folder or ".", prefix=f".{stem}.", suffix=f".tmp{dot}{suffix}"
    )
    os.close(handle)
    return temporary


def writable_target(path, flag=None):
    """Where a write of `path` goes: through a symbolic link, the file it
    points to (the link stays a link), as a shell redirection writes.
    `PermissionError` naming `flag` (or the path) when that file exists and
    is read-only (no write permission bit, or none for this user): it is
    refused rather than replaced, even for root."""
    target = os.path.realpath(path)
    if os.path.exists(target) and not os.path.isdir(target):
        mode = os.stat(target).st_mode
        if not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(
            target, os.W_OK
        ):
            name = f"{flag} {path}" if flag else path
            raise PermissionError(
                f"{name} is read-only (mode {stat.filemode(mode)}): make it writable "
                "or choose another file"
            )
    return target


def _default_mode():
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def replacing(path, flag=None):
    """Yield a temporary file (`temporary_path`) to write; when the block
    ends without an error it is renamed to `path` (same folder, so the
    rename is atomic: `path` is always the old file or the new one),
    otherwise removed. Two writers of one file both succeed, the last
    one's file wins. A symbolic link is written through and a read-only
    file refused (`writable_target`); an existing file keeps its
    permissions, a new one gets the umask's."""
    target = writable_target(path, flag)
    mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target) else _default_mode()
    temporary = temporary_path(target)
    try:
        yield temporary
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def write_atomically(path, write, flag=None):
    """Call `write(temporary)` and rename the result to `path` (`replacing`)."""
    with replacing(path, flag) as temporary:
        write(temporary)


def write_json_atomically(path, value):
    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(value, handle, indent=2)

    write_atomically(path, write)


def _has_type(value, kind):
    """`value` is a JSON value of `kind`: `int` (not a bool), `float` (any
    number, not a bool), `str`, `bool`, `dict`, `list`, or None."""
    if kind is None:
        return value is None
    if kind in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
_KINDS.update({dict: "a JSON object", list: "a list", None: "null"})


def read_json(path, what, fields=None, required=()):
    """The JSON object in `path`. A file that does not parse, holds
    something else than an object (`[]`), lacks a `required` key or holds a
    key of `fields` (`key: kind` or a tuple of kinds: `int`, `float`, `str`,
    `bool`, `dict`, `list`, None) of another kind raises `ValueError`
    naming it and `what` it is, in one line: it is damaged."""
    damaged = f"{path} ({what})"
    if os.path.isdir(path):
        raise ValueError(f"{damaged} is a directory; expected a file")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            value = json.load(handle)
    except ValueError as error:
        raise ValueError(f"{damaged} is not valid JSON ({error}): it is damaged") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{damaged} holds {json.dumps(value)[:40]} where a JSON object is expected: "
            "it is damaged"
        )
    for key in required:
        if key not in value:
            raise ValueError(f"{damaged} has no {key!r}: it is damaged")
    for key, kinds in (fields or {}).items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if key in value and not any(_has_type(value[key], kind) for kind in kinds):
            expected = " or ".join(_KINDS[kind] for kind in kinds)
            raise ValueError(
                f"{damaged}: {key!r} must be {expected}; holds {json.dumps(value[key])[:40]}: "
                "it is damaged"
            )
    return value


def recorded_settings(output):
    """The settings in `<output>/run.json`, or None when there is none."""
    path = os.path.join(output, RUN_FILE)
    if not os.path.exists(path):
        return None
    record = read_json(path, "the run's settings", fields={"settings": dict})
    return record.get("settings", {})


# What a folder holds when its run.json predates the recorded command.
COMMAND_MARKS = {
    "tune": ("tuning", "best_hyperparameters.json"),
    "train": ("model.keras", "backup"),
}


def recorded_command(output):
    """The command whose run `output` holds (`train` or `tune`, as recorded in
    `run.json`; for an older record, guessed from its files), or None."""
    path = os.path.join(output, RUN_FILE)
    record = read_json(path, "the run's settings") if os.path.exists(path) else None
    if isinstance(record, dict) and record.get("command"):
        return record["command"]
    for command, marks in COMMAND_MARKS.items():
        if any(os.path.exists(os.path.join(output, mark)) for mark in marks):
            return command
    return None


def differences(recorded, current, defaults=None):
    """`key: <recorded> in the run, <current> now` for each setting both
    record with different values; `defaults` are the values of settings a
    run recorded before they existed (compared as if recorded)."""
    recorded = {**(defaults or {}), **recorded}
    return [
        f"{key}: {recorded[key]!r} in the run, {current[key]!r} now"
        for key in current
        if key in recorded and recorded[key] != current[key]
    ]


def is_temporary(name, entries=RUN_ENTRIES):
    """True for the name of a temporary a killed write of one of a run's
    `entries` left (`temporary_path`: `.model.k2x9q_1.tmp.keras`)."""
    stems = {entry.partition(".")[0] for entry in entries}
    stem = name[1:].partition(".")[0]
    return name.startswith(".") and stem in stems and ".tmp" in name


def run_holding(path, entries=RUN_ENTRIES):
    """`(run, entry)` when `path` lies inside one of a run's own entries
    (`runs/tr/data`, `runs/tr/checkpoints/x`: the nearest folder above it
    that holds a `RUN_FILE`, and the entry's name), else None. A run's
    `members/` are runs of their own, so a folder under it is not inside
    the run's files."""
    path = os.path.realpath(path)
    below, folder = None, path
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        below, folder = os.path.basename(folder), parent
        if os.path.isfile(os.path.join(folder, RUN_FILE)):
            return (folder, below) if below in entries and below != "members" else None


def _check_not_inside_a_run(name, path, entries):
    """`UsageError` naming the flag `name` when `path` lies inside another
    run's files (`run_holding`): that run's commands write and delete them."""
    inside = run_holding(path, entries)
    if inside:
        raise UsageError(
            f"{flag(name)} {path} lies inside the run {inside[0]} (its {inside[1]}/), which "
            "that run's own commands write and delete: choose a folder outside it"
        )


def check_output_folder(name, path, entries=RUN_ENTRIES):
    """`UsageError` naming the flag `name` for a folder that a run may not
    be written into: one inside another run's files (that run's
    `--overwrite` would delete it; its `data/` holds a run's data) or one
    that holds runs in its subfolders (a folder of runs is not a run)."""
    _check_not_inside_a_run(name, path, entries)
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


def check_export_folder(name, path, entries=RUN_ENTRIES):
    """`UsageError` naming the flag `name` for an export folder that is a
    run's folder or lies inside a run's files, or that holds a
    CTranslate2 model (`model.bin`): exports go to a folder of their own."""
    if os.path.isfile(os.path.join(path, RUN_FILE)):
        raise UsageError(
            f"{flag(name)} {path} is a run's folder: exports go to a folder of their own "
            "(default saved_models)"
        )
    _check_not_inside_a_run(name, path, entries)
    if os.path.isfile(os.path.join(path, "model.bin")):
        raise UsageError(
            f"{flag(name)} {path} holds a CTranslate2 model (model.bin): exports go to a "
            "folder of their own (default saved_models)"
        )


def delete_run(output, entries=RUN_ENTRIES, keep=()):
    """Delete what a run wrote into `output` (its `entries`, by default
    the translation recipe's `RUN_ENTRIES`, the scores of other test sets
    beside `scores.json`, the worker folders and temporaries a killed
    write left), keeping anything else there and the names in `keep`."""
    for name in os.listdir(output):
        if name in keep:
            continue
        if (
            name in entries
            or name.startswith("worker-")
            or is_temporary(name, entries)
            or ("scores.json" in entries and re.fullmatch(r"scores\.[^/]+\.json", name))
        ):
            path = os.path.join(output, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def claim(
    output,
    settings,
    overwrite=False,
    defaults=None,
    upgrade=None,
    command=None,
    entries=RUN_ENTRIES,
):
    """Make `output` the run of `settings`: record them in `run.json` (keys
    the record lacks are added, compared first with their `defaults` when
    given), or raise `ValueError` listing what differs from the recorded
    run. With `overwrite`, an existing run is deleted first. `upgrade` maps
    an older record's settings to today's names before they are compared.
    `entries` are the names `--overwrite` deletes (`delete_run`).
    `command` (`train` or `tune`) is recorded too, and a run of another
    command is refused. Returns True when an old run was deleted."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"--output {output} is a file; expected a folder for the run")
    os.makedirs(output, exist_ok=True)
    recorded = written = recorded_settings(output)
    if upgrade is not None and recorded is not None:
        recorded = upgrade(recorded)
    deleted = False
    held_names = sorted(name for name in os.listdir(output) if name in entries)
    if held_names and RUN_FILE not in held_names and not _is_member_folder(output):
        # Names of a run's files, but no record of a run: the user's own
        # files (a corpus in data/, a config.json), which a run would write
        # over and --overwrite would delete.
        raise ValueError(
            f"--output {output} holds {', '.join(held_names)} but no {RUN_FILE}: not a run "
            "of this recipe, and a run would write over those names (--overwrite deletes "
            "nothing there); choose another --output or move those files"
        )
    if overwrite and held_names:
        delete_run(output, entries)
        recorded = written = None
        deleted = True
    held = None if deleted else recorded_command(output)
    if command is not None and held not in (None, command):
        raise ValueError(
            f"--output {output} holds a run of `{held}`, not of `{command}`: choose another "
            "--output (each command has its own default folder), or pass --overwrite to delete it"
        )
    if recorded is not None:
        changed = differences(recorded, settings, defaults)
        if changed:
            raise ValueError(
                f"--output {output} holds a run built with other settings ({'; '.join(changed)}): "
                "repeat the run's settings, pass --overwrite to delete it and start again, "
                "or choose another --output"
            )
    merged = {**(recorded or {}), **settings}
    if merged != written or (command is not None and held != command):
        record = {"settings": merged, **({"command": command} if command else {})}
        write_json_atomically(os.path.join(output, RUN_FILE), record)
    return deleted


def _is_member_folder(output):
    """True for `RUN/members/K`, a member of `train --members`: the run's
    process puts the shared data and vocabularies there before the
    member's own process claims it."""
    members = os.path.dirname(os.path.realpath(output))
    return os.path.basename(members) == "members" and os.path.isfile(
        os.path.join(os.path.dirname(members), RUN_FILE)
    )


class RunInUse(ValueError):
    """Another live process holds the run folder's lock."""


@contextlib.contextmanager
def locked(output, command):
    """Hold the lock of the run folder `output` (created if missing) while
    the block runs: `<output>/.run.lock`, an exclusive `flock`, and in it
    which process holds it. A second process gets `RunInUse` naming the
    holder's pid, host and command at once, instead of both writing one
    run. The kernel drops the lock when its process dies, so the lock of
    a killed run is taken over by the next one (the file's old text does
    not matter). The holder removes the file when the block ends, while
    it still holds the lock; a process that opened the file just before
    that finds, once it holds the lock, that the path is gone or is
    another file, and takes the lock again on the file at the path, so
    two processes never hold the lock of one folder at once."""
    os.makedirs(output, exist_ok=True)
    path = os.path.join(output, LOCK_FILE)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None or _lock_file(descriptor, path, output):
            break
        os.close(descriptor)  # locked a file its holder had removed: again
    try:
        os.ftruncate(descriptor, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        text = f"process {os.getpid()} on {socket.gethostname()} ({command}, since {started})"
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, text.encode("utf-8"))
        yield
    finally:
        if fcntl is not None and _is_file_at(descriptor, path):
            os.remove(path)  # still held: only the holder removes it
        os.close(descriptor)  # releases the flock


def _is_file_at(descriptor, path):
    """True when `path` is the file open as `descriptor`."""
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except FileNotFoundError:
        return False


def _lock_file(descriptor, path, output):
    """Take the exclusive `flock` of `descriptor` (the lock file of run
    folder `output`, opened at `path`): True when it is held and `path`
    is still that file, False when its holder removed it meanwhile (the
    lock of a file no one can open again is no lock); `RunInUse` naming
    the holder when another process holds it (`descriptor` is closed)."""
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.lseek(descriptor, 0, os.SEEK_SET)
        holder = os.read(descriptor, 200).decode("utf-8", "replace").strip()
        os.close(descriptor)
        raise RunInUse(
            f"--output {output} is in use by {holder or 'another process'}: wait for "
            "it to end, or choose another --output"
        ) from None
    return _is_file_at(descriptor, path)


def wait_for_run(output, settings, files, timeout, poll=1.0, defaults=None, upgrade=None):
    """On a worker that is not the chief: wait until the chief has recorded
    `settings` in `run.json` and written `files` (paths); `ValueError` when
    the recorded settings differ or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            recorded = recorded_settings(output)
        except ValueError:  # run.json being replaced: look again
            recorded = None
        if upgrade is not None and recorded is not None:
            recorded = upgrade(recorded)
        if recorded is not None and all(key in recorded for key in settings):
            changed = differences(recorded, settings, defaults)
            if changed:
                raise ValueError(
                    f"this worker's settings differ from the chief's run in --output {output} "
                    f"({'; '.join(changed)}): start every worker with the same flags"
                )
            if all(os.path.exists(path) for path in files):
                return
        if time.monotonic() > deadline:
            raise ValueError(
                f"waited {timeout:.0f}s for the chief to prepare the data and vocabularies in "
                f"--output {output}: start the chief (worker 0) with the same --output, on a "
                "folder every worker shares"
            )
        time.sleep(poll)
