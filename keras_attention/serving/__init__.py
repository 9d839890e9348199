"""TensorFlow-only code: SavedModel export for TensorFlow Serving, the
in-graph subword tokenizer, and the workarounds multi-worker training needs
on TensorFlow. Install with `pip install keras_attention[tensorflow]`.

    export.py       versioned atomic SavedModel exports, warm-up requests
    text.py         SubwordTokenizer (WordPiece, TensorFlow Text)
    distribute.py   MultiWorkerMirroredStrategy adaptations of a model
    check.py        an export's ops against TF Serving releases' op lists
"""

import importlib.util

_MISSING = [
    name for name in ("tensorflow", "tensorflow_text") if importlib.util.find_spec(name) is None
]
if "tensorflow" in _MISSING:
    raise ImportError(
        "keras_attention.serving needs TensorFlow (export, tokenizer, multi-worker training), "
        "which is not installed. Install it with `pip install keras_attention[tensorflow]` "
        "(tensorflow and tensorflow-text); the layers and keras_attention.seq2seq work "
        "without it."
    )
