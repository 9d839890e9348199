"""The atomic, versioned export directory helper: atomicity, concurrent
exports, abandoned staging folders, model names and `models.config`."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

from keras_attention.serving.export import atomic_version_dir, next_version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def publish(base, name, content="x", **kwargs):
    with atomic_version_dir(base, name, **kwargs) as staged:
        with open(os.path.join(staged.staging, "saved_model.pb"), "w") as handle:
            handle.write(content)
    return staged.path


def test_versions_count_up_and_publish_atomically(tmp_path):
    base = str(tmp_path)
    assert next_version(os.path.join(base, "m")) == 1
    with atomic_version_dir(base, "m") as staged:
        open(os.path.join(staged.staging, "saved_model.pb"), "w").write("x")
        assert not os.path.exists(staged.path)  # nothing visible until it is complete
    assert staged.path.endswith(os.path.join("m", "1")) and os.path.exists(
        os.path.join(staged.path, "saved_model.pb")
    )
    assert next_version(os.path.join(base, "m")) == 2
    assert "model_config_list" in open(os.path.join(base, "models.config")).read()
    assert sorted(os.listdir(base)) == ["m", "models.config"]  # no lock file left beside them


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_published_version_and_models_config_follow_the_umask(tmp_path, umask):
    """The staging folder (`tempfile`: 0700) and the config's temporary file
    (0600) get the modes `open` and `makedirs` would give: 0755 and 0644
    under umask 022, so that a server running as another user reads them."""
    previous = os.umask(umask)
    try:
        path = publish(str(tmp_path), "m")
    finally:
        os.umask(previous)
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o777 & ~umask)
    config = os.path.join(str(tmp_path), "models.config")
    assert oct(os.stat(config).st_mode & 0o777) == oct(0o666 & ~umask)
    made = os.path.join(str(tmp_path), "made-by-open")
    previous = os.umask(umask)
    try:
        open(made, "w").close()
    finally:
        os.umask(previous)
    assert os.stat(made).st_mode & 0o777 == os.stat(config).st_mode & 0o777


def test_failed_export_leaves_no_version_and_keeps_earlier_ones(tmp_path):
    base = str(tmp_path)
    publish(base, "m", "v1")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_version_dir(base, "m") as staged:
            open(os.path.join(staged.staging, "saved_model.pb"), "w").write("half")
            raise RuntimeError("killed midway")
    assert sorted(os.listdir(os.path.join(base, "m"))) == ["1"]
    assert open(os.path.join(base, "m", "1", "saved_model.pb")).read() == "v1"


def test_existing_version_is_an_error(tmp_path):
    publish(str(tmp_path), "m", version=3)
    with pytest.raises(ValueError, match="export version 3 already exists"):
        publish(str(tmp_path), "m", version=3)


def test_two_exports_at_once_get_two_versions(tmp_path):
    """Both exports number their version before either publishes (the
    barrier holds them there): they must still end up as 2 and 3."""
    base = str(tmp_path)
    publish(base, "m", "v1")
    both_staged, errors, paths = threading.Barrier(2, timeout=30), [], []

    def export(content):
        try:
            with atomic_version_dir(base, "m") as staged:
                open(os.path.join(staged.staging, "saved_model.pb"), "w").write(content)
                both_staged.wait()
            paths.append(staged.path)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=export, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    model = os.path.join(base, "m")
    assert sorted(os.listdir(model)) == ["1", "2", "3"]
    assert sorted(open(os.path.join(p, "saved_model.pb")).read() for p in paths) == ["a", "b"]
    assert open(os.path.join(model, "1", "saved_model.pb")).read() == "v1"


@pytest.mark.large(reason="a process killed mid-export")
def test_a_killed_exports_staging_folder_is_cleaned_up(tmp_path):
    base = str(tmp_path)
    script = f"""
import os, signal
from keras_attention.serving.export import atomic_version_dir
with atomic_version_dir({base!r}, "m") as staged:
    open(os.path.join(staged.staging, "saved_model.pb"), "w").write("half")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    killed = subprocess.Popen(
        [sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=ROOT), cwd=str(tmp_path)
    )
    assert killed.wait(timeout=120) == -signal.SIGKILL
    model = os.path.join(base, "m")
    (abandoned,) = os.listdir(model)
    assert abandoned.startswith(f".1.incomplete-{socket.gethostname()}-{killed.pid}-")
    live = f".1.incomplete-{socket.gethostname()}-{os.getpid()}-live"
    other_host = f".1.incomplete-another-host-{killed.pid}-x"
    for name in (live, other_host):
        os.mkdir(os.path.join(model, name))
    publish(base, "m")
    assert sorted(os.listdir(model)) == sorted([live, other_host, "1"])


@pytest.mark.parametrize(
    "name", ["../x", "/tmp/x", ".hidden", "", "a/b", 'x"\n  config {', "it's", "a b"]
)
def test_model_names_that_are_not_plain_names_are_refused(tmp_path, name):
    base = tmp_path / "exports"
    with pytest.raises(ValueError, match="model_name must be a plain name") as raised:
        publish(str(base), name)
    assert repr(name) in str(raised.value)
    assert not os.path.exists(tmp_path / "x") and not os.path.exists(base)


def test_one_models_config_lists_every_exported_model(tmp_path):
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    base = str(tmp_path)
    for name in ("translator", "digits", "digits", "v2.model"):
        publish(base, name)
    os.mkdir(os.path.join(base, "empty"))  # no version: not a model to serve
    config = text_format.Parse(
        open(os.path.join(base, "models.config")).read(),
        model_server_config_pb2.ModelServerConfig(),
    )
    entries = config.model_config_list.config
    assert sorted(e.name for e in entries) == ["digits", "translator", "v2.model"]
    for entry in entries:
        assert entry.model_platform == "tensorflow"
        # docs/serving.md mounts <base> as /models in the server's container.
        local = os.path.join(base, os.path.relpath(entry.base_path, "/models"))
        assert entry.base_path.startswith("/models/") and os.path.isdir(local)
        assert os.path.basename(local) == entry.name and next_version(local) > 1


@pytest.fixture(scope="module")
def tiny_translator(tiny_translator_with_options):
    """The path of an untrained tiny translator exported with
    `translator_archive` (the checks under test are in the graph, not the
    weights; one export serves every test here, as exports are slow)."""
    return tiny_translator_with_options[0]


def test_every_folder_and_file_of_a_real_export_is_readable_as_the_umask_allows(
    tiny_translator,
):
    umask = os.umask(0)
    os.umask(umask)
    base = os.path.dirname(os.path.dirname(tiny_translator))
    paths = [os.path.join(base, "models.config")]
    for folder, _, files in os.walk(tiny_translator):
        paths += [folder] + [os.path.join(folder, name) for name in files]
    assert len(paths) > 5
    for path in paths:
        readable = (0o555 if os.path.isdir(path) else 0o444) & ~umask
        mode = os.stat(path).st_mode & 0o777
        assert mode & readable == readable, (path, oct(mode), oct(umask))


def test_tokens_signature_refuses_inconsistent_input(tiny_translator):
    import tensorflow as tf

    tokens = tf.saved_model.load(tiny_translator).signatures["tokens"]

    def call(ids, lengths):
        return tokens(token_ids=tf.constant(ids, tf.int32), lengths=tf.constant(lengths, tf.int32))

    good = call([[1, 4, 5, 2], [1, 6, 2, 0]], [4, 3])["token_ids"]
    assert good.shape[0] == 2
    # Padding beyond a row's length is ignored, whatever it holds.
    np.testing.assert_array_equal(call([[1, 6, 2, -7]], [3])["token_ids"], good[1:])
    for ids, lengths, message in [
        ([[1, 4, 5, 2]], [4, 4], "one entry per row"),  # returned 2 rows
        ([[1, 4, 5, 2], [1, 4, 2, 0]], [4], "one entry per row"),
        ([[1, 4, 5, 2]], [0], "must be >= 1"),  # returned a "translation" of nothing
        ([[1, 4, 5, 2]], [5], "<= the width"),
        ([[1, -3, 5, 2]], [4], r"token_ids must be in \[0, 8\) .* got -3 in row 0"),  # wrapped
        ([[1, 8, 5, 2]], [4], r"token_ids must be in \[0, 8\) .* got 8 in row 0 at position 1"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            call(ids, lengths)
    assert call(np.zeros((0, 4)), np.zeros((0,)))["token_ids"].shape[0] == 0


def test_readme_serving_commands_match_the_export():
    """The serving page's (docs/serving.md) multi-model command mounts the export base dir as
    /models and reads the models.config the export writes; its ports are
    published on localhost only; its models.config example parses."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    readme = open(os.path.join(ROOT, "docs", "serving.md"), encoding="utf-8").read()
    assert '-v "$PWD/saved_models:/models"' in readme
    assert "--model_config_file=/models/models.config" in readme
    assert "-p 127.0.0.1:8501:8501" in readme and "-p 8501:8501" not in readme
    example = readme.split("`saved_models/models.config` (written by every export")[1]
    example = example.split("```\n")[1]
    config = text_format.Parse(example, model_server_config_pb2.ModelServerConfig())
    for entry in config.model_config_list.config:
        assert entry.base_path == f"/models/{entry.name}"


def test_text_signatures_refuse_a_matrix_fed_past_the_python_check(tiny_translator):
    """TF Serving runs the graph in a C++ session that does not check the
    signature's shapes; a callable made from `CallableOptions` does the
    same from Python. A `[3, 1]` text matrix gave `[3, 3]` translations
    beside `[3]` scores; it must be an INVALID_ARGUMENT, a vector still
    works."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2

    from keras_attention.serving.requests import rule_line

    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.load(session, ["serve"], tiny_translator)
        for name, inputs, output in [
            ("serving_default", ["text"], "translation"),
            ("greedy", ["text"], "translation"),
            ("attention", ["text"], "translation"),
            ("nbest", ["text"], "translations"),
            ("constrained", ["text", "prefix"], "translation"),
        ]:
            signature = meta_graph.signature_def[name]
            run = session._make_callable_from_options(
                config_pb2.CallableOptions(
                    feed=[signature.inputs[key].name for key in inputs],
                    fetch=[signature.outputs[output].name],
                )
            )
            vector = np.array(["Ich habe Zeit.", ""], dtype=object)
            (translation,) = run(*[vector] * len(inputs))
            assert translation.shape[0] == 2
            # The session's message is what TF Serving returns: its first line
            # names the input and the rule.
            for bad, shape in [
                (np.array([["Ich habe"], ["Zeit"], ["."]], dtype=object), "[3, 1]"),
                (np.array("Ich habe Zeit.", dtype=object), "[]"),
            ]:
                with pytest.raises(tf.errors.InvalidArgumentError) as error:
                    run(*[bad] * len(inputs))
                assert rule_line(error.value.message.splitlines()[0]) == (
                    "assertion failed: [text must be a vector of strings [batch]; got shape "
                    f"{shape}]"
                ), (name, error.value.message)


# -- n-best, forced prefixes, decoding options ------------------------------------------
OPTIONS = dict(
    min_length=2, no_repeat_ngram_size=2, repetition_penalty=1.3, coverage_penalty=0.2, alpha=1.1
)


@pytest.fixture(scope="module")
def tiny_translator_with_options(tmp_path_factory):
    """`(path, model, tokenizer)`: an untrained tiny translator exported with
    `translator_archive` and decoding options, 3 hypotheses of a beam of 3."""
    import keras

    from keras_attention.seq2seq import RecurrentSeq2Seq
    from keras_attention.serving.export import export_archive, translator_archive
    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    directory = tmp_path_factory.mktemp("translator-options")
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(RESERVED + ["ich", "habe", "zeit", "."]) + "\n")
    tokenizer = SubwordTokenizer(str(vocabulary))
    keras.utils.set_random_seed(1)
    model = RecurrentSeq2Seq(8, 8, embed_dim=4, hidden_dim=8, attention="dot")
    model.build()
    archive = translator_archive(
        model, tokenizer, tokenizer, max_length=6, beam_width=3, num_hypotheses=3, **OPTIONS
    )
    return export_archive(archive, str(directory / "exports"), "translator"), model, tokenizer


@pytest.mark.large(
    reason=(
        "a plain TensorFlow process; test_translation_export.py's runs the shared "
        "export's signatures so in `make test`"
    )
)
def test_nbest_and_constrained_from_plain_tensorflow_equal_in_process(
    tiny_translator_with_options, tmp_path
):
    """A process that imports only tensorflow and tensorflow_text gets, from
    `nbest` and `constrained`, the in-process beam search's hypotheses and
    scores with the exported options; a translation starts with its prefix;
    a prefix per row mismatch is an INVALID_ARGUMENT."""
    import keras
    import tensorflow as tf

    from keras_attention.seq2seq import BeamSearch
    from keras_attention.seq2seq.generation import beam_search, generate

    path, model, tokenizer = tiny_translator_with_options
    texts = ["ich habe zeit .", "zeit", "", "ich ich ich ich ich ich ich"]
    prefixes = ["habe", "", "zeit", "zeit ."]
    script = f"""
import json, sys, tensorflow as tf, tensorflow_text
assert "keras_attention" not in sys.modules
loaded = tf.saved_model.load({path!r})
nbest = loaded.signatures["nbest"](text=tf.constant({texts!r}))
forced = loaded.signatures["constrained"](
    text=tf.constant({texts!r}), prefix=tf.constant({prefixes!r}))
options = loaded.signatures["decoding_options"]()
unforced = loaded.signatures["constrained"](
    text=tf.constant({texts!r}), prefix=tf.constant([""] * {len(texts)}))
default = loaded.signatures["serving_default"](text=tf.constant({texts!r}))
try:
    loaded.signatures["constrained"](text=tf.constant(["ich", "zeit"]), prefix=tf.constant(["a"]))
    mismatch = "accepted"
except tf.errors.InvalidArgumentError as error:
    mismatch = error.message
print(json.dumps({{
    "translations": [[t.decode() for t in row] for row in nbest["translations"].numpy()],
    "scores": nbest["scores"].numpy().tolist(),
    "truncated": nbest["truncated"].numpy().tolist(),
    "forced": [t.decode() for t in forced["translation"].numpy()],
    "forced_scores": forced["score"].numpy().tolist(),
    "options": {{name: value.numpy().item() for name, value in options.items()
                 if name not in ("options", "summary", "search")}},
    "search": options["search"].numpy().decode(),
    "json": options["options"].numpy().decode(),
    "summary": options["summary"].numpy().decode(),
    "keys": sorted(options),
    "mismatch": mismatch,
    "unforced": [t.decode() for t in unforced["translation"].numpy()],
    "default": [t.decode() for t in default["translation"].numpy()],
}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["unforced"] == got["default"]  # only empty prefixes: width 0, nothing forced

    source, truncated = tokenizer.encode(tf.constant(texts), 6)
    expected = beam_search(model, source, 7, beam_width=3, num_hypotheses=3, **OPTIONS)
    flat = tokenizer.decode(np.asarray(expected["tokens"]).reshape(12, -1)).numpy()
    texts_expected = np.asarray([t.decode() for t in flat]).reshape(4, 3)
    texts_expected[2] = ""  # empty input, empty output
    assert got["translations"] == texts_expected.tolist()
    scores_expected = np.asarray(expected["scores"]).copy()
    scores_expected[2] = 0.0  # a blank text's scores are 0
    np.testing.assert_allclose(got["scores"], scores_expected, rtol=1e-5)
    assert got["truncated"] == [False, False, False, True]

    prefix = np.zeros((4, 3), "int32")
    prefix[0, 0], prefix[2, 0], prefix[3, :2] = 5, 6, [6, 7]  # habe; zeit; zeit .
    forced = generate(model, source, 7, beam_width=3, prefix=prefix, **OPTIONS)
    forced_scores = np.asarray(forced["scores"]).copy()
    forced_scores[2] = 0.0
    np.testing.assert_allclose(got["forced_scores"], forced_scores, rtol=1e-5)
    forced_text = [t.decode() for t in tokenizer.decode(forced["tokens"]).numpy()]
    assert got["forced"] == [forced_text[0], forced_text[1], "", forced_text[3]]
    assert got["forced"][0].startswith("habe") and got["forced"][3].startswith("zeit.")
    assert got["options"] == {
        "beam_width": 3,
        "num_hypotheses": 3,
        **{name: pytest.approx(value) for name, value in OPTIONS.items()},
    }
    # Plain keys: the JSON under `options`, the readable line under `summary`.
    assert json.loads(got["json"]) == dict(beam_width=3, num_hypotheses=3, **OPTIONS)
    assert got["summary"] == (
        "beam_width=3, num_hypotheses=3, min_length=2, no_repeat_ngram_size=2, "
        "repetition_penalty=1.3, coverage_penalty=0.2, alpha=1.1"
    )
    assert got["keys"] == sorted(["options", "summary", "search", *got["options"]])
    # The search itself, serialized: it rebuilds the BeamSearch the export ran.
    search = keras.saving.deserialize_keras_object(json.loads(got["search"]))
    assert search.get_config() == {
        **BeamSearch(beam_width=3, num_hypotheses=3, **OPTIONS).get_config(),
    }
    assert "prefix must have one entry per text; got 1 prefixes for 2 texts" in got["mismatch"]


@pytest.mark.large(reason="a saved_model_cli process")
def test_saved_model_cli_shows_the_decoding_options(tiny_translator_with_options):
    from keras_attention.serving import check

    path = tiny_translator_with_options[0]
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run(
        [cli, "show", "--dir", path, "--all"], capture_output=True, text=True
    ).stdout
    for signature in ("nbest", "constrained", "decoding_options"):
        assert f"signature_def['{signature}']" in shown
    assert "inputs['prefix'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in shown
    assert (
        "outputs['translations'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1, 3)"
        in shown
    )
    listed = shown.split("signature_def['decoding_options']")[1].split("signature_def")[0]
    for key in ("options", "summary", "search"):
        assert f"outputs['{key}'] tensor_info:\n        dtype: DT_STRING" in listed, listed
    assert (
        "outputs['min_length'] tensor_info:\n        dtype: DT_INT32\n        shape: ()" in listed
    )
    assert check.check_export(path) == {s: [] for s in check.available_servings()}


# -- int8 exports --------------------------------------------------------------------------
# float32 / int8 bytes of variables/ the tiny Transformer's int8 export must reach
# (2.7 measured): every projection is int8 (4n / (n + 4)x smaller for fan-in n), while
# biases, norms and position tables stay float32 and weigh more at tiny widths.
MIN_SHRINK = 2.5
TEXT_SIGNATURES = ("serving_default", "greedy", "nbest")


def tiny_quantizable(family, size):
    """A built tiny model of `family` over a vocabulary of `size`."""
    import keras

    from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq, TransformerSeq2Seq

    keras.utils.set_random_seed(2)
    model = {
        "transformer": lambda: TransformerSeq2Seq(
            size, size, hidden_dim=32, num_layers=1, num_heads=2, max_length=10
        ),
        "convs2s": lambda: ConvS2SSeq2Seq(
            size, size, embed_dim=16, hidden_dim=32, num_layers=1, max_length=10
        ),
        "rnn": lambda: RecurrentSeq2Seq(size, size, embed_dim=16, hidden_dim=32, attention="dot"),
    }[family]()
    model.build()
    return model


def tiny_translator_of(family, directory):
    from keras_attention.seq2seq import BeamSearch
    from keras_attention.serving import Translator
    from tests.test_translator import word_tokenizer

    tokenizer, size = word_tokenizer(directory)
    model = tiny_quantizable(family, size)
    return Translator(model, tokenizer, tokenizer, BeamSearch(beam_width=2), max_source_length=7)


@pytest.fixture(scope="module")
def int8_transformer(tmp_path_factory):
    """`(translator, int8 export, the model's weights before, the int8
    Translator exported)` of an untrained tiny Transformer. The export is
    `SavedModelExporter(quantize="int8")`'s (what `export(quantize="int8")`
    calls) in two steps, its `prepared` Translator kept and exported as it
    is: the tests below read the graphs it traced rather than tracing
    another int8 copy."""
    from keras_attention.serving.exporters import SavedModelExporter

    directory = tmp_path_factory.mktemp("int8")
    translator = tiny_translator_of("transformer", directory)
    before = [np.array(weight) for weight in translator.model.get_weights()]
    quantized = SavedModelExporter(quantize="int8").prepared(translator)
    int8_path = SavedModelExporter().export(quantized, str(directory / "exports"), "int8")
    return translator, int8_path, before, quantized


SIGNATURE_BODIES = (
    "translate_function",
    "greedy_function",
    "attention_function",
    "nbest_function",
    "constrained_function",
    "tokens_function",
    "options_function",
)


@pytest.fixture(scope="module")
def counted_rnn_export(tmp_path_factory):
    """`(translator, float export, calls)` of an untrained tiny RNN, exported
    while `calls` counts the runs of each signature body's Python for this
    translator (until the module's last test)."""
    from keras_attention.serving.graph import SignatureGraph

    calls = {name: 0 for name in SIGNATURE_BODIES}
    directory = tmp_path_factory.mktemp("counted")
    translator = tiny_translator_of("rnn", directory)

    def counting(name):
        original = getattr(SignatureGraph, name)

        def counted(self, *args, **kwargs):
            calls[name] += self is translator.graph
            return original(self, *args, **kwargs)

        return counted

    with pytest.MonkeyPatch.context() as patch:
        for name in SIGNATURE_BODIES:
            patch.setattr(SignatureGraph, name, counting(name))
        yield translator, translator.export(str(directory / "exports"), "float"), calls


def test_an_export_traces_each_signature_once(counted_rnn_export):
    """`tf.saved_model.save` traced every signature's search a second time
    (its function cache key holds the save options), which doubled an
    export's time and its saved_model.pb. Now the saved function calls the
    one trace (`traced_once`): an export runs each body's Python once, and
    the in-process methods reuse that trace."""
    from tests.test_translator import sentences

    translator, path, calls = counted_rnn_export
    assert calls == {name: 1 for name in SIGNATURE_BODIES}
    texts = sentences()[:3]
    translated, greedy = translator.translate(texts), translator.greedy(texts)
    assert calls == {name: 1 for name in SIGNATURE_BODIES}
    import tensorflow as tf

    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](text=tf.constant(texts))["translation"]
    assert [t.decode() for t in served.numpy()] == translated
    # The functions keep their argument names, in process and restored.
    for function in (translator.function("greedy"), loaded.greedy):
        served = function(text=tf.constant(texts))["translation"]
        assert [t.decode() for t in served.numpy()] == greedy
    tokens = loaded.tokens(token_ids=tf.constant([[4, 5]]), lengths=tf.constant([2]))
    assert tokens.keys() == loaded.signatures["tokens"].structured_outputs.keys()


def test_traced_once_keeps_names_and_refuses_a_function_without_a_signature():
    import tensorflow as tf

    from keras_attention.serving.versions import traced_once

    def scale(image, factor):
        return {"scaled": image * factor}

    spec = [tf.TensorSpec((None,), tf.float32), tf.TensorSpec((), tf.float32, name="factor")]
    wrapped = traced_once(tf.function(scale, input_signature=spec, autograph=False))
    out = wrapped(image=tf.constant([1.0, 2.0]), factor=tf.constant(3.0))
    np.testing.assert_allclose(out["scaled"].numpy(), [3.0, 6.0])
    # An unnamed spec's input is named after the argument, as without the wrapper.
    names = [t.name.split(":")[0] for t in wrapped.get_concrete_function().inputs]
    assert names == ["image", "factor"]
    with pytest.raises(ValueError, match="input_signature"):
        traced_once(tf.function(scale))


@pytest.mark.large
def test_an_int8_export_translates_as_the_quantized_model_in_process(int8_transformer):
    """The text signatures of the int8 export (plain TensorFlow) answer what
    `Translator.quantized("int8")` answers in process; the Translator's own
    model stays float, its weights untouched."""
    import tensorflow as tf

    from tests.test_translator import sentences

    translator, path, before, quantized = int8_transformer
    assert translator.quantization is None
    for weight, kept in zip(translator.model.get_weights(), before):
        np.testing.assert_array_equal(weight, kept)
    assert quantized.quantization == "int8" and quantized.model is not translator.model
    texts = sentences()[:12] + [""]
    loaded = tf.saved_model.load(path)
    served = {name: loaded.signatures[name](text=tf.constant(texts)) for name in TEXT_SIGNATURES}
    decoded = {
        name: [
            t.decode()
            for t in np.asarray(out["translation" if name != "nbest" else "translations"]).ravel()
        ]
        for name, out in served.items()
    }
    assert decoded["serving_default"] == quantized.translate(texts)
    assert decoded["greedy"] == quantized.greedy(texts)
    assert decoded["nbest"] == [text for row in quantized.nbest(texts) for text, _ in row]
    forced = loaded.signatures["constrained"](
        text=tf.constant(texts[:3]), prefix=tf.constant(["ich", "", "zeit"])
    )
    assert [t.decode() for t in forced["translation"].numpy()] == quantized.constrained(
        texts[:3], ["ich", "", "zeit"]
    )


def test_an_int8_export_stores_int8_weights_and_records_both_sizes(
    int8_transformer, counted_rnn_export
):
    import tensorflow as tf

    from keras_attention.serving.records import export_record, variables_bytes

    def dtypes(path):
        reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
        return reader.get_variable_to_dtype_map()

    def weight_bytes(model):
        return sum(np.asarray(w).nbytes for w in model.get_weights())

    translator, int8_path, _, _ = int8_transformer
    float_translator, float_path, _ = counted_rnn_export
    float_model = float_translator.model
    assert [name for name, dtype in dtypes(int8_path).items() if dtype == tf.int8]  # the kernels
    assert tf.int8 not in dtypes(float_path).values()
    float_record, int8_record = export_record(float_path), export_record(int8_path)
    assert float_record["quantization"] is None and int8_record["quantization"] == "int8"
    assert float_record["variables_bytes"] == variables_bytes(float_path)
    assert float_record["float32_variables_bytes"] == float_record["variables_bytes"]
    assert int8_record["variables_bytes"] == variables_bytes(int8_path)
    # Each weight is saved once (tracking the model too saved every one twice):
    # a float export's variables are its weights and the checkpoint's index.
    assert (
        weight_bytes(float_model) <= variables_bytes(float_path) < 1.1 * weight_bytes(float_model)
    )
    # The int8 export's float32 figure is what its float export would take:
    # the float weights and the checkpoint's index, whose entries (tens of
    # bytes each, the scales' too) make about 10% of this tiny model and well
    # under 0.1% of the demo's.
    weights = weight_bytes(translator.model)
    assert weights <= int8_record["float32_variables_bytes"] < 1.15 * weights
    assert int8_record["float32_variables_bytes"] / variables_bytes(int8_path) >= MIN_SHRINK


def int8_casts_in_loops(function):
    """The int8 -> float `Cast`s in the while-loop bodies of `function`'s
    graph (and in the functions those bodies call) other than of gathered
    rows (a token lookup): what a decoding loop would cast at every step."""
    import tensorflow as tf

    graph = function.get_concrete_function().graph.as_graph_def()
    library = {f.signature.name: f for f in graph.library.function}
    nodes = list(graph.node) + [node for f in library.values() for node in f.node_def]
    pending = [n.attr["body"].func.name for n in nodes if n.op in ("While", "StatelessWhile")]
    assert pending, "no while loop in the graph"
    seen, casts = set(), []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        body = {node.name: node for node in library[name].node_def}
        for node in body.values():
            pending += [v.func.name for v in node.attr.values() if v.func.name]
            pending += [f.name for v in node.attr.values() for f in v.list.func]
            if node.op != "Cast" or node.attr["SrcT"].type != tf.int8.as_datatype_enum:
                continue
            source = body.get(node.input[0].split(":")[0])
            if source is None or source.op not in ("GatherV2", "ResourceGather"):
                casts.append(f"{name}/{node.name}")
    return casts


@pytest.mark.tensorflow
def test_an_int8_translators_decoding_loops_cast_no_kernel(int8_transformer, tmp_path, monkeypatch):
    """The searches of an int8 export dequantize the kernels once per
    request, before the loop (`quantization.dequantized`): the loop bodies
    of its greedy and beam signatures (those the export traced) cast no
    int8 kernel to float, where casting at every step puts them in the
    body."""
    from keras_attention import quantization

    quantized = int8_transformer[3]
    for name in ("greedy", "serving_default"):
        assert int8_casts_in_loops(quantized.function(name)) == [], name
    monkeypatch.setattr(quantization, "dequantized", lambda model: contextlib.nullcontext())
    per_step = tiny_translator_of("transformer", tmp_path).quantized("int8")
    assert len(int8_casts_in_loops(per_step.function("greedy"))) >= 8  # the test sees them


def test_an_int8_export_passes_the_op_check_of_every_tf_serving_release(int8_transformer):
    from keras_attention.serving import check

    every = {serving: [] for serving in check.available_servings()}
    assert check.check_export(int8_transformer[1]) == every


# The other families' int8 exports: large (`make test-large`); the
# transformer's above is `make test`'s.
@pytest.mark.large
@pytest.mark.parametrize("family", ["convs2s", "rnn"])
def test_int8_exports_of_every_family_pass_the_op_check(family, tmp_path):
    from keras_attention.serving import check
    from keras_attention.serving.records import export_record

    path = tiny_translator_of(family, tmp_path).export(str(tmp_path), family, quantize="int8")
    assert export_record(path)["quantization"] == "int8"
    every = {serving: [] for serving in check.available_servings()}
    assert check.check_export(path) == every


def test_quantize_refuses_other_modes_and_a_quantized_model(tmp_path):
    translator = tiny_translator_of("rnn", tmp_path)
    for bad in ("int4", "INT8", True, 8):
        with pytest.raises(ValueError, match=r"`quantize` of Translator.export must be one of "):
            translator.export(str(tmp_path), "m", quantize=bad)
        with pytest.raises(ValueError, match=r"`mode` of Translator.quantized must be one of "):
            translator.quantized(bad)
    with pytest.raises(ValueError, match=r"\[None, 'int8'\]; received quantize='int4'"):
        translator.export(str(tmp_path), "m", quantize="int4")
    assert not os.path.exists(tmp_path / "m")  # refused before anything was written
    translator.model.quantize("int8")  # the user's own quantized model
    assert translator.quantization == "int8"
    with pytest.raises(ValueError, match="the model is quantized already"):
        translator.export(str(tmp_path), "m", quantize="int8")
    with pytest.raises(ValueError, match="the model is quantized already"):
        translator.quantized("int8")
