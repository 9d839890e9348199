"""plot_attention writes the heatmaps it is asked for."""

import matplotlib.image
import numpy as np
import pytest

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
