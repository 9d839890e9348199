"""The in-graph WordPiece tokenizer."""

import pytest
import tensorflow as tf

from keras_attention.serving.text import (
    END,
    PAD,
    START,
    UNK,
    SubwordTokenizer,
    build_vocabulary,
)

TEXTS = [
    "I didn't find the time for it.",
    "I have no time.",
    "Where is the station?",
    "It's fine (really).",
] * 20


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "en.vocab")
    build_vocabulary(TEXTS, path, vocab_size=200)
    return SubwordTokenizer(path)


def test_round_trip(tokenizer):
    ids, truncated = tokenizer.encode(tf.constant(TEXTS[:4]), 24)
    assert ids.dtype == tf.int32 and ids.shape == (4, 24) and not truncated.numpy().any()
    assert (ids.numpy()[:, 0] == START).all()
    decoded = [t.decode() for t in tokenizer.decode(ids).numpy()]
    assert decoded == TEXTS[:4]


def test_truncation_keeps_end_and_is_flagged(tokenizer):
    ids, truncated = tokenizer.encode(
        tf.constant(["I have no time.", "I didn't find the time for it."]), 5
    )
    assert truncated.numpy().tolist() == [True, True]
    assert ids.numpy()[:, -1].tolist() == [END, END]


def test_empty_and_invalid_utf8(tokenizer):
    ids, truncated = tokenizer.encode(tf.constant([b"", b"I have \xff time."]), 12)
    assert ids.numpy()[0].tolist()[:3] == [START, END, PAD]
    assert [t.decode() for t in tokenizer.decode(ids).numpy()] == ["", "I have time."]


def test_vocabulary_must_start_with_reserved_tokens(tmp_path):
    path = tmp_path / "bad.vocab"
    path.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match=r"must start with the reserved tokens"):
        SubwordTokenizer(str(path))


def test_decode_writes_the_copied_source_piece_for_unk(tokenizer):
    # generation's replace_unknown: "[UNK]" at 3, the source id of "station"
    # copied there; -1 (nothing copied) and a reserved id leave it dropped.
    ids, _ = tokenizer.encode(tf.constant(["Where is the station?"]), 12)
    ids = ids.numpy()[:, 1:]  # the output has no [START]
    station = ids[0, 3]
    ids[0, 3] = UNK
    copied = [[-1] * ids.shape[1]]
    assert [t.decode() for t in tokenizer.decode(ids).numpy()] == ["Where is the?"]
    copied[0][3] = station
    assert tokenizer.decode(ids, copied).numpy()[0].decode() == "Where is the station?"
    copied[0][3] = END
    assert tokenizer.decode(ids, copied).numpy()[0].decode() == "Where is the?"
