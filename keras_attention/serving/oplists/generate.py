"""Write the op list of a TF Serving release from the TensorFlow and
TensorFlow Text wheels it bundles.

A TF Serving binary can run a graph node only if its op is registered in
the TensorFlow and TensorFlow Text it was built from, and every attribute
the node sets is one that op declares. This script reads those registries
(`TF_GetAllOpList`, which includes ops that `tensorflow_text` loads from its
shared libraries) and writes, per op, the attribute names, an `=` after the
name of each attribute that has a default value:

    {"serving": "2.20", ..., "ops": {
    "Conv2D": ["T", "data_format=", "dilations=", ...],
    ...}}

Run it with the interpreters of virtualenvs holding the matching wheels
(it starts them itself; they need only tensorflow and tensorflow_text):

    python keras_attention/serving/oplists/generate.py --serving 2.20 \\
        --core .venv-serving/bin/python

`--text` names a second interpreter whose TensorFlow Text ops are taken
instead, for releases whose TF Text was built against an older TensorFlow
(TF Serving 2.17.1-2.19.1 bundle TF Text 2.12.1, which installs only beside
TensorFlow 2.12). `make serving-oplists` regenerates the committed lists.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Run inside the runtime's interpreter: prints the ops registered by
# TensorFlow alone ("core") and those tensorflow_text adds ("text").
DUMP = """
import json
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as c_api

def registered():
    buffer = c_api.TF_GetAllOpList()
    ops = op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buffer)).op
    return {op.name: sorted(a.name + ("=" if a.HasField("default_value") else "") for a in op.attr)
            for op in ops}

core = registered()
try:
    import tensorflow_text
    text_version = tensorflow_text.__version__
except ImportError:  # a virtualenv for the core ops only (--core with --text)
    text_version = None
everything = registered()
print(json.dumps({
    "tensorflow": tf.__version__,
    "tensorflow_text": text_version,
    "core": core,
    "text": {name: attrs for name, attrs in everything.items() if name not in core},
}))
"""


def dump(python):
    """The `{"tensorflow", "tensorflow_text", "core", "text"}` registries of
    the interpreter `python`."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        [os.path.abspath(python), "-c", DUMP], capture_output=True, text=True, env=env, cwd="/"
    )
    if result.returncode != 0:
        raise SystemExit(f"error: {python} could not list its ops:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def write_oplist(path, serving, servers, core, text):
    """One op a line, sorted, so that a regeneration diffs op by op."""
    ops = {**core["core"], **text["text"]}
    header = {
        "serving": serving,
        "servers": servers,
        "tensorflow": core["tensorflow"],
        "tensorflow_text": text["tensorflow_text"],
    }
    lines = [json.dumps(header)[:-1] + ', "ops": {']
    lines += [f"{json.dumps(name)}: {json.dumps(ops[name])}," for name in sorted(ops)]
    lines[-1] = lines[-1].rstrip(",")
    lines.append("}}")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serving", required=True, help="the release series, e.g. 2.20")
    parser.add_argument(
        "--servers", help="the TF Serving releases it stands for (default: SERVING.0)"
    )
    parser.add_argument(
        "--core", required=True, help="python of a virtualenv with the release's TensorFlow"
    )
    parser.add_argument(
        "--text", help="python of a virtualenv with the release's TensorFlow Text (default: --core)"
    )
    args = parser.parse_args(argv)
    for flag in ("core", "text"):
        python = getattr(args, flag)
        if python is not None and not os.access(python, os.X_OK):
            parser.error(f"--{flag} must be a python executable; got {python!r}")
    core = dump(args.core)
    text = dump(args.text) if args.text else core
    if text["tensorflow_text"] is None:
        parser.error(f"{args.text or args.core} has no tensorflow_text; install the release's")
    path = os.path.join(HERE, f"tf_serving_{args.serving}.json")
    write_oplist(path, args.serving, args.servers or f"{args.serving}.0", core, text)
    print(
        f"wrote {path}: TensorFlow {core['tensorflow']} ({len(core['core'])} ops), "
        f"TensorFlow Text {text['tensorflow_text']} ({len(text['text'])} ops)"
    )


if __name__ == "__main__":
    sys.exit(main())
