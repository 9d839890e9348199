"""The tokenizers' Python twins on every backend's virtualenv, TensorFlow
or not (`make test` runs this file in the JAX one too): a SentencePiece
model trained and read without TensorFlow encodes as `[START] pieces
[END]`, padded and cut as the graph's `encode`, and decodes losslessly;
number protection follows the rules' table (tokenizers/numbers.py). The
agreement with the graph itself, token for token, is
tests/test_python_tokenizers.py's (TensorFlow)."""

import numpy as np
import pytest

from keras_attention.tokenizers.characters import END, PAD, RESERVED, START, is_blank
from keras_attention.tokenizers.number_rules import (
    PLACEHOLDER,
    NumberRules,
    protect_pair,
    protect_text,
    restore_text,
)
from keras_attention.tokenizers.pieces import (
    SentencePieceEncoder,
    sentencepiece_pieces,
    train_sentencepiece,
)

pytest.importorskip("sentencepiece")  # the `tokenizers` extra; make test installs it

TEXTS = [f"Der Zug {i} fährt um {i % 24}:{i % 60:02d} Uhr ab." for i in range(400)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("spm") / "m.spm")
    size = train_sentencepiece(TEXTS, path, vocab_size=320)
    return path, size


def test_portability_of_a_model_trained_and_read_without_tensorflow(model):
    path, size = model
    with open(path, "rb") as handle:
        pieces = sentencepiece_pieces(handle.read())
    assert len(pieces) == size <= 320
    assert [piece for piece, _ in pieces[:4]] == RESERVED
    assert PLACEHOLDER in {piece for piece, _ in pieces}  # a piece of its own
    encoder = SentencePieceEncoder(path)
    text = "  Der Zug fährt  ab. 🙂 "
    ids, truncated = encoder.encode([text, "", "Zug " * 40], max_length=32)
    assert ids.shape == (3, 32) and ids.dtype == np.int32
    assert truncated.tolist() == [False, False, True]
    assert ids[1].tolist() == [START, END] + [PAD] * 30  # nothing between the marks
    assert ids[2, 0] == START and ids[2, -1] == END and PAD not in ids[2]  # cut, still ended
    first = ids[0][: ids[0].tolist().index(END) + 1]
    assert first[0] == START and PAD not in first
    # lossless: the text cleaned (spaces stripped, runs of spaces as one); the
    # emoji comes back through byte fallback
    assert encoder.decode(ids[:1]) == ["Der Zug fährt ab. 🙂"]
    digits = encoder.pieces(["1975"])[0]
    assert encoder.decode([digits]) == ["1975"] and len(digits) >= 4  # a piece per digit


def test_portability_of_number_protection():
    P = PLACEHOLDER
    assert protect_text("Das kostet 49 Euro, nicht 1975.") == f"Das kostet {P} Euro, nicht {P}."
    assert protect_text(f"getippt {P}") == "getippt  "  # a typed placeholder is a space
    # the table of tokenizers/numbers.py, copied back with swap_separators
    sources = ["2,5", "2,500", "1.000", "1,000", "1.234,56", "14.30", "24.12.2019", "14:35"]
    copied = ["2.5", "2.500", "1,000", "1.000", "1,234.56", "14.30", "24.12.2019", "14:35"]
    for source, expected in zip(sources, copied):
        assert restore_text(f"x {P} y", f"a {source} b", swap_separators=True) == f"x {expected} y"
        assert restore_text(f"x {P} y", f"a {source} b") == f"x {source} y"
    assert restore_text(f"um {P} oder {P}", "um 7") == "um 7 oder"  # one beyond: left out
    assert protect_pair("A 3,5 B 7", "a 3.5 b 7") == (f"A {P} B {P}", f"a {P} b {P}")
    assert protect_pair("7 und 3", "3 and 7") == ("7 und 3", "3 and 7")  # other order: kept
    rules = NumberRules.from_config(NumberRules(swap_separators=True).get_config())
    assert rules.get_config() == {"swap_separators": True}
    assert rules.protect_pair("A 3,5", "a 3.5") == (f"A {P}", f"a {P}")
    assert rules.restore(f"x {P}", "a 2,5") == "x 2.5"
    with pytest.raises(ValueError, match="swap_separators"):
        NumberRules(swap_separators="yes")
    assert is_blank("\u200b \u00a0") and not is_blank("a")
