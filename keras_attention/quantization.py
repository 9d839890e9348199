"""Weight-only int8 quantization with per-output-channel scales.

A quantized projection keeps its kernel as an int8 variable `q` (same name,
same shape, not trainable) beside a float32 `<name>_scale` variable with
one scale per output channel:

    s_c = max |W[..., c]| / 127        (abs-max over the input axes)
    q = clip(round(W / s), -127, 127)  (int8)
    W ≈ q · s

and computes in float: `(x · cast(q)) · s`, the scale applied to the
outputs of the product (the same value as `x · (q · s)` up to rounding).
Activations are not quantized: stock TensorFlow has no int8 matrix product
on CPU faster than its float32 one (see docs/models.md, "Quantization").

Everything here uses `keras.ops` (TensorFlow, JAX, PyTorch). A layer of
this library takes part through `Int8Kernels`, a mixin that implements
Keras's layer protocol (`quantize(mode, type_check, config)`, the
quantized dtype policy, `_int8_call`); `quantize_layers` walks a model and
quantizes its layers, this library's and Keras's `Dense`, `EinsumDense`
and `Embedding` (weight-only too, by default).
"""

import keras
import numpy as np
from keras import ops

MODE = "int8"  # the only mode: weight-only int8, per-channel scales


def quantize_array(values, axes):
    """Abs-max int8 quantization of `values` with one scale per output
    channel, the channels being every axis not in `axes` (the reduced,
    input axes).

    Returns `(q, scale)`: int8 `q` of `values`' shape and float32 `scale`
    of the shape without `axes`, such that `values ≈ q · scale` (scale
    expanded at `axes`). An all-zero channel gets scale 1 (and q = 0).

    >>> q, scale = quantize_array(np.array([[1.0, -0.5], [-2.0, 0.25]]), axes=0)
    >>> q.tolist(), scale.tolist()
    ([[64, -127], [-127, 64]], [0.015748031437397003, 0.003937007859349251])
    """
    values = np.asarray(values, dtype="float32")
    axes = tuple(np.atleast_1d(axes) % values.ndim)
    amax = np.max(np.abs(values), axis=axes, keepdims=True)
    scale = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0)).astype("float32")
    q = np.clip(np.round(values / scale), -127, 127).astype("int8")
    return q, np.squeeze(scale, axis=axes)


def kernel(layer, name, dtype):
    """`(kernel, scale)` of `layer`'s weight `name`: the variable cast to
    `dtype`, and its per-output-channel scale cast to `dtype`, or None when
    the weight is float. The weight is `kernel · scale` (see `rescale`)."""
    scale = getattr(layer, f"{name}_scale", None)
    value = ops.cast(getattr(layer, name), dtype)
    return value, None if scale is None else ops.cast(scale, dtype)


def rescale(outputs, scale):
    """`outputs · scale` on the last axis, the output channels (`scale`
    flattened: a `(H, d)` scale matches outputs `(..., H·d)`); `outputs`
    as they are when `scale` is None (a float weight)."""
    if scale is None:
        return outputs
    return outputs * ops.reshape(ops.cast(scale, outputs.dtype), (-1,))


def float_policy(policy):
    """The float policy a quantized one was made from (`int8_from_float32`
    -> `float32`), else `policy`: a quantized layer's sublayers (dropout,
    position tables) stay float."""
    if policy.quantization_mode is None:
        return policy
    return keras.dtype_policies.get(policy.name.split("_from_", 1)[1])


def check_mode(mode, config, owner):
    """Check `quantize`'s `mode` and `config` (a `QuantizationConfig` or
    None): only "int8" is supported. Returns "int8"."""
    if config is not None and not isinstance(config, keras.quantizers.QuantizationConfig):
        raise TypeError(
            f"`config` of {owner} must be a keras.quantizers.Int8QuantizationConfig or None; "
            f"received config={config!r} of type {type(config).__name__}."
        )
    config_mode = None if config is None else config.mode
    if mode is None:
        mode = config_mode or MODE
    if mode != MODE or config_mode not in (None, MODE):
        given = f"mode={mode!r}"
        if config_mode is not None:
            given += f" and a config of mode {config_mode!r} ({type(config).__name__})"
        raise ValueError(
            f"`mode` of {owner} must be {MODE!r} (weight-only int8 with per-output-channel "
            f"scales, the only mode this library supports); received {given}."
        )
    return mode


class Int8Kernels:
    """Mixin of a layer whose projection kernels are its own `add_weight`
    variables: Keras's layer quantization protocol, weight-only int8.

    The layer lists its kernels in `int8_kernels()`, `{attribute: reduced
    axes}` (the input axes; the others are the output channels), reads
    them through `kernel(layer, name, dtype)` and applies the scale with
    `rescale`, and calls `self.build_int8()` at the end of `build` (so that
    a layer made with an int8 dtype policy, as a loaded one, builds int8
    variables). Its sublayers use `float_policy(self.dtype_policy)`.
    """

    def int8_kernels(self):
        """`{attribute: reduced axes}` of the kernels to quantize."""
        return {}

    def quantize(self, mode=None, type_check=True, config=None):
        """Quantize the kernels in place (Keras's protocol; `config` is
        checked for its mode only: this layer's activations stay float)."""
        check_mode(mode, config, f"{type(self).__name__}.quantize")
        self._swap_kernels()
        self.dtype_policy = keras.dtype_policies.QuantizedDTypePolicy(MODE, self.dtype_policy.name)

    def build_int8(self):
        """At the end of `build`: int8 kernels when the policy says int8."""
        if self.quantization_mode is not None and not getattr(self, "_is_quantized", False):
            check_mode(self.quantization_mode, None, type(self).__name__)
            self._swap_kernels()

    def _swap_kernels(self):
        for name, axes in self.int8_kernels().items():
            old = getattr(self, name)
            if old is None:
                continue
            q, scale = quantize_array(ops.convert_to_numpy(old), axes)
            self._untrack_variable(old)
            new = self.add_weight(
                name=name, shape=q.shape, dtype="int8", initializer="zeros", trainable=False
            )
            new.assign(q)
            setattr(self, name, new)
            scale_variable = self.add_weight(
                name=f"{name}_scale", shape=scale.shape, initializer="ones", trainable=False
            )
            scale_variable.assign(scale)
            setattr(self, f"{name}_scale", scale_variable)
        self._is_quantized = True
        if keras.backend.backend() == "torch" and self.built:
            self._track_variables()  # the parameters torch holds changed

    def _int8_call(self, *args, **kwargs):
        return self.call(*args, **kwargs)


def keras_config(config):
    """The config given to Keras's `Dense`/`EinsumDense`: `config`, or by
    default weight-only (Keras's own default also quantizes the inputs)."""
    if config is None:
        return keras.quantizers.Int8QuantizationConfig(
            weight_quantizer=None, activation_quantizer=None
        )
    return config


def quantize_layers(root, config=None):
    """Quantize every layer inside `root` (not `root` itself) that can be:
    this library's `Int8Kernels` layers, weight-only, and Keras's `Dense`
    and `EinsumDense` with `config` (default weight-only, per output
    channel) and `Embedding` (per row, weight-only). Other layers keep
    their float weights. Returns the layers quantized."""
    done = []
    for layer in root._flatten_layers(include_self=False, recursive=True):
        if not layer.built or layer.quantization_mode is not None:
            continue
        if isinstance(layer, Int8Kernels):
            if layer.int8_kernels():
                layer.quantize(MODE, config=keras_config(None))
                done.append(layer)
            continue
        keras_layers = (keras.layers.Dense, keras.layers.EinsumDense, keras.layers.Embedding)
        if isinstance(layer, keras_layers):
            embedding = isinstance(layer, keras.layers.Embedding)
            layer_config = keras_config(None if embedding else config)
            try:
                layer.quantize(MODE, config=layer_config)
            except NotImplementedError:
                continue  # a subclass Keras refuses to quantize: stays float
            done.append(layer)
    return done
