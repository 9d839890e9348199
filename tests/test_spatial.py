"""Spatial transformer: grids, the bilinear sampler and its gradients,
thin-plate splines, the module, harness, bad input."""

import os

import keras
import numpy as np
import pytest
import scipy.ndimage

from keras_attention import AffineGrid, BilinearSampler, SpatialTransformer, ThinPlateSplineGrid
from keras_attention.spatial import control_grid
from tests import reference
from tests.harness import run_layer_test

FIXTURE = os.path.join(os.path.dirname(__file__), "data", "torch_grid_fixture.npz")
IDENTITY = np.array([[1, 0, 0], [0, 1, 0]], "float32")


def sample(image, theta, size, padding="zeros"):
    grid = AffineGrid(size)(np.asarray(theta, "float32").reshape(-1, 6))
    return np.asarray(BilinearSampler(padding)(image, grid))


def to_pixels(grid, height, width):
    grid = np.asarray(grid, np.float64)
    return (grid[..., 0] + 1) * (width - 1) / 2, (grid[..., 1] + 1) * (height - 1) / 2


def test_identity_returns_the_input(rng):
    image = rng.random((2, 9, 11, 3)).astype("float32")
    np.testing.assert_allclose(sample(image, np.stack([IDENTITY] * 2), (9, 11)), image, atol=1e-5)
    tps = ThinPlateSplineGrid(16, (9, 11))(
        np.tile(control_grid(16)[None], (2, 1, 1)).astype("float32")
    )
    np.testing.assert_allclose(np.asarray(BilinearSampler()(image, tps)), image, atol=1e-5)


def test_whole_pixel_translation_shifts_by_one_pixel(rng):
    image = rng.random((1, 8, 10, 2)).astype("float32")
    theta = IDENTITY.copy()
    theta[0, 2] = 2.0 / (10 - 1)  # one pixel to the right in normalised units
    out = sample(image, theta[None], (8, 10))
    np.testing.assert_allclose(out[:, :, :-1], image[:, :, 1:], atol=1e-5)
    np.testing.assert_allclose(out[:, :, -1], 0.0, atol=1e-6)  # read from outside the image
    border = sample(image, theta[None], (8, 10), padding="border")
    np.testing.assert_allclose(border[:, :, -1], image[:, :, -1], atol=1e-5)


def test_half_scale_about_centre_is_a_centre_crop_and_resize(rng):
    image = rng.random((1, 13, 17, 1)).astype("float32")
    out = sample(image, (IDENTITY * [[0.5, 0.5, 1], [0.5, 0.5, 1]])[None], (7, 9))[0, ..., 0]
    # Crop-and-resize reference: the central box [0.25, 0.75] of the pixel
    # range on each axis, resampled to 7 x 9 by scipy's order-1 spline.
    rows = np.linspace(0.25 * 12, 0.75 * 12, 7)
    cols = np.linspace(0.25 * 16, 0.75 * 16, 9)
    rr, cc = np.meshgrid(rows, cols, indexing="ij")
    want = scipy.ndimage.map_coordinates(image[0, ..., 0].astype(np.float64), [rr, cc], order=1)
    np.testing.assert_allclose(out, want, atol=1e-5)


@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_sampler_matches_reference(rng, padding):
    image = rng.random((2, 6, 7, 3)).astype("float32")
    grid = rng.uniform(-1.6, 1.6, (2, 4, 5, 2)).astype("float32")  # inside, at borders and outside
    grid[0, 0, 0] = [-1.0, 1.0]  # exactly on a corner
    out = np.asarray(BilinearSampler(padding)(image, grid))
    x, y = to_pixels(grid.reshape(2, -1, 2), 6, 7)
    want = reference.bilinear_sample(image.astype(np.float64), x, y, padding).reshape(out.shape)
    np.testing.assert_allclose(out, want, atol=1e-5)


@pytest.mark.tensorflow
def test_gradients_match_closed_forms_and_finite_differences(rng):
    import tensorflow as tf

    image = tf.constant(rng.random((1, 5, 6, 2)), tf.float32)
    grid = tf.constant(
        rng.uniform(-0.9, 0.9, (1, 3, 4, 2)), tf.float32
    )  # generic (non-integer) points
    sampler = BilinearSampler()
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([image, grid])
        out = sampler(image, grid)
        total = tf.reduce_sum(out)
    x, y = to_pixels(grid.numpy().reshape(1, -1, 2), 5, 6)
    # ∂V/∂U_nm: the bilinear weights, summed over outputs and channels.
    weights_x = np.maximum(0, 1 - np.abs(x[..., None] - np.arange(6)))
    weights_y = np.maximum(0, 1 - np.abs(y[..., None] - np.arange(5)))
    want_image = np.einsum("bph,bpw->bhw", weights_y, weights_x)[..., None].repeat(2, -1)
    np.testing.assert_allclose(tape.gradient(total, image).numpy(), want_image, atol=1e-5)
    # ∂V/∂x: the seed's closed form, in normalised units (dx_pixel/dx_norm = (W-1)/2).
    grad_grid = tape.gradient(total, grid).numpy().reshape(1, -1, 2)
    want_x = reference.bilinear_grad_x(image.numpy().astype(np.float64), x, y).sum(-1) * (6 - 1) / 2
    np.testing.assert_allclose(grad_grid[..., 0], want_x, atol=1e-4)
    # Finite differences for both coordinates.
    eps = 1e-3
    for axis in (0, 1):
        bump = np.zeros(grid.shape, "float32")
        bump[..., axis] = eps
        numeric = (
            np.asarray(sampler(image, grid + bump)) - np.asarray(sampler(image, grid - bump))
        ).sum(-1) / (2 * eps)
        np.testing.assert_allclose(grad_grid[..., axis], numeric.reshape(1, -1), atol=2e-3)


def test_thin_plate_spline_interpolates_its_control_points(rng):
    # 3 x 3 control points on a 5 x 5 output grid land on output pixels 0, 2, 4.
    moved = control_grid(9) + rng.uniform(-0.2, 0.2, (9, 2))
    grid = np.asarray(ThinPlateSplineGrid(9, (5, 5))(moved[None].astype("float32")))[0]
    np.testing.assert_allclose(grid[::2, ::2].reshape(9, 2), moved, atol=1e-5)
    # An affine motion of the control points moves the whole grid affinely.
    A = np.array([[0.8, 0.1], [-0.2, 0.9]])
    shifted = control_grid(9) @ A.T + [0.1, -0.05]
    grid = np.asarray(ThinPlateSplineGrid(9, (5, 5))(shifted[None].astype("float32")))[0]
    np.testing.assert_allclose(
        grid.reshape(-1, 2), reference_grid(5, 5) @ A.T + [0.1, -0.05], atol=1e-5
    )


def reference_grid(height, width):
    y, x = np.meshgrid(np.linspace(-1, 1, height), np.linspace(-1, 1, width), indexing="ij")
    return np.stack([x.ravel(), y.ravel()], -1)


@pytest.mark.parametrize("transform", ["affine", "tps"])
def test_module_starts_at_the_identity_and_returns_theta(rng, transform):
    image = rng.random((2, 12, 12, 1)).astype("float32")
    layer = SpatialTransformer(
        (12, 12), transform=transform, num_control_points=9, return_theta=True
    )
    out, theta = layer(image)
    np.testing.assert_allclose(np.asarray(out), image, atol=1e-5)
    want = (
        np.tile(IDENTITY[None], (2, 1, 1))
        if transform == "affine"
        else np.tile(control_grid(9)[None], (2, 1, 1))
    )
    np.testing.assert_allclose(np.asarray(theta), want, atol=1e-6)


def test_module_with_a_user_localisation_network(rng):
    import keras

    localization = keras.Sequential(
        [keras.layers.Flatten(), keras.layers.Dense(8, activation="tanh")]
    )
    layer = SpatialTransformer((4, 5), localization=localization)
    out = layer(rng.random((3, 10, 10, 2)).astype("float32"))
    assert out.shape == (3, 4, 5, 2)


# -- harness ----------------------------------------------------------------------
def test_harness_affine_grid(rng):
    theta = (IDENTITY[None] + rng.normal(scale=0.1, size=(2, 2, 3))).astype("float32")
    run_layer_test(AffineGrid, {"output_size": (4, 5)}, inputs={"theta": theta})


def test_harness_tps_grid(rng):
    points = (control_grid(4)[None] + rng.normal(scale=0.1, size=(2, 4, 2))).astype("float32")
    run_layer_test(
        ThinPlateSplineGrid,
        {"num_control_points": 4, "output_size": (3, 4), "align_corners": False},
        inputs={"control_points": points},
    )


@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_harness_sampler(rng, padding):
    run_layer_test(
        BilinearSampler,
        {"padding": padding},
        inputs={
            "image": rng.random((2, 6, 7, 3)).astype("float32"),
            "grid": rng.uniform(-1.2, 1.2, (2, 3, 4, 2)).astype("float32"),
        },
    )


@pytest.mark.parametrize("transform", ["affine", "tps"])
def test_harness_spatial_transformer(rng, transform):
    run_layer_test(
        SpatialTransformer,
        {"output_size": (6, 6), "transform": transform, "num_control_points": 4},
        inputs={"inputs": rng.random((2, 12, 12, 1)).astype("float32")},
    )


# -- bad input --------------------------------------------------------------------
def test_error_theta_shape(rng):
    with pytest.raises(
        ValueError,
        match=(
            r"`theta` of AffineGrid must have shape \(B, 2, 3\) or \(B, 6\); "
            r"received shape \(2, 3, 3\)"
        ),
    ):
        AffineGrid((4, 4))(np.zeros((2, 3, 3), "float32"))
    with pytest.raises(
        ValueError,
        match=r"`control_points` of ThinPlateSplineGrid\(num_control_points=9\) must have shape",
    ):
        ThinPlateSplineGrid(9, (4, 4))(np.zeros((2, 8, 2), "float32"))


def test_error_image_rank(rng):
    with pytest.raises(ValueError, match=r"`image` of BilinearSampler must have rank 4"):
        BilinearSampler()(
            rng.random((2, 6, 7)).astype("float32"), np.zeros((2, 3, 3, 2), "float32")
        )
    with pytest.raises(ValueError, match=r"`inputs` of SpatialTransformer must have rank 4"):
        SpatialTransformer((4, 4))(rng.random((2, 6, 7)).astype("float32"))


@pytest.mark.parametrize("size", [(0, 4), (4,), (3, -1), "big"])
def test_error_output_size(size):
    with pytest.raises(
        ValueError,
        match=r"`output_size` of SpatialTransformer must be \(height, width\) with both >= 1",
    ):
        SpatialTransformer(size)


def test_numpy_integer_output_size_is_a_size():
    grid = AffineGrid(tuple(np.array([4, 6])))
    assert grid.output_size == (4, 6) and all(type(v) is int for v in grid.output_size)


def test_error_control_points_not_square():
    with pytest.raises(
        ValueError, match=r"`num_control_points` of ThinPlateSplineGrid must be a square"
    ):
        ThinPlateSplineGrid(10, (4, 4))


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding", ["zeros", "border"])
def test_portability_matches_torch_affine_grid_and_grid_sample(align_corners, padding):
    # Values computed once by torch.nn.functional.affine_grid + grid_sample
    # (tests/data/make_torch_grid_fixture.py); PyTorch's default is False.
    data = np.load(FIXTURE)
    size = tuple(int(v) for v in data["output_size"])
    grid = AffineGrid(size, align_corners=align_corners)(data["theta"])
    np.testing.assert_allclose(np.asarray(grid), data[f"grid_align_{align_corners}"], atol=1e-6)
    out = BilinearSampler(padding, align_corners=align_corners)(data["image"], grid)
    np.testing.assert_allclose(
        np.asarray(out), data[f"out_{padding}_align_{align_corners}"], atol=1e-5
    )


def test_portability_align_corners_false_identity_and_conversion(rng):
    image = rng.random((1, 5, 7, 1)).astype("float32")
    sampler = BilinearSampler(align_corners=False)
    affine = AffineGrid((5, 7), align_corners=False)(IDENTITY[None])
    tps = ThinPlateSplineGrid(4, (5, 7), align_corners=False)(control_grid(4)[None])
    for grid in (affine, tps):  # the identity transforms are the identity
        np.testing.assert_allclose(np.asarray(sampler(image, grid)), image, atol=1e-5)
    module = SpatialTransformer(
        (5, 7), keras.layers.Flatten(), "tps", num_control_points=4, align_corners=False
    )
    module.build(image.shape)
    assert not module.grid_generator.align_corners and not module.sampler.align_corners
    # The conversion x_true = ((x_false + 1) W - 1)/(W - 1) - 1 names the
    # same pixel, so both conventions read the same values.
    grid = rng.uniform(-1.2, 1.2, (1, 3, 4, 2)).astype("float32")
    size = np.array([7, 5], "float32")  # (W, H) for (x, y)
    converted = ((grid + 1) * size - 1) / (size - 1) - 1
    np.testing.assert_allclose(
        np.asarray(BilinearSampler(align_corners=True)(image, converted)),
        np.asarray(BilinearSampler(align_corners=False)(image, grid)),
        atol=1e-5,
    )


def test_error_align_corners():
    with pytest.raises(ValueError, match="`align_corners` of AffineGrid must be True or False"):
        AffineGrid((2, 2), align_corners="false")


def test_an_empty_image_gets_a_value_error():
    with pytest.raises(
        ValueError,
        match=r"`image` of BilinearSampler must have at least one pixel .*\(1, 0, 0, 1\)",
    ):
        BilinearSampler()(np.ones((1, 0, 0, 1)), np.zeros((1, 2, 2, 2)))


@pytest.mark.parametrize("align_corners", [True, False])
def test_a_one_pixel_axis_samples_its_centre_as_pytorch(align_corners):
    # torch.nn.functional.affine_grid(identity, (1, 1, 1, 1), align_corners)
    # is [[[[0, 0]]]] for both values (linspace_from_neg_one returns 0 for
    # one step); for (1, 1, 1, 3) the x axis is linspace(-1, 1, 3) or
    # (2i + 1) / 3 - 1 and y is 0.
    identity = np.array([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], "float32")
    grid = np.asarray(AffineGrid((1, 1), align_corners=align_corners)(identity))
    np.testing.assert_allclose(grid, [[[[0.0, 0.0]]]])
    row = np.asarray(AffineGrid((1, 3), align_corners=align_corners)(identity))[0, 0]
    xs = [-1.0, 0.0, 1.0] if align_corners else [-2 / 3, 0.0, 2 / 3]
    np.testing.assert_allclose(row, np.stack([xs, [0.0] * 3], -1), atol=1e-6)
