"""Importing Keras without TensorFlow's start-up notes on stderr.

On the TensorFlow backend, `import keras` loads TensorFlow, whose C++ code
writes notes to file descriptor 2 before its logging is set up, so that
`TF_CPP_MIN_LOG_LEVEL` does not reach them: "All log messages before
absl::InitializeLog() ...", oneDNN's note, "Could not find cuda drivers on
your machine" and the CPU-feature notice. They read like failures in a
user's script. `import_keras` captures descriptor 2 while Keras is imported
and writes back everything but the lines below the level the user chose:

- `TF_CPP_MIN_LOG_LEVEL` unset: info lines (`I0000 ...`) are left out;
  warnings, errors and anything that is not a TensorFlow log line (a
  Python warning, a message of another library) are written back, in order;
- set: lines below that level are left out (`0` keeps everything, `2`
  also drops warnings, `3` also errors), as TensorFlow does after start-up.

Nothing else changes: no environment variable is set, TensorFlow's logging
after the import is its own (its CUDA probe at the first operation, "failed
call to cuInit" on a machine without a GPU, is TensorFlow's: set
`TF_CPP_MIN_LOG_LEVEL=3` to hide it), and when Keras is already imported, or
descriptor 2 cannot be duplicated, Keras is imported as it is.
"""

import os
import re
import sys
import tempfile

# absl's log line prefix: severity letter, MMDD, time (I0000 00:00:1795592916.434313 ...).
_LOG_LINE = re.compile(r"([IWEF])\d{4} \d\d:\d\d:")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
# The second line of TensorFlow's CPU-feature note (an info line).
_CONTINUATION = "To enable the following instructions:"


def minimum_level():
    """The lowest severity kept: `TF_CPP_MIN_LOG_LEVEL`, or 1 (warnings)."""
    value = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1")
    return int(value) if value.strip().isdigit() else 1


def without_notes(text, level=None):
    """`text` (what was written to stderr) without the log lines below
    `level` (default `minimum_level()`) and TensorFlow's start-up preamble
    and CPU-feature continuation line when info lines are dropped. Fatal
    lines and lines that are not TensorFlow log lines are always kept."""
    level = minimum_level() if level is None else level
    kept = []
    for line in text.splitlines(keepends=True):
        match = _LOG_LINE.match(line)
        if match:
            if _SEVERITY[match.group(1)] >= min(level, 3):
                kept.append(line)
        elif level < 1 or not (line.rstrip("\n") == _PREAMBLE or line.startswith(_CONTINUATION)):
            kept.append(line)
    return "".join(kept)


def import_keras():
    """Import Keras with TensorFlow's start-up notes left out of stderr
    (the module docstring says which lines); returns the `keras` module."""
    if "keras" in sys.modules:
        import keras

        return keras
    try:
        capture = tempfile.TemporaryFile()
    except OSError:  # no writable temporary folder: import as it is
        import keras

        return keras
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 (a GUI process): nothing to keep clean
        capture.close()
        import keras

        return keras
    with capture:
        _flush()
        os.dup2(capture.fileno(), 2)
        try:
            import keras
        finally:
            _flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = without_notes(capture.read().decode("utf-8", "replace"))
            if kept:
                os.write(2, kept.encode("utf-8"))
    return keras


def _flush():
    try:
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # None or closed
        pass


import_keras()  # importing this module is what keras_attention/__init__.py does first
