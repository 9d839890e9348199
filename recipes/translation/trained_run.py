"""Reading a trained run back: its model (`load_run`), the model to decode
with, alone or as an ensemble of runs (`load_decoder`), the checks that runs
decode as one (`check_one_vocabulary`, `check_same_numbers`) and that a
run's vocabularies are its model's (`check_vocabularies`), and whether a
run has finished training (`finished`).

Below training, distillation, the commands and the members (and the
benchmarks that read runs): it imports only the settings (`config.py`),
the vocabulary files (`data.py`) and `runs.py`. Keras is imported when a
model is loaded, not with the module: `finished` and the checks serve
`train --members`, whose processes set their share of the CPU before
TensorFlow starts.
"""

import filecmp
import os

from .. import runs
from .config import FAMILIES, UsageError, upgrade
from .data import load_tokenizers, vocabulary_paths

# What to do about a damaged config.json or model.keras of a trained run.
REMEDY = "restore it, or train again with --overwrite"


def load_run(output, decoding=None, compile=True):
    """The trained model, its config and tokenizers from an --output folder.
    Every file is checked first (a damaged one is a `ValueError` naming
    it), the vocabularies' sizes against the model's (`check_vocabularies`)
    and, given `decoding` (a `TranslationConfig`), its `--min-length`
    against the run's longest translation. `compile=False` for a model that
    only decodes (no loss, metrics or optimizer state: faster to load, and
    no optimizer warning)."""
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
    recorded = None if decoding is None or decoding.output != output else decoding.recorded
    config = read_run_config(output) if recorded is None else recorded
    min_length = None if decoding is None else decoding.min_length  # None: the run's own
    if min_length is not None and min_length > config["max_length"] + 1:
        raise UsageError(
            f"--min-length {decoding.min_length} is beyond the run's longest translation, "
            f"{config['max_length'] + 1} pieces (its --max-length {config['max_length']} "
            "+ 1): no translation could end; choose a smaller --min-length"
        )
    source, target = load_tokenizers(output)
    check_vocabularies(output, (source, target), config, "config.json")
    try:
        model = keras.saving.load_model(model_path, compile=compile)
    except runs.DAMAGED_FILE_ERRORS as error:
        raise runs.unloadable_model(model_path, error, REMEDY) from None
    sizes = {f"{side}_vocab": getattr(model, f"{side}_vocab_size", None) for side in SIDES}
    check_vocabularies(output, (source, target), sizes, "model.keras")
    return model, config, source, target


def read_run_config(output):
    """The run's `config.json`, checked (`CONFIG_FIELDS`, a `max_length` >= 1,
    a known family) and `upgrade`d: the one read of it a command makes
    (`recorded_config`, else `load_run`)."""
    config_path = os.path.join(output, "config.json")
    config = upgrade(
        runs.read_json(
            config_path, "the trained model's settings", CONFIG_FIELDS, ("max_length",), REMEDY
        )
    )
    if config["max_length"] < 1 or config.get("family", "rnn") not in FAMILIES:
        raise UsageError(
            f"{config_path} (the trained model's settings) holds max_length "
            f"{config['max_length']!r}, family {config.get('family')!r}: it is damaged"
        )
    return config


def recorded_config(output):
    """The `config.json` of the run in `output` (`read_run_config`), which the
    command line reads before any work to settle the decoding settings
    against it (`config.run_decoding`), so that `load_run` does not read it
    again; None for no folder, or a folder without config.json (`load_run`
    says what is missing)."""
    if not output or not os.path.exists(os.path.join(output, "config.json")):
        return None
    return read_run_config(output)


def load_decoder(config):
    """`load_run(config.output)` for decoding, and with `config.ensemble`
    (`--ensemble RUN ...`) an `Ensemble` of that run's model and theirs:
    every run must hold `--output`'s vocabulary files (byte for byte: one
    vocabulary, one segmentation) and protect numbers as it does. The
    ensemble's longest translation is its members' shortest `max_length`."""
    from keras_attention.seq2seq import Ensemble  # Keras: loaded when a run is

    model, run_config, source, target = load_run(config.output, config, compile=False)
    if not config.ensemble:
        return model, run_config, source, target
    members, lengths = [model], [run_config["max_length"]]
    for other in config.ensemble:
        if os.path.realpath(other) == os.path.realpath(config.output):
            raise UsageError(
                f"--ensemble {other} is --output itself: name the other runs "
                "(the --output run is always a member)"
            )
        check_one_vocabulary(config.output, other, "--ensemble", "--output's")
        member, member_config, _, _ = load_run(other, config, compile=False)
        check_same_numbers(run_config, member_config, other, "--ensemble", "--output's")
        members.append(member)
        lengths.append(member_config["max_length"])
    run_config = {**run_config, "max_length": min(lengths), "ensemble": list(config.ensemble)}
    return Ensemble(members), run_config, source, target


def check_one_vocabulary(first, other, flag, whose):
    """`UsageError` unless run `other` (named with `flag`) holds the
    vocabulary files of run `first` (`whose`: how the message names it),
    byte for byte: runs that decode as one ensemble share one vocabulary,
    one segmentation (`--ensemble`, `--distill-from`)."""
    for mine, theirs in zip(vocabulary_paths(first), vocabulary_paths(other)):
        if not os.path.exists(theirs) or not filecmp.cmp(mine, theirs, shallow=False):
            raise UsageError(
                f"{flag} {other}: its vocabulary {theirs} is not {whose} ({mine}); "
                "an ensemble decodes with one vocabulary: train its runs with the same "
                "data settings (--vocab-size, --tokenizer, --limit, --dictionary, --alternatives)"
            )


def check_same_numbers(first_config, other_config, other, flag, whose):
    """`UsageError` unless the run `other` (its `config.json`:
    `other_config`) protects numbers as the first run does: an ensemble
    restores them once, for all its members."""
    protects = bool(other_config.get("protect_numbers"))
    if protects != bool(first_config.get("protect_numbers")):
        raise UsageError(
            f"{flag} {other} protects numbers {'' if protects else 'not '}as {whose} run "
            "does not: train them with the same --protect-numbers setting"
        )


SIDES = ("source", "target")
# What `load_run` reads from config.json, and of which JSON kind.
CONFIG_FIELDS = {
    "family": str,
    "attention": (str, None),
    "max_length": int,
    "protect_numbers": bool,
    "source_vocab": int,
    "target_vocab": int,
}


def check_vocabularies(output, tokenizers, recorded, where):
    """`UsageError` naming both sizes when a tokenizer of the run in
    `output` has another vocabulary size than `recorded` (`source_vocab`,
    `target_vocab`: the model's, as `where` records them): a vocabulary
    file of another run beside this model would translate with the wrong
    pieces, or fail on ids beyond the model's vocabulary."""
    paths = vocabulary_paths(output)
    for side, tokenizer, path in zip(SIDES, tokenizers, paths):
        size = recorded.get(f"{side}_vocab")
        if size is not None and size != tokenizer.vocab_size:
            raise UsageError(
                f"{path} has {tokenizer.vocab_size} pieces but the model's {side} vocabulary "
                f"({os.path.join(output, where)}) has {size}: the vocabulary is another run's; "
                "put the run's own vocabulary files beside its model"
            )


def finished(output):
    """True when `output` holds a trained model and no backup of an
    unfinished training."""
    backup = os.path.join(output, "backup")
    return os.path.exists(os.path.join(output, "model.keras")) and not (
        os.path.isdir(backup) and os.listdir(backup)
    )
