"""Training a translation model (built by `model.py` from its settings,
watched by the callbacks of `callbacks.py`): resuming, the distribution
strategy, and `train`, which writes `model.keras` and `config.json` into
the run's folder.

Functions take a `TranslationConfig` (`config.py`) or the model's settings
dict (`model_settings`), never the command line's arguments.
"""

import math
import os
import shutil
import sys
import time

import keras

from .. import run_files, run_folders, runs
from ..runs import UsageError
from ..tuning import load_hyperparameters
from .averaging import average_last_epochs
from .budget import TimeBudget, planned_schedule, spent
from .callbacks import best_weights, training_callbacks
from .cluster import WAIT_ENVIRONMENT, cluster_task, given, worker_wait_seconds
from .config import model_settings, recorded_defaults, upgrade
from .corpus import check_file, check_text_file
from .data import graph_tokenizers, load_tokenizers, numbers_to_protect, vocabulary_paths
from .distillation import adopt_teacher_data, check_teachers, distilled_split
from .inputs import datasets
from .model import build_model
from .replicas import choose_strategy
from .settings import MAX_EPOCHS
from .splits import SPLITS, prepare
from .steps import fit_streams
from .text_io import validation_file
from .trained_run import decoding_settings, finished, greedy, translate_texts


def fit_verbosity(verbose):
    """Keras's progress bar when the output is a terminal (`verbose` None),
    one line per epoch otherwise; or the verbosity asked for."""
    if verbose is not None:
        return verbose
    return 1 if sys.stdout.isatty() else 2


def is_chief():
    """True on a single machine, and on the chief of a TF_CONFIG cluster (the
    "chief" task, or worker 0 when the cluster has no chief); `UsageError`
    for a TF_CONFIG that makes no working cluster (`cluster.cluster_task`)."""
    task = cluster_task()
    return task is None or task.is_chief


def task_index():
    """This process's index in its TF_CONFIG cluster's job (0 without one)."""
    task = cluster_task()
    return 0 if task is None else task.index


def prepared_run(config, settings, chief, log, refuse_finished=False):
    """`(paths, source_tokenizer, target_tokenizer)` of the run in
    `config.output`. The chief claims the run (`run_folders.claim`: other settings
    are refused) and prepares its data split and vocabularies; every other
    process waits until they are there and checks that it has the same
    settings, so that no two processes write them at once."""
    if chief:
        # refuses other settings
        if run_folders.claim(
            config.output,
            settings,
            config.overwrite,
            recorded_defaults(settings),
            upgrade,
            command="tune" if config.command == "tune" else "train",  # demo: a train run
        ):
            log(f"--overwrite: deleted the earlier run in {config.output}")
        if refuse_finished and finished(config.output):
            raise UsageError(
                f"--output {config.output} already holds a trained model: evaluate or translate "
                "with it, pass --overwrite to delete it and train again, or choose another --output"
            )
        if config.distill_from:  # the teachers' split and vocabularies
            vocabularies = vocabulary_paths(config.output, config.tokenizer)
            adopt_teacher_data(config, [os.path.basename(path) for path in vocabularies])
        if not os.path.exists(os.path.join(config.output, "data", "meta.json")):
            log("reading the corpus and splitting it into train/valid/test ...")
        paths = prepare(
            config.output,
            config.corpus,
            config.reverse,
            config.limit,
            bool(config.dictionary),
            config.alternatives,
            log=log,
        )
        tokenizers = load_tokenizers(
            config.output,
            paths,
            config.vocab_size,
            log,
            config.tokenizer,
            shared=bool(config.shared_vocabulary),
            sample=config.vocab_sample,
        )
        if config.distill_from:
            paths = {**paths, "train": distilled_split(config, paths, log)}
        return (paths, *tokenizers)
    paths = {split: os.path.join(config.output, "data", f"{split}.tsv") for split in SPLITS}
    if config.dictionary:
        paths["dictionary"] = os.path.join(config.output, "data", "dictionary.tsv")
    vocabularies = vocabulary_paths(config.output, config.tokenizer)
    log(f"waiting for the chief to prepare the data in {config.output}")
    run_folders.wait_for_run(
        config.output,
        settings,
        [*paths.values(), *vocabularies],
        worker_wait_seconds(),
        defaults=recorded_defaults(settings),
        upgrade=upgrade,
        longer=f"{WAIT_ENVIRONMENT}=SECONDS waits longer",
    )
    return (paths, *load_tokenizers(config.output))


def train_settings(config):
    """The run's settings (`run.json`: data and model) and the model's
    settings, `--hyperparameters` applied."""
    try:
        hyperparameters = load_hyperparameters(config.hyperparameters)
    except ValueError as error:
        raise UsageError(str(error)) from error
    spec = model_settings(config, hyperparameters)
    # the preset is recorded for what the run says of itself; its values are compared
    return {**config.data_settings(), **spec, "preset": config.preset}, spec


def check_inputs(config):
    """`UsageError` for what `train` or `tune` would refuse only after
    writing something: a corpus or `--valid` file that is missing or a
    directory or of a format not read (`corpus.check_text_file`),
    `--dictionary` or `--alternatives` with `--corpus`, a
    TF_CONFIG or KERAS_ATTENTION_WORKER_WAIT that makes no working cluster
    (`cluster.py`), an `--output` that is a file."""
    for flag, path in (("--corpus", config.corpus), ("--valid", config.valid)):
        if path:
            check_file(path, flag, UsageError)
            check_text_file(path, flag, UsageError)  # its format, before --overwrite deletes
    if config.dictionary and config.corpus:
        raise UsageError("the dictionary entries are the Ding corpus's: leave out --corpus")
    if config.alternatives and config.corpus:
        raise UsageError("--alternatives are the Ding corpus's: leave out --corpus")
    if config.time_budget and given():
        raise UsageError(
            "--time-budget trains in one process: the workers of a TF_CONFIG cluster could "
            "each read the clock differently and stop at different steps; give --epochs instead"
        )
    if config.subword_sampling and not graph_tokenizers():
        raise UsageError(
            f"--subword-sampling {config.subword_sampling} draws segmentations in the "
            "TensorFlow Text graph: run with Keras on TensorFlow (tensorflow and "
            "tensorflow-text installed), or leave it out"
        )
    if given() and keras.config.backend() != "tensorflow":
        raise UsageError(
            f"TF_CONFIG makes this process a worker of a TensorFlow cluster, and Keras runs on "
            f"{keras.config.backend()}: unset TF_CONFIG (one process trains on every local "
            "device), or set KERAS_BACKEND=tensorflow"
        )
    if cluster_task() is not None:  # a cluster that cannot work, refused before any wait
        worker_wait_seconds()
    if os.path.exists(config.output) and not os.path.isdir(config.output):
        raise UsageError(f"--output {config.output} is a file; expected a folder for the run")
    runs.check_output_folder("output", config.output)
    if os.path.exists(os.path.join(config.output, "model.bin")) and not os.path.exists(
        os.path.join(config.output, run_folders.RUN_FILE)
    ):  # its config.json and .spm files have a run's names: --overwrite would delete them
        raise UsageError(
            f"--output {config.output} holds a CTranslate2 model (model.bin), not a run: "
            "choose another --output"
        )
    if config.distill_from:
        check_teachers(config)


def abandon(output, existed, before=()):
    """Remove what a new run that never started training wrote into
    `output` (its `RUN_ENTRIES` and lock, less the names in `before`, what
    the folder held before the command: those are not the run's to
    delete), and the folder itself when it did not exist before and is now
    empty: a refused `train` leaves no run that its corrected command would
    be refused by."""
    run_folders.delete_run(output, keep=before)
    lock = os.path.join(output, run_folders.LOCK_FILE)
    if os.path.exists(lock):
        os.remove(lock)
    if not existed:
        try:
            os.rmdir(output)
        except OSError:  # something else is there now: keep it
            pass


def train(config, log=print):
    """Train into `config.output`: every setting and input file is checked
    first, then the chief locks the run folder (`run_folders.locked`: another
    `train` into it is refused, naming the process), claims the run
    (`run.json`) and prepares the data and vocabularies, other workers wait
    for them; resume from the backup of an interrupted run; write
    `model.keras` and `config.json` atomically, then delete the backup. A
    new run refused before its training starts leaves nothing behind
    (`abandon`)."""
    settings, spec = train_settings(config)
    check_inputs(config)
    # First: collective ops must be set up before any other TF op, and a
    # cluster's wait for its other tasks may end the process (`bounded_wait`)
    # before anything is written.
    strategy = choose_strategy()
    if not is_chief():
        return _train(config, log, settings, spec, strategy)
    output = config.output
    existed = os.path.isdir(output)
    # What abandoning a refused new run must keep: all that was there, less
    # an old run that --overwrite replaces.
    before = set(os.listdir(output)) if existed else set()
    if config.overwrite and run_folders.RUN_FILE in before:
        before = set()
    new = config.overwrite or not os.path.exists(os.path.join(output, run_folders.RUN_FILE))
    started = []
    with run_folders.locked(output, "train"):
        try:
            return _train(config, log, settings, spec, strategy, lambda: started.append(True))
        except BaseException:
            if new and not started:
                abandon(output, existed, before)
            raise


def _train(config, log, settings, spec, strategy, starting=None):
    """`train` once the run is checked (and locked on the chief), with
    `strategy` (`choose_strategy`); `starting()` is called just before the
    first epoch."""
    from keras_attention.training.distribute import adapt_for_distribution

    spec["jit"] = config.jit
    spec["time_budget"] = config.time_budget
    several = strategy.num_replicas_in_sync > 1 and keras.config.backend() == "tensorflow"
    if spec["update_freq"] > 1 and several:
        # Keras 3's accumulation updates inside a cond, and tf.distribute
        # cannot synchronise replicas there ("merge_call called while
        # defining a new graph")
        raise UsageError(
            f"--update-freq {spec['update_freq']} trains on one device: Keras's gradient "
            f"accumulation cannot synchronise the {strategy.num_replicas_in_sync} replicas; "
            "larger batches across the replicas (--batch-tokens) give the larger batch, or "
            "train on one GPU (CUDA_VISIBLE_DEVICES=0)"
        )
    if config.mixed_precision:
        keras.mixed_precision.set_global_policy(f"mixed_{config.mixed_precision}")
    keras.utils.set_random_seed(config.seed)
    paths, tokenizers, work, numbers = _inputs(config, settings, log)
    backup_folder = os.path.join(work, "backup")
    position = _epochs_done(config, backup_folder, log)
    replicas = strategy.num_replicas_in_sync
    streams, valid_data = _datasets(
        config, paths, tokenizers, numbers, spec, log, position, replicas
    )
    batches = streams[-1].steps  # an epoch's
    _check_update_freq(spec["update_freq"], batches, config)
    spec["total_steps"] = config.epochs * batches // spec["update_freq"]  # --decay cosine's end
    with strategy.scope():
        model = build_model(spec, tokenizers[0].vocab_size, tokenizers[1].vocab_size)
        model.optimizer.build(model.trainable_variables)
        adapt_for_distribution(model)  # several replicas: global token counts; multi-worker fixes
    backup = runs.resilient_backup(
        backup_folder, log, config.save_every, position, moves_fit=False, steps_per_epoch=batches
    )
    backup.set_model(model)
    if backup.restore() != position:  # the latest backup did not load: the one before's
        position = backup.position
        streams, _ = _datasets(config, paths, tokenizers, numbers, spec, log, position, replicas)
    best = best_weights(os.path.join(work, "best.weights.h5"), log)

    def translate(texts):
        return translate_texts(
            model, *tokenizers, texts, spec["max_length"], greedy(), numbers=numbers
        )

    steps = (valid_data, batches, position)
    chief_log = log if is_chief() else None
    callbacks = training_callbacks(
        config, paths["valid"], translate, work, backup, best, chief_log, steps
    )
    budget = _budget(config, model, work, batches, position, spec, backup, log, valid_data)
    if budget is not None:  # last: an epoch's time includes the other callbacks'
        callbacks.append(budget)
    log(_training_line(config, spec, strategy))
    started = time.perf_counter()
    if starting is not None:
        starting()  # from here on the run keeps what it wrote (a backup to resume from)
    with runs.ctrl_c_between_steps() as ctrl_c:
        history = fit_streams(
            model,
            streams,
            # A resumed run whose budget is spent trains no more (the backup's epochs).
            position[0] if budget is not None and budget.exhausted() else config.epochs,
            validation_data=valid_data,
            callbacks=[*callbacks, ctrl_c],
            verbose=fit_verbosity(config.verbose),
        )
    seconds = time.perf_counter() - started
    _check_finite(history, config, spec)
    _report_unapplied(model, spec["update_freq"], log)
    val_loss, averaged = _final_weights(config, model, history, best, valid_data, work, budget, log)
    run_files.write_atomically(os.path.join(work, "final.weights.h5"), model.save_weights)
    if is_chief():
        run_files.write_atomically(os.path.join(config.output, "model.keras"), model.save)
        record = _run_record(config, spec, numbers, tokenizers, seconds, val_loss, averaged, budget)
        run_files.write_json_atomically(os.path.join(config.output, "config.json"), record)
    # Only now that model.keras and config.json are in place.
    shutil.rmtree(backup_folder, ignore_errors=True)
    log(
        f"trained in {seconds:.0f}s{_budget_spent(budget)}, validation loss {val_loss:.3f} -> "
        f"{os.path.join(config.output, 'model.keras')}"
    )
    return model


def _budget_spent(budget):
    """What the time budget's run trained, for the last line: its share of
    the budget, its epochs and steps, what ended it."""
    if budget is None:
        return ""
    record = budget.record(budget.seconds / 60)
    return (
        f" ({record['seconds'] / 60:.1f} of the budget's {budget.seconds / 60:g} minutes: "
        f"{record['steps'] / record['epoch_steps']:.1f} epochs, {record['steps']} steps; "
        f"ended by {record['ended_by']})"
    )


def _inputs(config, settings, log):
    """`(paths, (source, target) tokenizers, work folder, numbers)` of a
    run: its split and vocabularies (`prepared_run`), the user's `--valid`
    file instead of the split's, and its number protection
    (`numbers_to_protect`)."""
    paths, source_tokenizer, target_tokenizer = prepared_run(
        config, settings, is_chief(), log, refuse_finished=True
    )
    # Workers other than the chief keep their checkpoints apart, so that no
    # two processes write one file.
    work = config.output if is_chief() else os.path.join(config.output, f"worker-{task_index()}")
    if config.valid:  # the user's validation file instead of the split's
        paths = {**paths, "valid": validation_file(config.output, config.valid, work, log)}
    numbers = numbers_to_protect(config, paths["train"], log)
    return paths, (source_tokenizer, target_tokenizer), work, numbers


def _datasets(config, paths, tokenizers, numbers, spec, log, position, replicas=1):
    """`(training streams, validation data)`: the training batches from
    `position` (`(epoch, steps)`, a resumed run's backup) to `--epochs`,
    each epoch's order a function of `--seed` and the epoch
    (`pipeline.EpochStream`s), and the validation split's batches, for
    `replicas` (`inputs.datasets`)."""
    first, skip = position
    return datasets(
        paths,
        *tokenizers,
        spec["max_length"],
        config.batch_size,
        config.seed,
        log,
        batch_tokens=config.batch_tokens,
        dictionary=config.dictionary,
        numbers=numbers,
        word_dropout=spec["word_dropout"],
        subword_sampling=spec["subword_sampling"],
        # at least one epoch: its length is the run's steps per epoch
        epochs=(first, max(config.epochs, first + 1), skip),
        replicas=replicas,
    )


def _budget(config, model, work, batches, position, spec, backup, log, valid_data):
    """`--time-budget`'s callback (None without one), resumed with what the
    backup's epochs and steps spent (`budget.spent`); the `backup` tells it
    of each backup written mid-epoch."""
    if not config.time_budget:
        return None
    if hasattr(valid_data, "cardinality"):  # tf.data: unknown (-2) or infinite (-1), no guess
        validation_steps = max(int(valid_data.cardinality()), 0)
    else:  # a PyDataset
        validation_steps = valid_data.num_batches
    budget = TimeBudget(
        config.time_budget * 60,
        batches,
        config.epochs,
        work,
        spent(work, *position, log=log if is_chief() else None),
        planned_schedule(model),
        log if is_chief() else None,
        spec["update_freq"],
        validation_steps=validation_steps,
    )
    backup.saved.append(budget.backed_up)
    return budget


def _epochs_done(config, backup, log):
    """`(epoch, steps)` of an interrupted run that its `backup` holds: the
    epochs done and the steps done of the next (`runs.backup_position`;
    said when resuming); `UsageError` when the epochs are more than
    `--epochs`."""
    done, steps = runs.backup_position(backup)
    if done > config.epochs:
        raise UsageError(
            f"{done} epochs of the run in {config.output} are done, more than --epochs "
            f"{config.epochs}: pass --epochs {done} or more to continue it, or --overwrite "
            "to start again"
        )
    if steps:
        log(
            f"resuming an interrupted run at step {steps} of its epoch {done + 1} of "
            f"{config.epochs} ({backup}); the epoch's batches before it are not trained again"
        )
    elif done:
        log(f"resuming an interrupted run after its epoch {done} of {config.epochs} ({backup})")
    return done, steps


def _training_line(config, spec, strategy):
    """What is trained, for how long, on how many replicas."""
    return (
        f"training {spec['family']}"
        + (f" with {spec['attention']} attention" if spec["family"] == "rnn" else "")
        + (
            f" for {config.time_budget:g} minutes"
            + (f" (at most {config.epochs} epochs)" if config.epochs < MAX_EPOCHS else "")
            if config.time_budget
            else f" for {config.epochs} epochs"
        )
        + f" on {strategy.num_replicas_in_sync} replica(s)"
    )


def _check_update_freq(update_freq, batches, config):
    """`UsageError` when `--update-freq` is more than an epoch's `batches`
    (a resumed run's full epoch too): an epoch, and a run of fewer
    epochs than K / batches, would end without one update, its model the
    untrained one. Raised before training starts, so a new run leaves
    nothing behind (`abandon`)."""
    if update_freq > batches:
        raise UsageError(
            f"--update-freq {update_freq} is more than the {batches} batches of an epoch: "
            "an epoch would end without updating the weights; give --update-freq "
            f"{batches} or less, or smaller batches (--batch-size {config.batch_size}"
            + (f", --batch-tokens {config.batch_tokens}" if config.batch_tokens else "")
            + ")"
        )


def _report_unapplied(model, update_freq, log):
    """Say when training ended inside an accumulation: the last batches,
    fewer than `update_freq`, had their gradients accumulated and made no
    update (the last epoch's end, or where the time budget stopped)."""
    if update_freq <= 1:
        return
    # Keras's count of the batches (its `iterations` counts the updates under
    # accumulation); a resumed run's backup restored the batches before it
    left = int(keras.ops.convert_to_numpy(model.optimizer._iterations)) % update_freq
    if left:
        log(
            f"--update-freq {update_freq}: the last {left} batches, fewer than {update_freq}, "
            "made no update (training ended before their accumulation was complete)"
        )


def _check_finite(history, config, spec):
    """`UsageError` when a loss or metric of `history` is not finite."""
    if not all(math.isfinite(value) for values in history.values() for value in values):
        raise UsageError(
            f"training diverged (loss {history['loss'][-1]}) and stopped; nothing was saved "
            f"and any earlier model in {config.output} is kept: lower --learning-rate "
            f"(now {spec['learning_rate']})"
        )


def _final_weights(config, model, history, best, valid_data, work, budget, log):
    """Give `model` its final weights: the `best` epoch's, or with
    `--average-last` the mean of the last epochs (`average_last_epochs`).
    Returns `(validation loss, the averaging's record)`."""
    if best.restore(model):  # the best epoch's weights, not the last's
        val_loss = best.val_loss
    elif history.get("val_loss"):
        val_loss = float(history["val_loss"][-1])
    else:  # every epoch was done before (a kill during the final save): the backup's model
        result = model.evaluate(valid_data, verbose=0)
        val_loss = float(result[0] if isinstance(result, list) else result)
    if not config.average_last:
        return val_loss, {}
    count = config.average_last  # the mean of the last epochs becomes the model
    if budget is not None:  # the clock chose the epochs: their second half at most
        count = budget.epochs_to_average(count)
        if config.save_every:  # the backups every --save-every steps: their second half
            count = min(config.average_last, budget.steps // config.save_every // 2)
        if count < config.average_last:
            fit = f"{budget.steps} steps" if config.save_every else ""
            log(
                f"--average-last {config.average_last}: {fit or len(budget.epoch_seconds)} "
                f"{'' if fit else 'epochs '}fit the time budget, so the last "
                f"{count} (at most half of them) are averaged"
            )
    # the last epoch's loss, beside the average's: not the best epoch's
    last_loss = best.last_val_loss if best.last_val_loss is not None else val_loss
    averaged = average_last_epochs(
        model,
        work,
        count,
        valid_data,
        last_loss,
        log,
        steps=bool(config.save_every),
        steps_per_epoch=budget.steps_per_epoch if budget is not None else None,
    )
    return averaged.pop("val_loss", val_loss), averaged


def _run_record(config, spec, numbers, tokenizers, seconds, val_loss, averaged, budget):
    """The trained run's `config.json`: the model's settings, the backend
    and Keras that trained it, and what training did (vocabulary sizes,
    epochs, batching, time, loss, averaging, time budget) and decoded with."""
    return {
        **spec,
        "preset": config.preset,
        # where the weights trained: a run trained on JAX exports on TensorFlow
        "backend": keras.config.backend(),
        "keras_version": keras.__version__,
        "protect_numbers": numbers is not None,
        "source_vocab": tokenizers[0].vocab_size,
        "target_vocab": tokenizers[1].vocab_size,
        "epochs": config.epochs,
        # how the validation split was batched, so that `average`
        # measures its loss as training did (`averaging.average_run`)
        "batch_size": config.batch_size,
        "batch_tokens": config.batch_tokens,
        "train_seconds": round(seconds, 1),
        "val_loss": round(val_loss, 4),
        **({"averaged": averaged} if averaged else {}),
        **({"time_budget": budget.record(config.time_budget)} if budget else {}),
        # what evaluate, translate and export decode with unless told otherwise
        "decoding": decoding_settings(config),
    }
