"""`keras-attention-serving-client` (recipes/serving_client.py) against a
minimal stand-in for TF Serving's REST API defined here: it records each
request body and answers a canned response, so no TensorFlow runs."""

import base64
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import numpy as np
import pytest
from keras_attention_recipes import serving_client

# Canned answers, in the format TF Serving uses for each request style.
NBEST = [["a b", "a", "b", ""], ["c", "c d", "d", "e"]]
SCORES = [[-1.0, -2.0, -3.0, -1e9], [-0.5, -1.5, -2.5, -3.5]]


def answer(body):
    """TF Serving's response to `body` for a 2-sentence `nbest` or a
    `serving_default` (whose `truncated` output is boolean)."""
    rows = body.get("instances")
    if body["signature_name"] == "nbest":
        outputs = {"translations": NBEST, "scores": SCORES, "truncated": [False, True]}
    else:
        count = len(rows if rows is not None else body["inputs"]["text"])
        outputs = {
            "translation": ["x"] * count,
            "score": [-1.25] * count,
            "truncated": [False] * count,
        }
    if rows is None:
        return {"outputs": outputs}
    return {"predictions": [dict(zip(outputs, row)) for row in zip(*outputs.values())]}


@pytest.fixture(scope="module")
def stub():
    """A REST server on 127.0.0.1 and a free port: `stub.bodies` lists the
    JSON bodies received (a body that is not JSON answers 400)."""
    bodies = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            data = self.rfile.read(int(self.headers["Content-Length"]))
            try:
                body = json.loads(data)
                bodies.append(body)
                status, reply = 200, answer(body)
            except ValueError as error:
                status, reply = 400, {"error": str(error)}
            encoded = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.bodies = bodies
    yield server
    server.shutdown()
    server.server_close()


def client(stub, capsys, *argv):
    """Run the client against `stub`: `(printed JSON, the body it sent)`."""
    port = str(stub.server_address[1])
    serving_client.main(["--host", "127.0.0.1", "--port", port, *argv])
    return json.loads(capsys.readouterr().out), stub.bodies[-1]


@pytest.mark.parametrize("style", ["inputs", "instances"])
def test_rest_in_both_styles_sends_json_and_prints_every_output(stub, capsys, style):
    printed, body = client(stub, capsys, "--text", "Ich habe", "Zeit", "--style", style)
    expected = [{"b64": base64.b64encode(t).decode()} for t in (b"Ich habe", b"Zeit")]
    sent = body["inputs"]["text"] if style == "inputs" else body["instances"]
    assert sent == expected
    assert printed == {
        "translation": ["x", "x"],
        "score": [-1.25, -1.25],
        "truncated": [False, False],
    }


def test_request_bodies_of_numpy_values_are_json_in_both_styles():
    """Booleans, integers and floats of NumPy (arrays and scalars, any
    shape) become JSON values in rows and in columns."""
    inputs = {
        "flag": np.array([True, False]),
        "token_ids": np.array([[1, 5], [7, 2]], "int32"),
        "weight": np.array([0.5, 1.5], "float32"),
        "text": np.array([b"a", b"\xff"], dtype=object),
    }
    for style in ("inputs", "instances"):
        body = json.loads(json.dumps(serving_client.rest_body(inputs, "x", style)))
        tensors = serving_client.tensors_from_rest_body(body, list(inputs))
        for name, value in inputs.items():
            np.testing.assert_array_equal(tensors[name], value)
    rows = serving_client.rest_body(inputs, "x", "instances")["instances"]
    assert rows[0] == {"flag": True, "token_ids": [1, 5], "weight": 0.5, "text": {"b64": "YQ=="}}


@pytest.mark.parametrize("style", ["inputs", "instances"])
def test_nbest_keeps_one_row_per_sentence_over_rest(stub, capsys, style):
    printed, _ = client(stub, capsys, "--text", "a", "b", "--signature", "nbest", "--style", style)
    assert printed["translations"] == NBEST
    assert printed["scores"] == SCORES
    assert printed["truncated"] == [False, True]


def test_nbest_keeps_one_row_per_sentence_over_grpc(monkeypatch, capsys):
    def predict_grpc(host, port, model_name, inputs, signature):
        assert (host, port, model_name, signature) == ("localhost", 8500, "translator", "nbest")
        return {
            "translations": np.array([[t.encode() for t in row] for row in NBEST], dtype=object),
            "scores": np.array(SCORES, "float32"),
        }

    monkeypatch.setattr(serving_client, "predict_grpc", predict_grpc)
    serving_client.main(["--text", "a", "b", "--signature", "nbest", "--protocol", "grpc"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["translations"] == NBEST
    np.testing.assert_allclose(printed["scores"], SCORES)


def test_text_that_is_not_utf8_is_sent_as_its_bytes(stub, capsys):
    """A command-line argument with invalid UTF-8 reaches Python as
    surrogates (`\\udcff` for the byte 0xff): the client sends the bytes."""
    _, body = client(stub, capsys, "--text", "caf\udce9 ok")
    assert base64.b64decode(body["inputs"]["text"][0]["b64"]) == b"caf\xe9 ok"
    # From a real command line too: no traceback.
    port = str(stub.server_address[1])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_attention_recipes.serving_client",
            "--port",
            port,
            "--host",
            "127.0.0.1",
        ]
        + ["--text", b"\xff\xfe".decode("utf-8", "surrogateescape")],
        capture_output=True,
    )
    assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr
    assert base64.b64decode(stub.bodies[-1]["inputs"]["text"][0]["b64"]) == b"\xff\xfe"


@pytest.mark.parametrize("port", ["0", "65536", "-1", "http"])
def test_a_port_outside_1_to_65535_is_refused(port, capsys):
    with pytest.raises(SystemExit) as stop:
        serving_client.main(["--text", "a", "--port", port])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "keras-attention-serving-client: error: argument --port: must be a port number in "
        f"1-65535; received {port!r}"
    )


def test_help_shows_a_local_docker_command_and_every_flag(capsys):
    with pytest.raises(SystemExit):
        serving_client.main(["--help"])
    shown = capsys.readouterr().out
    assert (
        "    docker run -p 127.0.0.1:8500:8500 -p 127.0.0.1:8501:8501 \\\n"
        '        -v "$PWD/saved_models/translator:/models/translator" \\\n'
        "        -e MODEL_NAME=translator tensorflow/serving\n"
    ) in shown
    assert "-p 8500" not in shown
    options = shown.split("options:")[1]
    for flag in ("--signature SIGNATURE", "--protocol {rest,grpc}", "--host HOST", "--port PORT"):
        after = options.split(flag)[1].lstrip(" ")
        assert not after.startswith("\n  -"), f"{flag} has no help text"


def test_inputs_of_another_dtype_are_refused_or_converted_before_sending(stub):
    """TF Serving refuses a request of another dtype before the graph runs,
    in a message naming no input; the client refuses it first, naming the
    input, and converts what converts (int64 ids to int32, float64 pixels
    to float32, str to UTF-8 bytes)."""
    sent = len(stub.bodies)
    port = stub.server_address[1]
    for inputs, error, message in [
        ({"text": np.array([1, 2], "int32")}, TypeError, "text must hold strings; got a value "),
        ({"text": [0.5]}, TypeError, "text must hold strings; got a value of type float"),
        ({"prefix": ["a", None]}, TypeError, "prefix must hold strings; got a value of type None"),
        (
            {"token_ids": np.array([[1.0, 2.0]]), "lengths": [2]},
            TypeError,
            "token_ids must hold integers (int32); got float64 values",
        ),
        ({"lengths": [True]}, TypeError, "lengths must hold integers (int32); got bool values"),
        ({"lengths": [2**40]}, ValueError, "lengths must hold int32 values; got 1099511627776"),
        ({"image": np.array(["x"])}, TypeError, "image must hold numbers (float32); got <U1"),
    ]:
        with pytest.raises(error) as raised:
            serving_client.predict_rest("127.0.0.1", port, "translator", inputs, "x")
        assert str(raised.value).splitlines()[0].startswith(message), raised.value
    assert len(stub.bodies) == sent  # nothing was sent
    converted = serving_client.checked_inputs(
        {
            "text": ["ä", b"\xff"],
            "token_ids": np.array([[1, 2]], "int64"),
            "image": np.zeros((1, 2), "float64"),
            "other": np.array([1.5]),
        }
    )
    assert converted["text"].dtype == object and converted["text"].tolist() == [
        "ä".encode(),
        b"\xff",
    ]
    assert converted["token_ids"].dtype == np.int32
    assert converted["image"].dtype == np.float32
    assert converted["other"].dtype == np.float64  # not an input of ours: unchanged


def test_a_single_string_for_text_is_refused_before_anything_is_sent():
    """`{"text": "Ich habe keine Zeit."}` became a scalar request, which the
    server refused with a shape error; the client now says what it wanted."""
    for value in ("Ich habe keine Zeit.", b"Ich habe keine Zeit."):
        with pytest.raises(ValueError) as raised:
            serving_client.checked_inputs({"text": value})
        assert str(raised.value) == (
            f"text must be a list of strings; got a single string {value!r} (wrap it in a list)"
        )
    assert serving_client.checked_inputs({"text": ["Ich habe keine Zeit."]})["text"].shape == (1,)
