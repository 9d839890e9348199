"""Attention heatmaps (needs matplotlib: `pip install keras_attention[recipes]`)."""

import numpy as np


def _as_panels(weights):
    """`weights` as a list of (title, (T, S) matrix) panels."""
    if isinstance(weights, dict):
        panels = []
        for name, value in weights.items():
            value = np.asarray(value, dtype="float32")
            if value.ndim == 3:  # (H, T, S): one panel per head
                panels += [(f"{name}, head {h + 1}", value[h]) for h in range(value.shape[0])]
            else:
                panels.append((name, value))
        return panels
    weights = np.asarray(weights, dtype="float32")
    if weights.ndim == 2:
        return [("", weights)]
    if weights.ndim == 3:
        return [(f"{i + 1}", w) for i, w in enumerate(weights)]
    raise ValueError(
        "`weights` of plot_attention must be a (T, S) matrix, a (N, T, S) stack, or a dict of "
        f"(T, S) / (H, T, S) arrays; received an array of shape {weights.shape}."
    )


def plot_attention(weights, source_tokens, target_tokens, path, title=None, columns=None):
    """Draw attention weights as heatmaps: target tokens down, source across.

    Args:
        weights: a `(T, S)` alignment (one panel), a `(N, T, S)` stack or a
            dict `{name: (T, S) or (H, T, S)}` (a grid, e.g. one panel per
            ConvS2S layer or per Transformer head).
        source_tokens: S labels for the columns.
        target_tokens: T labels for the rows.
        path: where to write the image (format from the suffix, e.g. .png).
        title: optional figure title.
        columns: panels per row of the grid (default: up to 4).

    Returns:
        `path`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _as_panels(weights)
    source_tokens, target_tokens = list(source_tokens), list(target_tokens)
    for name, matrix in panels:
        if matrix.shape != (len(target_tokens), len(source_tokens)):
            raise ValueError(
                f"plot_attention: panel {name!r} has shape {matrix.shape} but there are "
                f"{len(target_tokens)} target and {len(source_tokens)} source tokens; "
                "expected (len(target_tokens), len(source_tokens))."
            )
    columns = columns or min(4, len(panels))
    rows = -(-len(panels) // columns)
    cell = 0.45
    width = max(3.0, cell * len(source_tokens) + 1.5)
    height = max(2.5, cell * len(target_tokens) + 1.2)
    figure, axes = plt.subplots(
        rows, columns, figsize=(width * columns, height * rows), squeeze=False
    )
    for axis in axes.flat[len(panels) :]:
        axis.axis("off")
    for axis, (name, matrix) in zip(axes.flat, panels):
        image = axis.imshow(
            matrix, cmap="viridis", vmin=0.0, vmax=max(1e-6, float(matrix.max())), aspect="auto"
        )
        axis.set_xticks(range(len(source_tokens)))
        axis.set_xticklabels(source_tokens, rotation=90)
        axis.set_yticks(range(len(target_tokens)))
        axis.set_yticklabels(target_tokens)
        axis.set_xlabel("source")
        axis.set_ylabel("target")
        if name:
            axis.set_title(name)
        figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
