"""The three tiers hold: layers <- seq2seq <- serving, never upwards; no
module takes names from the package's `__init__`; TensorFlow is imported
only in `serving/`."""

import ast
import importlib.util
import os

import pytest

PACKAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_attention"
)


def modules():
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                yield os.path.relpath(path, os.path.dirname(PACKAGE)), path


def imported(path):
    """(module, names) for every import in the file, anywhere in it."""
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, tuple(alias.name for alias in node.names)


def tier(relative):
    if relative == os.path.join("keras_attention", "__init__.py"):
        return "facade"  # re-exports the layers and seq2seq names; never serving
    parts = relative.split(os.sep)
    return parts[1] if len(parts) > 2 else "layers"


def test_the_files_are_where_the_tiers_say():
    found = {tier(relative) for relative, _ in modules()}
    assert found == {"facade", "layers", "seq2seq", "serving"}


@pytest.mark.parametrize("relative,path", sorted(modules()))
def test_imports_point_down_only(relative, path):
    forbidden = {
        "layers": ("keras_attention.seq2seq", "keras_attention.serving", "tensorflow"),
        "seq2seq": ("keras_attention.serving", "tensorflow"),
        "facade": ("keras_attention.serving", "tensorflow"),
        "serving": (),
    }[tier(relative)]
    for module, names in imported(path):
        assert not module.startswith(forbidden), f"{relative} imports {module}"
        if module == "keras_attention" and not relative.endswith("__init__.py"):
            # Only submodules, never the names __init__ re-exports.
            for name in names:
                assert os.path.exists(os.path.join(PACKAGE, f"{name}.py")) or os.path.isdir(
                    os.path.join(PACKAGE, name)
                ), f"{relative} imports {name} from keras_attention/__init__"


@pytest.mark.skipif(
    importlib.util.find_spec("tensorflow") is not None,
    reason="TensorFlow is installed here; the JAX/PyTorch runs check this",
)
def test_without_tensorflow_the_serving_tier_names_what_is_missing():
    import sys

    import keras_attention  # noqa: F401

    assert "tensorflow" not in sys.modules
    with pytest.raises(
        ImportError,
        match=r"keras_attention.serving needs TensorFlow .*"
        r"pip install keras_attention\[tensorflow\]",
    ):
        import keras_attention.serving  # noqa: F401
