"""Writing a run's files whole and reading its JSON records back.

A file a run keeps (`model.keras`, `config.json`, a record) is written to a
temporary file of a unique name beside it and renamed into place
(`replacing`), so a kill never leaves half of one; a JSON record that does
not parse or holds a value of the wrong kind is a `ValueError` naming the
file (`read_json`). The standard library only.
"""

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile


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


def read_json(path, what, fields=None, required=(), remedy=None):
    """The JSON object in `path`. A file that does not parse, holds
    something else than an object (`[]`), lacks a `required` key or holds a
    key of `fields` (`key: kind` or a tuple of kinds: `int`, `float`, `str`,
    `bool`, `dict`, `list`, None) of another kind raises `ValueError`
    naming it and `what` it is, in one line: it is damaged, and `remedy`
    (`pass --overwrite to ...`) says what to do."""
    damaged = f"{path} ({what})"
    ending = "it is damaged" + (f"; {remedy}" if remedy else "")
    if os.path.isdir(path):
        raise ValueError(f"{damaged} is a directory; expected a file")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            value = json.load(handle)
    except ValueError as error:
        raise ValueError(f"{damaged} is not valid JSON ({error}): {ending}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{damaged} holds {json.dumps(value)[:40]} where a JSON object is expected: {ending}"
        )
    for key in required:
        if key not in value:
            raise ValueError(f"{damaged} has no {key!r}: {ending}")
    for key, kinds in (fields or {}).items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if key in value and not any(_has_type(value[key], kind) for kind in kinds):
            expected = " or ".join(_KINDS[kind] for kind in kinds)
            raise ValueError(
                f"{damaged}: {key!r} must be {expected}; holds {json.dumps(value[key])[:40]}: "
                + ending
            )
    return value


def file_digest(path, digest=None):
    """`digest` (a new SHA-256 by default) fed with the bytes of the file
    at `path`, 1 MiB at a time: a large file is never held whole."""
    digest = hashlib.sha256() if digest is None else digest
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest
