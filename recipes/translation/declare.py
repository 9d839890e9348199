"""How a setting of the translation recipe is declared: `setting`, the
field of `settings.Settings` that carries its default and, in its metadata,
its flag's help, the commands that take it, its check and its record; and
the names those declarations use (the commands, the checks).

Nothing here imports the library: the command line is made from these
declarations before Keras is imported.
"""

import dataclasses

# The commands and their one-line descriptions, in the order --help lists them.
COMMANDS = {
    "train": "train a model",
    "evaluate": "BLEU/chrF on the test split, samples, attention heatmaps",
    "translate": "translate sentences with a trained model",
    "average": "replace the run's model by the mean of checkpoints",
    "export": "export the trained model as a SavedModel for TensorFlow Serving",
    "convert": "convert the trained model for another runtime: CTranslate2 (the Transformer "
    "family)",
    "tune": "KerasTuner search (resumable; chief/worker distributed)",
    "demo": "train, evaluate and translate: the main job of `make demo`",
}
EVERY = tuple(COMMANDS)
DATA = ("train", "tune", "demo")  # the commands that build a data split and vocabularies
MODEL = ("train", "demo")  # the commands that build a model from the flags
SEARCHING = ("train", "evaluate", "translate", "export", "demo")  # beam width, alpha
DECODING_FLAGS = ("train", "translate", "export")  # every decoding option
RUNS = ("evaluate", "translate", "export")  # the commands that decode one run or an ensemble

# The checks a setting may declare (`check_setting`).
CHECKS = {
    "positive": {"integer": True, "low": 1},
    "count": {"integer": True, "low": 0},
    "fraction": {"low": 0, "below": 1},  # in [0, 1)
}


def setting(
    default=None,
    help=None,
    commands=(),
    *,
    check=None,
    at_most=None,
    records=(),
    families=None,
    family_default=None,
    old=None,
    folder=False,
    help_for=None,
    factory=None,
    **argument,
):
    """A `Settings` field: its `default` and its declaration.

    Args:
        default: the value when the flag is not given (a command's own
            default: `defaults.COMMAND_DEFAULTS`).
        help: the flag's help; `{family_default}` and `{at_most}` are
            replaced by those declared here. `help_for` gives a command its
            own wording.
        commands: the commands whose command line has the flag.
        check: "positive" (an integer >= 1), "count" (an integer >= 0),
            "fraction" (in [0, 1)), or a dict of `check_number`'s arguments
            (`integer`, `low`, `low_included`, `below`) with `at_most` (the
            largest value, inclusive) and `why` (said when it is exceeded).
        at_most: the largest value, added to a named `check` (every number
            is bounded, so that none overflows an integer of NumPy,
            TensorFlow or SentencePiece after the run has written its data).
        records: where a run records it: "model" (`MODEL_KEYS`), "data"
            (`DATA_KEYS`), "decoding" (`DECODING`).
        families: the model families that have it (`FAMILY_ONLY`); None: all.
        family_default: its value for those families when not given.
        old: the name 0.2.0 gave it (its flag still parses, with a note; a
            record under it is read under today's name).
        folder: a folder path (an empty one is refused).
        factory: a default made fresh for each object (a list).
        **argument: `argparse` arguments: choices, metavar, nargs,
            required, aliases (more option strings), positional, and
            exclusive (the name of a required mutually exclusive group).
    """
    check = (CHECKS[check] if isinstance(check, str) else check) or {}
    if at_most is not None:
        check = {**check, "at_most": at_most}
    placeholders = {"family_default": family_default, "at_most": check.get("at_most")}
    metadata = {
        "help": help and help.format(**placeholders),
        "help_for": {name: text.format(**placeholders) for name, text in (help_for or {}).items()},
        "commands": commands,
        "check": check,
        "records": records,
        "families": families,
        "family_default": family_default,
        "old": old,
        "folder": folder,
        "argument": argument,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)
