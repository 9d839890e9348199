"""Every kind of export, run by an older TensorFlow: the runtime of a TF
Serving release (`make serving-check`).

    python tests/serving_runtime.py --runtime .venv-serving/bin/python

trains tiny models with the recipes (this interpreter: the TensorFlow that
writes exports), exports a translator of each family, float32 and int8
(`export --quantize int8`), the Transformer and ConvS2S also over a
vocabulary shortlist (`--shortlist`), and the digits classifier, checks their ops
against the committed op lists (`keras_attention.serving.check`), then runs every signature of every
export on the same inputs (the export's warm-up requests, plus an empty
and an over-long sentence for text inputs) in this interpreter and in
`--runtime`, and compares: strings, integers and booleans equal, floats
within 1e-5 (1e-4 for XLA exports, whose programs each runtime's XLA
compiles). Each family is also exported with `export --xla` (float32
and int8), and its signatures, run in `--runtime`, must answer its
requests as the plain export of the same weights does there; a trained run
(`--trained`, default `runs/demo`) is exported both ways too and must
answer the whole Ding test split (its 960 sources) alike: translations
equal, scores within 1e-4. Exits with status 1 on
any difference or failure.
"""

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAMILIES = ("rnn", "convs2s", "transformer")
EXTRA_TEXTS = ["", "Das ist ein sehr langer Satz " * 10]
TOLERANCE = 1e-5
XLA_TOLERANCE = 1e-4  # an XLA export's scores against its plain export's
XLA_SIGNATURES = ("serving_default", "greedy", "nbest")


def encode(array):
    """A NumPy array as JSON (bytes in base64), the same in both interpreters."""
    array = np.asarray(array)
    if array.dtype == object:
        values = [base64.b64encode(x).decode() for x in array.ravel()]
        return {"dtype": "bytes", "shape": list(array.shape), "values": values}
    return {"dtype": array.dtype.name, "shape": list(array.shape), "values": array.ravel().tolist()}


def decode(value):
    """The NumPy array of an `encode`d value."""
    if value["dtype"] == "bytes":
        values = [base64.b64decode(x) for x in value["values"]]
        return np.array(values, dtype=object).reshape(value["shape"])
    return np.array(value["values"], dtype=value["dtype"]).reshape(value["shape"])


def sh(*argv):
    """Run a command from the repository root; stop with its output on failure."""
    print("$", " ".join(argv), flush=True)
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(
            f"error: {argv[2:4]} failed:\n{result.stdout[-1500:]}{result.stderr[-3000:]}"
        )
    return result.stdout


QUANTIZED = ("--quantize", "int8")
XLA = ("--xla",)
SHORTLIST = ("--shortlist", "300")  # of the tiny runs' 400 target pieces
# Each run is exported float32 and int8, plain and XLA: name suffix -> flags;
# a Transformer or ConvS2S run also over a vocabulary shortlist, plain and XLA.
KINDS = {"": (), "-int8": QUANTIZED, "-xla": XLA, "-xla-int8": XLA + QUANTIZED}
SHORTLIST_KINDS = {"-shortlist": SHORTLIST, "-xla-shortlist": XLA + SHORTLIST}


def kinds_of(family):
    return {**KINDS, **(SHORTLIST_KINDS if family != "rnn" else {})}


def build_exports(work):
    """Train and export every kind once; returns `{name: version_dir}`."""
    from tests.translation_helpers import TINY  # the recipe tests' tiny settings

    exports = os.path.join(work, "exports")
    paths = {}

    for family in FAMILIES:
        run = os.path.join(work, f"run-{family}")
        for suffix, flags in kinds_of(family).items():
            name = f"translator-{family}{suffix}"
            paths[name] = os.path.join(exports, name, "1")
            if os.path.exists(paths[name]):
                continue
            if not flags and not os.path.exists(os.path.join(run, "model.keras")):
                sh(
                    sys.executable,
                    "-m",
                    "keras_attention_recipes.translate",
                    "train",
                    "--output",
                    run,
                    "--family",
                    family,
                    "--epochs",
                    "1",
                    *TINY,
                )
            sh(
                sys.executable,
                "-m",
                "keras_attention_recipes.translate",
                "export",
                "--output",
                run,
                "--export-dir",
                exports,
                "--model-name",
                name,
                "--beam-width",
                "2",
                *flags,
            )
    paths["digits"] = os.path.join(exports, "digits", "1")
    if not os.path.exists(paths["digits"]):
        sh(
            sys.executable,
            "-m",
            "keras_attention_recipes.spatial_transformer_digits",
            "--limit",
            "100",
            "--epochs",
            "1",
            "--output",
            os.path.join(work, "run-digits"),
            "--export",
            "--export-dir",
            exports,
        )
    return paths


def requests_of(version_dir):
    """`{signature: {input: array}}`: the warm-up requests, with the empty
    and the over-long sentence added to text inputs."""
    from keras_attention.serving.export import read_warmup_requests

    requests = {}
    for signature, inputs in read_warmup_requests(version_dir):
        if "text" in inputs:
            extra = np.array([t.encode() for t in EXTRA_TEXTS], dtype=object)
            inputs["text"] = np.concatenate([inputs["text"].astype(object), extra])
            if "prefix" in inputs:  # `constrained`: one (empty) prefix per text
                blank = np.array([b""] * len(extra), dtype=object)
                inputs["prefix"] = np.concatenate([inputs["prefix"].astype(object), blank])
        requests[signature] = inputs
    return requests


def run_signatures(export_dir, requests_path):
    """Load an export, call each signature on the requests and print the
    outputs as JSON. Runs in both interpreters (any TensorFlow >= 2.12,
    NumPy 1 or 2), importing only TensorFlow and TensorFlow Text."""
    import tensorflow as tf
    import tensorflow_text

    with open(requests_path, encoding="utf-8") as handle:
        requests = json.load(handle)
    loaded = tf.saved_model.load(export_dir)
    results = {}
    for signature, inputs in requests.items():
        tensors = {name: tf.constant(decode(value)) for name, value in inputs.items()}
        outputs = loaded.signatures[signature](**tensors)
        results[signature] = {name: encode(value.numpy()) for name, value in outputs.items()}
    versions = {"tensorflow": tf.__version__, "tensorflow_text": tensorflow_text.__version__}
    print(json.dumps({**versions, "signatures": sorted(loaded.signatures), "results": results}))


def run_signatures_in(python, export_dir, requests_path):
    """`run_signatures` under the interpreter `python`: `(its JSON, None)`,
    or `(None, its error output)`."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [
            os.path.abspath(python),
            os.path.abspath(__file__),
            "run-signatures",
            export_dir,
            requests_path,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
    )
    if result.returncode != 0:
        return None, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), None


def ding_test_requests(work):
    """`{signature: {"text": array}}` of `XLA_SIGNATURES`, each the whole
    Ding test split's sources (the recipe's split, written once under
    `work`)."""
    from keras_attention_recipes.translation.splits import prepare

    paths = prepare(os.path.join(work, "ding-splits"), log=lambda line: None)
    with open(paths["test"], encoding="utf-8") as handle:
        texts = [line.split("\t")[0].encode() for line in handle.read().splitlines()]
    return {name: {"text": np.array(texts, dtype=object)} for name in XLA_SIGNATURES}


def write_requests(path, requests):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump({s: {k: encode(v) for k, v in i.items()} for s, i in requests.items()}, handle)


def xla_differences(runtime, plain_dir, xla_dir, requests_path):
    """The lines of `differences` between a plain export and its XLA
    export, both run by `runtime` on the requests (`XLA_TOLERANCE`), or
    one line saying which does not run."""
    results = []
    for version_dir in (plain_dir, xla_dir):
        got, error = run_signatures_in(runtime, version_dir, requests_path)
        if error:
            return [f"{version_dir} does not run there:\n{error}"]
        results.append(got["results"])
    return differences(*results, tolerance=XLA_TOLERANCE)


def differences(expected, got, tolerance=TOLERANCE):
    """One line per output that differs (strings, ints, bools exactly,
    floats to `tolerance`)."""
    found = []
    for signature, outputs in expected.items():
        for name, value in outputs.items():
            want, have = decode(value), decode(got[signature][name])
            where = f"{signature}/{name}"
            if want.shape != have.shape:
                found.append(f"{where}: shape {have.shape}, expected {want.shape}")
            elif want.dtype.kind == "f":
                error = float(np.max(np.abs(want - have), initial=0.0))
                if not error <= tolerance:
                    found.append(f"{where}: differs by {error:.2e} (> {tolerance})")
            elif not np.array_equal(want, have):
                rows = int(np.sum(np.any((want != have).reshape(len(want), -1), axis=1)))
                found.append(
                    f"{where}: {rows} of {len(want)} rows differ, the first "
                    f"{have[want != have][:2]} != {want[want != have][:2]}"
                )
    return found


def trained_exports(work, runs):
    """Export each trained run (a folder `train` wrote) as every kind of
    `KINDS`, once, again when its model is newer than the export; returns
    `{name: version_dir}` (`trained-<folder>...`)."""
    exports = os.path.join(work, "exports")
    folders = [os.path.basename(os.path.normpath(run)) for run in runs]
    if len(set(folders)) < len(folders):
        raise SystemExit(f"error: --trained runs must have different folder names; got {runs}")
    paths = {}
    for run, folder in zip(runs, folders):
        trained = os.path.getmtime(os.path.join(run, "model.keras"))
        with open(os.path.join(run, "config.json"), encoding="utf-8") as handle:
            family = json.load(handle)["family"]
        for suffix, flags in kinds_of(family).items():
            name = f"trained-{folder}{suffix}"
            paths[name] = os.path.join(exports, name, "1")
            if os.path.exists(paths[name]) and os.path.getmtime(paths[name]) < trained:
                shutil.rmtree(os.path.dirname(paths[name]))  # the run was trained again
            if not os.path.exists(paths[name]):
                sh(sys.executable, "-m", "keras_attention_recipes.translate", "export",
                   "--output", run, "--export-dir", exports, "--model-name", name,
                   *flags)  # fmt: skip
    return paths


def check_xla_exports(runtime, exports, requests_path, what):
    """Each XLA export of `exports` against its plain twin (the name
    without `-xla`), both run by `runtime` on the requests of
    `requests_path` (`what` they are, for the report, or None: the plain
    twin's own requests.json); returns the failures."""
    failed = []
    for name, version_dir in exports.items():
        if "-xla" not in name:
            continue
        plain = exports[name.replace("-xla", "")]
        requests = requests_path or os.path.join(os.path.dirname(plain), "requests.json")
        found = xla_differences(runtime, plain, version_dir, requests)
        for line in found:
            print(f"  {line}")
        if found:
            failed.append(f"{name}: {len(found)} output(s) differ from the plain export")
        verdict = "FAIL" if found else "ok  "
        print(
            f"{verdict} {name} = {os.path.basename(os.path.dirname(plain))} on "
            f"{what or 'its warm-up requests'} (translations equal, scores to {XLA_TOLERANCE})"
        )
    return failed


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run-signatures"]:  # the side that runs in the older runtime
        return run_signatures(*argv[1:])
    sys.path.insert(0, ROOT)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runtime", required=True, help="python of the older TensorFlow's virtualenv"
    )
    parser.add_argument(
        "--work",
        default=os.path.join(ROOT, "runs", "serving-check"),
        help="where the runs and exports go (reused when present)",
    )
    demo = os.path.join(ROOT, "runs", "demo")
    parser.add_argument(
        "--trained",
        nargs="*",
        default=[demo] if os.path.exists(os.path.join(demo, "model.keras")) else [],
        help="trained runs whose XLA exports are compared on the Ding test split "
        "(default: runs/demo when it holds a model)",
    )
    args = parser.parse_args(argv)
    if not os.access(args.runtime, os.X_OK):
        parser.error(f"--runtime must be a python executable; got {args.runtime!r}")
    from keras_attention.serving.check import report

    failed = []
    work = os.path.abspath(args.work)
    exports = build_exports(work)
    for name, version_dir in exports.items():
        print(f"\n== {name}")
        if not report(version_dir):
            failed.append(f"{name}: op check")
        requests_path = os.path.join(os.path.dirname(version_dir), "requests.json")
        write_requests(requests_path, requests_of(version_dir))
        expected, error = run_signatures_in(sys.executable, version_dir, requests_path)
        if error:
            raise SystemExit(f"error: the exporting TensorFlow cannot run {name}:\n{error}")
        got, error = run_signatures_in(args.runtime, version_dir, requests_path)
        if error:
            print(f"FAIL {name} does not run there:\n{error}")
            failed.append(f"{name}: does not load or run")
            continue
        runtimes = (
            f"TensorFlow {got['tensorflow']} + TF Text {got['tensorflow_text']} "
            f"(exported by {expected['tensorflow']} + {expected['tensorflow_text']})"
        )
        # An XLA export's programs are compiled by each runtime's own XLA,
        # which may round differently: its floats are held to XLA_TOLERANCE.
        tolerance = XLA_TOLERANCE if "-xla" in name else TOLERANCE
        found = differences(expected["results"], got["results"], tolerance)
        if got["signatures"] != expected["signatures"]:
            found.append(f"signatures {got['signatures']} != {expected['signatures']}")
        for line in found:
            print(f"  {line}")
        if found:
            failed.append(f"{name}: {len(found)} output(s) differ")
        count = sum(len(outputs) for outputs in expected["results"].values())
        verdict = "FAIL" if found else "ok  "
        print(f"{verdict} {runtimes}: {len(expected['results'])} signatures, {count} outputs")
    # XLA against plain: the tiny runs on their requests (an untrained
    # model's hypotheses tie often, and XLA's rounding breaks ties its own
    # way), the trained runs on the whole Ding test split.
    print("\n== XLA exports against their plain twins, in the serving runtime")
    failed += check_xla_exports(args.runtime, exports, None, None)
    trained = trained_exports(work, args.trained)
    if trained:
        requests_path = os.path.join(work, "ding-test-requests.json")
        requests = ding_test_requests(work)
        write_requests(requests_path, requests)
        rows = len(requests["serving_default"]["text"])
        what = f"the Ding test split ({rows} sources; {', '.join(XLA_SIGNATURES)})"
        failed += check_xla_exports(args.runtime, trained, requests_path, what)
    else:
        print("no trained run (--trained; make demo writes runs/demo): no Ding test split check")
    print()
    if failed:
        print("serving check FAILED: " + "; ".join(failed))
        return 1
    print("serving check passed: every signature of every export gives the same outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
