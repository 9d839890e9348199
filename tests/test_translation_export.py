"""The translation recipe's export: the SavedModel against the model in
process, warm-up requests, TF Serving's REST body and op checks.

The trained run and its export (`trained`, `exported`) are made once per
test session (`tests/conftest.py`)."""

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
from keras_attention_recipes import translate
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import (
    TINY,
    check_export,
    free_port,
    run,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


@pytest.fixture(scope="module")
def loaded(exported):
    """The session's export loaded once, for the tests that only call its
    signatures."""
    import tensorflow as tf

    return tf.saved_model.load(exported)


# Large: a whole run of each other family trained and exported (the shared
# run's family, rnn, is exported and checked in `make test`: `exported`,
# test_export_loads_in_plain_tensorflow_and_matches_in_process below).
@pytest.mark.large
@pytest.mark.parametrize("family", ["convs2s"])  # the transformer: test_translation_decoding.py
def test_export_of_the_other_families(tmp_path, family):
    run("train", "--output", str(tmp_path / "run"), "--family", family, "--epochs", "1", *TINY)
    check_export(str(tmp_path / "run"), tmp_path)


def test_warmup_requests_parse_and_run(exported, loaded):
    import tensorflow as tf

    from keras_attention.serving.export import read_warmup_requests

    requests = read_warmup_requests(exported)
    assert [signature for signature, _ in requests] == [
        "serving_default",
        "greedy",
        "attention",
        "tokens",
        "nbest",
        "constrained",
    ]
    for signature, inputs in requests:
        outputs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        assert outputs and all(
            v.shape[0] == len(next(iter(inputs.values()))) for v in outputs.values()
        )


def test_the_signature_defs_saved_model_cli_lists(exported):
    """The signature defs of the MetaGraph that `saved_model_cli show` and TF
    Serving read, read as the CLI reads them (`saved_model_utils`), in
    process: test_export.py's test_saved_model_cli_shows_the_decoding_options
    runs the CLI itself on an export."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.tools import saved_model_utils

    signatures = saved_model_utils.get_meta_graph_def(exported, "serve").signature_def

    def shown(tensor):  # dtype and shape as the CLI prints them
        dims = tuple(dim.size for dim in tensor.tensor_shape.dim)
        return types_pb2.DataType.Name(tensor.dtype), dims

    assert {"serving_default", "greedy", "attention", "tokens"} <= set(signatures)
    served = signatures["serving_default"]
    assert shown(served.inputs["text"]) == ("DT_STRING", (-1,))
    assert shown(served.outputs["translation"]) == ("DT_STRING", (-1,))
    assert shown(served.outputs["score"])[0] == "DT_FLOAT"
    assert shown(signatures["tokens"].inputs["token_ids"]) == ("DT_INT32", (-1, -1))


def test_rest_bodies_become_the_signature_inputs(exported):
    import tensorflow as tf
    from keras_attention_recipes.serving_client import (
        parse_rest_response,
        rest_body,
        tensors_from_rest_body,
    )

    loaded = tf.saved_model.load(exported)
    text = np.array(["Ich habe keine Zeit.".encode(), "Wo ist der Bahnhof?".encode()], dtype=object)
    direct = loaded.signatures["greedy"](text=tf.constant(text))
    for style in ("instances", "inputs"):
        body = json.loads(
            json.dumps(rest_body({"text": text}, "greedy", style))
        )  # through JSON, as sent
        tensors = tensors_from_rest_body(body, ["text"])
        np.testing.assert_array_equal(tensors["text"], text)
        out = loaded.signatures["greedy"](**{k: tf.constant(v) for k, v in tensors.items()})
        np.testing.assert_array_equal(out["translation"].numpy(), direct["translation"].numpy())
    ids = np.array([[1, 5, 6, 2], [1, 7, 2, 0]], "int32")
    body = json.loads(
        json.dumps(
            rest_body(
                {"token_ids": ids, "lengths": np.array([4, 3], "int32")}, "tokens", "instances"
            )
        )
    )
    tensors = tensors_from_rest_body(body, ["token_ids", "lengths"])
    np.testing.assert_array_equal(tensors["token_ids"], ids)
    # Responses in both formats parse back.
    translations = [t.decode() for t in direct["translation"].numpy()]
    rows = {"predictions": [{"translation": t, "score": 0.5} for t in translations]}
    columns = {"outputs": {"translation": translations, "score": [0.5, 0.5]}}
    for response in (rows, columns):
        parsed = parse_rest_response(response)
        assert [t.decode() for t in parsed["translation"]] == translations


@pytest.mark.skipif(
    shutil.which("tensorflow_model_server") is None,
    reason="tensorflow_model_server is not installed (not on PyPI or Debian; see "
    "docs/serving.md for its Docker and apt commands)",
)
def test_real_server_rest_and_grpc(exported, tmp_path):
    from keras_attention_recipes.serving_client import predict_grpc, predict_rest

    base = os.path.dirname(exported)
    grpc_port, rest_port = free_port(), free_port()
    server = subprocess.Popen(
        [
            "tensorflow_model_server",
            f"--port={grpc_port}",
            f"--rest_api_port={rest_port}",
            "--model_name=translator",
            f"--model_base_path={base}",
        ]
    )
    try:
        text = {"text": np.array([b"Ich habe keine Zeit."], dtype=object)}
        for _ in range(60):
            try:
                rest = predict_rest("127.0.0.1", rest_port, "translator", text, "greedy")
                break
            except Exception:
                time.sleep(1)
        grpc_out = predict_grpc("127.0.0.1", grpc_port, "translator", text, "greedy")
        assert rest["translation"][0] == grpc_out["translation"][0]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_export_holds_only_core_and_text_ops(exported):
    """No py_function, no XLA-only ops: what TF Serving has (core TensorFlow
    and TensorFlow Text kernels) is enough."""
    import tensorflow_text  # noqa: F401  (registers the text ops, as the server does)
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(os.path.join(exported, "saved_model.pb"), "rb").read())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    library = {function.signature.name for function in graph.library.function}
    ops -= library  # calls of the graph's own functions
    assert not {op for op in ops if "PyFunc" in op or op.startswith("Xla")}, ops
    unknown = sorted(op for op in ops if op_def_registry.get(op) is None)
    assert not unknown, f"ops no TensorFlow / TensorFlow Text kernel registers: {unknown}"
    assert "SentencepieceTokenizeOp" in ops  # the default --tokenizer


def test_export_passes_the_op_check_of_every_tf_serving_release(exported):
    """`keras_attention.serving.check` against the committed op lists: the
    tokenizer's TF Text ops (SentencePiece's, the default; WordPiece's in
    tests/test_export.py) and the decoding loop are in every release."""
    from keras_attention.serving import check

    ops = check.op_types(check.read_saved_model(exported))
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "While"} <= set(ops)
    assert os.path.exists(os.path.join(exported, "assets", "source.spm"))  # for `tokens` clients
    assert check.check_export(exported) == {s: [] for s in check.available_servings()}


def test_export_loads_in_plain_tensorflow_and_matches_in_process(trained, exported, tmp_path):
    check_export(trained[0], tmp_path, exported)  # the session's export of the shared run


def test_the_exports_signatures_read_unicode_blank_texts_as_blank(loaded):
    """Through the recipe's export (SentencePiece): a text of Unicode spaces
    or format characters only translates to "" with score 0."""
    import tensorflow as tf

    blanks = ["\u00a0\u2003", "\u202e\u200f\u200b", "\u3000", "\u2028", "\ufeff", "\u2581\u200b"]
    texts = tf.constant(["Ich habe keine Zeit.", *blanks])
    for name in ("serving_default", "greedy"):
        served = loaded.signatures[name](text=texts)
        assert [t.decode() for t in served["translation"].numpy()[1:]] == [""] * 6, name
        assert served["score"].numpy()[1:].tolist() == [0.0] * 6, name
        assert served["score"].numpy()[0] < 0, name
    nbest = loaded.signatures["nbest"](text=texts)
    assert nbest["scores"].numpy()[1:].tolist() == [[0.0] * 2] * 6
    assert set(nbest["translations"].numpy()[1:].ravel()) == {b""}


NUMBER_TEMPLATES = [
    ("Zimmer {}.", "Room {}."),
    ("Gleis {}.", "Platform {}."),
    ("Das kostet {} Euro.", "It costs {} euros."),
    ("Um {} Uhr.", "At {}."),
    ("Seite {}.", "Page {}."),
    ("Ich bin {} Jahre alt.", "I am {} years old."),
]


@pytest.mark.large  # a run trained and exported end to end (tests/test_numbers.py: in process)
def test_an_export_copies_numbers_it_never_saw(tmp_path):
    """End to end: a corpus whose numbers are copied trains with
    them protected, and the export (plain TensorFlow, what TF Serving runs)
    writes numbers it never saw, decimal separators swapped, every digit
    group kept (`number_consistency` 100%), and passes the op check."""
    import random

    import tensorflow as tf
    from keras_attention_recipes.translation.scores import number_consistency

    from keras_attention.serving import check

    draw = random.Random(0)
    corpus = tmp_path / "numbers.tsv"
    corpus.write_text(
        "".join(
            f"{source.format(n)}\t{target.format(n)}\n"
            for source, target in NUMBER_TEMPLATES
            for n in draw.sample(range(1, 3000), 60)
        ),
        encoding="utf-8",
    )
    output, exports = str(tmp_path / "run"), str(tmp_path / "exports")
    common = ["--output", output, "--vocab-size", "320", "--max-length", "16", "--verbose", "0"]
    common += ["--preset", "none"]  # the flags' defaults: small's warm-up outlasts this run
    log = run(
        "train",
        "--corpus",
        str(corpus),
        "--family",
        "transformer",
        "--hidden-dim",
        "32",
        "--num-layers",
        "1",
        "--epochs",
        "8",
        "--learning-rate",
        "3e-3",
        "--batch-size",
        "16",
        *common,
    )
    assert "numbers: protected in" in log
    with open(os.path.join(output, "config.json"), encoding="utf-8") as handle:
        assert json.load(handle)["protect_numbers"] is True
    run("export", "--output", output, "--export-dir", exports, "--beam-width", "2")
    export = os.path.join(exports, "translator", "1")
    sources = ["Zimmer 4711.", "Gleis 3,5.", "Um 14:35 Uhr.", "Das kostet 1.000 Euro.", "Seite 7."]
    serve = tf.saved_model.load(export).signatures["serving_default"]
    translations = [t.decode() for t in serve(text=tf.constant(sources))["translation"].numpy()]
    assert number_consistency(sources, translations)["number_consistency"] == 100.0, translations
    assert translations[0] == "Room 4711." and "3.5" in translations[1], translations
    assert check.check_export(export) == {s: [] for s in check.available_servings()}


# Large: the shared run exported a second time, through the command line;
# `make test` keeps the library's int8 export (tests/test_export.py).
@pytest.mark.large
def test_export_quantize_int8_reports_both_sizes_and_translates_as_in_process(trained, tmp_path):
    """`export --quantize int8`: the last line gives the variables' bytes
    and the float32 model's, the export records int8, its
    `serving_default` answers what the quantized Translator answers in
    process, and it passes the op check."""
    import re

    import tensorflow as tf

    from keras_attention.serving import check
    from keras_attention.serving.records import export_record

    exports = str(tmp_path / "exports")
    log = run(
        "export", "--output", trained[0], "--export-dir", exports, "--beam-width", "2",
        "--quantize", "int8",
    )  # fmt: skip
    path = os.path.join(exports, "translator", "1")
    record = export_record(path)
    assert record["quantization"] == "int8"
    size, float32 = record["variables_bytes"], record["float32_variables_bytes"]
    assert log.splitlines()[-1].endswith(
        f"; variables/ {size:,} bytes (int8; float32: {float32:,} bytes, "
        f"{float32 / size:.2f}x smaller)"
    )
    assert re.search(r"\(int8; float32: [\d,]+ bytes, \d+\.\d\dx smaller\)$", log)
    assert float32 > size
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?", ""]
    in_process = beam_2_translator(trained[0]).quantized("int8")
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))
    assert [t.decode() for t in served["translation"].numpy()] == in_process.translate(texts)
    assert check.check_export(path) == {s: [] for s in check.available_servings()}


def beam_2_translator(run_folder):
    """The run's Translator in process with the search `export --beam-width 2`
    settles on."""
    from keras_attention_recipes.translation.trained_run import TrainedRun

    argv = ["export", "--output", run_folder, "--beam-width", "2"]
    return TrainedRun(translate.check(translate.parser().parse_args(argv))).translator()


# Large: the shared run exported a second time, with 36 programs traced;
# `make test` keeps the library's XLA export (tests/test_xla_export.py).
@pytest.mark.large
def test_export_xla_records_the_buckets_and_translates_as_in_process(trained, tmp_path):
    """`export --xla`: the export records its buckets, its warm-up requests
    are the recipe's 6 and one per (searching signature, bucket), the
    batching parameters lie beside models.config, and `serving_default`
    answers what the Translator answers in process."""
    import tensorflow as tf

    from keras_attention.serving.buckets import batching_parameters
    from keras_attention.serving.records import export_record
    from keras_attention.serving.versions import read_warmup_requests

    exports = str(tmp_path / "exports")
    out = run(
        "export", "--output", trained[0], "--export-dir", exports, "--beam-width", "2", "--xla"
    )
    path = os.path.join(exports, "translator", "1")
    xla = export_record(path)["xla"]
    assert xla["batch_sizes"] == [1, 8, 32] and xla["programs"] == 6 * 3 * 2
    assert out.rstrip().endswith(
        f"; XLA: 36 programs (batch sizes [1, 8, 32], source widths {xla['source_lengths']}), "
        "served with --xla_cpu_compilation_enabled=true"
    )
    assert len(read_warmup_requests(path)) == 6 + xla["programs"]
    with open(os.path.join(exports, "batching_parameters.txt")) as handle:
        assert handle.read() == batching_parameters((1, 8, 32))
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?", ""]
    in_process = beam_2_translator(trained[0])
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(texts))
    assert [t.decode() for t in served["translation"].numpy()] == in_process.translate(texts)


def test_the_demo_s_everyday_scores_are_sacrebleu_s_on_the_export_s_translations(trained, loaded):
    """`commands.everyday_scores` (the demo's last lines): the hand-written
    everyday set through the export, scored as sacrebleu scores the
    translations that `translate` prints with the export's beam of 2."""
    import sacrebleu
    from keras_attention_recipes.translation import commands
    from keras_attention_recipes.translation.text_io import read_pair_file

    lines = []
    serve = loaded.signatures["serving_default"]
    scores = commands.everyday_scores(serve, lines.append)
    pairs = read_pair_file(commands.EVERYDAY, "--test", print)
    assert len(pairs) >= 60
    log = run("translate", *[s for s, _ in pairs], "--output", trained[0], "--beam-width", "2")
    translations = [line.split("-> ", 1)[1] for line in log.splitlines() if "-> " in line]
    references = [[reference for _, reference in pairs]]
    # (scores are rounded to 2 decimals, as scores.json holds them)
    assert scores["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(translations, references).score, abs=0.005
    )
    assert scores["chrf"] == pytest.approx(
        sacrebleu.corpus_chrf(translations, references).score, abs=0.005
    )
    assert lines[0].startswith(f"everyday set ({len(pairs)} hand-written sentences, through the")
    assert lines[1] == f"  {pairs[0][0]} -> {translations[0]}"


def test_export_checks_model_name_before_loading_the_model(trained, tmp_path, capsys, monkeypatch):
    """`export --model-name ../x` was refused only after all seven signatures
    were traced and written (about 20 s)."""
    from keras_attention_recipes.translation import trained_run

    from tests.translation_helpers import cli

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before --model-name was checked")

    monkeypatch.setattr(trained_run, "load_run", no_model)
    for name in ("../x", "/abs", "a b", ".hidden"):
        status, _, err = cli(
            capsys, "export", "--output", trained[0], "--export-dir", str(tmp_path / "e"),
            "--model-name", name,
        )  # fmt: skip
        assert status == 2 and err.startswith("error: --model-name: model_name must be a plain")
        assert err.count("\n") == 1, err
    assert not (tmp_path / "e").exists()


@pytest.mark.large(reason="a run quantized and exported for one message")
def test_export_quantize_of_a_quantized_run_speaks_in_flags(trained, tmp_path, capsys):
    """It said `export it with quantize=None`, the library's argument."""
    import keras

    import keras_attention  # noqa: F401  (registers the model classes)
    from tests.translation_helpers import cli

    quantized = tmp_path / "quantized"
    shutil.copytree(trained[0], quantized)
    model = keras.saving.load_model(str(quantized / "model.keras"), compile=False)
    model.quantize("int8")
    model.save(str(quantized / "model.keras"))
    status, _, err = cli(
        capsys, "export", "--output", str(quantized), "--export-dir", str(tmp_path / "e"),
        "--quantize", "int8",
    )  # fmt: skip
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --output {quantized} holds a model quantized already (int8)")
    assert "drop --quantize" in err and "quantize=None" not in err
    assert not (tmp_path / "e").exists()


JAX_PYTHON = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-jax", "bin", "python"
)
# The JAX virtualenv's translations of the texts on standard input, by a
# run's `TrainedRun`: greedy, the run's beam, and `n`-best lists.
JAX_TRANSLATIONS = """
import json, sys
from keras_attention_recipes import translate
from keras_attention_recipes.translation.trained_run import TrainedRun, greedy

output, n = sys.argv[1], int(sys.argv[2])
texts = sys.stdin.read().split("\\n")
run = TrainedRun(translate.check(translate.parser().parse_args(["translate", "--output", output])))
print(json.dumps({
    "greedy": run.translator(greedy()).translate(texts),
    "beam": run.translate(texts),
    "nbest": run.translator().nbest(texts, n),
}))
"""


@pytest.mark.skipif(not os.path.exists(JAX_PYTHON), reason="make test makes .venv-jax")
def test_a_run_trained_on_jax_exports_here_and_translates_as_on_jax(tmp_path):
    """A run trained in the JAX virtualenv, which has no TensorFlow, exports
    here unchanged: on its test split (and numbers, a blank text), the
    export's greedy translations are JAX's, every one; its beam's at least
    99% of them; and its n-best lists' scores JAX's within 1e-4."""
    import tensorflow as tf

    output = str(tmp_path / "run")
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    env["XLA_FLAGS"] = "--xla_backend_optimization_level=0 --xla_cpu_multi_thread_eigen=false"
    flags = [*TINY, "--family", "rnn", "--attention", "additive", "--epochs", "8"]
    flags += ["--learning-rate", "1e-2"]  # translations that differ by sentence
    command = [JAX_PYTHON, "-m", "keras_attention_recipes.translate", "train", "--output", output]
    done = subprocess.run([*command, *flags], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.load(open(os.path.join(output, "config.json")))["backend"] == "jax"

    run("export", "--output", output, "--export-dir", str(tmp_path / "exports"))
    export = tmp_path / "exports" / "translator" / "1"
    signatures = tf.saved_model.load(str(export)).signatures
    with open(os.path.join(output, "data", "test.tsv"), encoding="utf-8") as handle:
        texts = [line.split("\t")[0] for line in handle if line.strip()]
    texts += ["Das kostet 49 Euro.", ""]
    served = {
        name: signatures[name](text=tf.constant(texts))
        for name in ("greedy", "serving_default", "nbest")
    }
    n = served["nbest"]["translations"].shape[1]
    done = subprocess.run(
        [JAX_PYTHON, "-c", JAX_TRANSLATIONS, output, str(n)],
        input="\n".join(texts), capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    on_jax = json.loads(done.stdout.splitlines()[-1])

    def strings(values):
        return [value.decode() for value in values.numpy().reshape(-1)]

    assert on_jax["greedy"] == strings(served["greedy"]["translation"])
    beam = strings(served["serving_default"]["translation"])
    same = np.mean([a == b for a, b in zip(on_jax["beam"], beam)])
    assert same >= 0.99 and len(beam) == len(texts), list(zip(on_jax["beam"], beam))
    hypotheses = [text for row in on_jax["nbest"] for text, _ in row]
    scores = np.array([score for row in on_jax["nbest"] for _, score in row])
    assert hypotheses == strings(served["nbest"]["translations"])
    assert len(set(hypotheses)) > 3  # not one string for every text
    np.testing.assert_allclose(scores, served["nbest"]["scores"].numpy().reshape(-1), atol=1e-4)
