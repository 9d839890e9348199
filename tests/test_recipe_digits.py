"""The cluttered-digits recipe: a tiny run, its export loaded by plain
TensorFlow in a fresh process, tuning that resumes, and CLI errors."""

import io
import json
import os
import re
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from keras_attention_recipes import run_files, run_folders, runs
from keras_attention_recipes import spatial_transformer_digits as recipe
from keras_attention_recipes.digits.data import clutter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("cnn", "spatial_transformer")


def png_header(width, height):
    """A tiny PNG (gray, 8 bits) whose IHDR declares `width` x `height`
    pixels but whose data holds one row: what a hostile client sends."""

    def chunk(kind, data):
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1)))
        + chunk(b"IEND", b"")
    )


def test_clutter_places_the_digit_and_clutter():
    rng = np.random.default_rng(0)
    digits = np.zeros((3, 28, 28), "float32")
    digits[:, 10:18, 10:18] = 1.0
    canvases = clutter(digits, rng)
    assert canvases.shape == (3, 60, 60, 1)
    assert np.all(canvases.sum(axis=(1, 2, 3)) >= 64.0)  # the whole 8x8 stroke is on the canvas


def test_tiny_run_trains_reports_and_exports(tmp_path, monkeypatch, capsys):
    output, exports = str(tmp_path / "run"), str(tmp_path / "exports")
    flags = ["--limit", "100", "--epochs", "1", "--output", output]
    recipe.main(flags)
    trained = {name: os.path.getmtime(os.path.join(output, f"{name}.keras")) for name in MODELS}
    capsys.readouterr()

    # --export on the finished run: both models are reused, not trained again.
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(recipe, "train", no_training)
    recipe.main(flags + ["--export", "--export-dir", exports])
    assert capsys.readouterr().out.count("trained before with these settings") == 2
    assert trained == {m: os.path.getmtime(os.path.join(output, f"{m}.keras")) for m in MODELS}
    with open(os.path.join(output, "cnn.keras"), "rb") as handle:
        model_file = handle.read()
    with open(os.path.join(output, "cnn.keras"), "wb") as handle:  # damaged
        handle.write(b"not a zip")
    with pytest.raises(SystemExit) as exit:
        recipe.main(flags)
    stderr = capsys.readouterr().err
    assert exit.value.code == 2 and stderr.startswith(
        f"error: {os.path.join(output, 'cnn.keras')} does not load ("
    )
    assert stderr.endswith("): it is damaged; pass --overwrite to train again\n")
    with open(os.path.join(output, "cnn.keras"), "wb") as handle:
        handle.write(model_file)
    results = json.load(open(os.path.join(output, "results.json")))
    assert set(results) == {"cnn", "spatial_transformer"} and all(
        0 <= v <= 1 for v in results.values()
    )
    assert os.path.getsize(os.path.join(output, "transformed.png")) > 1000
    # The run folder holds what --help says: both models and TensorBoard logs.
    import keras

    for name in ("cnn", "spatial_transformer"):
        model = keras.saving.load_model(os.path.join(output, f"{name}.keras"))
        assert model.count_params() > 0
        assert os.listdir(os.path.join(output, "logs", name, "train"))
    assert not [f for f in os.listdir(output) if f.startswith(".")]  # no temporary files left
    version = os.path.join(exports, "digits", "1")
    assert os.path.exists(os.path.join(version, "saved_model.pb"))
    assert 'name: "digits"' in open(os.path.join(exports, "models.config")).read()
    from keras_attention.serving.export import read_warmup_requests

    requests = read_warmup_requests(version)
    assert [s for s, _ in requests] == ["serving_default", "image_bytes", "transformed"]
    # A real test digit as PNG (from the warm-up requests), and the same
    # pixels as GIF, JPEG, BMP and colour PNGs; a PNG header declaring
    # 16000x16000 pixels (a few bytes: the signature must not decode it).
    from PIL import Image

    digit = requests[1][1]["image_bytes"][0]
    gray = Image.open(io.BytesIO(digit))
    formats = {"png": digit}
    for name, image, kind, options in [
        ("gif", gray, "GIF", {}),
        ("jpeg", gray, "JPEG", {"quality": 95}),
        ("bmp", gray, "BMP", {}),
        ("rgb_png", gray.convert("RGB"), "PNG", {}),
        ("rgba_png", gray.convert("RGBA"), "PNG", {}),
    ]:
        stream = io.BytesIO()
        image.save(stream, kind, **options)
        formats[name] = stream.getvalue()
    formats["huge_png"] = png_header(16000, 16000)
    np.savez(
        str(tmp_path / "images.npz"), **{k: np.frombuffer(v, "uint8") for k, v in formats.items()}
    )

    # A fresh process with only TensorFlow: the three signatures work and agree.
    script = f"""
import io, numpy as np, tensorflow as tf, sys
assert "keras_attention" not in sys.modules
loaded = tf.saved_model.load({version!r})
rng = np.random.default_rng(0)
image = rng.random((2, 60, 60, 1)).astype("float32")
out = loaded.signatures["serving_default"](image=tf.constant(image))
assert out["probabilities"].shape == (2, 10) and out["class"].shape == (2,)
np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-5)
png = tf.io.encode_png(tf.cast(tf.round(image[0] * 255), tf.uint8)).numpy()
from_bytes = loaded.signatures["image_bytes"](image_bytes=tf.constant([png, png]))
direct = loaded.signatures["serving_default"](
    image=tf.constant(np.round(image[:1] * 255) / 255, tf.float32)
)
np.testing.assert_allclose(
    from_bytes["probabilities"].numpy()[0], direct["probabilities"].numpy()[0], atol=1e-5
)
warped = loaded.signatures["transformed"](image=tf.constant(image))["transformed"]
assert warped.shape == (2, 30, 30, 1)
from keras_attention_recipes.serving_client import rest_body, tensors_from_rest_body
import json
body = json.loads(
    json.dumps(
        rest_body(dict(image_bytes=np.array([png], dtype=object)), "image_bytes", "instances")
    )
)
assert body["instances"][0]["b64"]
via_rest = loaded.signatures["image_bytes"](
    image_bytes=tf.constant(tensors_from_rest_body(body, ["image_bytes"])["image_bytes"])
)
np.testing.assert_allclose(
    via_rest["probabilities"].numpy()[0], from_bytes["probabilities"].numpy()[0], atol=1e-6
)

# Requests TF Serving refuses. It returns the runtime's own message, whose
# first line must name the input and the rule; TensorFlow's Python wrapper
# would put "Graph execution error:" and node traces before it, so that
# wrapper is switched off here, and the runtime's {{{{node ...}}}} tags dropped.
from tensorflow.python.eager.polymorphic_function import atomic_function
atomic_function.InterpolateRuntimeError.__exit__ = lambda self, *error: False
import re
def first_line(signature, image):
    try:
        loaded.signatures[signature](image=tf.constant(image))
    except tf.errors.InvalidArgumentError as error:
        return re.sub(r"[{{][{{][^}}]*[}}][}}] *", "", error.message.splitlines()[0])
    raise AssertionError(f"{{signature}} accepted an image of shape {{image.shape}}")
shape_rule = (
    "assertion failed: [image must have shape [batch, 60, 60, 1] (gray pixels in [0, 1]; "
    "colour or encoded images go to the image_bytes signature); got "
)
for signature in ("serving_default", "transformed"):
    for bad in ((2, 28, 28, 1), (1, 60, 60, 3), (60, 60), (1, 60, 60, 1, 1)):
        line = first_line(signature, np.zeros(bad, "float32"))
        assert line == shape_rule + str(list(bad)) + "]", line
    nan = image.copy()
    nan[0, 5, 5, 0] = np.nan
    nan[1, 6, 6, 0] = np.inf
    line = first_line(signature, nan)
    assert line == (
        "assertion failed: [image must hold finite pixel values; got 2 NaN or infinite pixels]"
    ), line
    line = first_line(signature, image * 255)
    assert line.startswith(
        "assertion failed: [image must hold pixel values in [0, 1] (8-bit pixels divided by "
        "255); got values from "
    ), line

images = {{k: v.tobytes() for k, v in np.load("images.npz").items()}}
def classes(data):
    return loaded.signatures["image_bytes"](image_bytes=tf.constant(data))["class"].numpy()
png_class = classes([images["png"]])
for name in ("gif", "jpeg", "bmp", "rgb_png", "rgba_png"):
    assert (classes([images[name]]) == png_class).all(), name
empty = loaded.signatures["image_bytes"](image_bytes=tf.constant([], tf.string))
assert empty["probabilities"].shape == (0, 10) and empty["class"].shape == (0,)
import time
started = time.perf_counter()
try:
    classes([images["png"], images["huge_png"]])
    raise AssertionError("a 16000x16000 PNG was accepted")
except tf.errors.InvalidArgumentError as error:
    assert "declares 16000x16000 pixels" in error.message, error.message
assert time.perf_counter() - started < 2.0
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


@pytest.mark.large
def test_tuning_runs_and_resumes(tmp_path, capsys):
    args = [
        "--tune",
        "--algorithm",
        "random",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--limit",
        "60",
        "--output",
        str(tmp_path),
    ]
    recipe.main(args)
    best = json.load(open(tmp_path / "best_hyperparameters.json"))
    assert {"learning_rate", "loc_filters", "loc_units", "transform"} <= set(best)
    trials = os.listdir(tmp_path / "tuning" / "digits")
    recipe.main(args)  # resumes: the 2 trials are done, no new ones
    assert sorted(os.listdir(tmp_path / "tuning" / "digits")) == sorted(trials)

    # Another algorithm, or a training, in the search's folder: refused, listing what differs.
    for other, difference in [
        (["--algorithm", "bayesian"], "algorithm: 'random' in the run, 'bayesian' now"),
        (args[5:], "command: 'tune' in the run, 'train' now"),
    ]:
        with pytest.raises(SystemExit) as exit:
            recipe.main(args + other if other[0] == "--algorithm" else other)
        assert exit.value.code == 2 and difference in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path / "tuning" / "digits")) == sorted(trials)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--epochs", "0"], "--epochs must be >= 1; got 0"),
        (["--limit", "5"], "--limit must be >= 20; got 5"),
        (["--seed", "-1"], "--seed must be >= 0; got -1"),
        (["--hyperparameters", "/nonexistent.json"], "--hyperparameters /nonexistent.json"),
        (["--export", "--model-name", "../x"], "--model-name: model_name must be a plain name"),
        (["--export", "--export-dir", ""], "--export-dir is empty (that would be the current"),
        (["--output", ""], "--output is empty (that would be the current folder)"),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(tmp_path, capsys, argv, message):
    """In process (`main`); a fresh process's whole stderr is checked below."""
    with pytest.raises(SystemExit) as exit:
        recipe.main([*argv] if "--output" in argv else [*argv, "--output", str(tmp_path / "run")])
    stderr = capsys.readouterr().err
    assert exit.value.code == 2 and message in stderr and "Traceback" not in stderr
    assert not os.path.exists(tmp_path / "run")


def test_an_interrupted_training_resumes_from_its_backup(tmp_path, monkeypatch):
    """Interrupted after its second epoch (of three), a re-run trains only
    the third; the model file is written only by the run that completes."""
    import keras

    begun = []

    class InterruptingTensorBoard(keras.callbacks.TensorBoard):
        interrupt = True

        def on_epoch_begin(self, epoch, logs=None):
            begun.append(epoch)
            super().on_epoch_begin(epoch, logs)

        def on_epoch_end(self, epoch, logs=None):
            super().on_epoch_end(epoch, logs)
            if epoch == 1 and InterruptingTensorBoard.interrupt:
                raise KeyboardInterrupt

    monkeypatch.setattr(keras.callbacks, "TensorBoard", InterruptingTensorBoard)
    rng = np.random.default_rng(0)
    data = (rng.random((40, 60, 60, 1)).astype("float32"), np.arange(40) % 10)
    output = str(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        recipe.train(recipe.build_models(False)[0], data, data, 3, 16, output, "cnn")
    assert begun == [0, 1] and not os.path.exists(os.path.join(output, "cnn.keras"))
    InterruptingTensorBoard.interrupt = False
    recipe.train(recipe.build_models(False)[0], data, data, 3, 16, output, "cnn")
    assert begun == [0, 1, 2]  # resumed at the third epoch
    assert keras.saving.load_model(os.path.join(output, "cnn.keras")).count_params() > 0


def digits_cli(*argv, cwd=ROOT, **options):
    """The recipe's command line in a fresh process (`python -m`)."""
    return subprocess.run(
        [sys.executable, "-m", "keras_attention_recipes.spatial_transformer_digits", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=ROOT),
        **options,
    )


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"learning_rate": -1}', "learning_rate must be > 0; got -1"),
        ('{"loc_filters": 0}', "loc_filters must be >= 1; got 0"),
        ('{"loc_units": "x"}', "loc_units must be an integer; got 'x'"),
        ('{"transform": "spline"}', "transform must be one of ['affine', 'tps']; got 'spline'"),
        ('{"units": 8}', "unknown hyperparameters ['units']"),
    ],
)
def test_bad_hyperparameter_values_are_one_line_errors(tmp_path, capsys, content, message):
    (tmp_path / "best.json").write_text(content)
    path, output = str(tmp_path / "best.json"), tmp_path / "run"
    with pytest.raises(SystemExit) as exit:
        recipe.main(["--hyperparameters", path, "--output", str(output)])
    stderr = capsys.readouterr().err
    assert exit.value.code == 2
    assert stderr.startswith(f"error: --hyperparameters {path}: {message}")
    assert len(stderr.splitlines()) == 1
    assert not output.exists()  # refused before anything is written


@pytest.mark.large(reason="trains the digits recipe for each refusal")
def test_output_and_export_dir_naming_files_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    # In a fresh process: the whole of stderr, no TensorFlow start-up lines.
    result = digits_cli("--output", "notes.txt", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2,
        "error: --output notes.txt is a file; expected a folder for the run\n",
    )
    notes, run = str(tmp_path / "notes.txt"), str(tmp_path / "run")
    with pytest.raises(SystemExit) as exit:
        recipe.main(["--output", run, "--export", "--export-dir", notes])
    assert (exit.value.code, capsys.readouterr().err) == (
        2,
        f"error: --export-dir: {notes} is a file; expected a folder for the exports\n",
    )
    assert (tmp_path / "notes.txt").read_text() == "mine" and not os.path.exists(run)


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit) as exit:
        recipe.main(["--help"])
    assert exit.value.code == 0
    stdout = capsys.readouterr().out
    options = stdout[stdout.index("options:") :]
    takes_a_value = re.findall(r"\n  (--[a-z-]+) [A-Z{]", options)
    assert len(takes_a_value) == 12, takes_a_value
    for flag in takes_a_value:  # its help text, up to the next flag
        text = options[options.index(f"\n  {flag} ") :].split("\n  --")[1]
        assert "(default: " in " ".join(text.split()), (flag, text)
    assert "(default: 0.001)" in options and "(default: all 5000)" in options


@pytest.mark.large
def test_ctrl_c_keeps_the_run_other_settings_are_refused_and_a_rerun_resumes(tmp_path, capsys):
    """Ctrl-C after the CNN's first epoch: a message and exit status 1, no
    traceback; re-running with other settings is refused (nothing resumed
    under them); the same command resumes after the completed epoch."""
    import signal

    flags = ["--limit", "20", "--epochs", "200", "--output", str(tmp_path / "run")]
    # As the `keras-attention-digits` entry point calls it: main(), no __main__ block.
    entry_point = (
        "import sys; from keras_attention_recipes.spatial_transformer_digits import main; "
        "main(sys.argv[1:])"
    )
    command = [sys.executable, "-u", "-c", entry_point, *flags]

    def interrupted_after_first_epoch_line(pattern):
        """Ctrl-C at the first line matching `pattern`, as an epoch starts:
        in a resumed run, usually while its first step is traced. (Raised
        there, as Python does by default, it once aborted TensorFlow, exit
        status -6; the recipe takes it between two steps,
        `recipes.runs.ctrl_c_between_steps`.)"""
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=ROOT),
        )
        seen = []
        for line in process.stdout:
            seen.append(line)
            if re.match(pattern, line):
                process.send_signal(signal.SIGINT)
                break
        stdout, stderr = process.communicate(timeout=60)
        return process.returncode, "".join(seen) + stdout, stderr

    code, stdout, stderr = interrupted_after_first_epoch_line(r"Epoch 2/200")
    assert code == 1, stderr
    assert stderr.splitlines() == [
        runs.CTRL_C_HELD,
        "interrupted: re-run the same command to resume from the last completed epoch",
    ]
    assert os.listdir(tmp_path / "run" / "backup" / "cnn")  # the state is kept
    assert not (tmp_path / "run" / "cnn.keras").exists()

    for other in (["--rotate", "--learning-rate", "0.01"], ["--rotate", "--transform", "tps"]):
        with pytest.raises(SystemExit) as exit:
            recipe.main(flags + other)
        stderr = capsys.readouterr().err
        assert exit.value.code == 2
        assert stderr.startswith(f"error: --output {tmp_path / 'run'} holds a run built ")
        assert "rotate: False in the run, True now" in stderr and len(stderr.splitlines()) == 1
    assert not (tmp_path / "run" / "cnn.keras").exists()

    # Interrupted as its first epoch starts, while it restores and traces.
    code, stdout, stderr = interrupted_after_first_epoch_line(r"Epoch \d+/200")
    first = int(re.search(r"Epoch (\d+)/200", stdout).group(1))
    assert first >= 2 and code == 1, stderr  # resumed after the completed epoch(s), not from 1


def test_a_folder_of_another_recipe_is_refused_even_with_overwrite(tmp_path, capsys):
    run = tmp_path / "translate"
    run.mkdir()
    (run / "run.json").write_text('{"settings": {"corpus": "ding", "limit": null}}')
    for extra in ([], ["--overwrite"]):
        with pytest.raises(SystemExit) as exit:
            recipe.main(["--limit", "20", "--output", str(run), *extra])
        assert exit.value.code == 2
        assert capsys.readouterr().err == (
            f"error: --output {run} holds a run of another recipe (see its run.json): "
            "choose another --output\n"
        )
    assert os.listdir(run) == ["run.json"]


def test_overwrite_deletes_only_what_a_digits_run_writes(tmp_path):

    old = {"recipe": "digits", "rotate": False}
    run_folders.claim(str(tmp_path), old, entries=recipe.RUN_ENTRIES)
    for name in ("cnn.keras", "results.json", "notes.txt"):
        (tmp_path / name).write_text("x")
    (tmp_path / "backup" / "cnn").mkdir(parents=True)
    run_files.temporary_path(str(tmp_path / "cnn.keras"))  # what a save killed midway leaves
    with pytest.raises(ValueError, match="rotate: False in the run, True now"):
        run_folders.claim(str(tmp_path), {**old, "rotate": True}, entries=recipe.RUN_ENTRIES)
    assert run_folders.claim(
        str(tmp_path), {**old, "rotate": True}, True, entries=recipe.RUN_ENTRIES
    )
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "run.json"]  # the user's file is kept
    assert run_folders.recorded_settings(str(tmp_path)) == {**old, "rotate": True}
