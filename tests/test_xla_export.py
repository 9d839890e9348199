"""XLA exports (`Translator.export(..., xla=True)`, `serving.buckets`): the
exported signatures answer what the plain Translator does, for request
sizes inside, between and above the batch buckets; the warm-up requests
select every bucket; the SavedModel's must-compile functions are exactly
the searching signatures', one per bucket, of fixed shapes; the batching
parameters; bad buckets. One untrained tiny RNN exported once with small
buckets (batch 2, widths 4 and S = 7: 12 programs, each traced by the
export and each one a request runs compiled in seconds); the other
families, int8 and two batch buckets are `large`."""

import json
import os

import numpy as np
import pytest

# Large (`make test-large`): two XLA exports of shape buckets traced and
# compiled; `make test` checks what the XLA option prepares
# (test_exporters.py) and the plain and int8 exports.
pytestmark = [pytest.mark.tensorflow, pytest.mark.large]

tf = pytest.importorskip("tensorflow")

from keras_attention.serving.buckets import (  # noqa: E402
    SEARCHING,
    XlaBuckets,
    batching_parameters,
    get_buckets,
    write_batching_parameters,
)

BUCKETS = {"batch_sizes": [2], "source_lengths": [4]}
# Two batch buckets: the large test (more programs to trace and compile).
LARGE_BUCKETS = {"batch_sizes": [2, 4], "source_lengths": [4]}
# The first text alone fits the width-4 bucket; with the second, S = 7.
TEXTS = ["habe", "ich habe zeit", "ich ich habe zeit zeit ich", "zeit .", "", "du hast keine"]


def xla_export_of(family, directory, quantize=None, buckets=BUCKETS):
    """`(plain Translator, XLA Translator, XLA export path)` of an untrained
    tiny model of `family`, a beam of 2, S = 7 (the XLA Translator is the
    one exported: its signatures are traced). With `quantize`, the export
    is `export(quantize=..., xla=True)`, the plain Translator its quantized
    copy in process and the XLA one None."""
    from tests.test_export import tiny_translator_of

    translator = tiny_translator_of(family, directory)
    exports = str(directory / "exports")
    if quantize is not None:
        path = translator.export(exports, "xla", quantize=quantize, xla=True, buckets=buckets)
        return translator.quantized(quantize), None, path
    compiled = translator.xla_compiled(buckets)
    return translator, compiled, compiled.export(exports, "xla")


@pytest.fixture(scope="module")
def rnn_xla(tmp_path_factory):
    """`(translator, XLA translator, XLA export, its loaded SavedModel)`."""
    import tensorflow_text  # noqa: F401  (the tokenizers' ops)

    directory = tmp_path_factory.mktemp("xla")
    translator, compiled, path = xla_export_of("rnn", directory)
    return translator, compiled, path, tf.saved_model.load(path)


def assert_same(expected, got, what):
    assert set(expected) == set(got), what
    for key in expected:
        a, b = np.asarray(expected[key]), np.asarray(got[key])
        assert a.shape == b.shape, (what, key, a.shape, b.shape)
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, atol=1e-4, err_msg=f"{what} {key}")
        else:
            assert (a == b).all(), (what, key, a, b)


def compare_signatures(translator, loaded, sizes, names=SEARCHING):
    """Signatures `names` of `loaded` against `translator`'s plain graph
    functions (what its plain export answers), for requests of `sizes`
    rows."""
    for rows in sizes:
        text = tf.constant((TEXTS * 2)[:rows])
        ids, _ = translator.encode(text)
        lengths = tf.reduce_sum(tf.cast(ids != 0, tf.int32), 1)
        inputs = {
            "tokens": {"token_ids": ids, "lengths": lengths},
            "constrained": {"text": text, "prefix": tf.constant((["", "ich"] * 6)[:rows])},
        }
        for name in names:
            given = inputs.get(name, {"text": text})
            expected = translator.function(name)(**given)
            assert_same(expected, loaded.signatures[name](**given), f"{name}, {rows} rows")


def test_an_xla_export_answers_what_the_plain_translator_does(rnn_xla):
    """`serving_default` at 1 row (padded to the bucket of 2, the width-4
    bucket) and 3 (above the largest bucket: padded to 4, two chunks of 2,
    width S), and `constrained` (prefixes padded to L) at 3 rows; blank
    texts included. Every signature (`attention` padded back to S, `tokens`
    ids narrower than S) of every family, and a request between two batch
    buckets: the large test below (each XLA program compiled costs
    seconds)."""
    translator, _, _, loaded = rnn_xla
    compare_signatures(translator, loaded, (1, 3), ["serving_default"])
    compare_signatures(translator, loaded, (3,), ["constrained"])


def test_no_request_shape_makes_a_new_program(rnn_xla):
    """The export's must-compile functions: one per (searching signature,
    batch bucket, width bucket), each over inputs of fixed shape, so XLA,
    which compiles a function once per input shape, has nothing left to
    compile after the warm-up; in process the compiled functions keep the
    traces the export made through requests of 3 and 6 rows."""
    from keras_attention.serving.check import must_compile, read_saved_model

    _, compiled, path, _ = rnn_xla
    found = must_compile(read_saved_model(path))
    assert sorted(found) == sorted(SEARCHING)
    assert all(len(names) == 1 * 2 for names in found.values())
    library = {
        function.signature.name: function
        for graph in read_saved_model(path).meta_graphs
        for function in graph.graph_def.library.function
    }
    for names in found.values():
        for name in names:  # its inputs but the variables (resources): the search's
            function = library[name]
            for index, arg in enumerate(function.signature.input_arg):
                if arg.type != tf.resource.as_datatype_enum:
                    shape = function.arg_attr[index].attr["_output_shapes"].list.shape[0]
                    rows, width = [d.size for d in shape.dim]  # a source, or a prefix (L = 8)
                    assert rows == 2 and width in (4, 7, 8), (name, rows, width)
    traces = [function.experimental_get_tracing_count() for function in compiled.bucketed.compiled]
    for rows in (1, 3):
        compiled.function("serving_default")(tf.constant((TEXTS * 2)[:rows]))
    after = [function.experimental_get_tracing_count() for function in compiled.bucketed.compiled]
    assert after == traces and sum(traces) >= 12


def selected_bucket(compiled, name, inputs):
    """The (signature, batch bucket, width bucket) a request selects."""
    bucketed = compiled.bucketed
    if name == "tokens":
        rows, used = len(inputs["lengths"]), int(np.max(inputs["lengths"]))
    else:
        source, _ = compiled.encode(tf.constant(inputs["text"]))
        rows, used = source.shape[0], int(np.max(np.sum(source.numpy() != 0, 1)))
    batch = min([b for b in bucketed.batch_sizes if b >= rows] or [bucketed.batch_sizes[-1]])
    return name, batch, min(w for w in bucketed.lengths if w >= used), rows


def test_the_warmup_requests_compile_every_bucket_and_the_record_says_so(rnn_xla):
    from keras_attention.serving.records import export_record
    from keras_attention.serving.versions import read_warmup_requests

    _, compiled, path, _ = rnn_xla
    selected = [selected_bucket(compiled, *request) for request in read_warmup_requests(path)]
    assert all(rows == batch for _, batch, _, rows in selected)  # no filler rows needed
    expected = {(name, b, w) for name in SEARCHING for b in (2,) for w in (4, 7)}
    assert {bucket[:3] for bucket in selected} == expected and len(selected) == 12
    assert export_record(path)["xla"] == {
        "batch_sizes": [2],
        "source_lengths": [4, 7],
        "signatures": list(SEARCHING),
        "programs": 12,
        "server_flags": ["--xla_cpu_compilation_enabled=true"],
    }


def test_the_check_says_the_export_needs_the_xla_flag(rnn_xla, tmp_path):
    from keras_attention.serving import check

    _, _, path, _ = rnn_xla
    lines = []
    check.report(path, ["2.20"], log=lines.append)
    assert lines[1] == (
        "needs --xla_cpu_compilation_enabled=true: 12 functions must compile with XLA, in "
        "signatures attention, constrained, greedy, nbest, serving_default, tokens"
    )
    assert lines[2].startswith("ok ")  # no op or attribute the servers lack


def test_batching_parameters_match_the_buckets_and_are_written_atomically(
    rnn_xla, tmp_path, monkeypatch
):
    _, _, path, _ = rnn_xla
    base = os.path.dirname(os.path.dirname(path))
    assert open(os.path.join(base, "batching_parameters.txt")).read() == batching_parameters((2,))
    text = batching_parameters((2, 4))
    fields = [line.split("#")[0].split()[0].rstrip(":") for line in text.splitlines()]
    assert fields == [
        "max_batch_size",
        "max_execution_batch_size",
        "enable_large_batch_splitting",
        "batch_timeout_micros",
        "max_enqueued_batches",
        "num_batch_threads",
        "allowed_batch_sizes",
        "allowed_batch_sizes",
        "pad_variable_length_inputs",
    ]
    assert "max_execution_batch_size { value: 4 }" in text and "allowed_batch_sizes: 4" in text
    assert sorted(os.listdir(base)) == ["batching_parameters.txt", "models.config", "xla"]
    write_batching_parameters(str(tmp_path), (1, 8))
    monkeypatch.setattr(os, "replace", lambda *args: (_ for _ in ()).throw(OSError("full")))
    with pytest.raises(OSError, match="full"):
        write_batching_parameters(str(tmp_path), (1, 8, 32))
    assert os.listdir(tmp_path) == ["batching_parameters.txt"]  # the old file, no temporary
    assert "allowed_batch_sizes: 8\n" in (tmp_path / "batching_parameters.txt").read_text()


def test_a_plain_translator_records_no_buckets(tmp_path):
    from keras_attention.serving.records import write_export_record
    from tests.test_export import tiny_translator_of

    record = write_export_record(str(tmp_path), tiny_translator_of("rnn", tmp_path))
    assert record["xla"] is None


@pytest.mark.parametrize(
    "arguments,message",
    [
        (
            {"batch_sizes": [8, 1]},
            "`batch_sizes` of XlaBuckets must be strictly increasing; received batch_sizes=[8, 1].",
        ),
        (
            {"batch_sizes": [0, 4]},
            "`batch_sizes` of XlaBuckets must be a non-empty list of positive integers; "
            "received batch_sizes=[0, 4].",
        ),
        (
            {"batch_sizes": []},
            "`batch_sizes` of XlaBuckets must be a non-empty list of positive integers; "
            "received batch_sizes=[].",
        ),
        (
            {"source_lengths": [2, 5]},
            "`source_lengths` of XlaBuckets must be at least 3 ([START], a piece, [END]); "
            "received source_lengths=[2, 5].",
        ),
        (
            {"source_lengths": [4.5]},
            "`source_lengths` of XlaBuckets must be a non-empty list of positive integers; "
            "received source_lengths=[4.5].",
        ),
        (
            {"batch_sizes": [1, 2**40]},
            "`batch_sizes` of XlaBuckets must each be at most MAX_BUCKET_BATCH=1024 (each "
            "bucket is an XLA program the export's warm-up requests compile); received "
            "batch_sizes=[1, 1099511627776].",
        ),
        (
            {"source_lengths": [3, 10_001]},
            "`source_lengths` of XlaBuckets must each be at most MAX_BUCKET_LENGTH=10000 (each "
            "bucket is an XLA program the export's warm-up requests compile); received "
            "source_lengths=[3, 10001].",
        ),
    ],
)
def test_bad_buckets_are_refused_naming_the_argument(arguments, message):
    with pytest.raises(ValueError) as raised:
        XlaBuckets(**arguments)
    assert str(raised.value) == message
    with pytest.raises(ValueError) as raised:  # the same through a config
        get_buckets(arguments)
    assert str(raised.value) == message


def test_a_buckets_config_with_an_unknown_key_is_refused_naming_it():
    assert XlaBuckets(batch_sizes=[1024], source_lengths=[10_000]).batch_sizes == (1024,)
    with pytest.raises(ValueError) as raised:
        get_buckets({"batch_sizes": [1, 8], "batch_size": [4]})
    assert str(raised.value) == (
        "`buckets` has unknown keys ['batch_size']: an XlaBuckets config has the keys "
        "['batch_sizes', 'source_lengths']; received buckets={'batch_sizes': [1, 8], "
        "'batch_size': [4]}."
    )


def test_buckets_beyond_the_source_length_or_without_xla_are_refused(tmp_path):
    from tests.test_export import tiny_translator_of

    translator = tiny_translator_of("rnn", tmp_path)  # S = 7
    with pytest.raises(ValueError) as raised:
        translator.xla_compiled({"source_lengths": [4, 9]})
    assert str(raised.value) == (
        "`source_lengths` of XlaBuckets must be at most max_source_length=7; received "
        "source_lengths=[4, 9]."
    )
    with pytest.raises(ValueError, match=r"`buckets` of Translator.export needs xla=True"):
        translator.export(str(tmp_path), "m", buckets=BUCKETS)
    with pytest.raises(ValueError, match=r"`buckets` must be an XlaBuckets, its config"):
        translator.xla_compiled([1, 8])
    with pytest.raises(ValueError, match=r"`buckets` has unknown keys \['sizes'\]: an Xla"):
        translator.xla_compiled({"sizes": [1, 8]})
    assert XlaBuckets(**XlaBuckets().get_config()).get_config() == {
        "batch_sizes": [1, 8, 32],
        "source_lengths": None,
    }
    assert XlaBuckets().lengths(7) == (4, 7) and XlaBuckets().lengths(40) == (20, 40)


@pytest.mark.large
@pytest.mark.parametrize(
    "family,quantize",
    [("rnn", None), ("transformer", None), ("convs2s", None), ("transformer", "int8")],
)
def test_every_family_and_int8_compile_and_answer_as_the_plain_translator(
    family, quantize, tmp_path
):
    import tensorflow_text  # noqa: F401

    translator, _, path = xla_export_of(family, tmp_path, quantize, LARGE_BUCKETS)
    compare_signatures(translator, tf.saved_model.load(path), (1, 3, 6))
    assert (
        json.load(open(os.path.join(path, "assets.extra", "keras_attention.json")))["quantization"]
        == quantize
    )


@pytest.mark.large
@pytest.mark.parametrize("family", ["transformer", "convs2s"])
def test_a_shortlisted_translator_compiles_and_answers_as_it_does_without_xla(family, tmp_path):
    """A shortlist's columns are chosen inside each XLA program, at fixed
    shapes: every searching signature answers as the shortlisted plain
    Translator, no request compiles anew, and the export passes the op
    check of every TF Serving release."""
    import tensorflow_text  # noqa: F401

    from keras_attention.seq2seq import Shortlist
    from keras_attention.serving.check import (
        available_servings,
        check_export,
        must_compile,
        read_saved_model,
    )
    from tests.test_export import tiny_translator_of

    translator = tiny_translator_of(family, tmp_path)
    size = translator.model.target_vocab_size
    rng = np.random.default_rng(0)
    pairs = [(rng.integers(4, size, 4), rng.integers(4, size, 4)) for _ in range(30)]
    shortlisted = translator.shortlisted(Shortlist.learn(pairs, size, size, size=10, depth=2))
    compiled = shortlisted.xla_compiled(BUCKETS)
    path = compiled.export(str(tmp_path / "exports"), "short")
    compare_signatures(shortlisted, tf.saved_model.load(path), (1, 3))
    assert all(len(names) == 2 for names in must_compile(read_saved_model(path)).values())
    assert check_export(path) == {serving: [] for serving in available_servings()}
    record = json.load(open(os.path.join(path, "assets.extra", "keras_attention.json")))
    assert record["shortlist"] == {"size": 10, "frequent": 2, "always": []}
