"""The modules that left `serving/` keep their old paths: `serving.text` and
`serving.numbers` (now `keras_attention.tokenizers`) and
`serving.distribute` (now `keras_attention.training.distribute`) give the
same objects, each with a `DeprecationWarning` that names the new path; the
library itself, and its tests, use the new paths only, and importing
`keras_attention.serving` warns of nothing."""

import ast
import importlib
import os
import subprocess
import sys
import warnings

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# old module -> {name: the module that defines it now}
MOVED = {
    "keras_attention.serving.text": {
        "RESERVED": "keras_attention.tokenizers.characters",
        "PAD": "keras_attention.tokenizers.characters",
        "START": "keras_attention.tokenizers.characters",
        "END": "keras_attention.tokenizers.characters",
        "UNK": "keras_attention.tokenizers.characters",
        "InGraphTokenizer": "keras_attention.tokenizers.base",
        "PLACEHOLDER": "keras_attention.tokenizers.number_rules",
        "SubwordTokenizer": "keras_attention.tokenizers.wordpiece",
        "build_vocabulary": "keras_attention.tokenizers.wordpiece",
        "digits_split": "keras_attention.tokenizers.wordpiece",
        "SentencePieceTokenizer": "keras_attention.tokenizers.sentencepiece",
        "train_sentencepiece": "keras_attention.tokenizers.pieces",
        "sentencepiece_pieces": "keras_attention.tokenizers.pieces",
        "WORD_BOUNDARY": "keras_attention.tokenizers.pieces",
        "BYTE": "keras_attention.tokenizers.pieces",
        "CONTROL": "keras_attention.tokenizers.pieces",
        "UNKNOWN": "keras_attention.tokenizers.pieces",
        "UNUSED": "keras_attention.tokenizers.pieces",
        "load_tokenizer": "keras_attention.tokenizers.loading",
    },
    "keras_attention.serving.numbers": {
        **{
            name: "keras_attention.tokenizers.numbers"
            for name in ("NumberProtection", "sanitize", "_MARK")
        },
        **{
            name: "keras_attention.tokenizers.number_rules"
            for name in (
                "PLACEHOLDER",
                "NUMBER",
                "SWAPPED",
                "OTHER_DIGITS",
                "copied_number",
                "numbers_in",
                "protect_text",
                "sanitized",
                "same_number",
                "number_key",
            )
        },
        "code_point_ranges": "keras_attention.tokenizers.characters",
    },
    "keras_attention.serving.distribute": {
        name: "keras_attention.training.distribute"
        for name in ("adapt_for_distribution", "in_multi_worker_mode", "_global_token_count")
    },
}
CASES = [(old, name, new) for old, names in MOVED.items() for name, new in names.items()]


@pytest.mark.parametrize("old,name,new", CASES, ids=[f"{o}.{n}" for o, n, _ in CASES])
def test_an_old_path_gives_the_same_object_with_a_deprecation_warning(old, name, new):
    module = importlib.import_module(old)
    removal = r"is deprecated and will be removed in keras_attention 0\.4\.0"
    with pytest.warns(DeprecationWarning, match=rf"{old} {removal}: {name} moved to {new}"):
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(new), name)
    assert name in dir(module)


def test_from_import_of_an_old_path_warns_at_the_importing_line():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from keras_attention.serving.text import SubwordTokenizer  # noqa: F401
    (warning,) = caught
    assert warning.category is DeprecationWarning and warning.filename == __file__
    assert "import it from keras_attention.tokenizers instead" in str(warning.message)


def test_an_unknown_name_of_an_old_path_is_an_attribute_error():
    import keras_attention.serving.text as text

    with pytest.raises(AttributeError, match="keras_attention.serving.text.*no_such_name"):
        text.no_such_name  # noqa: B018


@pytest.mark.large(reason="a fresh process")
def test_the_library_imports_without_a_deprecation_warning():
    """A process that imports every module of the package and takes the
    serving package's names: none of our deprecation warnings (an error
    here), so no module of the library goes through an old path."""
    code = (
        "import keras_attention.serving as serving\n"
        "serving.Translator, serving.NumberProtection\n"
        "import keras_attention.tokenizers, keras_attention.training.distribute\n"
        "import keras_attention.serving.ctranslate2, keras_attention.serving.export\n"
        "import keras_attention.serving.check, keras_attention.serving.records\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error:keras_attention.serving:DeprecationWarning", "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert result.returncode == 0, result.stderr[-2000:]


def imported_modules(path):
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_no_module_of_the_project_uses_an_old_path():
    # The 0.2.0 fixture script runs on 0.2.0's layout, where these are the paths.
    skipped = {__file__, os.path.join(ROOT, "tests", "data", "make_v0_2_0_fixtures.py")}
    found = []
    for top in ("keras_attention", "recipes", "bench", "tests"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                path = os.path.join(folder, name)
                if not name.endswith(".py") or path in skipped:
                    continue
                found += [
                    f"{os.path.relpath(path, ROOT)}: {module}"
                    for module in imported_modules(path)
                    if module in MOVED
                ]
    assert not found


@pytest.mark.parametrize("name", ["check_vocabulary_fits", "decode_loop", "filter_logits"])
def test_the_sampling_helpers_still_import_from_search_with_a_warning(name):
    """0.2.0 offered them from `seq2seq.search` too; they live in
    `seq2seq.sampling`, the only module offering them without a warning."""
    from keras_attention.seq2seq import sampling, search

    with pytest.warns(DeprecationWarning, match=f"import {name} from keras_attention.seq2seq"):
        moved = getattr(search, name)
    assert moved is getattr(sampling, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        search.nothing_here  # noqa: B018
