"""Run folders (`--output`): the record of the settings a run was built
from, claiming a folder for a run, deleting what a run wrote, the lock of
the process writing a run, and a worker waiting for its chief's run.

A run directory records in `run.json` the settings its data, vocabularies
and model were built from. A later command compares its own settings with
that record: the same run is reused, another one is refused with the list
of differences (`reverse: False in the run, True now`), and `--overwrite`
deletes what the old run wrote (its `RUN_ENTRIES`, never the user's own
files) and starts again (`claim`). A process writing a run holds its lock
(`locked`). The standard library only.
"""

import contextlib
import os
import re
import shutil
import socket
import time

from .run_files import read_json, write_json_atomically

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are not locked there
    fcntl = None

RUN_FILE = "run.json"
# What to do about a damaged run.json (`read_json`).
REMEDY = "restore it, or pass --overwrite to start the run again"
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


def recorded_settings(output):
    """The settings in `<output>/run.json`, or None when there is none."""
    path = os.path.join(output, RUN_FILE)
    if not os.path.exists(path):
        return None
    record = read_json(path, "the run's settings", fields={"settings": dict}, remedy=REMEDY)
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
    record = read_json(path, "the run's settings", remedy=REMEDY) if os.path.exists(path) else None
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


def enclosing_run(path):
    """The run folder that `path` lies inside, after resolving links: the
    nearest folder strictly above it that holds a `RUN_FILE`; None when no
    folder above it does. `path` need not exist."""
    folder = os.path.realpath(path)
    while True:
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent
        if os.path.isfile(os.path.join(folder, RUN_FILE)):
            return folder


def delete_run(output, entries=RUN_ENTRIES, keep=()):
    """Delete what a run wrote into `output` (its `entries`, by default
    the translation recipe's `RUN_ENTRIES`, the scores of other test sets
    beside `scores.json`, the worker folders and temporaries a killed
    write left), keeping anything else there and the names in `keep`. A
    symbolic link among them is removed, never what it points to."""
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
            if os.path.isdir(path) and not os.path.islink(path):
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
    if held_names and RUN_FILE not in held_names and not is_member_folder(output):
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


def is_member_folder(output):
    """True for `RUN/members/K`, K a number from 2, a member of `train
    --members` (the first is `RUN` itself): the run's process puts the
    shared data and vocabularies there before the member's own process
    claims it. No other name under `members/` is a member's."""
    folder = os.path.realpath(output)
    members, name = os.path.dirname(folder), os.path.basename(folder)
    return (
        re.fullmatch(r"[1-9][0-9]*", name) is not None
        and int(name) >= 2
        and os.path.basename(members) == "members"
        and os.path.isfile(os.path.join(os.path.dirname(members), RUN_FILE))
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


def wait_for_run(
    output, settings, files, timeout, poll=1.0, defaults=None, upgrade=None, longer=None
):
    """On a worker that is not the chief: wait until the chief has recorded
    `settings` in `run.json` and written `files` (paths); `ValueError` when
    the recorded settings differ, or when `timeout` seconds (finite, above
    0) pass, naming what is still missing (and `longer`, how to wait
    longer, when given)."""
    if not 0 < timeout < float("inf"):  # NaN too: a wait that could never end
        raise ValueError(f"timeout {timeout!r}: expected a finite number of seconds above 0")
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
            missing = [os.path.relpath(path, output) for path in files if not os.path.exists(path)]
            if recorded is None or any(key not in recorded for key in settings):
                missing.insert(0, RUN_FILE)
            raise ValueError(
                f"waited {timeout:g}s for the chief to prepare the data and vocabularies in "
                f"--output {output} (still missing: {', '.join(missing)}): start the chief "
                "(the chief task, or worker 0 without one) with the same --output, on a folder "
                "every worker shares" + (f"; {longer}" if longer else "")
            )
        time.sleep(poll)
