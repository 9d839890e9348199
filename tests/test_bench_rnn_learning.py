"""`bench/rnn_learning.py`: its plain-Keras RNN is a fair peer (source
padding changes nothing) that learns on a run's batches."""

import math
import os

import numpy as np
import pytest

from tests.bench_helpers import load_bench

DING = "/usr/share/trans/de-en"


@pytest.fixture(scope="module")
def bench():
    return load_bench("rnn_learning")


def test_the_keras_reference_ignores_source_padding(bench):
    model = bench.keras_reference(30, 20, 8, 16, dropout=0.0)
    source = np.array([[5, 6, 7, 2]])
    target = np.array([[1, 4, 9]])
    padded = np.concatenate([source, np.zeros((1, 5), "int64")], axis=1)
    logits = np.asarray(model([source, target]))
    assert logits.shape == (1, 3, 20)
    np.testing.assert_allclose(np.asarray(model([padded, target])), logits, atol=1e-5)
    # ... and the source does reach the logits.
    other = np.asarray(model([np.array([[8, 9, 10, 2]]), target]))
    assert np.abs(other - logits).max() > 1e-4


@pytest.mark.parametrize("name", ["ours", "keras", "bidirectional", "convs2s"])
def test_each_model_is_what_its_name_says(bench, name):
    from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq

    model = bench.build(name, 30, 20, 16, 1e-2, 0, 1e-2)
    source, target = np.array([[5, 6, 7, 2, 0]]), np.array([[1, 4, 9]])
    logits = model([source, target] if name == "keras" else (source, target))
    assert tuple(logits.shape) == (1, 3, 20)
    if name == "convs2s":
        assert isinstance(model, ConvS2SSeq2Seq)
    elif name != "keras":
        assert isinstance(model, RecurrentSeq2Seq) and model.input_feeding
        assert model.attention_spec == "general" and model.num_layers == 2
        assert model.bidirectional == (name == "bidirectional")
    assert model.optimizer is not None and model.loss is not None  # compiled


@pytest.mark.large
@pytest.mark.skipif(not os.path.exists(DING), reason="needs the Debian package trans-de-en")
def test_the_keras_reference_lowers_its_validation_loss_on_a_run(bench, trained):
    # (The recipe's own models train in the recipe's tests.)
    output, _ = trained
    rows = bench.curve(output, "keras", 2, units=16, learning_rate=1e-2, warmup=0)
    assert [row["epoch"] for row in rows] == [1, 2]
    losses = [row["valid_loss"] for row in rows]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[1] < losses[0]


def test_bad_arguments_name_what_was_expected(bench, tmp_path):
    with pytest.raises(ValueError, match=r"`name`: expected one of .*received 'lstm'"):
        bench.curve(str(tmp_path), "lstm", 1)
    with pytest.raises(
        ValueError,
        match=r"`run`: expected a translation run's folder, with .*train.tsv; received '/",
    ):
        bench.curve(str(tmp_path), "keras", 1)
