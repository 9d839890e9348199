"""TensorFlow-only code: the `Translator` and its SavedModel export for
TensorFlow Serving, versioned exports, the op check and request checks.
Install with `pip install keras_attention[tensorflow]`.

    translator.py   Translator: a model, its tokenizers and a search; in process and exported
    graph.py        the bodies of the Translator's signatures (graph functions)
    records.py      what an export records about itself: versions, quantization, sizes
    buckets.py      XLA exports: searches compiled for fixed shape buckets, their warm-up
    versions.py     versioned atomic SavedModel exports, warm-up requests
    export.py       0.2.0's names (translator_archive, ...), thin wrappers kept for old code
    check.py        an export's ops against TF Serving releases' op lists
    requests.py     graph checks of a served request's inputs (first line: the input and the rule)
    exporters.py    exporters as objects: SavedModelExporter, CTranslate2Exporter, get_exporter
    ctranslate2.py  a TransformerSeq2Seq converted to a CTranslate2 model (needs ctranslate2)

The tokenizers and number protection live in `keras_attention.tokenizers`,
the multi-worker training adaptations in `keras_attention.training`; their
old paths here (`text.py`, `numbers.py`, `distribute.py`) still work, with a
`DeprecationWarning`.

Importing this package changes nothing in the layers: their run-time
checks (`validation.assert_at_run_time`) depend on the Keras backend alone.
"""

import importlib.util

_MISSING = [
    name for name in ("tensorflow", "tensorflow_text") if importlib.util.find_spec(name) is None
]
if "tensorflow" in _MISSING:
    raise ImportError(
        "keras_attention.serving needs TensorFlow (the Translator, SavedModel export), "
        "which is not installed. Install it with `pip install keras_attention[tensorflow]` "
        "(tensorflow and tensorflow-text); the layers and keras_attention.seq2seq work "
        "without it."
    )


def __getattr__(name):
    # Imported on first use: `Translator` pulls in the models and generation.
    if name == "Translator":
        from keras_attention.serving.translator import Translator

        return Translator
    if name == "NumberProtection":
        from keras_attention.tokenizers.numbers import NumberProtection

        return NumberProtection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
