"""Files written whole: a reader sees the old file or the new one, never
part of one. Plain Python, for every tier (the tokenizers' vocabularies,
the serving tier's `models.config` and batching parameters)."""

import contextlib
import os
import tempfile


def umask_mode(mode):
    """`mode` less the process's umask: what `open` and `os.makedirs` give a
    new file or folder. `tempfile`'s files (0600) and folders (0700) are
    set to this before they are published, so that another user (a TF
    Serving container) can read them whenever the umask lets it (0644 and
    0755 under 022)."""
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def write_atomically(path, data):
    """Write `data` (bytes, or a string written as UTF-8) to `path`: into a
    temporary file of a unique name beside it, then renamed over it. No
    other file is touched (a fixed `path.tmp` would be replaced), two
    writers both succeed, the file's mode is 0666 less the umask, and on an
    error the old file stays and the temporary one is removed. Creates the
    folder if needed; returns `path`. `TypeError` for `data` that is
    neither bytes nor a string."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(
            f"`data` of write_atomically must be bytes or a string; received "
            f"{type(data).__name__} for {path!r}."
        )
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
        os.chmod(temporary, umask_mode(0o666))
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):  # the first error is the one to see
            os.remove(temporary)
        raise
    return path
