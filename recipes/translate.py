"""Train, evaluate, tune and use translation models built from keras_attention.

    keras-attention-translate train --family transformer         # Ding corpus, German -> English
    keras-attention-translate train --family rnn --attention additive --epochs 8
    keras-attention-translate evaluate --output runs/translate   # BLEU, chrF, samples, heatmaps
    keras-attention-translate translate --output runs/translate "Ich habe keine Zeit."
    keras-attention-translate translate --output runs/translate < de.txt > en.txt  # a line each
    keras-attention-translate average --output runs/translate --last 5   # checkpoint averaging
    keras-attention-translate tune --output runs/tune            # KerasTuner (resumable)
    keras-attention-translate demo                               # what `make demo` runs

Data: the German-English sentences of Debian's `trans-de-en` by default
(`--reverse` for English -> German), or `--corpus FILE.tsv` with
`source<TAB>target` lines. A run keeps everything in `--output`: the data
split, the vocabularies (SentencePiece models `source.spm`, `target.spm`;
`--tokenizer wordpiece`: `source.vocab`, `target.vocab`), `config.json`, checkpoints and
TensorBoard logs (`logs/`), and the trained model (`model.keras`).
Training resumes from its last epoch when re-run after an interruption.

Hardware: every visible GPU is used through `MirroredStrategy`, several
machines through `MultiWorkerMirroredStrategy` when `TF_CONFIG` is set;
`--mixed-precision bfloat16|float16` and `--jit` (XLA) are opt-in; the same
commands run on a CPU.
"""

import argparse
import json
import math
import os
import shutil
import sys
import time
import weakref

from .runs import import_tensorflow_quietly

import_tensorflow_quietly()  # before anything imports TensorFlow

from keras_attention.registry import names as attention_names  # noqa: E402
from keras_attention.seq2seq.transformer import POSITIONS  # noqa: E402

from . import runs  # noqa: E402

FAMILIES = ("rnn", "convs2s", "transformer")
ATTENTION = attention_names() + ("none",)  # the RNN's attention, by the library's own names
DEFAULTS = {  # sizes that train a reasonable model on the Ding corpus in minutes on a CPU
    "embed_dim": 128,
    "units": 256,
    "layers": 2,
    "heads": 4,
    "position": "sinusoidal",  # the paper's, and what runs before --position had
    "kv_heads": None,  # one key/value head per query head
    "window": None,  # self-attention sees every position
    "dropout": 0.1,
    "learning_rate": 1e-3,
    "label_smoothing": 0.1,
    "style": "luong",
    "warmup": 0,  # steps of learning-rate warm-up (0: a constant rate)
    "decay": "rsqrt",  # after the warm-up: 1/sqrt(step), or a cosine to 0 at the last step
    "tie_embeddings": False,  # the transformer's output projection is its target embedding
}
# The flags only some families have: the transformer's embedding width is
# --units, and only the transformer has several heads (and their variants).
TRANSFORMER_FLAGS = ("heads", "position", "kv_heads", "window", "tie_embeddings")
FAMILY_FLAGS = {
    "embed_dim": ("rnn", "convs2s"),
    **{key: ("transformer",) for key in TRANSFORMER_FLAGS},
}
INTEGER_FLAGS = ("embed_dim", "units", "layers", "heads", "kv_heads", "window", "max_length")
COUNT_FLAGS = ("warmup",)  # >= 0
DECAYS = ("rsqrt", "cosine")  # --decay
FRACTION_FLAGS = ("dropout", "label_smoothing")  # in [0, 1)
DATA_SETTINGS = ("corpus", "reverse", "limit", "vocab_size", "tokenizer", "dictionary")
# --tokenizer: the suffix of its vocabulary files. A run recorded before the
# flag existed used WordPiece (`recorded_defaults`).
TOKENIZERS = {"sentencepiece": "spm", "wordpiece": "vocab"}
# How long a worker waits for the chief to prepare the data and vocabularies
# (the Ding corpus's take about two minutes on a 2-core CPU).
WORKER_WAIT_SECONDS = float(os.environ.get("KERAS_ATTENTION_WORKER_WAIT", 900))


class UsageError(ValueError):
    """A user mistake: printed as `error: ...`, exit status 2."""


# -- configuration -----------------------------------------------------------------
def model_config(args, hyperparameters=None):
    config = {
        key: getattr(args, key, None)  # --embed-dim and the family's flags: absent when not given
        for key in (
            "family",
            "attention",
            "embed_dim",
            "units",
            "layers",
            "heads",
            "position",
            "kv_heads",
            "window",
            "dropout",
            "learning_rate",
            "label_smoothing",
            "max_length",
            "style",
            "warmup",
            "decay",
            "tie_embeddings",
        )
    }
    family = (hyperparameters or {}).get("family", config["family"])
    for key, families in FAMILY_FLAGS.items():
        if config[key] is not None and family not in families:
            raise UsageError(
                f"--{key.replace('_', '-')} does not apply to the {family} family "
                f"(only to {' and '.join(families)})"
                + (": its embedding width is --units" if key == "embed_dim" else "")
                + "; leave it out"
            )
    config.update(
        {  # a tuner's file may hold values of the other families: they do not apply
            key: value
            for key, value in (hyperparameters or {}).items()
            if family in FAMILY_FLAGS.get(key, FAMILIES)
        }
    )
    for key, families in FAMILY_FLAGS.items():
        if config[key] is None and config["family"] in families:
            config[key] = DEFAULTS[key]
    if config["family"] not in FAMILIES:
        raise UsageError(f"--family must be one of {list(FAMILIES)}; got {config['family']!r}")
    if config["family"] != "rnn" and config["attention"] not in (
        None,
        "multihead" if config["family"] == "transformer" else "multistep",
    ):
        raise UsageError(
            "--attention chooses the recurrent model's attention; "
            f"the {config['family']} family has "
            f"its own ({'multi-head' if config['family'] == 'transformer' else 'multi-step'}): "
            "leave --attention out"
        )
    if config["family"] == "rnn" and config["attention"] is None:
        config["attention"] = "general"
    for key in INTEGER_FLAGS:
        if config[key] is not None:
            check_number(key, config[key], integer=True, low=1)
    check_number("learning_rate", config["learning_rate"], low=0, low_included=False)
    for key in FRACTION_FLAGS:
        check_number(key, config[key], low=0, high=1)
    for key in COUNT_FLAGS:
        config[key] = DEFAULTS[key] if config[key] is None else config[key]
        check_number(key, config[key], integer=True, low=0)
    config["decay"] = config["decay"] or DEFAULTS["decay"]
    if config["decay"] not in DECAYS:
        raise UsageError(f"--decay must be one of {list(DECAYS)}; got {config['decay']!r}")
    if config["position"] is not None and config["position"] not in POSITIONS:
        raise UsageError(f"--position must be one of {list(POSITIONS)}; got {config['position']!r}")
    if config["kv_heads"] is not None and config["heads"] % config["kv_heads"]:
        raise UsageError(
            f"--kv-heads {config['kv_heads']} must divide --heads {config['heads']} "
            "(each key/value head serves heads/kv-heads query heads)"
        )
    return config


def recorded_defaults(settings):
    """The model settings a `run.json` written before they were flags was
    trained with: a run that lacks one is compared as having this value."""
    transformer = settings.get("family") == "transformer"
    return {
        "tokenizer": "wordpiece",
        **{key: DEFAULTS[key] if transformer else None for key in TRANSFORMER_FLAGS[1:]},
        "warmup": 0,
        "decay": "rsqrt",
        "dictionary": 0.0,
    }


def check_number(name, value, integer=False, low=None, high=None, low_included=True):
    """Raise `UsageError` unless `value` is a finite number (an integer when
    `integer`) with `low <= value < high` (`low < value` unless
    `low_included`); `name` is the flag or hyperparameter."""
    flag = f"--{name.replace('_', '-')}"
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise UsageError(f"{flag} must be {kind}; got {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{flag} must be a finite number; got {value}")
    if high is not None and not low <= value < high:
        raise UsageError(f"{flag} must be in [{low}, {high}); got {value}")
    if low is not None and (value < low or (value == low and not low_included)):
        raise UsageError(f"{flag} must be {'>=' if low_included else '>'} {low}; got {value}")


def build_model(config, source_vocab, target_vocab):
    import keras

    from keras_attention.seq2seq import (
        ConvS2SSeq2Seq,
        MaskedAccuracy,
        MaskedCrossEntropy,
        MaskedPerplexity,
        RecurrentSeq2Seq,
        TransformerSeq2Seq,
    )

    family, units, layers = config["family"], int(config["units"]), int(config["layers"])
    if family == "rnn":
        attention = None if config["attention"] == "none" else config["attention"]
        model = RecurrentSeq2Seq(
            source_vocab,
            target_vocab,
            int(config["embed_dim"]),
            units,
            attention=attention,
            style=config["style"],
            num_layers=layers,
            dropout=float(config["dropout"]),
        )
    elif family == "convs2s":
        convolutions = [(units, 3)] * (2 * layers)
        model = ConvS2SSeq2Seq(
            source_vocab,
            target_vocab,
            int(config["embed_dim"]),
            convolutions,
            convolutions,
            max_length=int(config["max_length"]) + 2,
            dropout=float(config["dropout"]),
        )
    else:
        heads = int(config["heads"])
        if units % heads:
            raise UsageError(
                f"--heads {heads} must divide --units {units} (each head gets units/heads features)"
            )
        model = TransformerSeq2Seq(
            source_vocab,
            target_vocab,
            units,
            heads,
            2 * units,
            layers,
            max_length=int(config["max_length"]) + 2,
            dropout=float(config["dropout"]),
            # .get: a config.json or tuner trial written before these flags
            position=config.get("position") or DEFAULTS["position"],
            num_key_value_heads=config.get("kv_heads"),
            sliding_window=config.get("window"),
            tie_embeddings=bool(config.get("tie_embeddings")),
        )
    # Build the weights now: KerasTuner loads checkpoints into freshly
    # built models, and BackupAndRestore restores.
    model.build()
    optimizer = keras.optimizers.Adam(learning_rate(config), global_clipnorm=1.0)
    model.compile(
        optimizer,
        MaskedCrossEntropy(label_smoothing=float(config["label_smoothing"])),
        # token accuracy and perplexity (unsmoothed) of each epoch, padding excluded
        metrics=[MaskedAccuracy(), MaskedPerplexity()],
        jit_compile=bool(config.get("jit", False)),
    )
    return model


def learning_rate(config):
    """Adam's rate: `learning_rate` constant, or with `warmup` steps of
    warm-up to it then `decay`: 1/sqrt(step) (`InverseSquareRootSchedule`)
    or a cosine to 0 at `total_steps`, the run's last step (Keras's
    `CosineDecay` with its warm-up)."""
    import keras

    from keras_attention.seq2seq import InverseSquareRootSchedule

    peak, warmup = float(config["learning_rate"]), int(config.get("warmup") or 0)
    if config.get("decay") == "cosine":
        decay_steps = int(config["total_steps"]) - warmup
        if decay_steps < 1:
            raise UsageError(
                f"--decay cosine needs more training steps than --warmup {warmup}; "
                f"the run has {config['total_steps']}"
            )
        return keras.optimizers.schedules.CosineDecay(
            0.0 if warmup else peak,
            decay_steps,
            warmup_target=peak if warmup else None,
            warmup_steps=warmup,
        )
    return InverseSquareRootSchedule(peak, warmup) if warmup else peak


def resilient_backup(directory, log=print):
    """`BackupAndRestore` that keeps the two last epochs and, when the latest
    backup does not load (a kill while it was written leaves a truncated
    file), says so and resumes from the one before. Keras itself falls back
    only on `OSError`; a truncated HDF5 file raises `ValueError` too."""
    import keras

    class ResilientBackup(keras.callbacks.BackupAndRestore):
        def on_epoch_end(self, epoch, logs=None):
            # A diverged epoch (stopped by TerminateOnNaN) is not backed up:
            # the backup keeps the last good one.
            if all(math.isfinite(value) for value in (logs or {}).values()):
                super().on_epoch_end(epoch, logs)

        def on_train_begin(self, logs=None):
            try:
                self._load_model()
            except (OSError, ValueError) as error:
                if not os.path.exists(self._prev_weights_path):
                    raise UsageError(
                        f"the backup in {directory} does not load ({str(error).splitlines()[0]}) "
                        "and there is no earlier one: remove that folder to start over"
                    ) from error
                log(
                    f"the last backup did not load ({type(error).__name__}); "
                    "resuming from the epoch before it"
                )
                shutil.copy(self._prev_weights_path, self._weights_path)
                if os.path.exists(self._prev_training_metadata_path):
                    shutil.copy(self._prev_training_metadata_path, self._training_metadata_path)
                self._load_model()

    # Deleted by `train` once the final model and config are in place.
    return ResilientBackup(directory, double_checkpoint=True, delete_checkpoint=False)


def best_weights(path, log=print):
    """A callback that keeps the weights of the epoch with the lowest
    validation loss in `path` (written atomically, with its loss and epoch
    in `path.json`, so a resumed run knows the best so far); its
    `restore(model)` loads them at the end of training."""
    import keras

    class BestWeights(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            record = path + ".json"
            saved = runs.read_json(record, "the best epoch") if os.path.exists(record) else {}
            self.val_loss = saved.get("val_loss", math.inf)
            self.epoch = saved.get("epoch")
            self.last_val_loss = None

        def on_epoch_end(self, epoch, logs=None):
            value = (logs or {}).get("val_loss")
            if value is None or not math.isfinite(value):
                return
            self.last_val_loss = float(value)
            if value < self.val_loss:
                self.val_loss, self.epoch = float(value), epoch + 1
                runs.write_atomically(path, self.model.save_weights)
                runs.write_json_atomically(
                    path + ".json", {"val_loss": self.val_loss, "epoch": self.epoch}
                )

        def restore(self, model):
            """Load the best weights when an epoch before the last was
            better; True when the model now holds the best epoch's."""
            if self.epoch is None or not os.path.exists(path):
                return False
            if self.last_val_loss is not None and self.last_val_loss <= self.val_loss:
                return True  # the last epoch is the best
            model.load_weights(path)
            log(
                f"keeping epoch {self.epoch}'s weights, the best on validation loss "
                f"({self.val_loss:.3f})"
            )
            return True

    return BestWeights()


def fit_verbosity(verbose):
    """Keras's progress bar when the output is a terminal (`verbose` None),
    one line per epoch otherwise; or the verbosity asked for."""
    if verbose is not None:
        return verbose
    return 1 if sys.stdout.isatty() else 2


def completed_epochs(backup):
    """The epochs a backup folder holds (0 without one)."""
    path = os.path.join(backup, "training_metadata.json")
    return (
        int(runs.read_json(path, "the backup's epoch").get("epoch", 0))
        if os.path.exists(path)
        else 0
    )


def choose_strategy():
    import tensorflow as tf

    if os.environ.get("TF_CONFIG"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def is_chief():
    """True on a single machine, and on the chief of a TF_CONFIG cluster (the
    "chief" task, or worker 0 when the cluster has no chief)."""
    if not os.environ.get("TF_CONFIG"):
        return True
    config = json.loads(os.environ["TF_CONFIG"])
    task = config.get("task", {})
    if task.get("type") == "chief":
        return True
    return (
        task.get("type") == "worker"
        and task.get("index", 0) == 0
        and "chief" not in config.get("cluster", {})
    )


def task_index():
    return json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("index", 0)


# -- data and vocabularies ----------------------------------------------------------
def vocabulary_paths(output, tokenizer=None):
    """The source and target vocabulary files of a run: those of
    `tokenizer`, or (None) of whichever kind `output` holds."""
    if tokenizer is None:
        found = [
            name
            for name, suffix in TOKENIZERS.items()
            if os.path.exists(os.path.join(output, f"source.{suffix}"))
        ]
        tokenizer = found[0] if found else "sentencepiece"
    return [
        os.path.join(output, f"{side}.{TOKENIZERS[tokenizer]}") for side in ("source", "target")
    ]


def load_tokenizers(output, paths=None, vocab_size=8000, log=print, tokenizer=None):
    """The run's source and target tokenizers. With `paths` (the data
    split), a missing vocabulary of `tokenizer` is first learned from the
    training split's side."""
    from keras_attention.serving.text import build_vocabulary, load_tokenizer, train_sentencepiece

    from .translation_data import read_pairs

    tokenizers = []
    for column, path in enumerate(vocabulary_paths(output, tokenizer)):
        if not os.path.exists(path):
            if paths is None:
                raise UsageError(f"{path} is missing: train a model into --output {output} first")
            texts = [pair[column] for pair in read_pairs(paths["train"])]
            sentencepiece = path.endswith(".spm")
            learn = train_sentencepiece if sentencepiece else build_vocabulary
            side = ("source", "target")[column]
            log(f"learning the {side} vocabulary from {len(texts)} training sentences ...")
            started = time.perf_counter()
            try:
                size = learn(texts, path, vocab_size)
            except ValueError as error:
                raise UsageError(f"{error}: raise --vocab-size") from None
            unit = "SentencePiece (unigram) pieces" if sentencepiece else "WordPiece tokens"
            what = f"{size} {unit} from {len(texts)} texts"
            seconds = time.perf_counter() - started
            log(f"{side} vocabulary: {what} ({seconds:.0f}s) -> {path}")
        try:
            with runs.stderr_silenced():  # SentencePiece's C++ log says it uses identity rules
                tokenizers.append(load_tokenizer(path))
        except (ValueError, UnicodeDecodeError) as error:
            raise UsageError(
                f"{path} is not a vocabulary ({str(error).splitlines()[0]}): it is damaged; "
                f"train again with --overwrite"
            ) from None
    return tokenizers


def data_settings(args):
    """What a run's data split and vocabularies are built from (`run.json`)."""
    from .translation_data import DING

    return {
        "corpus": os.path.abspath(args.corpus) if args.corpus else DING,
        "reverse": args.reverse,
        "limit": args.limit,
        "vocab_size": args.vocab_size,
        "tokenizer": args.tokenizer,
        "dictionary": args.dictionary,
    }


def datasets(
    paths,
    source_tokenizer,
    target_tokenizer,
    max_length,
    batch_size,
    seed,
    log,
    batch_tokens=None,
    dictionary=0.0,
):
    """The training and validation datasets; each split's pairs are counted
    after the `max_length` filter, reported, and an empty split stops the
    run with a message. With `dictionary` > 0, each training epoch adds that
    many dictionary entries per sentence pair."""
    from .translation_data import make_dataset

    made = []
    for split in ("train", "valid"):
        training = split == "train"
        data, kept, total = make_dataset(
            paths[split],
            source_tokenizer,
            target_tokenizer,
            max_length,
            batch_size,
            shuffle=training,
            seed=seed,
            batch_tokens=batch_tokens,
            extra_path=paths.get("dictionary") if training and dictionary else None,
            extra_ratio=dictionary if training else 0.0,
        )
        log(
            f"{split}: {kept} of {total} pairs fit --max-length {max_length}"
            + (f" ({total - kept} longer ones left out)" if kept < total else "")
        )
        if kept == 0:
            raise UsageError(
                f"no {split} pair fits --max-length {max_length} ({total} pairs, each longer "
                "in subword pieces): raise --max-length or --vocab-size"
            )
        made.append(data)
    return made


def load_run(output):
    """The trained model, its config and tokenizers from an --output folder."""
    import keras

    import keras_attention  # noqa: F401  (registers the model classes for loading)

    config_path, model_path = (
        os.path.join(output, "config.json"),
        os.path.join(output, "model.keras"),
    )
    for path in (model_path, config_path):
        if not os.path.exists(path):
            raise UsageError(
                f"no trained model in {output} ({path} is missing): run `train --output {output}`"
            )
    config = runs.read_json(config_path, "the trained model's settings")
    source, target = load_tokenizers(output)
    try:
        model = keras.saving.load_model(model_path)
    except (OSError, ValueError) as error:
        raise UsageError(
            f"{model_path} does not load ({str(error).splitlines()[0]}): it is damaged; "
            f"train again with --overwrite"
        ) from None
    return model, config, source, target


# -- commands -------------------------------------------------------------------------
def prepared_run(args, settings, chief, log, refuse_finished=False):
    """`(paths, source_tokenizer, target_tokenizer)` of the run in
    `args.output`. The chief claims the run (`runs.claim`: other settings
    are refused) and prepares its data split and vocabularies; every other
    process waits until they are there and checks that it has the same
    settings, so that no two processes write them at once."""
    from .translation_data import SPLITS, prepare

    if chief:
        # refuses other settings
        if runs.claim(args.output, settings, args.overwrite, recorded_defaults(settings)):
            log(f"--overwrite: deleted the earlier run in {args.output}")
        if refuse_finished and finished(args.output):
            raise UsageError(
                f"--output {args.output} already holds a trained model: evaluate or translate "
                "with it, pass --overwrite to delete it and train again, or choose another --output"
            )
        if not os.path.exists(os.path.join(args.output, "data", "meta.json")):
            log("reading the corpus and splitting it into train/valid/test ...")
        paths = prepare(
            args.output, args.corpus, args.reverse, args.limit, bool(args.dictionary), log=log
        )
        return (paths, *load_tokenizers(args.output, paths, args.vocab_size, log, args.tokenizer))
    paths = {split: os.path.join(args.output, "data", f"{split}.tsv") for split in SPLITS}
    if args.dictionary:
        paths["dictionary"] = os.path.join(args.output, "data", "dictionary.tsv")
    vocabularies = vocabulary_paths(args.output, args.tokenizer)
    log(f"waiting for the chief to prepare the data in {args.output}")
    runs.wait_for_run(
        args.output,
        settings,
        [*paths.values(), *vocabularies],
        WORKER_WAIT_SECONDS,
        defaults=recorded_defaults(settings),
    )
    return (paths, *load_tokenizers(args.output))


def finished(output):
    """True when `output` holds a trained model and no backup of an
    unfinished training."""
    backup = os.path.join(output, "backup")
    return os.path.exists(os.path.join(output, "model.keras")) and not (
        os.path.isdir(backup) and os.listdir(backup)
    )


def train_settings(args):
    """The run's settings, `config` (the model's) and the hyperparameters."""
    from .tuning import load_hyperparameters

    try:
        hyperparameters = load_hyperparameters(args.hyperparameters)
    except ValueError as error:
        raise UsageError(str(error)) from error
    config = model_config(args, hyperparameters)
    return {**data_settings(args), **config}, config


def train(args, log=print):
    """Train into `args.output`: the chief claims the run (`run.json`) and
    prepares the data and vocabularies, other workers wait for them; resume
    from the backup of an interrupted run; write `model.keras` and
    `config.json` atomically, then delete the backup."""
    import keras

    from keras_attention.serving.distribute import adapt_for_distribution

    from .averaging import average_last_epochs
    from .translation_io import validation_file
    from .translation_scores import monitoring_callbacks

    settings, config = train_settings(args)
    config["jit"] = args.jit
    strategy = choose_strategy()  # first: collective ops must be set up before any other TF op
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{args.mixed_precision}")
    keras.utils.set_random_seed(args.seed)
    paths, source_tokenizer, target_tokenizer = prepared_run(
        args, settings, is_chief(), log, refuse_finished=True
    )
    # Workers other than the chief keep their checkpoints apart, so that no
    # two processes write one file.
    work = args.output if is_chief() else os.path.join(args.output, f"worker-{task_index()}")
    if getattr(args, "valid", None):  # the user's validation file instead of the split's
        paths = {**paths, "valid": validation_file(args.output, args.valid, work, log)}
    train_data, valid_data = datasets(
        paths,
        source_tokenizer,
        target_tokenizer,
        config["max_length"],
        args.batch_size,
        args.seed,
        log,
        batch_tokens=args.batch_tokens,
        dictionary=args.dictionary,
    )
    config["total_steps"] = args.epochs * int(train_data.cardinality())  # --decay cosine's end
    with strategy.scope():
        model = build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)
        model.optimizer.build(model.trainable_variables)
        adapt_for_distribution(model)  # several replicas: global token counts; multi-worker fixes
    backup = os.path.join(work, "backup")
    done = completed_epochs(backup)
    if done > args.epochs:
        raise UsageError(
            f"{done} epochs of the run in {args.output} are done, more than --epochs "
            f"{args.epochs}: pass --epochs {done} or more to continue it, or --overwrite "
            "to start again"
        )
    if done:
        log(f"resuming an interrupted run after its epoch {done} of {args.epochs} ({backup})")
    best = best_weights(os.path.join(work, "best.weights.h5"), log)
    callbacks = [
        resilient_backup(backup, log),
        keras.callbacks.TerminateOnNaN(),
        best,
        # validation BLEU, kept epochs: before TensorBoard, which logs their val_bleu
        *monitoring_callbacks(
            args,
            paths["valid"],
            lambda texts: translate_texts(
                model, source_tokenizer, target_tokenizer, texts, config["max_length"], 1
            ),
            work,
            log if is_chief() else None,
        ),
        keras.callbacks.TensorBoard(os.path.join(work, "logs")),
    ]
    if args.patience:
        callbacks.append(
            keras.callbacks.EarlyStopping("val_loss", patience=args.patience, verbose=1)
        )
    log(
        f"training {config['family']}"
        + (f" with {config['attention']} attention" if config["family"] == "rnn" else "")
        + f" for {args.epochs} epochs on {strategy.num_replicas_in_sync} replica(s)"
    )
    started = time.perf_counter()
    history = model.fit(
        train_data,
        validation_data=valid_data,
        epochs=args.epochs,
        callbacks=callbacks,
        shuffle=False,  # the training dataset shuffles itself
        verbose=fit_verbosity(args.verbose),
    ).history
    seconds = time.perf_counter() - started
    if not all(math.isfinite(value) for values in history.values() for value in values):
        raise UsageError(
            f"training diverged (loss {history['loss'][-1]}) and stopped; nothing was saved "
            f"and any earlier model in {args.output} is kept: lower --learning-rate "
            f"(now {config['learning_rate']})"
        )
    if best.restore(model):  # the best epoch's weights, not the last's
        val_loss = best.val_loss
    elif history.get("val_loss"):
        val_loss = float(history["val_loss"][-1])
    else:  # every epoch was done before (a kill during the final save): the backup's model
        result = model.evaluate(valid_data, verbose=0)
        val_loss = float(result[0] if isinstance(result, list) else result)
    averaged = {}
    if getattr(args, "average_last", None):  # the mean of the last epochs becomes the model
        averaged = average_last_epochs(model, work, args.average_last, valid_data, val_loss, log)
        val_loss = averaged.pop("val_loss", val_loss)
    runs.write_atomically(os.path.join(work, "final.weights.h5"), model.save_weights)
    if is_chief():
        runs.write_atomically(os.path.join(args.output, "model.keras"), model.save)
        runs.write_json_atomically(
            os.path.join(args.output, "config.json"),
            {
                **config,
                "source_vocab": source_tokenizer.vocab_size,
                "target_vocab": target_tokenizer.vocab_size,
                "epochs": args.epochs,
                "train_seconds": round(seconds, 1),
                "val_loss": round(val_loss, 4),
                **({"averaged": averaged} if averaged else {}),
            },
        )
    # Only now that model.keras and config.json are in place.
    shutil.rmtree(backup, ignore_errors=True)
    log(
        f"trained in {seconds:.0f}s, validation loss {val_loss:.3f} -> "
        f"{os.path.join(args.output, 'model.keras')}"
    )
    return model


_SEARCHES = weakref.WeakKeyDictionary()  # model -> {decoding settings: tf.function}


def compiled_search(model, max_length, beam_width, return_attention, options):
    """The model's search as one graph (in eager mode its loop would run op
    by op), traced once per model and settings: a file translated in chunks
    or a BLEU computed each epoch reuses it. The batch dimension is left
    unknown, so a last, shorter batch needs no second trace."""
    import tensorflow as tf

    from keras_attention.seq2seq.generation import generate

    searches = _SEARCHES.setdefault(model, {})
    key = (max_length, beam_width, return_attention, tuple(sorted(options.items())))
    if key not in searches:
        searches[key] = tf.function(
            lambda source: generate(
                model,
                source,
                max_length + 1,
                beam_width,
                return_attention=return_attention,
                **options,
            ),
            input_signature=[tf.TensorSpec([None, max_length], tf.int32)],
        )
    return searches[key]


def translate_texts(
    model,
    source_tokenizer,
    target_tokenizer,
    texts,
    max_length,
    beam_width=4,
    batch_size=64,
    return_attention=False,
    **options,
):
    """Translate a list of strings with beam search; returns the best
    translations (and, optionally, token ids and attention of each).
    `options` are generation's decoding options (`decoding_options(args)`)."""
    import numpy as np
    import tensorflow as tf

    search = compiled_search(model, max_length, beam_width, return_attention, options)
    translations, details = [], []
    for start in range(0, len(texts), batch_size):
        source, _ = source_tokenizer.encode(
            tf.constant(texts[start : start + batch_size]), max_length
        )
        result = search(source)
        tokens, attention = result["tokens"], result.get("attention")
        text = target_tokenizer.blank_where_empty(
            tf.constant(texts[start : start + batch_size]), target_tokenizer.decode(tokens)
        )
        translations += [t.decode("utf-8") for t in text.numpy()]
        if return_attention:
            details += list(zip(np.asarray(source), np.asarray(tokens), np.asarray(attention)))
    return (translations, details) if return_attention else translations


LENGTH_BUCKETS = ((1, 5), (6, 10), (11, 15), (16, 25), (26, None))  # source words


def bleu_by_length(sources, hypotheses, references, buckets=LENGTH_BUCKETS):
    """Corpus BLEU of the sentences in each source-length bucket (words
    split on white space), as Bahdanau et al. (2015, Fig. 2) plot it:
    `{"1-5": {"bleu": ..., "sentences": n}, ..., "26+": ...}`; a bucket
    without sentences is left out."""
    import sacrebleu

    table = {}
    for low, high in buckets:
        chosen = [
            (hypothesis, reference)
            for source, hypothesis, reference in zip(sources, hypotheses, references)
            if low <= len(source.split()) and (high is None or len(source.split()) <= high)
        ]
        if chosen:
            bleu = sacrebleu.corpus_bleu([h for h, _ in chosen], [[r for _, r in chosen]])
            name = f"{low}-{high}" if high else f"{low}+"
            table[name] = {"bleu": round(bleu.score, 2), "sentences": len(chosen)}
    return table


def evaluate(args, log=print):
    from keras_attention.seq2seq.plotting import plot_attention

    from .translation_data import read_pairs
    from .translation_io import read_pair_file
    from .translation_scores import corpus_scores, write_scores

    test_file = getattr(args, "test", None)  # the user's test file, read before the model
    pairs = read_pair_file(test_file, "--test", log) if test_file else None
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    if not test_file:
        test_file = os.path.join(args.output, "data", "test.tsv")
        pairs = read_pairs(test_file)
    if args.limit_test:
        pairs = pairs[: args.limit_test]
    sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
    log(f"translating the {len(pairs)} test sentences (beam search, width {args.beam_width}) ...")
    started = time.perf_counter()
    hypotheses, details = translate_texts(
        model,
        source_tokenizer,
        target_tokenizer,
        sources,
        config["max_length"],
        args.beam_width,
        return_attention=True,
        **decoding_options(args),
    )
    scores = corpus_scores(hypotheses, references)
    log(
        f"test set: {test_file}, {len(pairs)} sentences, beam {args.beam_width}, "
        f"{time.perf_counter() - started:.0f}s"
    )
    log(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}")
    log(f"signatures: BLEU {scores['bleu_signature']}, chrF {scores['chrf_signature']}")
    for source, reference, hypothesis in list(zip(sources, references, hypotheses))[: args.samples]:
        log(f"\n  source:     {source}\n  reference:  {reference}\n  model:      {hypothesis}")
    if config["family"] == "rnn" and config["attention"] == "none":
        log("\n(no heatmaps: the bottleneck baseline has no attention)")
    else:
        os.makedirs(os.path.join(args.output, "attention"), exist_ok=True)
        for index, (source_ids, target_ids, weights) in enumerate(details[: args.samples]):
            source_labels = [
                t.decode() for t in source_tokenizer.tokens(source_ids[source_ids > 0]).numpy()
            ]
            length = int((target_ids > 0).sum())
            target_labels = [
                t.decode() for t in target_tokenizer.tokens(target_ids[:length]).numpy()
            ]
            path = os.path.join(args.output, "attention", f"sample{index}.png")
            plot_attention(
                weights[:length, : len(source_labels)],
                source_labels,
                target_labels,
                path,
                title=sources[index],
            )
        log(f"\nattention heatmaps: {os.path.join(args.output, 'attention')}/sample*.png")
    scores = {
        **scores,
        "sentences": len(pairs),
        "beam_width": args.beam_width,
        "alpha": args.alpha,
        "bleu_by_source_length": bleu_by_length(sources, hypotheses, references),
        "test": os.path.abspath(test_file),
    }
    log(
        "BLEU by source length (words): "
        + ", ".join(
            f"{bucket}: {row['bleu']:.1f} ({row['sentences']})"
            for bucket, row in scores["bleu_by_source_length"].items()
        )
    )
    write_scores(args.output, scores)
    return scores


DECODING_FLAGS = {  # flag dest -> (generation's option, its "off" value)
    "alpha": ("alpha", 0.6),  # not off: GNMT's usual length penalty, beam search's default
    "min_length": ("min_length", 0),
    "no_repeat_ngram": ("no_repeat_ngram_size", 0),
    "repetition_penalty": ("repetition_penalty", 1.0),
    "coverage_penalty": ("coverage_penalty", 0.0),
}


def decoding_options(args):
    """The decoding options the flags chose, by generation's names (off
    where a command has no such flag: `demo`)."""
    return {option: getattr(args, flag, off) for flag, (option, off) in DECODING_FLAGS.items()}


def nbest_lines(model, source_tokenizer, target_tokenizer, texts, max_length, beam_width, n, args):
    """`score<TAB>translation` lines: `n` per text, best first, texts in order
    (the `nbest` signature's translations and scores, computed in process)."""
    import tensorflow as tf

    from keras_attention.serving.export import decoding_options as export_options
    from keras_attention.serving.export import nbest_translations

    options = export_options(beam_width, num_hypotheses=n, **decoding_options(args))
    result = nbest_translations(
        model, source_tokenizer, target_tokenizer, tf.constant(texts), max_length, options
    )
    lines = []
    for translations, scores in zip(result["translations"].numpy(), result["scores"].numpy()):
        lines += [
            f"{score:.4f}\t{text.decode('utf-8')}" for text, score in zip(translations, scores)
        ]
    return lines


def translate_command(args, log=print):
    from .translation_io import reads_lines, translate_file

    if reads_lines(args):  # a line out for each line in: files, pipes, --output-file
        return translate_file(args, lambda: line_translator(args))
    if not args.text:
        raise UsageError(
            "give the text to translate, e.g. "
            'translate --output runs/translate "Ich habe keine Zeit."'
        )
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    if getattr(args, "nbest", None):
        for line in nbest_lines(
            model,
            source_tokenizer,
            target_tokenizer,
            args.text,
            config["max_length"],
            args.beam_width,
            args.nbest,
            args,
        ):
            log(line)
        return
    for text, translation in zip(
        args.text,
        translate_texts(
            model,
            source_tokenizer,
            target_tokenizer,
            args.text,
            config["max_length"],
            args.beam_width,
            **decoding_options(args),
        ),
    ):
        log(f"{text}\n  -> {translation}")


def line_translator(args):
    """`sentences -> lines` with the run's model: a translation each, or
    `--nbest` N `score<TAB>translation` lines each."""
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    common = (model, source_tokenizer, target_tokenizer)
    if args.nbest:
        return lambda texts: nbest_lines(
            *common, texts, config["max_length"], args.beam_width, args.nbest, args
        )
    return lambda texts: translate_texts(
        *common, texts, config["max_length"], args.beam_width, **decoding_options(args)
    )


def average_command(args, log=print):
    """Replace the run's model by the mean of checkpoints (`averaging.py`)."""
    from .averaging import average_run

    return average_run(args, load_run(args.output), log)


def tune(args, log=print):
    from .tuning import run_search

    paths, source_tokenizer, target_tokenizer = prepared_run(
        args, data_settings(args), os.environ.get("KERASTUNER_TUNER_ID", "chief") == "chief", log
    )
    data = datasets(
        paths,
        source_tokenizer,
        target_tokenizer,
        args.max_length,
        args.batch_size,
        args.seed,
        log,
    )

    def build(hp):
        family = hp.Choice("family", list(args.families))
        config = {
            "family": family,
            "attention": hp.Choice(
                "attention", list(attention_names()), parent_name="family", parent_values=["rnn"]
            )
            if family == "rnn"
            else None,
            # The transformer's embedding width is its `units`; only it has heads.
            "embed_dim": hp.Choice(
                "embed_dim", [64, 128], parent_name="family", parent_values=["rnn", "convs2s"]
            )
            if family != "transformer"
            else None,
            "units": hp.Choice("units", [64, 128, 256]),
            "layers": hp.Int("layers", 1, 3),
            "heads": hp.Choice("heads", [2, 4], parent_name="family", parent_values=["transformer"])
            if family == "transformer"
            else None,
            "position": hp.Choice(
                "position", list(POSITIONS), parent_name="family", parent_values=["transformer"]
            )
            if family == "transformer"
            else None,
            # 1 (multi-query) and 2 divide both head counts; 2 of 2 is plain multi-head.
            "kv_heads": hp.Choice(
                "kv_heads", [1, 2], parent_name="family", parent_values=["transformer"]
            )
            if family == "transformer"
            else None,
            "dropout": hp.Float("dropout", 0.0, 0.3, step=0.1),
            "learning_rate": hp.Float("learning_rate", 3e-4, 3e-3, sampling="log"),
            "label_smoothing": hp.Choice("label_smoothing", [0.0, 0.1]),
            "max_length": args.max_length,
            "style": "luong",
        }
        return build_model(config, source_tokenizer.vocab_size, target_tokenizer.vocab_size)

    tuner, best = run_search(
        build,
        (data[0], None),
        data[1],
        algorithm=args.algorithm,
        objective="val_loss",
        max_trials=args.trials,
        max_epochs=args.epochs,
        output=args.output,
        project="translate",
    )
    if best is not None and args.bleu_trials:
        import sacrebleu

        from .translation_data import read_pairs

        pairs = read_pairs(paths["valid"])[:200]
        log(
            f"\nvalidation BLEU of the {args.bleu_trials} best trials "
            f"(beam 1, {len(pairs)} sentences):"
        )
        for trial, model in zip(
            tuner.oracle.get_best_trials(args.bleu_trials), tuner.get_best_models(args.bleu_trials)
        ):
            hypotheses = translate_texts(
                model,
                source_tokenizer,
                target_tokenizer,
                [p[0] for p in pairs],
                args.max_length,
                beam_width=1,
            )
            log(
                f"  trial {trial.trial_id}: BLEU "
                f"{sacrebleu.corpus_bleu(hypotheses, [[p[1] for p in pairs]]).score:.2f}"
            )
    return best


def export_command(args, log=print):
    """Write the trained model as the next version of a TF Serving model."""
    import numpy as np

    from keras_attention.serving.export import (
        export_archive,
        translator_archive,
        write_warmup_requests,
    )

    from .translation_data import read_pairs

    if os.path.exists(args.export_dir) and not os.path.isdir(args.export_dir):
        raise UsageError(f"--export-dir {args.export_dir} is a file; expected a folder")
    model, config, source_tokenizer, target_tokenizer = load_run(args.output)
    archive = translator_archive(
        model,
        source_tokenizer,
        target_tokenizer,
        config["max_length"],
        args.beam_width,
        num_hypotheses=getattr(args, "num_hypotheses", None),
        **decoding_options(args),
    )
    # Warm-up requests: real test sentences, for every signature.
    sentences = [pair[0] for pair in read_pairs(os.path.join(args.output, "data", "test.tsv"))[:4]]
    text = np.array(sentences or ["Ich habe keine Zeit."], dtype=object)
    ids = source_tokenizer.encode(text, config["max_length"])[0].numpy()
    warmup = [
        ("serving_default", {"text": text}),
        ("greedy", {"text": text}),
        ("attention", {"text": text[:1]}),
        ("tokens", {"token_ids": ids, "lengths": (ids > 0).sum(1).astype("int32")}),
        ("nbest", {"text": text}),
        ("constrained", {"text": text[:1], "prefix": np.array([""], dtype=object)}),
    ]  # not decoding_options: constants, and a request without inputs is an odd warm-up
    path = export_archive(
        archive,
        args.export_dir,
        args.model_name,
        before_publish=lambda staging: write_warmup_requests(staging, args.model_name, warmup),
    )
    log(
        f"exported {path} (signatures: serving_default, greedy, attention, tokens, nbest, "
        "constrained, decoding_options)"
    )
    return path


def demo(args, log=print):
    """The main job: train a ConvS2S model (`--family` for another) on the
    Ding corpus, report BLEU and samples, draw an attention heatmap,
    translate a sentence, export it."""
    log("== keras_attention demo: German -> English on the Ding dictionary's example sentences")
    started = time.perf_counter()
    settings, _ = train_settings(args)
    if finished(args.output) and not args.overwrite:
        runs.claim(args.output, settings, defaults=recorded_defaults(settings))  # refuses others
        log(f"{args.output} holds the trained demo model: evaluating it (--overwrite retrains)")
    else:
        train(args, log)
    args.samples = 5
    scores = evaluate(args, log)
    args.text = [
        "Ich habe keine Zeit.",
        "Wo ist der Bahnhof?",
        "Bei meinem Handy war der Akku leer.",
    ]
    translate_command(args, log)
    import tensorflow as tf

    args.export_dir, args.model_name = "saved_models", "translator"
    path = export_command(args, log)
    served = tf.saved_model.load(path).signatures["serving_default"](
        text=tf.constant(args.text[:1])
    )
    log(
        f"through the exported model: {args.text[0]} -> {served['translation'].numpy()[0].decode()}"
    )
    log(
        f"== done in {(time.perf_counter() - started) / 60:.1f} minutes: test BLEU "
        f"{scores['bleu']:.2f}, chrF {scores['chrf']:.2f} on {scores['sentences']} sentences"
    )


# -- command line -------------------------------------------------------------------
class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and every flag's default (said in
    the help text where "None" would not tell it, and left out for switches)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or "default:" in action.help:
            return action.help
        return super()._get_help_string(action)


def add_alpha_flag(command, default=0.6):
    """`--alpha`, beam search's length penalty, for every command that
    searches (the demo's default is larger: RESULTS.md)."""
    command.add_argument(
        "--alpha",
        type=float,
        default=default,
        help="GNMT's length penalty of beam search: hypotheses are ranked by "
        "log p / ((5 + length) / 6)^alpha (>= 0; 0: the plain sum)",
    )


def add_decoding_flags(command):
    """The decoding options of `translate` and `export` (issue 13)."""
    add_alpha_flag(command)
    command.add_argument(
        "--min-length",
        type=int,
        default=0,
        help="at least this many target pieces before the end (>= 0)",
    )
    command.add_argument(
        "--no-repeat-ngram",
        type=int,
        default=0,
        help="never repeat an n-gram of this many pieces (0: off)",
    )
    command.add_argument(
        "--repetition-penalty",
        type=float,
        default=1.0,
        help="CTRL's penalty on pieces already generated (> 0; 1: off)",
    )
    command.add_argument(
        "--coverage-penalty",
        type=float,
        default=0.0,
        help="GNMT's coverage penalty beta of beam search (>= 0; 0: off)",
    )


def add_training_flags(command):
    """`train`'s flags for validation, monitoring and averaging (issue 12)."""
    command.add_argument(
        "--valid",
        metavar="FILE",
        help="validate on this TSV file of source<TAB>target lines instead of the split",
    )
    command.add_argument(
        "--bleu-every",
        type=int,
        default=0,
        help="validation BLEU (greedy) every K epochs, logged as val_bleu (0: off)",
    )
    command.add_argument(
        "--bleu-sentences", type=int, default=200, help="validation pairs --bleu-every translates"
    )
    command.add_argument(
        "--average-last",
        type=int,
        help="keep the last N epochs' weights (checkpoints/) and save their mean as the model",
    )


def parser():
    main = argparse.ArgumentParser(
        prog="keras-attention-translate", description=__doc__, formatter_class=HelpFormatter
    )
    commands = main.add_subparsers(dest="command", required=True)

    def add(name, help_text, data=True, model=True):
        command = commands.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        command.add_argument(
            "--output",
            default=f"runs/{'translate' if name != 'demo' else 'demo'}",
            help="the run's folder (data split, vocabularies, checkpoints, model)",
        )
        if data:
            command.add_argument(
                "--corpus", help="a TSV file of source<TAB>target lines (default: Ding de-en)"
            )
            command.add_argument(
                "--reverse",
                action="store_true",
                help="swap the direction (Ding: English -> German)",
            )
            command.add_argument(
                "--limit", type=int, help="use only the first N pairs of the corpus (default: all)"
            )
            command.add_argument(
                "--vocab-size", type=int, default=8000, help="subword vocabulary size target"
            )
            command.add_argument(
                "--tokenizer",
                choices=list(TOKENIZERS),
                default="sentencepiece",
                help="subword vocabulary: SentencePiece (decodes to the exact input text) "
                "or WordPiece (loses where spaces were; the only one before this flag)",
            )
            command.add_argument("--batch-size", type=int, default=64, help="pairs per batch")
            command.add_argument(
                "--batch-tokens",
                type=int,
                help="size batches by this many subword pieces per side instead of --batch-size "
                "(batches are bucketed by length either way)",
            )
            command.add_argument(
                "--dictionary",
                type=float,
                default=0.0,
                help="Ding only: per epoch, add this many of the dictionary's word and phrase "
                "entries per sentence pair as training pairs (a new random draw each epoch; "
                "0: off)",
            )
            command.add_argument(
                "--max-length",
                type=int,
                default=32,
                help="longest sentence in subword pieces (longer pairs are left out)",
            )
            command.add_argument("--seed", type=int, default=0, help="random seed")
            command.add_argument(
                "--verbose",
                type=int,
                choices=[0, 1, 2],
                help="Keras fit verbosity (default: a progress bar on a terminal, else a line "
                "per epoch)",
            )
            command.add_argument(
                "--overwrite",
                action="store_true",
                help="delete what an earlier run wrote in --output and start again",
            )
        if model:
            command.add_argument(
                "--family", choices=FAMILIES, default="transformer", help="the model family"
            )
            command.add_argument(
                "--attention",
                choices=ATTENTION,
                default=None,
                help="the recurrent model's attention ('none': the bottleneck baseline; "
                "default: general)",
            )
            command.add_argument(
                "--style",
                choices=["luong", "bahdanau"],
                default=DEFAULTS["style"],
                help="where the recurrent decoder applies attention",
            )
            command.add_argument(
                "--embed-dim",
                type=int,
                default=argparse.SUPPRESS,
                help=f"embedding width (default: {DEFAULTS['embed_dim']}; rnn and convs2s "
                "only: the transformer's is --units)",
            )
            command.add_argument(
                "--units", type=int, default=DEFAULTS["units"], help="hidden width"
            )
            command.add_argument(
                "--layers", type=int, default=DEFAULTS["layers"], help="layers per stack"
            )
            command.add_argument(
                "--heads",
                type=int,
                default=argparse.SUPPRESS,
                help=f"attention heads (default: {DEFAULTS['heads']}; transformer only)",
            )
            command.add_argument(
                "--position",
                choices=POSITIONS,
                default=argparse.SUPPRESS,
                help=f"how the transformer places tokens: added to the embeddings (sinusoidal, "
                f"learned) or in every self-attention (rope, alibi, relative) (default: "
                f"{DEFAULTS['position']}; transformer only)",
            )
            command.add_argument(
                "--kv-heads",
                type=int,
                default=argparse.SUPPRESS,
                help="key/value heads, dividing --heads: grouped-query attention (1: multi-query; "
                "default: one per head; transformer only)",
            )
            command.add_argument(
                "--window",
                type=int,
                default=argparse.SUPPRESS,
                help="sliding window w: each self-attention sees positions at most w away "
                "(default: all; transformer only)",
            )
            command.add_argument(
                "--dropout", type=float, default=DEFAULTS["dropout"], help="in [0, 1)"
            )
            command.add_argument(
                "--learning-rate",
                type=float,
                default=DEFAULTS["learning_rate"],
                help="Adam's learning rate (> 0)",
            )
            command.add_argument(
                "--label-smoothing",
                type=float,
                default=DEFAULTS["label_smoothing"],
                help="in [0, 1)",
            )
            command.add_argument("--epochs", type=int, default=10, help="epochs to train")
            command.add_argument(
                "--warmup",
                type=int,
                default=DEFAULTS["warmup"],
                help="learning-rate warm-up steps, then --decay "
                "(--learning-rate is the peak; 0 with rsqrt: a constant rate)",
            )
            command.add_argument(
                "--decay",
                choices=DECAYS,
                default=DEFAULTS["decay"],
                help="the rate after the warm-up: as 1/sqrt(step), or along a cosine "
                "to 0 at the last step of --epochs",
            )
            command.add_argument(
                "--tie-embeddings",
                action="store_true",
                default=argparse.SUPPRESS,
                help="the output projection is the target embedding table (transformer only)",
            )
            command.add_argument(
                "--patience",
                type=int,
                help="stop after this many epochs without a better validation loss "
                "(the best epoch's weights are kept either way)",
            )
            command.add_argument("--hyperparameters", help="best_hyperparameters.json from `tune`")
            command.add_argument(
                "--mixed-precision",
                choices=["bfloat16", "float16"],
                help="compute in this precision (variables stay float32)",
            )
            command.add_argument("--jit", action="store_true", help="compile training with XLA")
        return command

    add_training_flags(add("train", "train a model"))
    for name, help_text in (
        ("evaluate", "BLEU/chrF on the test split, samples, attention heatmaps"),
        ("translate", "translate sentences with a trained model"),
    ):
        command = add(name, help_text, data=False, model=False)
        command.add_argument("--beam-width", type=int, default=4, help="beam search width")
        if name == "evaluate":
            add_alpha_flag(command)
            command.add_argument(
                "--samples", type=int, default=5, help="sample translations and heatmaps shown"
            )
            command.add_argument(
                "--limit-test", type=int, help="evaluate only the first N test sentences"
            )
            command.add_argument(
                "--test",
                metavar="FILE",
                help="score this TSV file of source<TAB>target lines instead of the test split",
            )
        else:
            add_decoding_flags(command)
            command.add_argument(
                "--nbest",
                "--num-hypotheses",
                dest="nbest",
                type=int,
                help="print the N best hypotheses of each sentence instead: N lines per "
                "sentence, sentences in order, best first, each `score<TAB>translation` "
                "(score: log-probability over the length penalty, plus the coverage "
                "penalty; an unfilled slot is -1000000000.0 and empty); N <= --beam-width",
            )
            command.add_argument(
                "--input",
                metavar="FILE",
                help="translate the lines of FILE (-: standard input, also read when it is "
                "not a terminal and no text is given): a line out for each line in",
            )
            command.add_argument(
                "--output-file",
                metavar="FILE",
                help="write the translations there, a line each, atomically (default: stdout)",
            )
            command.add_argument("text", nargs="*", help="the sentences to translate")
    average = add(
        "average", "replace the run's model by the mean of checkpoints", data=False, model=False
    )
    checkpoints = average.add_mutually_exclusive_group(required=True)
    checkpoints.add_argument(
        "--checkpoints", nargs="+", metavar="FILE", help=".weights.h5 files of the run's model"
    )
    checkpoints.add_argument("--last", type=int, help="the last N epochs train --average-last kept")
    average.add_argument("--valid", metavar="FILE", help="report validation loss on this TSV file")
    export = add(
        "export",
        "export the trained model as a SavedModel for TensorFlow Serving",
        data=False,
        model=False,
    )
    export.add_argument(
        "--export-dir", default="saved_models", help="base directory: <dir>/<name>/<version>/"
    )
    export.add_argument("--model-name", default="translator", help="the served model's name")
    export.add_argument(
        "--beam-width", type=int, default=4, help="beam width of serving_default and nbest"
    )
    export.add_argument(
        "--num-hypotheses",
        type=int,
        help="hypotheses the nbest signature returns (default: --beam-width; at most that)",
    )
    add_decoding_flags(export)
    tune_command = add(
        "tune", "KerasTuner search (resumable; chief/worker distributed)", model=False
    )
    tune_command.add_argument(
        "--algorithm",
        choices=["hyperband", "bayesian", "random"],
        default="hyperband",
        help="the search algorithm",
    )
    tune_command.add_argument("--trials", type=int, default=10, help="trials for bayesian/random")
    tune_command.add_argument("--epochs", type=int, default=4, help="most epochs a trial trains")
    tune_command.add_argument(
        "--families", nargs="+", choices=FAMILIES, default=list(FAMILIES), help="families searched"
    )
    tune_command.add_argument(
        "--bleu-trials", type=int, default=3, help="report validation BLEU of the N best"
    )
    demo_command = add("demo", "train, evaluate and translate: the main job of `make demo`")
    demo_command.add_argument("--beam-width", type=int, default=4, help="beam search width")
    # Chosen on the validation split (RESULTS.md): 0.6 left translations short.
    add_alpha_flag(demo_command, default=1.2)
    demo_command.add_argument(
        "--limit-test", type=int, help="evaluate only the first N test sentences (default: all)"
    )
    # Sized for ten minutes on a quiet 2-core CPU for the whole job;
    # `train` defaults are larger. What each setting did to BLEU:
    # RESULTS.md, "The demo's settings".
    demo_command.set_defaults(
        family="convs2s",
        average_last=3,
        epochs=14,
        units=128,
        vocab_size=4000,
        batch_tokens=1536,
        dictionary=0.5,
        warmup=400,
        learning_rate=3e-3,
    )
    return main


def check(args):
    """The command's numeric flags: sizes >= 1, counts >= 0 (the model's
    flags are checked with the hyperparameters, in `model_config`)."""
    for name in (
        "epochs",
        "batch_size",
        "max_length",
        "beam_width",
        "trials",
        "limit",
        "vocab_size",
        "limit_test",
        "batch_tokens",
        "patience",
        "bleu_sentences",
        "last",
    ):
        value = getattr(args, name, None)
        if value is not None:
            check_number(name, value, integer=True, low=1)
    if getattr(args, "average_last", None) is not None:  # 1 would average one epoch
        check_number("average_last", args.average_last, integer=True, low=2)
    for name in ("samples", "bleu_trials", "min_length", "no_repeat_ngram", "bleu_every"):
        value = getattr(args, name, None)
        if value is not None:
            check_number(name, value, integer=True, low=0)
    if getattr(args, "repetition_penalty", None) is not None:
        check_number("repetition_penalty", args.repetition_penalty, low=0, low_included=False)
    if getattr(args, "dictionary", None) is not None:
        check_number("dictionary", args.dictionary, low=0)
    if getattr(args, "coverage_penalty", None) is not None:
        check_number("coverage_penalty", args.coverage_penalty, low=0)
    if getattr(args, "alpha", None) is not None:
        check_number("alpha", args.alpha, low=0)
    for flag, name in (("nbest", "nbest"), ("num-hypotheses", "num_hypotheses")):
        value = getattr(args, name, None)
        if value is not None:
            check_number(name, value, integer=True, low=1)
            if value > args.beam_width:
                raise UsageError(
                    f"--{flag} must be at most --beam-width {args.beam_width}; got {value}"
                )
    if getattr(args, "family", None) is not None:
        model_config(args)  # the flags alone, before any work (--hyperparameters may change them)


INTERRUPTED = {
    "export": "interrupted: nothing was kept (an export publishes only complete versions); "
    "run the export again",
    "evaluate": "interrupted: run the command again",
    "translate": "interrupted",
}


def main(argv=None):
    """The command line: a user mistake, a bad corpus, a file that cannot be
    read or written, or a `ValueError` from the library is one `error:` line
    and exit status 2, never a traceback."""
    from .translation_data import CorpusError

    args = parser().parse_args(argv)
    try:
        check(args)
        command = {
            "train": train,
            "evaluate": evaluate,
            "translate": translate_command,
            "tune": tune,
            "demo": demo,
            "export": export_command,
            "average": average_command,
        }
        command[args.command](args)
    except (UsageError, CorpusError, ValueError, OSError) as error:
        print(
            f"error: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            file=sys.stderr,
        )
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(
            INTERRUPTED.get(
                args.command,
                "interrupted: re-run the same command to resume from the last completed epoch",
            )
        )


if __name__ == "__main__":
    main()
