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

A search reads the same kernels at every step of its loop; inside
`with dequantized(model):` every int8 kernel is turned into its float
value `W = cast(q) · s` once, on entering, and the layers compute with
those tensors (`x · W`, no cast or scale per step); the layers that lay
out kernels for their step's products (`loop_kernels`: `MultiHead`'s
query, key and value side by side, a tied output projection's table
transposed) get those too, float models included. The searches of
`seq2seq/` enter it around their loop (after the encoder, which reads each
kernel once anyway), so in a traced search the loop body reads
loop-invariant float tensors. The price is memory: a float32 copy of the
quantized kernels and of the laid-out ones while the scope is open, per
call (per request, in an export).

Everything here uses `keras.ops` (TensorFlow, JAX, PyTorch). A layer of
this library takes part through `Int8Kernels`, a mixin that implements
Keras's layer protocol (`quantize(mode, type_check, config)`, the
quantized dtype policy, `_int8_call`); `quantize_layers` walks a model and
quantizes its layers, this library's and Keras's `Dense`, `EinsumDense`
and `Embedding` (weight-only too, by default).
"""

import contextlib
import threading
import types

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
    the weight is float. The weight is `kernel · scale` (see `rescale`).
    Inside `dequantized`, an int8 weight is its float value `q · s`
    computed on entering, with scale None."""
    value = _scoped(layer, name)
    if value is not None:
        return ops.cast(value, dtype), None
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


# The name under which a tied projection's owner lays out its table.
TIED_OUTPUT_KERNEL = "tied_output_kernel"


def tied_logits(owner, table_layer, x):
    """`x · Eᵀ` `(..., V)`, `E` the token table `(V, D)` of `table_layer`
    (its `embeddings`, int8 with per-row scales or float): a tied output
    projection. Inside a search's scope it reads `owner`'s laid-out
    table (`owner.loop_kernels`, from `tied_loop_kernels`)."""
    laid_out = _scoped(owner, TIED_OUTPUT_KERNEL)
    if laid_out is not None:
        return ops.matmul(x, ops.cast(laid_out, x.dtype))
    table, scale = kernel(table_layer, "embeddings", x.dtype)
    return rescale(ops.matmul(x, ops.transpose(table)), scale)


def tied_loop_kernels(table_layer, dtype):
    """`loop_kernels` of a tied projection's owner: `{TIED_OUTPUT_KERNEL:
    Eᵀ}`, `Eᵀ` `(D, V)` the float value of `table_layer`'s token table
    transposed, for `tied_logits`: laid out once before a search's loop.
    Transposed inside the loop, the table fed XLA's CPU compiler a
    batch-1 product that it emits as an elemental loop over a copy of the
    table made at every step; laid out, the copy is made once a call."""
    table, scale = kernel(table_layer, "embeddings", dtype)
    if scale is not None:  # one scale per row (token): the logits' columns
        table = table * ops.reshape(scale, (-1, 1))
    return {TIED_OUTPUT_KERNEL: ops.transpose(table)}


def column_projection(columns, dtype, dense=None, table_layer=None, bias=None):
    """`features (B, D) -> logits (B, K)` over the output ids `columns (K,)`
    of an output projection, its weights gathered once here: a `Dense`
    (`dense`), or a tied embedding table (`table_layer`, its `embeddings`
    read as `(V, D)`) with its `bias (V,)`. This library's int8 tables
    keep their per-column scales; a Keras int8 `Dense` must be read inside
    `dequantized` (its float kernel)."""
    if dense is not None:
        weight, scale = kernel(dense, "kernel", dtype)
        if scale is not None:  # Keras's int8 `Dense` divides by its scale, and may quantize inputs
            raise ValueError(
                f"`dense` of column_projection: the int8 Keras Dense {dense.name!r} must be read "
                "inside quantization.dequantized, which turns weight-only int8 kernels into "
                "float ones; one that also quantizes its inputs cannot project onto columns "
                "(quantize the model weight-only, the default)."
            )
        weight = ops.take(weight, columns, axis=1)
        bias = dense.bias if dense.use_bias else None
    else:
        table, scale = kernel(table_layer, "embeddings", dtype)
        weight = ops.transpose(ops.take(table, columns, axis=0))
    if scale is not None:
        scale = ops.take(ops.reshape(scale, (-1,)), columns, axis=0)
    bias = None if bias is None else ops.take(ops.cast(bias, dtype), columns, axis=0)

    def project(features):
        logits = rescale(ops.matmul(features, weight), scale)
        return logits if bias is None else logits + bias

    return project


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


# -- dequantizing once per call ------------------------------------------------
# Each thread's open `dequantized` scopes, innermost last: `{(id(layer),
# name): float kernel}`. Per thread, because a scope is entered while a call
# runs or is traced, and another thread may run the same model meanwhile.
_open_scopes = threading.local()
# Keras layers whose `_int8_call` reads the scopes, and how many open scopes
# (of any thread) hold each: the instance method is put back at zero.
_keras_lock = threading.Lock()
_keras_layers = {}


def _scopes():
    if not hasattr(_open_scopes, "stack"):
        _open_scopes.stack = []
    return _open_scopes.stack


def _scoped(layer, name):
    """The float kernel `name` of `layer` in this thread's innermost open
    `dequantized` scope that holds it, else None."""
    for kernels in reversed(_scopes()):
        value = kernels.get((id(layer), name))
        if value is not None:
            return value
    return None


def prepared(layer, name):
    """The tensor `name` that this thread's innermost open `dequantized`
    scope laid out for `layer` (`loop_kernels`), else None."""
    return _scoped(layer, name)


def dequantize(value, scale, axes, dtype):
    """`W = cast(q) · s` in `dtype`: the int8 `value` times its per-output-
    channel `scale` (the shape of `value` without the reduced `axes`),
    broadcast over `axes`."""
    axes = tuple(int(axis) for axis in np.atleast_1d(axes) % len(value.shape))
    shape = [1 if axis in axes else size for axis, size in enumerate(value.shape)]
    return ops.cast(value, dtype) * ops.reshape(ops.cast(scale, dtype), shape)


def _keras_float_kernel(layer):
    """The float kernel of a weight-only int8 Keras `Dense` or `EinsumDense`
    (Keras's convention: `W = cast(q) / s`), None for other layers and for
    those that also quantize their inputs or carry a LoRA update (their
    per-step path stays as Keras computes it)."""
    if not isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
        return None
    if layer.quantization_mode != MODE or getattr(layer, "inputs_quantizer", None) is not None:
        return None
    if getattr(layer, "lora_enabled", False):
        return None
    scale = ops.convert_to_tensor(layer.kernel_scale)
    if isinstance(layer, keras.layers.EinsumDense):
        scale = layer._adjust_scale_for_dequant(scale)  # back to the kernel's layout
    dtype = layer.compute_dtype
    return ops.cast(layer._kernel, dtype) / ops.cast(scale, dtype)


def _dequantized_int8_call(self, inputs, training=None):
    """`_int8_call` of a Keras `Dense`/`EinsumDense` while a `dequantized`
    scope is open: the layer's float computation on the scope's kernel
    (Keras's own int8 call, which casts the int8 kernel, outside one)."""
    weight = _scoped(self, "kernel")
    if weight is None:
        return type(self)._int8_call(self, inputs, training=training)
    weight = ops.cast(weight, inputs.dtype)
    if isinstance(self, keras.layers.EinsumDense):
        x = ops.einsum(self.equation, inputs, weight)
    else:
        x = ops.matmul(inputs, weight)
    if self.bias is not None:
        x = ops.add(x, ops.cast(self.bias, x.dtype))
    if self.activation is not None:
        x = self.activation(x)
    return x


def _hold_keras_layer(layer):
    with _keras_lock:
        count = _keras_layers.get(id(layer), 0)
        if count == 0:  # an instance attribute, past Keras's attribute tracking
            object.__setattr__(layer, "_int8_call", types.MethodType(_dequantized_int8_call, layer))
        _keras_layers[id(layer)] = count + 1


def _release_keras_layer(layer):
    with _keras_lock:
        count = _keras_layers.pop(id(layer)) - 1
        if count:
            _keras_layers[id(layer)] = count
        else:
            object.__delattr__(layer, "_int8_call")


def _float_kernels(model):
    """`({(id(layer), name): W}, Keras layers among them)` of `model`'s
    int8 kernels (see `dequantized`)."""
    kernels, keras_layers = {}, []
    if not isinstance(model, keras.layers.Layer):
        return kernels, keras_layers
    layers = list(model._flatten_layers(include_self=True))
    for layer in layers:
        if isinstance(layer, Int8Kernels):
            dtype = float_policy(layer.dtype_policy).compute_dtype
            for name, axes in layer.int8_kernels().items():
                scale = getattr(layer, f"{name}_scale", None)
                if scale is not None:
                    value = getattr(layer, name)
                    kernels[(id(layer), name)] = dequantize(value, scale, axes, dtype)
            continue
        weight = _keras_float_kernel(layer)
        if weight is not None:
            kernels[(id(layer), "kernel")] = weight
            keras_layers.append(layer)
    laid_out = {}
    for layer in layers:
        if hasattr(layer, "loop_kernels") and layer.built:  # an unbuilt layer has no kernels
            dtype = float_policy(layer.dtype_policy).compute_dtype
            float_kernel = _float_kernel_of(layer, kernels, dtype)
            for name, value in layer.loop_kernels(float_kernel).items():
                laid_out[(id(layer), name)] = value
    return {**kernels, **laid_out}, keras_layers


def _float_kernel_of(layer, kernels, dtype):
    """`name -> ` the float value of `layer`'s kernel `name`: dequantized
    (in `kernels`) or the float variable cast to `dtype`."""

    def float_kernel(name):
        value = kernels.get((id(layer), name))
        return ops.cast(getattr(layer, name), dtype) if value is None else value

    return float_kernel


@contextlib.contextmanager
def dequantized(model):
    """Inside the scope, the int8 kernels of `model` (a Keras layer or
    model; every layer inside it, itself included) are float tensors
    computed once, on entering:

        W = cast(q) · s        (this library's layers; `kernel` returns W)
        W = cast(q) / s        (Keras's weight-only int8 `Dense`, `EinsumDense`)

    and each product is `x · W`: the arithmetic of the float model whose
    weights are the dequantized `W`. A search enters it once per call
    around its loop, so in a traced graph the loop body reads `W` as a
    loop-invariant tensor instead of casting the int8 variables at every
    step. Token lookups still gather int8 rows (Keras's `Embedding` and
    `TokenAndPositionEmbedding` never read a whole table to look up a
    row); a token table's float value is used by a tied output projection.
    Layers that quantize their inputs too keep Keras's own int8 call.

    The scope also holds, for float layers too, the kernels that a layer
    lays out for a decoding loop's products (`loop_kernels(kernel)`,
    `kernel(name)` a kernel's float value): `MultiHead`'s query, key and
    value kernels side by side (`heads.project_heads` reads them with
    `prepared`), a tied output projection's token table (`tied_logits`).
    A search's loop then reads them as loop-invariant inputs.

    Memory: a float copy of every int8 kernel lives as long as the scope
    (per call; per request in a SavedModel), four times the int8 bytes,
    and a copy of the laid-out kernels; in a `tf.function` the ones the
    call never reads are pruned from the graph. A float model without such
    layers, or an object that is not a Keras layer, enters an empty scope.

    Example:

    >>> from keras_attention import MultiHead
    >>> layer = MultiHead(num_heads=2, key_dim=4)
    >>> x = np.ones((1, 3, 8), "float32")
    >>> _ = layer(x, x)
    >>> layer.quantize("int8")
    >>> with dequantized(layer):
    ...     once = ops.convert_to_numpy(layer(x, x))
    >>> bool(np.allclose(once, ops.convert_to_numpy(layer(x, x)), atol=1e-6))
    True
    """
    kernels, keras_layers = _float_kernels(model)
    if not kernels:
        yield
        return
    _scopes().append(kernels)
    for layer in keras_layers:
        _hold_keras_layer(layer)
    try:
        yield
    finally:
        for layer in keras_layers:
            _release_keras_layer(layer)
        _scopes().pop()  # this one: scopes nest within a thread
