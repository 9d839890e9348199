"""`import keras_attention` keeps TensorFlow's start-up notes off stderr and
passes on everything else (keras_attention/_startup.py)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from keras_attention._startup import without_notes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
STDERR = "".join(
    line + "\n"
    for line in (
        PREAMBLE,
        "I0000 00:00:1795592916.434313     489 port.cc:153] oneDNN custom operations are on.",
        "I0000 00:00:1795592916.605721     489 cpu_feature_guard.cc:227] This TensorFlow binary",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow",
        "W0000 00:00:1795592916.7     489 trt_convert.cc:1] TF-TRT Warning: no TensorRT",
        "/x/y.py:3: UserWarning: another library's warning",
        "E0000 00:00:1795592916.8     489 cuda_platform.cc:52] failed call to cuInit: DRIVER",
        "F0000 00:00:1795592916.9     489 fatal.cc:1] Check failed",
    )
)


def lines(text):
    return [line.split("]")[-1].strip() if "]" in line else line for line in text.splitlines()]


def test_only_the_notes_below_the_level_are_left_out():
    assert lines(without_notes(STDERR, level=1)) == [  # TF_CPP_MIN_LOG_LEVEL unset
        "TF-TRT Warning: no TensorRT",
        "/x/y.py:3: UserWarning: another library's warning",
        "failed call to cuInit: DRIVER",
        "Check failed",
    ]
    assert without_notes(STDERR, level=0) == STDERR
    assert lines(without_notes(STDERR, level=3)) == [
        "/x/y.py:3: UserWarning: another library's warning",
        "Check failed",
    ]


def import_in_a_fresh_process(**environment):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", "import keras_attention; print(keras_attention.__file__)"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, **environment},
    )


def test_import_keras_attention_prints_nothing_on_stderr():
    result = import_in_a_fresh_process()
    assert result.returncode == 0
    assert result.stdout.strip() == os.path.join(ROOT, "keras_attention", "__init__.py")
    assert result.stderr == ""


@pytest.mark.large(reason="a fresh process; the quiet start it undoes is checked in `make test`")
@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is None, reason="the notes are TensorFlow's"
)
def test_a_user_who_asks_for_every_log_line_gets_them():
    result = import_in_a_fresh_process(TF_CPP_MIN_LOG_LEVEL="0")
    assert result.returncode == 0 and PREAMBLE in result.stderr


def test_the_attention_demo_prints_no_tensorflow_start_up_lines():
    """As the translation and digits recipes: TensorFlow's C++ lines
    (oneDNN, CUDA drivers) stay off its stderr, here a usage error's."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention_recipes.attention_demo", "--length", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ") and "0000 " not in result.stderr, result.stderr
