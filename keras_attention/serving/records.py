"""What an export records about itself, and the sizes and quantization
behind it (TensorFlow-specific): `write_export_record` writes
`assets.extra/keras_attention.json` into each `Translator.export`,
`export_record` reads it; `quantized_copy` makes the int8 copy that
`Translator.quantized` and `export(quantize="int8")` use.
"""

import json
import math
import os

import numpy as np
import tensorflow as tf

from keras_attention.serving.buckets import SEARCHING, SERVER_FLAG

# `Translator.export(quantize=...)`: weight-only int8 (`Seq2Seq.quantize`).
QUANTIZATIONS = ("int8",)
# What an export writes about itself, beside the warm-up requests
# (`assets.extra/` is not loaded by TF Serving): `export_record`.
EXPORT_RECORD = os.path.join("assets.extra", "keras_attention.json")


def quantization_of(model):
    """The quantization mode of `model` or of any of its layers ("int8"),
    None when every layer is float."""
    modes = {getattr(model, "quantization_mode", None)}
    modes |= {getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()}
    modes.discard(None)
    return ", ".join(sorted(modes)) or None


def float_copy(model):
    """A copy of the built `model`: its config, built, its weights."""
    copy = type(model).from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    return copy


def quantized_copy(model, mode):
    """A copy of the built `model` (`float_copy`), then quantized in place
    (`model.quantize(mode)`: weight-only int8); `model` is not changed."""
    copy = float_copy(model)
    copy.quantize(mode)
    return copy


def variables_bytes(version_dir):
    """The bytes of a SavedModel's `variables/` on disk (its checkpoint:
    every weight of the model, and the tokenizers' few)."""
    folder = os.path.join(version_dir, "variables")
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def _nbytes(model):
    return sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.variables)


def float32_variables_bytes(version_dir, translator):
    """The bytes `variables/` would take in the float32 export of the
    model a quantized `translator` was made from (`Translator.quantized`):
    the export's, each variable of the quantized copy taken out and each of
    the float model put in (a checkpoint stores them raw, so this is the
    float export's size but for the index entries of the quantized copy's
    extra variables, the scales: tens of bytes each)."""
    return (
        variables_bytes(version_dir) - _nbytes(translator.model) + _nbytes(translator.float_model)
    )


def write_export_record(version_dir, translator):
    """Write `assets.extra/keras_attention.json` into an export of
    `translator`: `keras_attention` and `tensorflow` (the versions that
    wrote it), `quantization` ("int8" or None), `variables_bytes` (its
    `variables/` on disk) and `float32_variables_bytes` (the same model's
    float32 export's; None for a model quantized before the Translator
    was made) and `xla`: None, or for an XLA export (`Translator.xla_compiled`)
    its buckets (`batch_sizes`, `source_lengths`), the searching
    `signatures`, `programs` (signatures x batch sizes x source lengths)
    and the `server_flags` TF Serving needs to run it; `shortlist`: None,
    or the `Shortlist`'s config (its table is `assets/shortlist.npz`).
    Returns the record."""
    import keras_attention

    size = variables_bytes(version_dir)
    quantization = translator.quantization
    if quantization is None:
        float32 = size
    elif translator.float_model is not None:
        float32 = float32_variables_bytes(version_dir, translator)
    else:
        float32 = None
    record = {
        "keras_attention": keras_attention.__version__,
        "tensorflow": tf.__version__,
        "quantization": quantization,
        "variables_bytes": size,
        "float32_variables_bytes": float32,
        "xla": xla_record(translator),
        "shortlist": None if translator.shortlist is None else translator.shortlist.get_config(),
    }
    path = os.path.join(version_dir, EXPORT_RECORD)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return record


def xla_record(translator):
    """The `xla` entry of the export record of `translator` (None unless
    its searches are compiled by XLA: `Translator.bucketed`)."""
    bucketed = translator.bucketed
    if bucketed is None:
        return None
    batch_sizes, lengths = list(bucketed.batch_sizes), list(bucketed.lengths)
    return {
        "batch_sizes": batch_sizes,
        "source_lengths": lengths,
        "signatures": list(SEARCHING),
        "programs": len(SEARCHING) * len(batch_sizes) * len(lengths),
        "server_flags": [SERVER_FLAG],
    }


def export_record(version_dir):
    """The record `Translator.export` wrote about a version
    (`write_export_record`): a dict, None for an export without one
    (one written before exports recorded themselves)."""
    path = os.path.join(version_dir, EXPORT_RECORD)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
