"""plot_attention writes the heatmaps it is asked for."""

import matplotlib.image
import numpy as np
import pytest
from keras import ops

from keras_attention.seq2seq.plotting import plot_attention


def test_single_alignment(tmp_path):
    weights = np.eye(4)[::-1]
    path = plot_attention(
        weights,
        ["he", "hit", "me", "<eos>"],
        ["er", "schlug", "mich", "<eos>"],
        str(tmp_path / "one.png"),
        title="alignment",
    )
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_grid_of_layers_and_heads(tmp_path):
    rng = np.random.default_rng(0)
    single = plot_attention(
        rng.random((3, 5)), list("abcde"), list("xyz"), str(tmp_path / "single.png")
    )
    grid = plot_attention(
        {"layer 1": rng.random((3, 5)), "layer 2": rng.random((2, 3, 5))},
        list("abcde"),
        list("xyz"),
        str(tmp_path / "grid.png"),
    )
    # Three panels (one layer, two heads) in one row: wider than one panel.
    assert matplotlib.image.imread(grid).shape[1] > 2 * matplotlib.image.imread(single).shape[1]


def test_error_labels_do_not_fit(tmp_path):
    with pytest.raises(
        ValueError, match=r"has shape \(3, 5\) but there are 3 target and 4 source tokens"
    ):
        plot_attention(np.ones((3, 5)), list("abcd"), list("xyz"), str(tmp_path / "bad.png"))


def test_tensor_labels_are_numbers_rows_after_eos_are_trimmed_and_cells_square():
    # What the README's seq2seq example passes: greedy output ids as a
    # backend tensor (6 steps, <eos> = 2 at step 2, then padding whose rows
    # still hold attention) and a source row of ids.
    weights = np.full((6, 5), 0.2, "float32")
    target = ops.convert_to_tensor(np.array([7, 9, 2, 0, 0, 0], "int32"))
    source = ops.convert_to_tensor(np.array([9, 7, 4, 3, 5], "int32"))
    figure = plot_attention(ops.convert_to_tensor(weights), source, target, eos=2)
    axis = figure.axes[0]
    assert [t.get_text() for t in axis.get_yticklabels()] == ["7", "9", "2"]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["9", "7", "4", "3", "5"]
    assert axis.images[0].get_array().shape == (3, 5)
    # Square cells: equal aspect, and the drawn image is 5 cells wide, 3 high.
    assert axis.get_aspect() == 1.0
    figure.canvas.draw()
    box = axis.get_window_extent()
    assert box.width / box.height == pytest.approx(5 / 3, rel=0.02)

    # Token strings and bytes (a tokenizer's output), scalar tensors in a list,
    # and trailing rows that are zero everywhere (steps after every
    # hypothesis ended) are not drawn.
    weights = np.zeros((4, 2), "float32")
    weights[:2] = 0.5
    figure = plot_attention(
        {"layer 1": weights, "layer 2": weights[None]},
        [b"er", "schl\u00e4gt"],
        [ops.convert_to_tensor(5), np.int64(2), ops.convert_to_tensor(0), 0],
    )
    heatmaps = [axis for axis in figure.axes if axis.get_xlabel() == "source"]
    assert len(heatmaps) == 2  # the other axes are colorbars
    for axis in heatmaps:
        assert [t.get_text() for t in axis.get_yticklabels()] == ["5", "2"]
        assert [t.get_text() for t in axis.get_xticklabels()] == ["er", "schl\u00e4gt"]


def test_plot_attention_refuses_an_alignment_too_large_to_draw():
    tokens = list(range(2000))
    with pytest.raises(ValueError, match=r"at most 150 tokens per axis; received 2000 target"):
        plot_attention(np.full((2000, 2000), 1e-3, "float32"), tokens, tokens)
    with pytest.raises(ValueError, match=r"draw fewer panels"):
        plot_attention(np.full((9, 100, 100), 1e-3, "float32"), tokens[:100], tokens[:100])
