"""Shared by the test suite and the docstring examples (`--doctest-modules
keras_attention`): the backend default and the names examples use."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pytest_addoption(parser):
    """`--run_large`: also run the tests marked `large` (tests/conftest.py
    skips them without it). Here, the root conftest, so that pytest knows
    the option whatever paths it is given."""
    parser.addoption(
        "--run_large",
        action="store_true",
        default=False,
        help="also run the tests marked `large` (a recipe's processes end to end)",
    )


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace):
    """Docstring examples use `np` and the package's names unqualified."""
    import keras

    import keras_attention

    doctest_namespace["np"] = np
    doctest_namespace["keras"] = keras
    for name in keras_attention.__all__:
        doctest_namespace[name] = getattr(keras_attention, name)
