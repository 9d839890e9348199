"""Train, evaluate, tune and use translation models built from keras_attention.

    keras-attention-translate train --family transformer         # Ding corpus, German -> English
    keras-attention-translate train --family rnn --attention additive --epochs 8
    keras-attention-translate evaluate --output runs/translate   # BLEU, chrF, samples, heatmaps
    keras-attention-translate translate --output runs/translate "Ich habe keine Zeit."
    keras-attention-translate translate --output runs/translate < de.txt > en.txt  # a line each
    keras-attention-translate average --output runs/translate --last 5   # checkpoint averaging
    keras-attention-translate tune --output runs/tune            # KerasTuner (resumable)
    keras-attention-translate convert --output runs/translate --to ctranslate2 --dir ct2_model
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
import importlib.util
import sys

# Nothing here imports TensorFlow or Keras: the arguments are parsed first
# (`--help` and a mistyped flag answer at once), then `main` imports them.
from . import run_folders
from .runs import HelpFormatter, UsageError, flag, import_tensorflow_quietly, keras_backend
from .translation.cluster import cluster_task
from .translation.command_settings import BEAM_DEFAULTS, COMMAND_DEFAULTS, FIELDS
from .translation.config import DECODES, TranslationConfig, trained_family
from .translation.corpus import CorpusError, count_pairs
from .translation.data import graph_tokenizers
from .translation.presets import (
    PRESET_KEYS,
    PRESET_PAIRS,
    PRESETS,
    preset_for_families,
    preset_summary,
)
from .translation.settings import COMMANDS


def decoding_default(command, name):
    """How a decoding flag's default is said: `train` and the demo record the
    flags in the run, evaluate, translate and export use the run's; a
    command default of its own (the demo's alpha) is said as any other."""
    if getattr(TranslationConfig.for_command(command), name) is not None:
        return ""
    default = BEAM_DEFAULTS[name]
    if command in ("train", "demo"):
        return (
            f" (default: {default}; recorded in the run as what evaluate, translate and export use)"
        )
    return f" (default: the run's, recorded when it trained; else {default})"


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag (0.2.0's `--kv-heads` for
    `--num-key-value-heads`): sets the same setting, says so on stderr in
    one line, and is hidden from `--help`."""

    def __init__(self, option_strings, dest, new=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(
            f"note: {option_string} is deprecated and will be removed in keras_attention "
            f"0.4.0; use {self.new}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_setting(command, name, field, groups):
    """The flag of setting `field` on `command` (named `name`), as its
    declaration says (`settings.setting`): typed as the field, a switch for
    a boolean, its old spelling hidden beside it."""
    declared = field.metadata
    argument = dict(declared["argument"])
    exclusive = argument.pop("exclusive", None)
    if exclusive is not None and exclusive not in groups:
        groups[exclusive] = command.add_mutually_exclusive_group(required=True)
    target = groups.get(exclusive, command)
    names = [field.name] if argument.pop("positional", False) else [flag(field.name)]
    names += argument.pop("aliases", ())
    if field.type is bool:
        # a switch a preset may turn on can be turned off (`--no-tie-embeddings`)
        off = field.default or field.name in PRESET_KEYS
        argument["action"] = argparse.BooleanOptionalAction if off else "store_true"
    else:  # a list's items are strings
        argument["type"] = str if field.type is list else field.type
    help_text = declared["help_for"].get(name, declared["help"])
    if declared["group"] == "decoding":
        help_text += decoding_default(name, field.name)
    action = target.add_argument(*names, help=help_text, **argument)
    if declared["old"]:
        command.add_argument(
            flag(declared["old"]),
            dest=field.name,
            type=action.type,
            action=DeprecatedFlag,
            new=action.option_strings[0],
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )


def parser():
    """The command line, made from the settings' declarations
    (`command_settings.Settings`): each command takes the settings that name it,
    each flag's default is its command's (`TranslationConfig.for_command`)."""
    main = argparse.ArgumentParser(
        prog="keras-attention-translate", description=__doc__, formatter_class=HelpFormatter
    )
    commands = main.add_subparsers(dest="command", required=True)
    for name, help_text in COMMANDS.items():
        command = commands.add_parser(
            name, help=help_text, description=help_text, formatter_class=HelpFormatter
        )
        groups = {}
        for field in FIELDS.values():
            if name in field.metadata.get("commands", ()):
                add_setting(command, name, field, groups)
        defaults = TranslationConfig.for_command(name)
        presets = name in FIELDS["preset"].metadata["commands"]
        for action in command._actions:
            if action.default is not argparse.SUPPRESS and hasattr(defaults, action.dest):
                action.default = getattr(defaults, action.dest)
                # --epochs too: with --time-budget and no --epochs, the budget decides
                if presets and action.dest in (*PRESET_KEYS, "epochs"):
                    preset_default(action)
        command.set_defaults(command=name)
    return main


def preset_default(action):
    """A flag of a setting that `--preset` fills: left out of the parsed
    arguments unless given, so that a preset fills it
    (`TranslationConfig.for_command`) and a flag given wins; its default is
    said in its help."""
    given = action.default is not None and action.default is not False  # 0 is a default
    if given and "default:" not in action.help:
        action.help += f" (default: {action.default})"
    action.default = argparse.SUPPRESS


def choose_preset(command, settings, log=None):
    """`settings` (a command line's, for `command`) with the `--preset`
    that `train` uses when none is given: a run resumed (its `run.json`
    there, no `--overwrite`) keeps its own (none for a run from before
    presets, trained with the flags' defaults); a new run's is chosen by
    the corpus's sentence pairs (`presets.preset_for`; `tune`'s, the
    preset every one of its `--families` has), said to `log`. A command
    whose defaults name a preset (the demo) keeps it, said to `log` too.
    A corpus that cannot be read chooses nothing:
    `train`'s own checks then say why."""
    commands = FIELDS["preset"].metadata["commands"]
    if command not in commands:
        return settings
    family = trained_family(command, settings)
    families = [family]
    if command == "tune":  # its trials each start from their family's settings of one preset
        families = settings.get("families") or FIELDS["families"].default_factory()
    defaults = COMMAND_DEFAULTS.get(command, {})
    if "preset" in defaults:  # the demo's: said, not chosen
        name = settings.get("preset") or defaults["preset"]
        if log is not None and family in PRESETS.get(name, {}):
            summary = preset_summary(name, family)
            log(f"the {command}'s settings: preset {name} for the {family} ({summary})")
        return settings
    if settings.get("preset"):
        return settings
    output = settings.get("output") or FIELDS["output"].default
    try:
        recorded = None if settings.get("overwrite") else run_folders.recorded_settings(output)
    except ValueError:  # a damaged run.json: `train` says so
        recorded = None
    if recorded is not None:
        return {**settings, "preset": recorded.get("preset") or "none"}
    limit = settings.get("limit")
    fewest = max(PRESET_PAIRS.values())
    try:
        pairs = count_pairs(settings.get("corpus"), min(limit or fewest, fewest))
    except (CorpusError, OSError, ValueError):
        return settings
    name = preset_for_families(pairs, families)
    chosen = f"a {pairs:,}{'+' if pairs >= fewest else ''}-pair corpus: preset {name}"
    if log is not None and command == "tune":
        log(
            f"{chosen}; each trial starts from its family's settings and searches around them "
            "(--preset none: the flags' own defaults):"
        )
        for member in families:
            log(f"  {member}: {preset_summary(name, member)}")
    elif log is not None:
        larger = [
            n for n in PRESETS if PRESET_PAIRS[n] > PRESET_PAIRS[name] and family in PRESETS[n]
        ]
        log(
            f"{chosen} for the {family} ({preset_summary(name, family)})"
            + "".join(f"; --preset {n} for {PRESET_PAIRS[n]:,} pairs or more" for n in larger)
            + "; a flag given wins"
        )
    return {**settings, "preset": name}


def check(args, log=None):
    """The `TranslationConfig` of parsed arguments: the one object the
    commands below the command line receive, `train`'s preset chosen
    (`choose_preset`, said to `log`). It is validated (`UsageError`
    naming the flag) here, or, for a command that decodes a run, once its
    decoding settings are settled against the run's (`TrainedRun`, before
    any other work)."""
    settings = {key: value for key, value in vars(args).items() if key != "command"}
    settings = choose_preset(args.command, settings, log)
    config = TranslationConfig.for_command(args.command, **settings)
    return config if args.command in DECODES else config.validate()


def run(args, log=print):
    """Run the parsed command: check its settings, then hand them over."""
    from .translation.commands import COMMANDS  # Keras and TensorFlow: not for --help

    return COMMANDS[args.command](check(args, log), log)


INTERRUPTED = {
    "export": "interrupted: nothing was kept (an export publishes only complete versions); "
    "run the export again",
    "evaluate": "interrupted: run the command again",
    "tune": "interrupted: re-run the same command to continue the search",
    "translate": "interrupted",
    "convert": "interrupted: nothing was written (the folder appears only when complete)",
}


# The packages each command needs beyond Keras: with TensorFlow and
# TensorFlow Text, the commands tokenise in the graph (`tf.data`, the
# Translator), and `export`, `convert` and the demo make a SavedModel;
# `tune` adds KerasTuner. Without TensorFlow, the commands that train,
# average, translate and score run with the tokenizers' Python twins
# (`data.graph_tokenizers`), which need SentencePiece.
NEEDS = {"tensorflow": "TensorFlow", "tensorflow_text": "TensorFlow Text"}
COMMAND_NEEDS = {"tune": {"keras_tuner": "KerasTuner"}}
PIECES = {"sentencepiece": "SentencePiece"}
SCORES = {**PIECES, "sacrebleu": "sacrebleu"}  # BLEU and chrF
SAVED_MODELS = ("export", "convert", "demo")  # keras_attention.serving's, on TensorFlow
WITHOUT_TENSORFLOW = {
    "translate": PIECES,
    "average": PIECES,
    "evaluate": SCORES,
    "train": SCORES,  # validation BLEU
    "tune": {**SCORES, "keras_tuner": "KerasTuner"},
}


def missing_packages(command):
    """The names of the packages `command` needs that are not installed."""
    needs = {**NEEDS, **COMMAND_NEEDS.get(command, {})}
    if command in WITHOUT_TENSORFLOW and not graph_tokenizers():
        needs = WITHOUT_TENSORFLOW[command]
    return [name for module, name in needs.items() if importlib.util.find_spec(module) is None]


def main(argv=None):
    """The command line: a user mistake, a bad corpus, a file that cannot be
    read or written, a package the command needs that is not installed
    (before anything is written), or a `ValueError` from the library is one
    `error:` line and exit status 2, never a traceback."""
    args = parser().parse_args(argv)
    missing = missing_packages(args.command)
    if missing:
        named = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        print(
            f"error: {args.command} needs {named}, not installed here: "
            "pip install 'keras_attention[recipes]' (without TensorFlow: "
            "'keras_attention[recipes-jax]' trains, tunes, translates and evaluates; "
            "export, convert and the demo need TensorFlow)",
            file=sys.stderr,
        )
        sys.exit(2)
    if args.command in SAVED_MODELS and keras_backend() != "tensorflow":
        print(
            f"error: {args.command} runs with Keras on TensorFlow (keras_attention.serving); "
            f"Keras runs on {keras_backend()} here: set KERAS_BACKEND=tensorflow (a run "
            "trained on any backend works)",
            file=sys.stderr,
        )
        sys.exit(2)
    if not graph_tokenizers() and keras_backend() == "tensorflow":  # Keras would import it
        print(
            f"error: {args.command} without TensorFlow runs on Keras's JAX or PyTorch backend: "
            "set KERAS_BACKEND=jax (or torch)",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        if args.command == "train":  # a TF_CONFIG that makes no cluster: said before the imports
            cluster_task()
        import_tensorflow_quietly()  # before anything imports TensorFlow
        run(args)
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
