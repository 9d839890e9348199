"""`keras_attention.serving.exporters`: the registry (`get_exporter`,
`register_exporter`), `SavedModelExporter` writing what `Translator.export`
writes (the same signatures, the same answers), its int8 and XLA options,
`CTranslate2Exporter` and its refusal to pass our GNMT alpha as
CTranslate2's length penalty, and the layers' run-time checks, the same
whether or not `keras_attention.serving` was imported. One untrained tiny
RNN translator, exported once each way."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow

tf = pytest.importorskip("tensorflow")

from keras_attention.serving.exporters import (  # noqa: E402
    EXPORTERS,
    CTranslate2Exporter,
    Exporter,
    SavedModelExporter,
    get_exporter,
    register_exporter,
)

TEXTS = ["ich habe zeit", "habe", "", "zeit ich habe keine zeit wir gehen"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """`(translator, {"exporter": loaded, "translator": loaded})`: one tiny
    RNN translator exported by `SavedModelExporter` and by
    `Translator.export` (its signatures are traced once, for both)."""
    import tensorflow_text  # noqa: F401  (the tokenizers' ops)

    from tests.test_export import tiny_translator_of

    directory = tmp_path_factory.mktemp("exporters")
    translator = tiny_translator_of("rnn", directory)
    base = str(directory / "exports")
    by_exporter = SavedModelExporter().export(translator, base, "by_exporter")
    by_translator = translator.export(base, "by_translator")
    return translator, {
        "exporter": (by_exporter, tf.saved_model.load(by_exporter)),
        "translator": (by_translator, tf.saved_model.load(by_translator)),
    }


# -- the registry --------------------------------------------------------------
def test_the_registry_names_both_exporters_and_makes_them_with_their_options():
    assert {"saved_model", "ctranslate2"} <= set(EXPORTERS)
    saved = get_exporter("saved_model", quantize="int8", xla=True, buckets={"batch_sizes": [2]})
    assert isinstance(saved, SavedModelExporter) and saved.name == "saved_model"
    assert saved.get_config() == {
        "quantize": "int8",
        "xla": True,
        "buckets": {"batch_sizes": [2], "source_lengths": None},
        "shortlist": None,
    }
    assert SavedModelExporter(**saved.get_config()).get_config() == saved.get_config()
    converter = get_exporter("ctranslate2", quantization="int8", length_penalty=1)
    assert isinstance(converter, CTranslate2Exporter) and converter.name == "ctranslate2"
    assert converter.get_config() == {
        "quantization": "int8",
        "length_penalty": 1.0,
        "max_positions": None,
        "shortlist": None,
    }
    assert repr(get_exporter("saved_model")) == (
        "SavedModelExporter(quantize=None, xla=False, buckets=None, shortlist=None)"
    )


def test_an_unknown_exporter_name_is_refused_naming_the_choices():
    for name in ("onnx", "SavedModel", None):
        with pytest.raises(ValueError) as raised:
            get_exporter(name)
        assert str(raised.value) == (
            f"`name` of get_exporter must be one of {sorted(EXPORTERS)}; received name={name!r}."
        )


def test_register_exporter_adds_a_name_and_refuses_a_taken_one(monkeypatch):
    monkeypatch.setattr("keras_attention.serving.exporters.EXPORTERS", dict(EXPORTERS))
    from keras_attention.serving import exporters

    @register_exporter("listing")
    class Listing(Exporter):
        def __init__(self, prefix=""):
            self.prefix = prefix

        def export(self, translator, export_dir):
            return self.prefix + export_dir

    assert exporters.EXPORTERS["listing"] is Listing and Listing.name == "listing"
    assert get_exporter("listing", prefix="at ").export(None, "here") == "at here"
    with pytest.raises(ValueError, match=r"must be a new name; 'saved_model' is SavedModel"):
        register_exporter("saved_model")(Listing)
    with pytest.raises(ValueError, match=r"must be a non-empty string; received name=''"):
        register_exporter("")(Listing)


@pytest.mark.parametrize(
    "make,message",
    [
        (
            lambda: SavedModelExporter(quantize="int4"),
            "`quantize` of SavedModelExporter must be one of [None, 'int8']; "
            "received quantize='int4'.",
        ),
        (
            lambda: SavedModelExporter(xla="yes"),
            "`xla` of SavedModelExporter must be one of [False, True]; received xla='yes'.",
        ),
        (
            lambda: SavedModelExporter(buckets={"batch_sizes": [2]}),
            "`buckets` of SavedModelExporter needs xla=True; got {'batch_sizes': [2]}.",
        ),
        (
            lambda: CTranslate2Exporter(quantization="int4"),
            "`quantization` of CTranslate2Exporter must be one of [None, 'int8', "
            "'int8_float32', 'float16']; received quantization='int4'.",
        ),
        (
            lambda: CTranslate2Exporter(length_penalty=float("nan")),
            "`length_penalty` of CTranslate2Exporter must be None or a finite number "
            "(CTranslate2's |Y|^length_penalty); received length_penalty=nan.",
        ),
        (
            lambda: SavedModelExporter(shortlist=64),
            "`shortlist` of SavedModelExporter must be a keras_attention.seq2seq.Shortlist or "
            "None; received 64.",
        ),
        (
            lambda: CTranslate2Exporter(shortlist={"size": 64}),
            "`shortlist` of CTranslate2Exporter must be a keras_attention.seq2seq.Shortlist or "
            "None; received {'size': 64}.",
        ),
        (
            lambda: CTranslate2Exporter(max_positions=0),
            "`max_positions` of CTranslate2Exporter must be None or a positive integer; "
            "received max_positions=0.",
        ),
    ],
)
def test_bad_options_are_refused_when_the_exporter_is_made(make, message):
    with pytest.raises(ValueError) as raised:
        make()
    assert str(raised.value) == message


# -- SavedModelExporter --------------------------------------------------------------
def test_the_exporter_writes_what_translator_export_wrote(exports):
    """The same signatures, inputs and outputs, the same answers in every
    signature (and those of the Translator in process), the same record."""
    from keras_attention.serving.graph import SIGNATURES
    from keras_attention.serving.records import export_record

    translator, written = exports
    (path, by_exporter), (theirs, by_translator) = written["exporter"], written["translator"]
    assert sorted(by_exporter.signatures) == sorted(by_translator.signatures) == sorted(SIGNATURES)
    text = tf.constant(TEXTS)
    ids, _ = translator.encode(text)
    inputs = {
        "tokens": {"token_ids": ids, "lengths": tf.reduce_sum(tf.cast(ids != 0, tf.int32), 1)},
        "constrained": {"text": text, "prefix": tf.constant(["", "ich", "", "zeit"])},
        "decoding_options": {},
    }
    for name in SIGNATURES:
        given = inputs.get(name, {"text": text})
        ours, before = (
            by_exporter.signatures[name](**given),
            by_translator.signatures[name](**given),
        )
        assert sorted(ours) == sorted(before), name
        for key in ours:
            np.testing.assert_array_equal(ours[key].numpy(), before[key].numpy(), err_msg=name)
    served = by_exporter.signatures["serving_default"](text=text)["translation"].numpy()
    assert [t.decode() for t in served] == translator.translate(TEXTS)
    assert any(served) and served[2] == b""
    # The SavedModel against the Translator in process, signature by signature.
    greedy = by_exporter.signatures["greedy"](text=text)["translation"].numpy()
    assert [t.decode() for t in greedy] == translator.greedy(TEXTS)
    prefixes = ["", "ich", "", "zeit"]
    constrained = by_exporter.signatures["constrained"](text=text, prefix=tf.constant(prefixes))
    assert [t.decode() for t in constrained["translation"].numpy()] == translator.constrained(
        TEXTS, prefixes
    )
    record, before = export_record(path), export_record(theirs)
    assert record["quantization"] is None and record["xla"] is None
    assert {k: v for k, v in record.items() if k != "variables_bytes"} == {
        k: v for k, v in before.items() if k != "variables_bytes"
    }


def test_the_int8_and_xla_options_prepare_the_translator_export_writes(exports):
    """`prepared` is what `export` writes: the int8 copy (the Translator's
    own model untouched) and XLA buckets. The int8 and XLA exports
    themselves are tested through `Translator.export`, now a call on this
    exporter (tests/test_export.py, tests/test_xla_export.py)."""
    translator, _ = exports
    assert SavedModelExporter().prepared(translator) is translator
    int8 = SavedModelExporter(quantize="int8").prepared(translator)
    assert int8.quantization == "int8" and translator.quantization is None
    assert int8.float_model is translator.model and int8.bucketed is None
    xla = SavedModelExporter(xla=True, buckets={"batch_sizes": [2, 4], "source_lengths": [4]})
    compiled = xla.prepared(translator)
    assert compiled.model is translator.model and translator.bucketed is None
    assert compiled.bucketed.batch_sizes == (2, 4) and compiled.bucketed.lengths == (4, 7)
    assert xla.prepared(compiled) is compiled  # XLA-compiled already: as it is
    both = SavedModelExporter(quantize="int8", xla=True).prepared(translator)
    assert both.quantization == "int8" and both.bucketed.batch_sizes == (1, 8, 32)
    with pytest.raises(ValueError) as raised:
        SavedModelExporter(quantize="int8").prepared(int8)
    assert str(raised.value) == (
        "`quantize` of SavedModelExporter: the model is quantized already (int8); export it "
        "with quantize=None, or quantize a float model."
    )


# -- CTranslate2Exporter ----------------------------------------------------------
def ctranslate2_translator(directory, search):
    """A tiny Transformer translator with `search` over the test vocabulary."""
    from keras_attention.serving import Translator
    from tests.test_export import tiny_quantizable
    from tests.test_translator import word_tokenizer

    tokenizer, size = word_tokenizer(directory)
    model = tiny_quantizable("transformer", size)
    return Translator(model, tokenizer, tokenizer, search, max_source_length=7)


def test_the_ctranslate2_exporter_never_passes_alpha_as_length_penalty(tmp_path):
    from keras_attention.seq2seq.sampling import GreedySearch, RandomSampling
    from keras_attention.seq2seq.search import BeamSearch

    beam = ctranslate2_translator(tmp_path, BeamSearch(beam_width=3, alpha=0.6))
    with pytest.raises(ValueError) as raised:
        CTranslate2Exporter().translate_options(beam)
    assert str(raised.value).startswith(
        "`length_penalty` of CTranslate2Exporter must be given for a beam search with "
        "alpha=0.6: our beam divides by GNMT's ((5 + |Y|) / 6)^alpha, CTranslate2 by "
        "|Y|^length_penalty"
    )
    given = CTranslate2Exporter(length_penalty=1.0).translate_options(beam)
    assert given["beam_size"] == 3 and given["length_penalty"] == 1.0
    assert given["max_input_length"] == 7 and given["max_decoding_length"] == 8
    plain = ctranslate2_translator(tmp_path, BeamSearch(beam_width=3, alpha=0.0))
    assert CTranslate2Exporter().translate_options(plain)["length_penalty"] == 0.0
    greedy = ctranslate2_translator(tmp_path, GreedySearch(min_length=2))
    options = CTranslate2Exporter().translate_options(greedy)
    assert options["beam_size"] == 1 and options["min_decoding_length"] == 2
    sampling = ctranslate2_translator(tmp_path, RandomSampling())
    with pytest.raises(ValueError, match=r"must decode with GreedySearch or BeamSearch"):
        CTranslate2Exporter().translate_options(sampling)


def test_the_translate_path_refuses_a_runs_alpha_copied_into_length_penalty():
    from keras_attention.serving.ctranslate2 import checked_translate_options

    copied = {"translate_batch": {"beam_size": 4, "length_penalty": 0.6}}
    with pytest.raises(ValueError, match=r"holds length_penalty=0.6, a run's GNMT alpha"):
        checked_translate_options(copied, {}, "ct2_model")
    # The caller's own length penalty, a beam of 1, or the exporter's record pass.
    assert (
        checked_translate_options(copied, {"length_penalty": 1.0}, "m") == copied["translate_batch"]
    )
    assert checked_translate_options(copied, {"beam_size": 1}, "m")["length_penalty"] == 0.6
    marked = {**copied, "length_penalty_set_by": "CTranslate2Exporter"}
    assert checked_translate_options(marked, {}, "m")["length_penalty"] == 0.6
    with pytest.raises(ValueError, match=r"`alpha` of translate_with_ctranslate2 is not a"):
        checked_translate_options({}, {"alpha": 0.6}, "m")


def test_the_ctranslate2_exporter_writes_a_model_ctranslate2_loads(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="ctranslate2 is not installed")
    from keras_attention.seq2seq.sampling import GreedySearch

    translator = ctranslate2_translator(tmp_path, GreedySearch())
    out = get_exporter("ctranslate2").export(translator, str(tmp_path / "ct2"), metadata={"a": 1})
    with open(os.path.join(out, "keras_attention.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    assert record["a"] == 1 and record["length_penalty_set_by"] == "CTranslate2Exporter"
    assert record["translate_batch"] == CTranslate2Exporter().translate_options(translator)
    assert record["alpha"] is None and record["protect_numbers"] is False
    # The vocabularies are the tokenizer's pieces; CTranslate2's greedy
    # search gives our greedy search's tokens.
    source = ["[START]", "ich", "habe", "zeit", "[END]"]
    pieces = [p.decode() for p in np.asarray(translator.source_tokenizer.tokens(np.arange(5)))]
    assert pieces[:4] == ["[PAD]", "[START]", "[END]", "[UNK]"]
    loaded = ctranslate2.Translator(out, device="cpu")
    theirs = loaded.translate_batch([source[1:-1]], beam_size=1, max_decoding_length=8)
    ids, _ = translator.encode(tf.constant(["ich habe zeit"]))
    ours = translator.run_search(translator.greedy_search, ids)["tokens"].numpy()[0]
    tokens = [p.decode() for p in np.asarray(translator.target_tokenizer.tokens(ours))]
    ended = tokens.index("[END]") if "[END]" in tokens else len(tokens)
    assert theirs[0].hypotheses[0] == tokens[:ended]


# -- importing serving changes nothing in the layers ----------------------------------
# One process: the layer's check before `keras_attention.serving` is
# imported, then after.
LAYER_CHECK = """
import sys
import numpy as np
import keras
import tensorflow as tf
from keras_attention import PositionalEmbedding


def check():
    layer = PositionalEmbedding(4, mode="learned")
    layer.build((None, None, 2))
    call = tf.function(layer, input_signature=[tf.TensorSpec((1, None, 2))])
    try:
        out = call(np.zeros((1, 6, 2), "float32"))
        return f"unchecked {bool(np.isnan(np.asarray(out)).any())}"
    except Exception as error:
        return f"refused {'positions 0..3' in str(error)}"


before = check()
assert "keras_attention.serving" not in sys.modules
import keras_attention.serving  # noqa: E402, F401

print(before, "|", check())
"""


@pytest.mark.large(reason="two fresh processes")
def test_importing_serving_changes_no_run_time_check_of_the_layers():
    """On TensorFlow a learned position past `max_length` in a graph of
    unknown length is refused by the layer's run-time assert, with its
    message, before `keras_attention.serving` is imported and after."""
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", LAYER_CHECK],
        capture_output=True,
        text=True,
        env=environment,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "refused True | refused True"
