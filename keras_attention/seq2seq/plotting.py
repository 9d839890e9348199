"""Attention heatmaps (needs matplotlib: `pip install keras_attention[recipes]`)."""

import keras
import numpy as np

# One labelled square cell per (target, source) pair, 0.45 inch at 100 dpi:
# beyond these the image takes gigabytes to draw (2000 x 2000 tokens ask
# for a 90,000-pixel square) and no label is readable anyway.
MAX_TOKENS = 150  # per axis of a panel
MAX_PIXELS = 100_000_000  # the whole figure (400 MB as RGBA)
DPI = 100


def _as_panels(weights):
    """`weights` as a list of (title, (T, S) matrix) panels."""
    if isinstance(weights, dict):
        panels = []
        for name, value in weights.items():
            value = np.asarray(keras.ops.convert_to_numpy(value), dtype="float32")
            if value.ndim == 3:  # (H, T, S): one panel per head
                panels += [(f"{name}, head {h + 1}", value[h]) for h in range(value.shape[0])]
            else:
                panels.append((name, value))
        return panels
    weights = np.asarray(keras.ops.convert_to_numpy(weights), dtype="float32")
    if weights.ndim == 2:
        return [("", weights)]
    if weights.ndim == 3:
        return [(f"{i + 1}", w) for i, w in enumerate(weights)]
    raise ValueError(
        "`weights` of plot_attention must be a (T, S) matrix, a (N, T, S) stack, or a dict of "
        f"(T, S) / (H, T, S) arrays; received an array of shape {weights.shape}."
    )


def _labels(tokens):
    """`tokens` (a list, an array or a backend tensor of ids, `bytes` or
    strings) as a list of `(raw, label)`: `raw` a plain Python int/str
    (for comparing with `eos`), `label` the text drawn on the axis."""
    if hasattr(tokens, "shape") and not isinstance(tokens, np.ndarray):
        tokens = keras.ops.convert_to_numpy(tokens)  # a TF, JAX or torch tensor
    labels = []
    for token in tokens:
        if hasattr(token, "shape") and not isinstance(token, (np.ndarray, np.generic)):
            token = keras.ops.convert_to_numpy(token)  # a scalar tensor in a list
        if isinstance(token, (np.ndarray, np.generic)):
            token = token.item()
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        labels.append((token, str(token)))
    return labels


def _rows_to_draw(panels, target, eos):
    """How many target rows to draw: up to the first `eos` id (included),
    and without trailing rows whose weights are zero in every panel (steps
    after every hypothesis ended)."""
    rows = len(target)
    raw = [token for token, _ in target]
    if eos is not None and eos in raw:
        rows = raw.index(eos) + 1
    while rows > 1 and all(not np.any(matrix[rows - 1]) for _, matrix in panels):
        rows -= 1
    return rows


def plot_attention(
    weights, source_tokens, target_tokens, path=None, title=None, columns=None, eos=None
):
    """Draw attention weights as heatmaps: target tokens down, source across,
    one square cell per (target, source) pair.

    Args:
        weights: a `(T, S)` alignment (one panel), a `(N, T, S)` stack or a
            dict `{name: (T, S) or (H, T, S)}` (a grid, e.g. one panel per
            ConvS2S layer or per Transformer head); arrays or tensors.
        source_tokens: S labels for the columns: token strings, `bytes`
            (decoded as UTF-8) or int ids, as a list, an array or a tensor.
        target_tokens: T labels for the rows, likewise.
        path: where to write the image (format from the suffix, e.g. .png);
            None returns the matplotlib `Figure` instead.
        title: optional figure title.
        columns: panels per row of the grid (default: up to 4).
        eos: optional end-of-sequence id (or token); rows after the first
            target token equal to it are not drawn. Trailing rows that are
            all zero in every panel are not drawn either.

    Returns:
        `path`, or the `Figure` when `path` is None.

    Raises:
        ValueError: a panel of more than `MAX_TOKENS` (150) tokens on an axis
            after trimming, or a figure of more than `MAX_PIXELS` (100
            million) pixels: plot a slice, or fewer panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels, source, target = _checked_panels(weights, source_tokens, target_tokens, eos)
    columns = columns or min(4, len(panels))
    rows = -(-len(panels) // columns)
    width, height = _panel_size(len(panels), len(source), len(target), columns, rows)
    figure, axes = plt.subplots(
        rows, columns, figsize=(width * columns, height * rows), squeeze=False
    )
    for axis in axes.flat[len(panels) :]:
        axis.axis("off")
    for axis, (name, matrix) in zip(axes.flat, panels):
        _draw_panel(figure, axis, name, matrix, source, target)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    if path is None:
        return figure
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
    return path


def _checked_panels(weights, source_tokens, target_tokens, eos):
    """`(panels, source, target)` of `plot_attention`'s arguments, each
    panel `(T, S)` checked against the labels, and the rows past `eos` or
    all zero trimmed (`_rows_to_draw`); at most `MAX_TOKENS` per axis."""
    panels = _as_panels(weights)
    source, target = _labels(source_tokens), _labels(target_tokens)
    for name, matrix in panels:
        if matrix.shape != (len(target), len(source)):
            raise ValueError(
                f"plot_attention: panel {name!r} has shape {matrix.shape} but there are "
                f"{len(target)} target and {len(source)} source tokens; "
                "expected (len(target_tokens), len(source_tokens))."
            )
    rows_drawn = _rows_to_draw(panels, target, eos)
    target = target[:rows_drawn]
    panels = [(name, matrix[:rows_drawn]) for name, matrix in panels]
    if max(len(source), len(target)) > MAX_TOKENS:
        raise ValueError(
            f"plot_attention draws one labelled cell per token pair, at most {MAX_TOKENS} "
            f"tokens per axis; received {len(target)} target x {len(source)} source tokens "
            "(to draw). Plot a slice: weights[:T, :S] with target_tokens[:T] and "
            "source_tokens[:S]."
        )
    return panels, source, target


def _panel_size(panel_count, source_count, target_count, columns, rows):
    """`(width, height)` in inches of one panel of `target_count` x
    `source_count` cells; a grid of `rows` x `columns` of them may have at
    most `MAX_PIXELS`."""
    cell = 0.45
    width = max(3.0, cell * source_count + 1.5)
    height = max(2.5, cell * target_count + 1.2)
    pixels = width * columns * DPI * height * rows * DPI
    if pixels > MAX_PIXELS:
        raise ValueError(
            f"plot_attention: {panel_count} panels of {target_count} x {source_count} tokens "
            f"make a figure of {pixels / 1e6:.0f} million pixels, more than "
            f"{MAX_PIXELS // 10**6} million; draw fewer panels (or shorter slices) per call."
        )
    return width, height


def _draw_panel(figure, axis, name, matrix, source, target):
    """One heatmap, `matrix (T, S)`, labelled and with its colour bar."""
    image = axis.imshow(
        matrix, cmap="viridis", vmin=0.0, vmax=max(1e-6, float(matrix.max())), aspect="equal"
    )
    axis.set_xticks(range(len(source)))
    axis.set_xticklabels([label for _, label in source], rotation=90)
    axis.set_yticks(range(len(target)))
    axis.set_yticklabels([label for _, label in target])
    axis.set_xlabel("source")
    axis.set_ylabel("target")
    if name:
        axis.set_title(name)
    figure.colorbar(image, ax=axis, fraction=0.046, pad=0.04)
