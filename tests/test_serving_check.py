"""The op check of exports against TF Serving releases: a hand-built
`tf.Module` export, planted future ops and attributes, the translator and
digits exports, the committed op lists and the CLI."""

import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_attention.serving import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OLDEST, NEWEST = check.available_servings()[0], check.available_servings()[-1]


@pytest.fixture(scope="module")
def module_export(tmp_path_factory):
    """`relu(x) + 1` saved by `tf.saved_model.save`, as TF Serving loads it."""
    import tensorflow as tf

    class Shifted(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((None,), tf.float32, name="x")])
        def shifted_relu(self, x):
            return {"y": tf.nn.relu(x) + 1.0}

    module = Shifted()
    path = str(tmp_path_factory.mktemp("module") / "1")
    tf.saved_model.save(module, path, signatures={"serving_default": module.shifted_relu})
    return path


def planted(export_dir, tmp_path, edit):
    """A copy of `export_dir` whose saved_model.pb `edit(proto)` changed."""
    copy = str(tmp_path / "planted")
    shutil.copytree(export_dir, copy)
    proto = check.read_saved_model(copy)
    edit(proto)
    with open(os.path.join(copy, "saved_model.pb"), "wb") as handle:
        handle.write(proto.SerializeToString())
    return copy


def function_with(proto, op):
    """The library function holding the first node of `op`, and that node."""
    for function in proto.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            if node.op == op:
                return function, node
    raise AssertionError(f"no {op} node")


def relu_function(export_dir):
    """The name of the library function that computes `relu(x) + 1`."""
    return function_with(check.read_saved_model(export_dir), "Relu")[0].signature.name


def test_op_lists_name_their_wheels_and_stay_small():
    assert check.available_servings() == ["2.17", "2.19", "2.20"]
    for serving in check.available_servings():
        path = os.path.join(check.OPLISTS, f"tf_serving_{serving}.json")
        assert os.path.getsize(path) < 200_000
        oplist = check.load_oplist(serving)
        assert oplist["tensorflow"].startswith(serving + ".")
        # Conv2D: `T`, `strides`, `padding` are required, the rest default.
        assert oplist["ops"]["Conv2D"][1] == {"T", "strides", "padding"}
        assert "dilations" in oplist["ops"]["Conv2D"][0]
        assert "FastWordpieceTokenizeWithOffsets" in oplist["ops"]  # TF Text
    # TF Serving 2.17.1-2.19.1 bundle TF Text 2.12.1, which predates these.
    for older in ("2.17", "2.19"):
        assert check.load_oplist(older)["tensorflow_text"] == "2.12.1"
        for op in ("TFText>RoundRobinTrim", "TFText>Utf8Binarize"):
            assert op in check.load_oplist("2.20")["ops"]
            assert op not in check.load_oplist(older)["ops"]


def test_a_module_export_passes_every_release(module_export):
    proto = check.read_saved_model(module_export)
    assert proto.meta_graphs[0].meta_info_def.stripped_default_attrs
    assert {"Relu", "AddV2", "Placeholder"} <= set(check.op_types(proto))
    assert "__inference_shifted_relu" not in " ".join(check.op_types(proto))  # calls are not ops
    assert check.check_export(module_export) == {s: [] for s in check.available_servings()}


def test_a_future_op_in_a_function_is_caught(module_export, tmp_path):
    def add_future_op(proto):
        function, relu = function_with(proto, "Relu")
        function.node_def.add(name="future", op="FutureRelu", input=[relu.input[0]])

    path = planted(module_export, tmp_path, add_future_op)
    expected = f"unknown op FutureRelu (node 'future' in function {relu_function(module_export)})"
    assert check.check_export(path) == {s: [expected] for s in check.available_servings()}


def test_a_text_op_newer_than_tf_text_2_12_fails_only_the_older_releases(module_export, tmp_path):
    def add_round_robin(proto):
        function, _ = function_with(proto, "Relu")
        function.node_def.add(name="trim", op="TFText>RoundRobinTrim")

    found = check.check_export(planted(module_export, tmp_path, add_round_robin))
    # 2.20 knows the op (and asks for the attributes this bare node lacks).
    assert found["2.20"] and not [line for line in found["2.20"] if "unknown op" in line]
    where = f"(node 'trim' in function {relu_function(module_export)})"
    assert found["2.17"] == found["2.19"] == [f"unknown op TFText>RoundRobinTrim {where}"]


def test_unknown_and_missing_attributes_are_caught(module_export, tmp_path):
    def edit_attributes(proto):
        _, add = function_with(proto, "AddV2")
        add.attr["future_attr"].b = True  # not declared by AddV2
        add.attr["_internal_hint"].b = True  # internal: not validated, ignored
        _, relu = function_with(proto, "Relu")
        del relu.attr["T"]  # required: Relu has no default for T

    found = check.check_export(planted(module_export, tmp_path, edit_attributes), [NEWEST])
    where = f"in function {relu_function(module_export)})"
    assert sorted(found[NEWEST]) == [
        f"op AddV2 has no attribute 'future_attr' there (node 'add' {where}",
        f"op Relu needs attribute 'T', which the node lacks (node 'Relu' {where}",
    ]


def test_an_export_with_default_attributes_kept_is_reported(module_export, tmp_path):
    def unstrip(proto):
        proto.meta_graphs[0].meta_info_def.stripped_default_attrs = False

    found = check.check_export(planted(module_export, tmp_path, unstrip), [OLDEST])
    assert found[OLDEST] == [
        "written without stripping default-valued attributes "
        "(tf.saved_model.save strips them; do not pass a graph written otherwise)"
    ]


def test_digits_export_passes_every_release(tmp_path):
    from keras_attention_recipes import spatial_transformer_digits as recipe

    model, warp = recipe.build_models(True)
    examples = np.random.default_rng(0).random((4, recipe.CANVAS, recipe.CANVAS, 1))
    args = argparse.Namespace(export_dir=str(tmp_path), model_name="digits")
    path = recipe.export(model, warp, args, examples)
    assert "DecodeImage" in " ".join(check.op_types(check.read_saved_model(path)))
    assert check.check_export(path) == {s: [] for s in check.available_servings()}


def test_cli_prints_a_verdict_per_release_and_fails_on_problems(module_export, tmp_path, capsys):
    assert check.main([module_export, "--serving", NEWEST]) == 0
    assert f"ok   TF Serving {check.load_oplist(NEWEST)['servers']} " in capsys.readouterr().out

    def add_future_op(proto):
        function_with(proto, "Relu")[0].node_def.add(name="future", op="FutureRelu")

    assert check.main([planted(module_export, tmp_path, add_future_op)]) == 1
    printed = capsys.readouterr().out
    assert printed.count("FAIL TF Serving") == len(check.available_servings())
    assert "  unknown op FutureRelu (node 'future' in function __inference_" in printed


def test_cli_serving_takes_one_release_and_repeats(module_export, capsys):
    """`--serving 2.20 DIR`: the flag takes one value, so the directory is
    not swallowed; repeated, it checks each release named once."""
    assert check.main(["--serving", NEWEST, module_export]) == 0
    printed = capsys.readouterr().out
    assert printed.count("ok   TF Serving") == 1
    assert f"TensorFlow {check.load_oplist(NEWEST)['tensorflow']}," in printed
    argv = ["--serving", OLDEST, module_export, "--serving", NEWEST, "--serving", OLDEST]
    assert check.main(argv) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ok")]
    assert len(lines) == 2 and check.load_oplist(OLDEST)["tensorflow"] in lines[0]


def test_cli_errors_are_messages_not_tracebacks(module_export, tmp_path, capsys):
    (tmp_path / "saved_model.pb").write_bytes(b"not a protocol buffer")
    for argv, message in [
        (
            [module_export, "--serving", "2.21"],
            "error: --serving must be among ['2.17', '2.19', '2.20']",
        ),
        ([str(tmp_path)], f"error: EXPORT_DIR {tmp_path}: cannot read saved_model.pb"),
    ]:
        with pytest.raises(SystemExit) as exited:
            check.main(argv)
        assert exited.value.code == 2 and message in capsys.readouterr().err
    # The installed entry point: one line of error, no traceback.
    result = subprocess.run(
        [sys.executable, "-m", "keras_attention.serving.check", "/nonexistent"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "error: EXPORT_DIR must be a SavedModel directory holding saved_model.pb; got " in (
        result.stderr
    )


def test_the_runtime_comparison_catches_a_different_output():
    """`make serving-check`'s comparison (tests/serving_runtime.py): strings
    exactly, floats to 1e-5, through its JSON encoding."""
    from tests.serving_runtime import decode, differences, encode

    text = np.array([b"I have no time.", b"\xff\x00"], dtype=object)
    score = np.array([-1.5, -2.25], "float32")
    np.testing.assert_array_equal(decode(encode(text)), text)
    expected = {"greedy": {"translation": encode(text), "score": encode(score)}}
    assert differences(expected, expected) == []
    close = {"greedy": {"translation": encode(text), "score": encode(score + 4e-6)}}
    assert differences(expected, close) == []
    other = np.array([b"I have no time.", b"?"], dtype=object)
    far = {"greedy": {"translation": encode(other), "score": encode(score + 1e-4)}}
    found = differences(expected, far)
    assert len(found) == 2
    assert found[0] == "greedy/translation: 1 of 2 rows differ, the first [b'?'] != [b'\\xff\\x00']"
    assert found[1].startswith("greedy/score: differs by 1.00e-04")
    # An XLA export's scores are held to 1e-4 (its plain twin's by XLA_TOLERANCE).
    assert differences(expected, close, tolerance=1e-4) == []
    near = {"greedy": {"translation": encode(text), "score": encode(score + 5e-5)}}
    assert differences(expected, near) != [] and differences(expected, near, 1e-4) == []


def test_must_compile_finds_the_signatures_that_call_an_xla_function(module_export, tmp_path):
    """`check.must_compile`: a signature that calls a `jit_compile=True`
    function (through a branch) is listed with it, a plain one is not, and
    the report names the server flag; a plain export lists none."""
    import tensorflow as tf

    compiled = tf.function(lambda x: {"y": x * 2.0}, jit_compile=True, autograph=False)

    class Mixed(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((None,), tf.float32, name="x")])
        def doubled(self, x):
            return tf.cond(tf.size(x) > 0, lambda: compiled(x), lambda: {"y": x})

        @tf.function(input_signature=[tf.TensorSpec((None,), tf.float32, name="x")])
        def plain(self, x):
            return {"y": x + 1.0}

    module = Mixed()
    path = str(tmp_path / "1")
    signatures = {"serving_default": module.doubled, "plain": module.plain}
    tf.saved_model.save(module, path, signatures=signatures)
    found = check.must_compile(check.read_saved_model(path))
    assert list(found) == ["serving_default"] and len(found["serving_default"]) == 1
    lines = []
    check.report(path, [NEWEST], log=lines.append)
    assert lines[1] == (
        "needs --xla_cpu_compilation_enabled=true: 1 functions must compile with XLA, in "
        "signatures serving_default"
    )
    assert check.must_compile(check.read_saved_model(module_export)) == {}
