"""Send requests to a model served by TensorFlow Serving, over REST or gRPC.

    keras-attention-serving-client --text "Ich habe keine Zeit."                 # translator, REST
    keras-attention-serving-client --text "Wo ist der Bahnhof?" --protocol grpc
    keras-attention-serving-client --image digit.png --model-name digits --signature image_bytes

Start the server first, e.g. with Docker (its ports published on this
machine only: TF Serving has no authentication):

    docker run -p 127.0.0.1:8500:8500 -p 127.0.0.1:8501:8501 \\
        -v "$PWD/saved_models/translator:/models/translator" \\
        -e MODEL_NAME=translator tensorflow/serving

REST bodies come in TF Serving's two formats: "instances" (a list of rows)
and "inputs" (a dict of columns); bytes travel as {"b64": "..."}. The
outputs are printed as JSON, each with its shape (the `nbest` signature's
translations: one list of N per sentence).
"""

import argparse
import base64
import json
import sys

import numpy as np


def _encode(value):
    """`value` as JSON values: NumPy scalars and arrays (of any dtype: bool,
    integers, floats, bytes) as Python ones, bytes as `{"b64": ...}`, at
    any depth of lists, tuples and dicts."""
    if isinstance(value, np.ndarray):
        value = value.tolist()  # nested lists of Python scalars (bytes for object arrays)
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {key: _encode(v) for key, v in value.items()}
    return value


def _printable(value):
    """An output as JSON for printing: its shape kept (a `[2, 4]` array is
    2 lists of 4), strings as text (invalid UTF-8 replaced by U+FFFD)."""
    value = value.tolist() if isinstance(value, np.ndarray) else value
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [_printable(v) for v in value]
    return value


def rest_body(inputs, signature="serving_default", style="inputs"):
    """The JSON body of a REST predict request for `{input_name: batch}`."""
    if style == "inputs":
        return {
            "signature_name": signature,
            "inputs": {name: _encode(value) for name, value in inputs.items()},
        }
    if style == "instances":
        names = list(inputs)
        rows = [dict(zip(names, values)) for values in zip(*(inputs[name] for name in names))]
        if len(names) == 1:  # a single input: bare values per row
            rows = [row[names[0]] for row in rows]
        return {"signature_name": signature, "instances": [_encode(row) for row in rows]}
    raise ValueError(f"`style` must be 'inputs' or 'instances'; received {style!r}.")


def _decode(value):
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _array(values):
    values = _decode(values)
    flat = np.array(values, dtype=object)
    if flat.size and all(isinstance(v, (bytes, str)) for v in flat.ravel()):
        return np.array(
            [v.encode() if isinstance(v, str) else v for v in flat.ravel()], dtype=object
        ).reshape(flat.shape)
    return np.array(values)


def tensors_from_rest_body(body, input_names):
    """What TF Serving feeds the signature for a REST body, as
    `{input_name: numpy array}` (the inverse of `rest_body`)."""
    if "inputs" in body:
        inputs = body["inputs"]
        if not isinstance(inputs, dict):
            inputs = {input_names[0]: inputs}
        return {name: _array(value) for name, value in inputs.items()}
    rows = body["instances"]
    if rows and isinstance(rows[0], dict) and not set(rows[0]) == {"b64"}:
        return {name: _array([row[name] for row in rows]) for name in input_names}
    return {input_names[0]: _array(rows)}


def parse_rest_response(body):
    """`{output_name: numpy array}` from a REST response in either format
    ("predictions" rows or "outputs" columns)."""
    if "outputs" in body:
        outputs = body["outputs"]
        return (
            {name: _array(value) for name, value in outputs.items()}
            if isinstance(outputs, dict)
            else {"output": _array(outputs)}
        )
    rows = body["predictions"]
    if rows and isinstance(rows[0], dict):
        return {name: _array([row[name] for row in rows]) for name in rows[0]}
    return {"output": _array(rows)}


# The dtypes of the exports' inputs (translator, digits). A request of
# another dtype is refused by TF Serving before the signature's graph runs,
# with a message naming no input ("Type mismatch: actual int32 vs. expect
# string" over gRPC; a JSON parse error over REST), so the client checks
# and converts first.
INPUT_KINDS = {
    "text": "string",
    "prefix": "string",
    "image_bytes": "string",
    "token_ids": "int32",
    "lengths": "int32",
    "image": "float32",
}


def checked_inputs(inputs):
    """`inputs` as arrays of the dtypes the exports' signatures take
    (strings as bytes, `token_ids`/`lengths` int32, `image` float32); a
    `TypeError` naming the input when its values are of another kind
    (e.g. numbers for `text`); a `ValueError` for one string where a list
    of them is wanted. Inputs of other names pass unchanged."""
    checked = {}
    for name, value in inputs.items():
        kind = INPUT_KINDS.get(name)
        array = np.asarray(value, dtype=object if kind == "string" else None)
        flat = list(array.ravel())
        if kind == "string":
            if isinstance(value, (str, bytes)):  # one string: a scalar the server refuses
                raise ValueError(
                    f"{name} must be a list of strings; got a single string {value[:40]!r} "
                    "(wrap it in a list)"
                )
            if not all(isinstance(v, (str, bytes)) for v in flat):
                other = next(type(v).__name__ for v in flat if not isinstance(v, (str, bytes)))
                raise TypeError(f"{name} must hold strings; got a value of type {other}")
            array = np.array(
                [v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v for v in flat],
                dtype=object,
            ).reshape(array.shape)
        elif kind == "int32":
            if array.size and not (
                np.issubdtype(array.dtype, np.integer) and array.dtype != np.bool_
            ):
                raise TypeError(f"{name} must hold integers (int32); got {array.dtype} values")
            if array.size and (array.min() < -(2**31) or array.max() >= 2**31):
                raise ValueError(f"{name} must hold int32 values; got {array.max()}")
            array = array.astype(np.int32)
        elif kind == "float32":
            numeric = np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_
            if array.size and not numeric:
                raise TypeError(f"{name} must hold numbers (float32); got {array.dtype} values")
            array = array.astype(np.float32)
        checked[name] = array
    return checked


def predict_rest(host, port, model_name, inputs, signature, style="inputs", timeout=30):
    import requests

    inputs = checked_inputs(inputs)

    url = f"http://{host}:{port}/v1/models/{model_name}:predict"
    response = requests.post(url, json=rest_body(inputs, signature, style), timeout=timeout)
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered {response.status_code}: {response.text[:500]}")
    return parse_rest_response(response.json())


def predict_grpc(host, port, model_name, inputs, signature, timeout=30):
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model_name, signature
    for name, value in checked_inputs(inputs).items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(
            request, timeout=timeout
        )
    return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}


def _port(value):
    """`--port`: an integer in 1-65535 (0 would mean "pick one" to a server,
    and is no port to connect to)."""
    try:
        port = int(value)
    except ValueError:
        port = None
    if port is None or not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 1-65535; received {value!r}")
    return port


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="keras-attention-serving-client",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", nargs="+", help="sentences for a translator")
    what.add_argument("--image", nargs="+", help="PNG/JPEG files for the digits classifier")
    parser.add_argument("--model-name", help="served model name (default: translator or digits)")
    parser.add_argument(
        "--signature",
        default="serving_default",
        help="the signature to call: serving_default, greedy, attention, nbest, ... "
        "(default: serving_default; image_bytes with --image)",
    )
    parser.add_argument(
        "--protocol",
        choices=["rest", "grpc"],
        default="rest",
        help="REST (JSON over HTTP, needs requests) or gRPC (needs tensorflow-serving-api) "
        "(default: rest)",
    )
    parser.add_argument(
        "--host", default="localhost", help="the server's host name or address (default: localhost)"
    )
    parser.add_argument(
        "--port", type=_port, help="the server's port, 1-65535 (default: 8501 REST, 8500 gRPC)"
    )
    parser.add_argument(
        "--style",
        choices=["inputs", "instances"],
        default="inputs",
        help="REST body format: inputs (columns) or instances (rows) (default: inputs)",
    )
    args = parser.parse_args(argv)
    if args.text:
        # Sent as the bytes given: an argument that is not UTF-8 (Python
        # holds its bytes as surrogates) goes as it is, and the export
        # replaces invalid UTF-8 with U+FFFD.
        texts = [text.encode("utf-8", "surrogateescape") for text in args.text]
        inputs, model_name = {"text": np.array(texts, dtype=object)}, "translator"
    else:
        try:
            images = [open(path, "rb").read() for path in args.image]
        except OSError as error:
            parser.error(f"--image: {error}")
        inputs, model_name = {"image_bytes": np.array(images, dtype=object)}, "digits"
        if args.signature == "serving_default":
            args.signature = "image_bytes"
    model_name = args.model_name or model_name
    port = args.port if args.port is not None else (8501 if args.protocol == "rest" else 8500)
    try:
        if args.protocol == "rest":
            outputs = predict_rest(args.host, port, model_name, inputs, args.signature, args.style)
        else:
            outputs = predict_grpc(args.host, port, model_name, inputs, args.signature)
    except (
        Exception
    ) as error:  # a server that is down or refuses is the user's environment, not a bug
        sys.exit(f"error: {args.protocol} request to {args.host}:{port} failed: {error}")
    print(json.dumps({k: _printable(v) for k, v in outputs.items()}, indent=2, default=str))


if __name__ == "__main__":
    main()
