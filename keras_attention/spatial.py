"""Spatial Transformer Networks (Jaderberg et al., 2015): attention over
where to look in an image. A localisation network predicts a transform, a
grid generator maps every output pixel to a source location, and a bilinear
sampler reads the input there; every step is differentiable.

Coordinates are normalised to [-1, 1] whatever the size, in one of
PyTorch's two conventions, chosen by `align_corners` (a documented choice,
see docs/conventions.md):

- `align_corners=True` (our default, kept for compatibility with files
  saved before the option existed): x = -1 is the *centre* of the leftmost
  pixel and x = +1 that of the rightmost; pixel x_p = (x + 1)(W - 1)/2, and
  the target grid is `linspace(-1, 1, W)`.
- `align_corners=False` (PyTorch's default for `affine_grid` and
  `grid_sample`): x = -1 is the left *edge* of the leftmost pixel and +1 the
  right edge of the rightmost; x_p = ((x + 1)W - 1)/2, and the target grid
  holds the pixel centres (2i + 1)/W - 1. The same pixel has the
  coordinate x_true = ((x_false + 1)·W − 1)/(W − 1) − 1 under the first
  convention, so a grid (or θ) written for one reads the same image under
  the other after this affine rescaling of each axis.
- An axis of one pixel has its centre at 0 under both, as in PyTorch's
  `affine_grid` (which special-cases a size of 1: `linspace(-1, 1, 1)`
  would put the one target point at -1).

Both match `torch.nn.functional.affine_grid` + `grid_sample(mode="bilinear")`
with padding "zeros" or "border" (tests/data/torch_grid_fixture.npz).
"""

import numbers

import keras
import numpy as np
from keras import ops

from keras_attention.validation import (
    check_choice,
    check_float_input,
    check_rank,
    check_same_batch,
)

register = keras.saving.register_keras_serializable(package="keras_attention")


def _check_align_corners(align_corners, owner):
    if not isinstance(align_corners, (bool, np.bool_)):
        raise ValueError(
            f"`align_corners` of {owner} must be True or False; "
            f"received align_corners={align_corners!r}."
        )
    return bool(align_corners)


def _check_size(output_size, owner):
    """`output_size` as a tuple of two Python ints >= 1 (NumPy integers, as
    shapes and arrays give them, are taken too)."""
    if (
        not isinstance(output_size, (tuple, list))
        or len(output_size) != 2
        or any(
            isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1 for v in output_size
        )
    ):
        raise ValueError(
            f"`output_size` of {owner} must be (height, width) with both >= 1; "
            f"received output_size={output_size!r}."
        )
    return tuple(int(v) for v in output_size)


def _axis(size, align_corners):
    """The normalised coordinates of the `size` pixel centres of one axis.

    PyTorch's convention (`torch.nn.functional.affine_grid`): with
    `align_corners=True` the first and last centres are at -1 and 1
    (`linspace(-1, 1, size)`); with False the edges of the outer pixels are
    at ±1, so the centres are `(2i + 1) / size - 1`. An axis of one pixel
    has its one centre at 0 in both conventions (PyTorch special-cases
    `size <= 1`: `linspace(-1, 1, 1)` would give -1, off the centre).
    """
    if size == 1:
        return np.zeros(1)
    if align_corners:
        return np.linspace(-1.0, 1.0, size)
    return (2.0 * np.arange(size) + 1.0) / size - 1.0  # pixel centres, edges at ±1


def target_grid(height, width, align_corners=True):
    """Normalised target coordinates `(H·W, 2)` as (x_t, y_t), row-major."""
    y, x = np.meshgrid(_axis(height, align_corners), _axis(width, align_corners), indexing="ij")
    return np.stack([x.ravel(), y.ravel()], axis=-1)


@register
class AffineGrid(keras.layers.Layer):
    """Sampling grid of an affine transform:

        (x_s, y_s)ᵀ = A_θ (x_t, y_t, 1)ᵀ,   A_θ = [[θ11 θ12 θ13], [θ21 θ22 θ23]]

    for every target pixel (x_t, y_t) of an `output_size` grid. This is
    `torch.nn.functional.affine_grid(θ, (B, C, H_out, W_out), align_corners)`,
    channels-last.

    Args:
        output_size: (height, width) of the grid.
        align_corners: True (default): ±1 are the centres of the corner
            pixels; False (PyTorch's default): ±1 are the outer edges of the
            corner pixels. See the module docstring.

    Call arguments:
        theta: `(B, 2, 3)` or `(B, 6)`.

    Returns:
        `(B, H_out, W_out, 2)` source coordinates (x_s, y_s).
    """

    def __init__(self, output_size, align_corners=True, **kwargs):
        super().__init__(**kwargs)
        self.output_size = _check_size(output_size, "AffineGrid")
        self.align_corners = _check_align_corners(align_corners, "AffineGrid")

    def build(self, theta_shape):
        if tuple(theta_shape[1:]) not in ((2, 3), (6,)):
            raise ValueError(
                "`theta` of AffineGrid must have shape (B, 2, 3) or (B, 6); "
                f"received shape {tuple(theta_shape)}."
            )
        height, width = self.output_size
        grid = target_grid(height, width, self.align_corners)
        self._homogeneous = np.concatenate([grid, np.ones((height * width, 1))], 1).astype(
            "float32"
        )  # (H·W, 3)
        self.built = True

    def call(self, theta):
        theta = ops.reshape(ops.cast(theta, "float32"), (-1, 2, 3))
        coordinates = ops.einsum("pk,bjk->bpj", self._homogeneous, theta)  # (B, H·W, 2)
        height, width = self.output_size
        return ops.cast(ops.reshape(coordinates, (-1, height, width, 2)), self.compute_dtype)

    def compute_output_shape(self, theta_shape):
        return (theta_shape[0],) + self.output_size + (2,)

    def get_config(self):
        return {
            **super().get_config(),
            "output_size": list(self.output_size),
            "align_corners": self.align_corners,
        }


def _tps_kernel(squared_distance):
    """U(r) = r² log r² (0 at r = 0)."""
    return np.where(
        squared_distance > 0, squared_distance * np.log(np.maximum(squared_distance, 1e-12)), 0.0
    )


def control_grid(num_control_points):
    """A √K × √K regular grid of control points in [-1, 1]², `(K, 2)`."""
    side = int(round(np.sqrt(num_control_points)))
    if side * side != num_control_points or side < 2:
        raise ValueError(
            "`num_control_points` of ThinPlateSplineGrid must be a square of an integer >= 2 "
            f"(4, 9, 16, ...): the points form a regular grid; received {num_control_points!r}."
        )
    return target_grid(side, side)


@register
class ThinPlateSplineGrid(keras.layers.Layer):
    """Sampling grid of a thin-plate spline through K control points.

    The control points p_k form a regular grid over the target. Given where
    each lands in the source, p'_k (the input), the spline

        T(x) = a_0 + a_x x + a_y y + Σ_k w_k U(‖x - p_k‖),   U(r) = r² log r²

    interpolates them (T(p_k) = p'_k) with the least bending. Its parameters
    solve `L [w; a] = [P'; 0]`, with `L = [[U(‖p_i - p_j‖), P̂], [P̂ᵀ, 0]]`
    and `P̂ = [1, x, y]`; L depends only on the fixed p_k, so the whole
    map from P' to the grid is one precomputed matrix, `grid = M P'`.
    With p'_k = p_k the grid is the identity.

    Args:
        num_control_points: K, a square (4, 9, 16, ...).
        output_size: (height, width) of the grid.
        align_corners: True (default): ±1 are the centres of the corner
            pixels; False (PyTorch's default): ±1 are the outer edges of the
            corner pixels. The control points stay a regular grid over
            [-1, 1]² in either convention; only the target pixels move.

    Call arguments:
        control_points: `(B, K, 2)` or `(B, 2K)`, the p'_k as (x, y).

    Returns:
        `(B, H_out, W_out, 2)` source coordinates.
    """

    def __init__(self, num_control_points, output_size, align_corners=True, **kwargs):
        super().__init__(**kwargs)
        self.control = control_grid(num_control_points)
        self.num_control_points = num_control_points
        self.output_size = _check_size(output_size, "ThinPlateSplineGrid")
        self.align_corners = _check_align_corners(align_corners, "ThinPlateSplineGrid")

    def build(self, control_points_shape):
        K = self.num_control_points
        if tuple(control_points_shape[1:]) not in ((K, 2), (2 * K,)):
            raise ValueError(
                f"`control_points` of ThinPlateSplineGrid(num_control_points={K}) must have shape "
                f"(B, {K}, 2) or (B, {2 * K}); received shape {tuple(control_points_shape)}."
            )
        p = self.control
        squared = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
        P_hat = np.concatenate([np.ones((K, 1)), p], 1)  # (K, 3)
        L = np.block([[_tps_kernel(squared), P_hat], [P_hat.T, np.zeros((3, 3))]])
        L_inverse = np.linalg.inv(L)[:, :K]  # only the P' block of the right-hand side is non-zero
        grid = target_grid(*self.output_size, self.align_corners)
        basis = np.concatenate(
            [
                _tps_kernel(((grid[:, None, :] - p[None, :, :]) ** 2).sum(-1)),
                np.ones((len(grid), 1)),
                grid,
            ],
            1,
        )  # (H·W, K + 3)
        self._grid_from_points = (basis @ L_inverse).astype("float32")  # M, (H·W, K)
        self.built = True

    def call(self, control_points):
        points = ops.reshape(ops.cast(control_points, "float32"), (-1, self.num_control_points, 2))
        coordinates = ops.einsum("pk,bkj->bpj", self._grid_from_points, points)  # (B, H·W, 2)
        height, width = self.output_size
        return ops.cast(ops.reshape(coordinates, (-1, height, width, 2)), self.compute_dtype)

    def compute_output_shape(self, control_points_shape):
        return (control_points_shape[0],) + self.output_size + (2,)

    def get_config(self):
        return {
            **super().get_config(),
            "num_control_points": self.num_control_points,
            "output_size": list(self.output_size),
            "align_corners": self.align_corners,
        }


@register
class BilinearSampler(keras.layers.Layer):
    """Reads `image` at the (normalised) coordinates of `grid`, bilinearly:

        V_i^c = Σ_n Σ_m U_nm^c max(0, 1 - |x_i^s - m|) max(0, 1 - |y_i^s - n|)

    with (x_i^s, y_i^s) in pixel units (x = (x_norm + 1)(W - 1)/2, or
    ((x_norm + 1)W - 1)/2 with `align_corners=False`). This is
    `torch.nn.functional.grid_sample(mode="bilinear", padding_mode=padding,
    align_corners=align_corners)`, channels-last. Only the
    four pixels around each point have non-zero weight, so the sum is four
    gathers. It is differentiable with respect to the image
    (∂V/∂U_nm = the weights) and the coordinates (∂V/∂x = Σ U_nm
    max(0, 1 - |y - n|) · (+1 if m ≥ x else -1) within distance 1), built
    from `keras.ops` gathers: no custom op.

    Args:
        padding: "zeros" (outside the image reads 0) or "border" (reads
            the nearest edge pixel).
        align_corners: True (default): ±1 are the centres of the corner
            pixels; False (PyTorch's default): ±1 are the outer edges of the
            corner pixels. Use the grid generator's value.

    Call arguments:
        image: `(B, H, W, C)`.
        grid: `(B, H_out, W_out, 2)` from `AffineGrid` or `ThinPlateSplineGrid`.

    Returns:
        `(B, H_out, W_out, C)`.
    """

    def __init__(self, padding="zeros", align_corners=True, **kwargs):
        super().__init__(**kwargs)
        check_choice("padding", padding, ("zeros", "border"), "BilinearSampler")
        self.padding = padding
        self.align_corners = _check_align_corners(align_corners, "BilinearSampler")

    def build(self, image_shape, grid_shape):
        check_rank("image", image_shape, (4,), "BilinearSampler", "(B, H, W, C)")
        check_rank("grid", grid_shape, (4,), "BilinearSampler", "(B, H_out, W_out, 2)")
        if grid_shape[-1] != 2:
            raise ValueError(
                "`grid` of BilinearSampler must end in 2 coordinates (x, y); "
                f"received shape {tuple(grid_shape)}."
            )
        self._check_not_empty(image_shape)
        self.built = True

    @staticmethod
    def _check_not_empty(image_shape):
        if 0 in tuple(image_shape)[1:3]:
            raise ValueError(
                "`image` of BilinearSampler must have at least one pixel (H, W >= 1) to "
                f"read from; received image with shape {tuple(image_shape)}."
            )

    def call(self, image, grid):
        self._check_not_empty(image.shape)  # build() may have seen another shape
        check_float_input("image", image, "BilinearSampler")  # int pixels: int weights
        check_same_batch("BilinearSampler", image=image, grid=grid)
        shape = ops.shape(image)
        batch, height, width, channels = shape[0], shape[1], shape[2], shape[3]
        h, w = ops.cast(height, "float32"), ops.cast(width, "float32")
        grid = ops.cast(grid, "float32")
        if self.align_corners:
            x = (grid[..., 0] + 1.0) * (w - 1.0) / 2.0  # (B, Ho, Wo), pixel units
            y = (grid[..., 1] + 1.0) * (h - 1.0) / 2.0
        else:
            x = ((grid[..., 0] + 1.0) * w - 1.0) / 2.0
            y = ((grid[..., 1] + 1.0) * h - 1.0) / 2.0
        # Points further than one pixel outside are clamped to one pixel
        # outside (every weight then falls outside: zero, and a zero gradient,
        # as in the equation); "border" clamps onto the image instead.
        margin = 0.0 if self.padding == "border" else 1.0
        x = ops.clip(x, -margin, w - 1.0 + margin)
        y = ops.clip(y, -margin, h - 1.0 + margin)
        x0, y0 = ops.floor(x), ops.floor(y)  # the neighbours are m = x0, x0 + 1 and n = y0, y0 + 1
        x1, y1 = x0 + 1.0, y0 + 1.0

        def axis_weights(position, low, high, size):
            """max(0, 1 - |position - m|) for m = low, high; 0 outside [0, size)."""
            w_high = position - low
            w_low = 1.0 - w_high
            valid = lambda m: ops.logical_and(m >= 0.0, m <= size - 1.0)  # noqa: E731
            return ops.where(valid(low), w_low, 0.0), ops.where(valid(high), w_high, 0.0)

        wx0, wx1 = axis_weights(x, x0, x1, w)
        wy0, wy1 = axis_weights(y, y0, y1, h)

        def pixel_index(m, size):
            return ops.clip(ops.cast(m, "int32"), 0, size - 1)

        xi0, xi1 = pixel_index(x0, width), pixel_index(x1, width)
        rows0 = (ops.arange(batch) * height * width)[:, None, None] + pixel_index(
            y0, height
        ) * width
        rows1 = (ops.arange(batch) * height * width)[:, None, None] + pixel_index(
            y1, height
        ) * width
        flat = ops.reshape(image, (-1, channels))  # (B·H·W, C)
        output = 0.0
        for rows, wy in ((rows0, wy0), (rows1, wy1)):
            for columns, wx in ((xi0, wx0), (xi1, wx1)):
                pixels = ops.take(flat, rows + columns, axis=0)  # (B, Ho, Wo, C)
                output = output + pixels * ops.cast(wy * wx, image.dtype)[..., None]
        return output

    def compute_output_shape(self, image_shape, grid_shape):
        return tuple(grid_shape[:3]) + (image_shape[-1],)

    def get_config(self):
        return {
            **super().get_config(),
            "padding": self.padding,
            "align_corners": self.align_corners,
        }


def default_localization(name="localization"):
    """A small CNN: two conv + max-pool stages and a 32-unit dense layer."""
    return keras.Sequential(
        [
            keras.layers.Conv2D(8, 5, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(10, 5, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="relu"),
        ],
        name=name,
    )


@register
class SpatialTransformer(keras.layers.Layer):
    """The spatial transformer module: localisation network → grid → sampler.

        θ = f_loc(U)                    (a regression layer on the localisation features)
        (x^s, y^s) = T_θ(G)             (AffineGrid or ThinPlateSplineGrid)
        V = BilinearSampler(U, T_θ(G))

    The final regression layer (added here, after `localization`) starts
    with zero weights and a bias equal to the identity transform, so an
    untrained module passes its input through; it can be inserted anywhere
    in a network.

    Args:
        output_size: (height, width) of the output.
        localization: a Keras layer/model mapping the input to features,
            or None for `default_localization()`.
        transform: "affine" (θ has 6 numbers) or "tps" (2K numbers).
        num_control_points: K for "tps".
        padding: the sampler's "zeros" or "border".
        align_corners: the coordinate convention of the grid and the sampler
            (True, the default, or PyTorch's default False; see the module
            docstring). The identity start is the identity in either.
        return_theta: also return θ (`(B, 2, 3)` or control points `(B, K, 2)`).

    Call arguments:
        inputs: `(B, H, W, C)`.

    Returns:
        `(B, H_out, W_out, C)`, or `(output, theta)`.
    """

    def __init__(
        self,
        output_size,
        localization=None,
        transform="affine",
        num_control_points=16,
        padding="zeros",
        return_theta=False,
        align_corners=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.output_size = _check_size(output_size, "SpatialTransformer")
        check_choice("transform", transform, ("affine", "tps"), "SpatialTransformer")
        self.transform = transform
        self.num_control_points = num_control_points
        if transform == "tps":
            control_grid(num_control_points)  # validates K
        self.padding = padding
        self.return_theta = bool(return_theta)
        self.align_corners = _check_align_corners(align_corners, "SpatialTransformer")
        self.localization = localization if localization is not None else default_localization()

    def build(self, inputs_shape):
        check_rank("inputs", inputs_shape, (4,), "SpatialTransformer", "(B, H, W, C)")
        if not self.localization.built:
            self.localization.build(inputs_shape)
        features = self.localization.compute_output_shape(inputs_shape)
        if self.transform == "affine":
            identity = np.array([1, 0, 0, 0, 1, 0], "float32")
            self.grid_generator = AffineGrid(
                self.output_size, self.align_corners, dtype=self.dtype_policy, name="grid"
            )
        else:
            identity = control_grid(self.num_control_points).ravel().astype("float32")
            self.grid_generator = ThinPlateSplineGrid(
                self.num_control_points,
                self.output_size,
                self.align_corners,
                dtype=self.dtype_policy,
                name="grid",
            )
        self.regression = keras.layers.Dense(
            len(identity),
            kernel_initializer="zeros",
            bias_initializer=keras.initializers.Constant(identity),
            dtype="float32",
            name="regression",  # θ stays float32 under mixed precision
        )
        self.regression.build(features)
        self.grid_generator.build((None, len(identity)))
        self.sampler = BilinearSampler(
            self.padding, self.align_corners, dtype=self.dtype_policy, name="sampler"
        )
        self.built = True

    def call(self, inputs, training=None):
        check_float_input("inputs", inputs, "SpatialTransformer")
        theta = self.regression(ops.cast(self.localization(inputs, training=training), "float32"))
        output = self.sampler(inputs, self.grid_generator(theta))
        if not self.return_theta:
            return output
        shape = (-1, 2, 3) if self.transform == "affine" else (-1, self.num_control_points, 2)
        return output, ops.reshape(theta, shape)

    def compute_output_shape(self, inputs_shape):
        return (inputs_shape[0],) + self.output_size + (inputs_shape[-1],)

    def compute_output_spec(self, inputs, training=None):
        output = keras.KerasTensor(
            self.compute_output_shape(inputs.shape), dtype=self.compute_dtype
        )
        if not self.return_theta:
            return output
        shape = (
            (inputs.shape[0], 2, 3)
            if self.transform == "affine"
            else (inputs.shape[0], self.num_control_points, 2)
        )
        return output, keras.KerasTensor(shape, dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "output_size": list(self.output_size),
            "localization": keras.saving.serialize_keras_object(self.localization),
            "transform": self.transform,
            "num_control_points": self.num_control_points,
            "padding": self.padding,
            "return_theta": self.return_theta,
            "align_corners": self.align_corners,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["localization"] = keras.saving.deserialize_keras_object(config["localization"])
        return cls(**config)
