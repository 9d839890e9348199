"""Writes tests/data/torch_grid_fixture.npz: PyTorch's affine_grid + grid_sample
(bilinear) on a few small images and thetas, for both `align_corners`
conventions and both paddings. Not run by the tests (they read the .npz);
rerun by hand after changing the cases:

    python3 -m venv /tmp/venv-torch
    /tmp/venv-torch/bin/pip install /path/to/torch-*+cpu*.whl numpy
    /tmp/venv-torch/bin/python tests/data/make_torch_grid_fixture.py

Layout: PyTorch is channels-first (B, C, H, W) with grids (B, H, W, 2) in
(x, y); the file stores channels-last images and outputs, as our layers
take them.
"""

import os

import numpy as np
import torch
import torch.nn.functional as F

OUTPUT_SIZE = (4, 6)


def main():
    rng = np.random.default_rng(14)
    image = rng.random((3, 5, 7, 2)).astype("float32")  # (B, H, W, C)
    theta = np.stack(
        [
            [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],  # identity (differs between conventions at 4x6)
            [[0.8, -0.3, 0.2], [0.25, 1.1, -0.1]],  # generic, partly outside
            [[1.3, 0.0, 0.5], [0.0, 0.7, 0.6]],  # shifted out of the image
        ]
    ).astype("float32")  # (B, 2, 3)
    arrays = {"image": image, "theta": theta, "output_size": np.array(OUTPUT_SIZE)}
    image_nchw = torch.from_numpy(image).permute(0, 3, 1, 2)
    for align_corners in (False, True):
        grid = F.affine_grid(
            torch.from_numpy(theta),
            (image.shape[0], image.shape[3]) + OUTPUT_SIZE,
            align_corners=align_corners,
        )  # (B, Ho, Wo, 2)
        arrays[f"grid_align_{align_corners}"] = grid.numpy()
        for padding in ("zeros", "border"):
            out = F.grid_sample(
                image_nchw, grid, "bilinear", padding, align_corners=align_corners
            )  # (B, C, Ho, Wo)
            arrays[f"out_{padding}_align_{align_corners}"] = out.permute(0, 2, 3, 1).numpy()
    arrays["torch_version"] = np.array(torch.__version__)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_grid_fixture.npz")
    np.savez_compressed(path, **arrays)
    print(path, {k: v.shape for k, v in arrays.items()})


if __name__ == "__main__":
    main()
