"""Run directories of the translation recipe.

A run directory (`--output`) records in `run.json` the settings its data,
vocabularies and model were built from. A later command compares its own
settings with that record: the same run is reused, another one is refused
with the list of differences (`reverse: False in the run, True now`), and
`--overwrite` deletes what the old run wrote and starts again. The files a
finished run keeps (`model.keras`, `config.json`) are written to a
temporary file and renamed into place, so a kill never leaves half of one.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import time

RUN_FILE = "run.json"
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
    "attention",
    "tuning",
    "best_hyperparameters.json",
)


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


def temporary_path(path):
    """A sibling of `path` with the same suffix (Keras checks `.keras` and
    `.weights.h5`): `model.keras` -> `model.tmp.keras`."""
    folder, name = os.path.split(path)
    stem, dot, suffix = name.partition(".")
    return os.path.join(folder, f"{stem}.tmp{dot}{suffix}")


def write_atomically(path, write):
    """Call `write(temporary)` and rename the result to `path` (same folder,
    so the rename is atomic): `path` is always the old file or the new one."""
    temporary = temporary_path(path)
    write(temporary)
    os.replace(temporary, path)


def write_json_atomically(path, value):
    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(value, handle, indent=2)

    write_atomically(path, write)


def read_json(path, what):
    """The JSON in `path`; a file that does not parse raises `ValueError`
    naming it and `what` it is."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except ValueError as error:
        raise ValueError(f"{path} ({what}) is not valid JSON ({error}): it is damaged") from None


def recorded_settings(output):
    """The settings in `<output>/run.json`, or None when there is none."""
    path = os.path.join(output, RUN_FILE)
    if not os.path.exists(path):
        return None
    return read_json(path, "the run's settings").get("settings", {})


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


def delete_run(output, entries=RUN_ENTRIES):
    """Delete what a run wrote into `output` (its `entries`, by default
    the translation recipe's `RUN_ENTRIES`, and the worker folders),
    keeping anything else there."""
    for name in os.listdir(output):
        if name in entries or name.startswith("worker-"):
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
    if overwrite and any(name in entries for name in os.listdir(output)):
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
