"""A stand-in for TensorFlow Serving's REST API, for tests and benchmarks
where `tensorflow_model_server` is not installed (it is not on PyPI or in
Debian): one SavedModel, called in this process.

    python tests/serving_stub.py saved_models/translator/1 --port 8501

answers what TF Serving's REST API answers for one model:

- `GET /v1/models/<name>[/versions/<N>]`: the version's status;
- `POST /v1/models/<name>[/versions/<N>]:predict` with
  `{"signature_name": ..., "instances": [...]}` (rows) or
  `{"signature_name": ..., "inputs": {...}}` (columns); bytes as
  `{"b64": "..."}`. A response holds `predictions` (rows) or `outputs`
  (columns) in the request's format; string outputs are UTF-8 text unless
  the output's name ends in `_bytes` (then `{"b64": ...}`);
- errors as `{"error": "..."}`: 404 for an unknown model, version or path,
  400 for a bad body, an unknown signature or inputs the signature refuses,
  500 for anything else.

It parses bodies itself (not with `recipes/serving_client.py`'s inverse
functions), so that the client is checked against the documented format,
not against its own mirror image. It is not TF Serving: no batching across
requests, no model reloading, one version.
"""

import argparse
import base64
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?(?P<verb>:\w+)?$")


class RequestError(Exception):
    """A request the stub answers with `status` and `{"error": message}`."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _decode(value, name):
    """A JSON value with `{"b64": ...}` leaves as nested lists of bytes/numbers."""
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise RequestError(400, f'{name}: a JSON object must be {{"b64": "..."}}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except ValueError as error:
            raise RequestError(400, f"{name}: invalid base64: {error}") from None
    if isinstance(value, list):
        return [_decode(v, name) for v in value]
    if isinstance(value, str):
        return value.encode("utf-8")
    return value


def _tensor(value, spec, name):
    """The NumPy array of one input's JSON value, in the signature's dtype."""
    value = _decode(value, name)
    leaves = list(_leaves(value))
    if spec.dtype.name == "string":
        array = np.array(value, dtype=object)
        if any(not isinstance(leaf, bytes) for leaf in array.ravel()):  # numbers, ragged lists
            raise RequestError(
                400, f"{name}: expected a regular array of strings; got {value!r}"[:300]
            )
        return array
    if any(isinstance(leaf, bytes) for leaf in leaves):
        raise RequestError(400, f"{name}: expected {spec.dtype.name} numbers; got strings")
    if spec.dtype.is_integer and any(
        isinstance(leaf, float) or isinstance(leaf, bool) for leaf in leaves
    ):
        raise RequestError(400, f"{name}: expected {spec.dtype.name} integers; got {value!r}"[:300])
    try:
        return np.array(value, dtype=spec.dtype.as_numpy_dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise RequestError(400, f"{name}: {error}") from None


def _leaves(value):
    if isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _json_value(array, name):
    if array.dtype == object:
        if name.endswith("_bytes"):
            encode = lambda b: {"b64": base64.b64encode(b).decode("ascii")}  # noqa: E731
        else:
            encode = lambda b: b.decode("utf-8", "replace")  # noqa: E731
        flat = [encode(b) for b in array.ravel()]
        return np.array(flat, dtype=object).reshape(array.shape).tolist() if flat else []
    return array.tolist()


class ServingStub:
    """TF Serving's REST predict API for the SavedModel in `export_dir`,
    served as `model_name`, version the folder's name (an integer) or 1.

    `with ServingStub(path) as stub:` starts it on `127.0.0.1` and a free
    port (`stub.port`) in a thread, and stops it on exit. `loaded`: the
    SavedModel already loaded from `export_dir`, to share it. `calls`
    counts the predict requests it answered, `errors` its error answers."""

    def __init__(
        self,
        export_dir,
        model_name="translator",
        version=None,
        host="127.0.0.1",
        port=0,
        loaded=None,
    ):
        import tensorflow as tf

        try:
            import tensorflow_text  # noqa: F401  (registers the tokenizers' ops, as the server does)
        except ImportError:  # pragma: no cover - exports without text ops still load
            pass
        self.tf = tf
        self.loaded = loaded if loaded is not None else tf.saved_model.load(export_dir)
        self.signatures = dict(self.loaded.signatures)
        base = os.path.basename(os.path.normpath(export_dir))
        self.model_name = model_name
        self.version = str(version if version is not None else (base if base.isdigit() else 1))
        self.calls = self.errors = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet, as the tests and the bench print tables
                pass

            def _answer(self, status, body):
                data = json.dumps(body).encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, post):
                try:
                    status, body = 200, stub.handle(self.command, self.path, self._body(post))
                except RequestError as error:
                    status, body = error.status, {"error": str(error)}
                except Exception as error:  # what TF Serving reports as INTERNAL
                    status, body = 500, {"error": f"{type(error).__name__}: {error}"}
                if status != 200:
                    with stub._lock:
                        stub.errors += 1
                self._answer(status, body)

            def _body(self, post):
                if not post:
                    return None
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length)

            def do_GET(self):
                self._serve(post=False)

            def do_POST(self):
                self._serve(post=True)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.host, self.port = self.server.server_address[:2]
        self._thread = None

    # -- the API ----------------------------------------------------------------------------
    def handle(self, method, path, data):
        """`(method, path, body bytes)` → the JSON answer; raises `RequestError`."""
        match = PATH.match(path.split("?")[0])
        if not match:
            raise RequestError(404, f"Malformed request: {method} {path}")
        name, version, verb = match["name"], match["version"], match["verb"]
        if name != self.model_name or (version is not None and version != self.version):
            wanted = f"Specific({name}, {version})" if version else f"Latest({name})"
            raise RequestError(404, f"Servable not found for request: {wanted}")
        if method == "GET" and verb is None:
            return {
                "model_version_status": [
                    {
                        "version": self.version,
                        "state": "AVAILABLE",
                        "status": {"error_code": "OK", "error_message": ""},
                    }
                ]
            }
        if method != "POST" or verb != ":predict":
            raise RequestError(404, f"Malformed request: {method} {path}")
        with self._lock:
            self.calls += 1
        try:
            body = json.loads(data or b"")
        except ValueError as error:
            raise RequestError(400, f"JSON Parse error: {error}") from None
        if not isinstance(body, dict):
            raise RequestError(400, "JSON Value is not an object")
        return self.predict(body)

    def predict(self, body):
        name = body.get("signature_name", "serving_default")
        if name not in self.signatures:
            raise RequestError(400, f'Serving signature name: "{name}" not found in signature def')
        signature = self.signatures[name]
        specs = signature.structured_input_signature[1]
        names = sorted(specs)
        if ("instances" in body) == ("inputs" in body):
            raise RequestError(
                400,
                "Missing 'inputs' or 'instances' key"
                if "instances" not in body
                else "Only one of 'inputs' or 'instances' may be given",
            )
        rows = "instances" in body
        if rows:
            instances = body["instances"]
            if not isinstance(instances, list):
                raise RequestError(400, "'instances' must be a JSON list")
            if len(names) == 1 and not any(
                isinstance(row, dict) and set(row) != {"b64"} for row in instances
            ):
                columns = {names[0]: instances}
            else:
                if not all(isinstance(row, dict) and set(row) == set(names) for row in instances):
                    raise RequestError(
                        400, f"every instance must be an object with the inputs {names}"
                    )
                columns = {key: [row[key] for row in instances] for key in names}
        else:
            columns = body["inputs"]
            if not isinstance(columns, dict) or (len(names) == 1 and names[0] not in columns):
                if len(names) != 1:
                    raise RequestError(400, f"'inputs' must be an object with the inputs {names}")
                columns = {names[0]: columns}
            if set(columns) != set(names):
                raise RequestError(
                    400, f"'inputs' has {sorted(columns)}; the signature takes {names}"
                )
        feed = {key: _tensor(value, specs[key], key) for key, value in columns.items()}
        tf = self.tf
        try:
            outputs = signature(
                **{key: tf.constant(value, specs[key].dtype) for key, value in feed.items()}
            )
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as error:
            raise RequestError(400, str(error)) from None
        outputs = {  # a scalar string's numpy() is bytes: an object array of shape ()
            key: np.array(value.numpy(), dtype=object)
            if value.dtype == tf.string
            else value.numpy()
            for key, value in outputs.items()
        }
        if not rows:  # one output: its bare value, as TF Serving answers
            columns = {key: _json_value(value, key) for key, value in outputs.items()}
            return {"outputs": next(iter(columns.values())) if len(columns) == 1 else columns}
        counts = {value.shape[0] if value.ndim else None for value in outputs.values()}
        if len(counts) != 1 or None in counts:
            raise RequestError(
                400, "Output tensors have different 0th dimensions; use the 'inputs' format"
            )
        values = {key: _json_value(value, key) for key, value in outputs.items()}
        if len(values) == 1:
            return {"predictions": next(iter(values.values()))}
        return {"predictions": [dict(zip(values, row)) for row in zip(*values.values())]}

    # -- running ----------------------------------------------------------------------------
    def start(self):
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "export_dir", help="a SavedModel version folder, e.g. saved_models/translator/1"
    )
    parser.add_argument("--model-name", default="translator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8501)
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(args.export_dir, "saved_model.pb")):
        parser.error(f"export_dir: no saved_model.pb in {args.export_dir!r}")
    stub = ServingStub(args.export_dir, args.model_name, host=args.host, port=args.port)
    print(f"serving {args.model_name} version {stub.version} on http://{stub.host}:{stub.port}")
    try:
        stub.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        stub.server.server_close()


if __name__ == "__main__":
    main()
