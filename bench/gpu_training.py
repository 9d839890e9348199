"""The demo's and the translator's training on an NVIDIA GPU through Keras's
JAX backend, for GPU machines whose Python has JAX with CUDA but no
TensorFlow with CUDA (as the machines lent to this project: no TensorFlow,
no network, so neither `make gpu-check` nor the recipe's `tf.data` input
runs there). It measures what the recipe's models reach when a GPU trains
them; the scores come from the recipe's own `evaluate` here.

Three steps, the first and last on a machine with TensorFlow (`make setup`):

1. `--prepare RUN`: draws `--epochs` training epochs of the demo's run
   `RUN` with the recipe's own input pipeline (`inputs.datasets`: bucketed
   1,536-token batches, a new dictionary draw each epoch, numbers
   protected) and its validation batches into `--batches FILE` (.npz);
2. (default) on the GPU machine, with Keras, optree and namex carried as
   wheels: trains each `--models` entry (`demo`: the demo's settings;
   `translator`: the wide translator's, the Makefile's
   TRANSLATOR_WIDE_FLAGS) on those batches with the mixed float16 policy
   (JAX compiles each step with XLA), one epoch per drawn epoch (cycled
   when `--epochs` is more than were drawn), a validation loss after
   each, and the mean of the last epochs' weights as the recipe averages
   them (`--average-last`); writes each model's float32 weights
   (`<name>-0.npz`, `<name>-1.npz`, ...: files of at most 15 MB, which
   the device tool brings back) and
   `gpu_training.json` (epoch times and losses) under `--out`; then, with
   `--tune`, a KerasTuner search in its distributed mode with a worker
   process on each GPU (`CUDA_VISIBLE_DEVICES`), as `distributed_tuning`
   starts them, of small ConvS2S models;
3. `--score RUN --weights DIR`: each model's weights into a copy of `RUN`
   with the model's settings (`<RUN>-gpu-<DIR's name>-<name>`), then the
   recipe's `evaluate` (Ding test, beam 4). Give `--config` too when the
   weights trained with another config.json than the run's.

    python bench/gpu_training.py --prepare runs/demo --batches B.npz --epochs 30
    python bench/gpu_training.py --batches B.npz --config runs/demo/config.json \
        --out OUT --models demo translator [--minutes 3] [--tune]
    python bench/gpu_training.py --score runs/demo --weights OUT --models demo translator

Each batch is padded to one of two shapes (`few_shapes`), and each step is
compiled with XLA whatever the run's `jit` says (`model_spec`). What an
H200 did with it: BENCHMARKS.md, "The recipe's models on a GPU", and
RESULTS.md, "On a GPU".
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from keras_attention_recipes import run_files  # noqa: E402 (the standard library only: it runs on the GPU machine too)
from keras_attention_recipes.translation.config import TranslationConfig  # noqa: E402 (so is this)

# The settings that differ from the demo's run (its config.json) by model.
# The demo trains on the clock; the bench trains it 40 epochs, the ceiling
# its run had before the budget alone ended training.
MODELS = {
    "demo": {"average_last": TranslationConfig.for_command("demo").average_last, "epochs": 40},
    "translator": {  # the Makefile's TRANSLATOR_WIDE_FLAGS
        "embed_dim": 256,
        "hidden_dim": 256,
        "dropout": 0.2,
        "learning_rate": 2e-3,
        "average_last": 5,
        "epochs": 200,
    },
}
LIMIT = 15_000_000  # bytes of one weights file that comes back


def prepare(run, path, epochs):
    """Draw `epochs` training epochs and the validation batches of `run`."""
    import numpy as np
    from keras_attention_recipes.translation.config import TranslationConfig
    from keras_attention_recipes.translation.data import load_tokenizers, numbers_to_protect
    from keras_attention_recipes.translation.inputs import datasets

    spec = json.load(open(os.path.join(run, "config.json")))
    config = TranslationConfig.for_command("demo", output=run)
    data = os.path.join(run, "data")
    paths = {s: os.path.join(data, f"{s}.tsv") for s in ("train", "valid", "dictionary")}
    source, target = load_tokenizers(run)
    numbers = numbers_to_protect(config, paths["train"])
    train, valid = datasets(
        paths,
        source,
        target,
        spec["max_length"],
        config.batch_size,
        config.seed,
        print,
        batch_tokens=config.batch_tokens,
        dictionary=config.dictionary,
        numbers=numbers,
    )
    arrays = {}

    def keep(prefix, dataset):
        for i, ((s, t_in), t_out) in enumerate(dataset.as_numpy_iterator()):
            arrays[f"{prefix}_{i}_s"] = s.astype(np.uint16)
            arrays[f"{prefix}_{i}_i"] = t_in.astype(np.uint16)
            arrays[f"{prefix}_{i}_o"] = t_out.astype(np.uint16)

    keep("valid", valid)
    for epoch in range(epochs):
        keep(f"e{epoch}", train)
    np.savez_compressed(path, vocab=np.array([source.vocab_size, target.vocab_size]), **arrays)
    print(f"{epochs} epochs and the validation batches -> {path} ({os.path.getsize(path)} bytes)")


def load_batches(path):
    import numpy as np

    stored = np.load(path)
    batches = {}
    for key in stored.files:
        if key == "vocab":
            continue
        prefix, index, part = key.rsplit("_", 2)
        batches.setdefault(prefix, {}).setdefault(int(index), {})[part] = stored[key].astype(
            "int32"
        )
    ordered = {
        prefix: [few_shapes((b["s"], b["i"]), b["o"]) for _, b in sorted(found.items())]
        for prefix, found in batches.items()
    }
    epochs = [ordered[f"e{i}"] for i in range(len(ordered) - 1)]
    return [int(v) for v in stored["vocab"]], epochs, ordered["valid"]


# XLA compiles a step for every batch shape: an epoch of the recipe's holds
# 15, and since a bucket's short last batch changes with each draw, 30
# drawn epochs hold about 155 together: minutes of compiling on a GPU. Each
# batch is padded (with [PAD], which the loss and attention mask) to one of
# two shapes: the short buckets' and the long ones'.
SHAPES = ((219, 15), (80, 33))  # (rows, pieces): bucket_batch_sizes at 1,536 tokens


def few_shapes(inputs, target_out):
    import numpy as np

    source, target_in = inputs
    rows, width = next(shape for shape in SHAPES if source.shape[1] <= shape[1])
    rows = max(rows, source.shape[0])

    def pad(array, columns):
        return np.pad(array, ((0, rows - array.shape[0]), (0, columns - array.shape[1])))

    return (pad(source, width), pad(target_in, width - 1)), pad(target_out, width - 1)


def training_spec(run_config, name, count, batches):
    """`model_spec`, with the run's last step planned for `count` epochs of
    `batches` steps: a cosine decay ends there (the CPU run's `total_steps`
    counts its own epochs)."""
    return {**model_spec(run_config, name), "total_steps": count * batches}


def model_spec(run_config, name):
    """The model's settings: the run's, then `MODELS[name]`'s, compiled with
    XLA. The recipe's runs compile without it (`jit: false`, the CPU's
    faster choice), and on the JAX backend that means a step of thousands
    of op-by-op dispatches: 1.46 s against 0.39 s a step here on the CPU,
    and most likely why no epoch finished in 160 s on an H100
    (BENCHMARKS.md)."""
    spec = {**run_config, **MODELS[name], "jit": True}
    spec.pop("average_last", None)
    spec.pop("epochs", None)
    return spec


def validation_loss(model, valid):
    import numpy as np

    losses, weights = [], []
    for (s, t_in), t_out in valid:
        result = model.test_on_batch((s, t_in), t_out, return_dict=True)
        losses.append(result["loss"])
        weights.append(np.count_nonzero(t_out))
    return float(np.average(losses, weights=weights))


def train_one(name, spec, vocab, epochs, valid, count, minutes, log, steps=None):
    """Train one model for `count` epochs, ending after the epoch that
    passes `minutes` (or within an epoch at twice that: the deadline of a
    lease); returns its record and the averaged weights (a list of
    arrays). The first epoch's first steps are logged with their times, so
    that a run cut off before its first epoch still says how far it got
    (compiling or stepping)."""
    import keras
    import numpy as np
    from keras_attention_recipes.translation.model import build_model

    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(0)
    model = build_model(spec, *vocab)
    average = MODELS[name]["average_last"]
    kept, record, done = [], {"epochs": [], "first_steps_s": []}, 0
    started = time.perf_counter()
    for epoch in range(count):
        t0 = time.perf_counter()
        for step, ((s, t_in), t_out) in enumerate(epochs[epoch % len(epochs)][:steps]):
            t1 = time.perf_counter()
            logs = model.train_on_batch((s, t_in), t_out, return_dict=True)
            done += 1
            if epoch == 0 and (step < 4 or step in (16, 64)):
                seconds = time.perf_counter() - t1
                record["first_steps_s"].append(round(seconds, 3))
                log(f"{name} step {step + 1} {s.shape}: {seconds:.3f}s")
            if time.perf_counter() - started > 2 * minutes * 60:
                break
        train_s = time.perf_counter() - t0
        val = validation_loss(model, valid)
        kept = (kept + [[np.array(v) for v in model.get_weights()]])[-average:]
        record["epochs"].append(
            {
                "train_s": round(train_s, 2),
                "loss": round(float(logs["loss"]), 4),
                "val": round(val, 4),
            }
        )
        log(f"{name} epoch {epoch + 1}: {train_s:.1f}s, loss {logs['loss']:.3f}, val {val:.3f}")
        if time.perf_counter() - started > minutes * 60:
            break
    record["seconds"] = round(time.perf_counter() - started, 1)
    record["steps"] = done
    averaged = [np.mean(group, axis=0) for group in zip(*kept)]
    model.set_weights(averaged)
    record["averaged"] = len(kept)
    record["val_averaged"] = round(validation_loss(model, valid), 4)
    log(f"{name}: mean of the last {len(kept)} epochs: val {record['val_averaged']:.3f}")
    return record, averaged


def save_weights(out, name, weights):
    import numpy as np

    parts, part, size = [], [], 0
    for i, array in enumerate(weights):
        if part and size + array.nbytes > LIMIT:
            parts.append(part)
            part, size = [], 0
        part.append(i)
        size += array.nbytes
    parts.append(part)
    for k, indices in enumerate(parts):
        np.savez(
            os.path.join(out, f"{name}-{k}.npz"),
            **{f"w{i:04d}": weights[i].astype("float32") for i in indices},
        )


def load_weights(folder, name):
    import numpy as np

    found = {}
    for k in range(8):
        path = os.path.join(folder, f"{name}-{k}.npz")
        if os.path.exists(path):
            found.update(dict(np.load(path)))
    return [found[key] for key in sorted(found)]


def train_all(args):
    import jax
    import keras

    log = lambda text: print(text, flush=True)  # noqa: E731
    log(f"keras {keras.__version__} on {keras.backend.backend()}, devices {jax.devices()}")
    vocab, epochs, valid = load_batches(args.batches)
    log(f"{len(epochs)} drawn epochs of {len(epochs[0])} batches, {len(valid)} validation batches")
    run_config = json.load(open(args.config))
    os.makedirs(args.out, exist_ok=True)
    device = jax.devices()[0]
    results = {
        "device": f"{device} ({device.device_kind})",
        "versions": {"jax": jax.__version__, "keras": keras.__version__},
        "models": {},
    }
    for name in args.models:
        count = args.epochs or MODELS[name]["epochs"]
        record, weights = train_one(
            name,
            training_spec(run_config, name, count, len(epochs[0][: args.steps])),
            vocab,
            epochs,
            valid,
            count,
            args.minutes,
            log,
            args.steps,
        )
        results["models"][name] = record
        save_weights(args.out, name, weights)
        run_files.write_json_atomically(os.path.join(args.out, "gpu_training.json"), results)
    if args.tune:
        results["tune"] = tune(args, log)
        run_files.write_json_atomically(os.path.join(args.out, "gpu_training.json"), results)


# -- KerasTuner's distributed mode: a chief and a worker per GPU ----------------
SEARCH = {"hidden_dim": [64, 128], "num_layers": [1, 2]}


def tune(args, log):
    """The chief and one worker per GPU, started as
    `recipes.distributed_tuning` starts them (`launch`); returns the
    trials' results. Logs: `chief.log`, `tuner0.log`, ... under `--out`."""
    from keras_attention_recipes.distributed_tuning import gpu_count, launch

    gpus = max(gpu_count(), 1)
    folder = os.path.join(args.tune_dir, "tune")  # not under --out: its files stay there
    member = [sys.executable, os.path.abspath(__file__), "--tune-member", folder]
    member += ["--batches", args.batches, "--config", args.config, "--trials", str(args.trials)]
    member += ["--steps", str(args.steps)] if args.steps else []
    processes, started = [], time.perf_counter()
    launch(gpus, 8765, [], args.out, processes, command=member)
    try:
        codes = [process.wait(timeout=args.tune_timeout) for _, process, _ in processes[1:]]
        codes.insert(0, processes[0][1].wait(timeout=60))
    except subprocess.TimeoutExpired:
        for _, process, _ in processes:
            process.kill()
        codes = ["timeout"]
    seconds = round(time.perf_counter() - started, 1)
    summary = os.path.join(folder, "summary.json")
    trials = json.load(open(summary)) if os.path.exists(summary) else None
    log(f"tune: {gpus} worker(s), exit codes {codes}, {seconds}s, trials {trials}")
    return {"workers": gpus, "exit_codes": codes, "seconds": seconds, "trials": trials}


def tune_member(args):
    """One chief or worker process of `tune`."""
    import keras
    import keras_tuner
    from keras_attention_recipes.translation.model import build_model
    from keras_attention_recipes.tuning import end_chief_promptly

    if os.environ.get("KERASTUNER_TUNER_ID") == "chief":
        end_chief_promptly()  # device time: not 20 s idle after the last trial
    vocab, epochs, valid = load_batches(args.batches)
    run_config = json.load(open(args.config))

    def build(hp):
        keras.mixed_precision.set_global_policy("mixed_float16")
        spec = {
            **training_spec(run_config, "demo", 1, len(epochs[0][: args.steps])),
            "embed_dim": 64,
        }
        spec.update({key: hp.Choice(key, values) for key, values in SEARCH.items()})
        return build_model(spec, *vocab)

    def batches():
        while True:
            for (s, t_in), t_out in epochs[0][: args.steps]:
                yield (s, t_in), t_out

    def valid_batches():
        while True:
            for (s, t_in), t_out in valid:
                yield (s, t_in), t_out

    tuner = keras_tuner.RandomSearch(
        build,
        objective="val_loss",
        max_trials=args.trials,
        directory=os.path.dirname(args.tune_member),
        project_name=os.path.basename(args.tune_member),
        seed=0,
    )
    tuner.search(
        batches(),
        steps_per_epoch=len(epochs[0][: args.steps]),
        validation_data=valid_batches(),
        validation_steps=len(valid),
        epochs=1,
        verbose=2,
    )
    if os.environ.get("KERASTUNER_TUNER_ID") == "chief":
        trials = [
            {"hyperparameters": t.hyperparameters.values, "val_loss": t.score}
            for t in tuner.oracle.get_best_trials(args.trials)
        ]
        run_files.write_json_atomically(os.path.join(args.tune_member, "summary.json"), trials)


# -- scoring the weights here, with the recipe -----------------------------------
def copy_settings(run_config, trained_config, name, record):
    """The config.json of a scored copy of a run: the model's settings as
    they trained (`trained_config`, then `MODELS[name]`), compiled as the
    run compiles (its `jit`: this CPU evaluates it), without the CPU run's
    training record, and with the bench's (`gpu_training`). The bench's
    validation loss is a mean over target tokens, not the recipe's
    `val_loss` (Keras's mean over batches), so it is `gpu_val_loss`."""
    spec = {**model_spec(trained_config, name), "jit": run_config.get("jit", False)}
    for key in ("time_budget", "averaged", "train_seconds", "val_loss"):
        spec.pop(key, None)
    return {**spec, "gpu_val_loss": record["val_averaged"], "gpu_training": record}


def score(run, folder, models, config=None):
    """Each model's weights from `folder` into a copy of `run`
    (`<run>-gpu-<folder's name>-<model>`), then the recipe's `evaluate`.
    `config`: the config.json the weights were trained with (`--config` of
    the training step), when not the run's own."""
    import keras
    from keras_attention_recipes.translation.model import build_model

    results = json.load(open(os.path.join(folder, "gpu_training.json")))
    run_config = json.load(open(os.path.join(run, "config.json")))
    trained_config = json.load(open(config)) if config else run_config
    label = os.path.basename(os.path.abspath(folder))
    for name in models:
        target = f"{os.path.normpath(run)}-gpu-{label}-{name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(run, target, ignore=shutil.ignore_patterns("*.h5", "checkpoints", "logs"))
        settings = copy_settings(run_config, trained_config, name, results["models"][name])
        model = build_model(settings, settings["source_vocab"], settings["target_vocab"])
        model.set_weights(load_weights(folder, name))
        model.save(os.path.join(target, "model.keras"))
        run_files.write_json_atomically(os.path.join(target, "config.json"), settings)
        keras.backend.clear_session()
        command = [
            sys.executable,
            "-m",
            "keras_attention_recipes.translate",
            "evaluate",
            "--output",
            target,
        ]
        subprocess.run(command, check=True)
        print(name, json.load(open(os.path.join(target, "scores.json"))))


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prepare", metavar="RUN")
    parser.add_argument("--score", metavar="RUN")
    parser.add_argument("--weights", metavar="DIR")
    parser.add_argument("--tune-member", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--batches", default="gpu_batches.npz")
    parser.add_argument("--config", help="the settings the models train with (a run's config.json)")
    parser.add_argument("--out", default="gpu-out")
    parser.add_argument("--models", nargs="*", default=["demo"], choices=sorted(MODELS))
    parser.add_argument(
        "--epochs", type=int, help="epochs to draw (--prepare) or train (default: the model's)"
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="each model's ceiling")
    parser.add_argument("--steps", type=int, help="batches per epoch at most (a smoke test)")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--tune-dir", default="/tmp/gpu-tune", help="the tuner's folder")
    parser.add_argument("--tune-timeout", type=float, default=150)
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.prepare, args.batches, args.epochs or 40)
    elif args.score:
        score(args.score, args.weights, args.models, args.config)
    elif args.tune_member:
        tune_member(args)
    else:
        train_all(args)


if __name__ == "__main__":
    main()
