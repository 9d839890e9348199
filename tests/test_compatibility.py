"""Files written by keras_attention 0.1.0 (before the three-tier layout)
load and compute what they computed then (`tests/data/v0_1_0`, made by
`tests/data/make_v0_1_0_fixtures.py` at commit 88acf34)."""

import glob
import json
import os
import warnings

import keras
import numpy as np
import pytest

import keras_attention  # noqa: F401  (registers the classes)

DATA = os.path.join(os.path.dirname(__file__), "data", "v0_1_0")
NAMES = sorted(
    os.path.basename(p)[: -len(".keras")] for p in glob.glob(os.path.join(DATA, "*.keras"))
)


def test_every_family_has_a_fixture():
    assert {
        "rnn_general",
        "rnn_local",
        "rnn_multihead",
        "rnn_none",
        "convs2s",
        "transformer",
        "general",
        "local",
        "multihead",
        "glu",
        "convs2s_encoder",
    } <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_0_1_0_file_loads_with_the_same_outputs(name):
    saved = np.load(os.path.join(DATA, f"{name}.npz"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # loading old names is quiet
        loaded = keras.saving.load_model(os.path.join(DATA, f"{name}.keras"))
    if "source" in saved:
        output = loaded((saved["source"], saved["target_in"]))
    else:
        inputs = [saved[key] for key in sorted(k for k in saved.files if k.startswith("arr_"))]
        output = loaded(*inputs)
        output = output[0] if isinstance(output, (tuple, list)) else output
    np.testing.assert_allclose(keras.ops.convert_to_numpy(output), saved["output"], atol=1e-5)


# -- 0.2.0: the files written before the decoding objects, the Translator and the recipe
# package (`tests/data/v0_2_0`, made by `tests/data/make_v0_2_0_fixtures.py` at 5d4ad2c).
DATA_0_2_0 = os.path.join(os.path.dirname(__file__), "data", "v0_2_0")
MODELS_0_2_0 = ("convs2s", "rnn_additive", "transformer")


@pytest.mark.parametrize("name", MODELS_0_2_0)
def test_0_2_0_model_loads_with_the_same_logits_and_searches(name):
    """A 0.2.0 `.keras` file loads quietly and computes the logits, greedy
    search and beam search 0.2.0 computed, called as 0.2.0 code called them."""
    from keras_attention.seq2seq import beam_search, greedy_search

    saved = np.load(os.path.join(DATA_0_2_0, f"{name}.npz"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        model = keras.saving.load_model(os.path.join(DATA_0_2_0, f"{name}.keras"))
    logits = model((saved["source"], saved["target_in"]))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(logits), saved["output"], atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 0.2.0's `return_attention`
        greedy = greedy_search(model, saved["source"], 6, return_attention=True)
    beam = beam_search(
        model, saved["source"], 6, beam_width=3, num_hypotheses=2, alpha=0.8, min_length=1
    )
    for prefix, result in (("greedy_", greedy), ("beam_", beam)):
        for key in (k[len(prefix) :] for k in saved.files if k.startswith(prefix)):
            value = keras.ops.convert_to_numpy(result[key])
            if key in ("tokens", "lengths"):
                np.testing.assert_array_equal(value, saved[prefix + key], err_msg=prefix + key)
            else:
                np.testing.assert_allclose(value, saved[prefix + key], atol=1e-4)


def _plain(outputs):
    """Signature outputs as the fixture's JSON holds them."""
    plain = {}
    for name, value in outputs.items():
        value = value.numpy()
        if isinstance(value, bytes):
            plain[name] = value.decode("utf-8")
            continue
        value = np.asarray(value)
        if value.dtype == object:
            value = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value)
        plain[name] = value.tolist()
    return plain


def _assert_same_outputs(outputs, expected):
    for signature, values in expected.items():
        for name, value in values.items():
            got = outputs[signature][name]
            if isinstance(value, str) or (isinstance(value, list) and _holds_strings(value)):
                assert got == value, (signature, name)
            else:
                np.testing.assert_allclose(got, value, atol=1e-4, err_msg=f"{signature}/{name}")


def _holds_strings(value):
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, str)


def _signature_outputs(signatures, texts):
    import tensorflow as tf

    text = tf.constant(texts)
    return {
        "serving_default": _plain(signatures["serving_default"](text=text)),
        "greedy": _plain(signatures["greedy"](text=text)),
        "nbest": _plain(signatures["nbest"](text=text)),
        "constrained": _plain(
            signatures["constrained"](text=text, prefix=tf.constant(["habe", "", "zeit", ""]))
        ),
    }


def _expected_translator_outputs():
    with open(os.path.join(DATA_0_2_0, "translator_outputs.json")) as handle:
        expected = json.load(handle)
    texts = expected.pop("texts")
    options = expected.pop("decoding_options")
    return texts, expected, options


@pytest.mark.tensorflow
def test_0_2_0_export_loads_and_answers_as_it_did():
    """The SavedModel 0.2.0 exported loads (TensorFlow and TF Text only) and
    its signatures give the outputs recorded when it was written."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops of the tokenizer)

    texts, expected, options = _expected_translator_outputs()
    loaded = tf.saved_model.load(os.path.join(DATA_0_2_0, "exports", "translator", "1"))
    _assert_same_outputs(_signature_outputs(loaded.signatures, texts), expected)
    recorded = _plain(loaded.signatures["decoding_options"]())
    assert recorded.keys() == options.keys()
    for name, value in options.items():
        if isinstance(value, str):  # the options as JSON, under a key that lists them
            assert json.loads(recorded[name]) == pytest.approx(json.loads(value))
        else:
            assert recorded[name] == pytest.approx(value)


@pytest.mark.tensorflow
@pytest.mark.large
def test_0_2_0_translator_exported_again_answers_the_same(tmp_path):
    """The 0.2.0 translator's `.keras` file and vocabulary, exported by
    today's code with 0.2.0's call, answer every request as 0.2.0's export."""
    import tensorflow as tf

    from keras_attention.serving.export import export_archive, translator_archive
    from keras_attention.tokenizers import SubwordTokenizer

    texts, expected, _ = _expected_translator_outputs()
    model = keras.saving.load_model(os.path.join(DATA_0_2_0, "translator.keras"))
    tokenizer = SubwordTokenizer(os.path.join(DATA_0_2_0, "translator_vocab.txt"))
    archive = translator_archive(
        model, tokenizer, tokenizer, max_length=6, beam_width=3, alpha=0.9, min_length=1
    )
    path = export_archive(archive, str(tmp_path), "translator")
    loaded = tf.saved_model.load(path)
    # Changed since 0.2.0: a blank text's scores are 0 (0.2.0 gave the score
    # of the search on an empty source beside its "" translation).
    blank = [not text.strip() for text in texts]
    for values in expected.values():
        for name in ("score", "scores"):
            if name in values:
                values[name] = [
                    np.zeros_like(value).tolist() if empty else value
                    for value, empty in zip(values[name], blank)
                ]
    assert any(blank)
    _assert_same_outputs(_signature_outputs(loaded.signatures, texts), expected)
    # Changed since 0.2.0: the options' JSON under the plain key `options`.
    _, _, options = _expected_translator_outputs()
    recorded = _plain(loaded.signatures["decoding_options"]())
    (old_key,) = [name for name in options if name.startswith("options: ")]
    assert json.loads(recorded["options"]) == pytest.approx(json.loads(options[old_key]))
    assert recorded["summary"] == old_key[len("options: ") :]
