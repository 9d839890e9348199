"""The translation recipe's settings object: `TranslationConfig`, every
group of settings (`settings.py`, `command_settings.py`) in one, with the
one checker of what each setting declares (`check_setting`), the checks
that span several (`validate`, `model_settings`) and the reading of what
runs recorded.

The command line (`recipes/translate.py`) builds a `TranslationConfig` from
its flags, both made from the same declarations, and hands it down; nothing
below the command line sees argparse. Model settings carry the names of the
model arguments they set (`num_heads`, `num_key_value_heads`,
`sliding_window`, ...); `RENAMED` maps the names 0.2.0 wrote in `run.json`,
`config.json` and `best_hyperparameters.json` to them (`upgrade`).

Example:

    config = TranslationConfig(command="train", family="rnn", attention="additive")
    config.validate()            # UsageError naming the flag, or nothing
    config.group("decoding")     # DecodingSettings(beam_width=None, alpha=None, ...)
    model_settings(config)       # the model's settings, family defaults filled in
"""

import dataclasses
import os

from ..runs import UsageError, check_number, flag
from ..tuning import load_hyperparameters
from .command_settings import BEAM_DEFAULTS, COMMAND_DEFAULTS, FIELDS, Settings
from .presets import DING_ONLY, PAPER_RATE, PRESET_KEYS, PRESETS, paper_rate
from .settings import CHECKS, FAMILIES, GROUPS, MAX_EPOCHS, RECORDS, WINDOW_RULE, corpus_key

# The lists made from the settings' declarations.


def declared(key, value=True):
    """The names of the settings whose metadata `key` holds `value` (or
    contains it, for a tuple), in their declaration order."""

    def holds(field):
        found = field.metadata.get(key)
        return value in found if isinstance(found, tuple) else found == value

    return tuple(name for name, field in FIELDS.items() if holds(field))


def check_kind(check):
    """A declared check less its upper bound (`at_most`, `why`): which of
    `CHECKS` it is."""
    return {key: value for key, value in (check or {}).items() if key not in ("at_most", "why")}


def checked_as(kind):
    """The names of the settings whose check is `CHECKS[kind]`, whatever
    their upper bound, in their declaration order."""
    return tuple(
        name
        for name, field in FIELDS.items()
        if check_kind(field.metadata.get("check")) == CHECKS[kind]
    )


POSITIVE = checked_as("positive")  # integers >= 1
COUNTS = checked_as("count")  # integers >= 0
# What a run records (`settings.RECORDS`): the groups' fields, in their order.
MODEL_KEYS = declared("records", "model")  # the model's settings (`config.model_settings`)
# What a run's data split and vocabularies are built from (and `distill_from`,
# the teachers of a distilled run: `distillation.py`).
DATA_KEYS = declared("records", "data")
DECODING = declared("records", "decoding")  # BeamSearch's decoding options, by its names
# The settings only some families have, and their value there when not given.
FAMILY_ONLY = {
    name: field.metadata["families"]
    for name, field in FIELDS.items()
    if field.metadata.get("families")
}
FAMILY_DEFAULTS = {name: FIELDS[name].metadata["family_default"] for name in FAMILY_ONLY}
TRANSFORMER_ONLY = tuple(
    name for name, families in FAMILY_ONLY.items() if families == ("transformer",)
)
# 0.2.0's names of the model settings (and flags), and the decoding flags (and
# `config.json` "decoding" keys) renamed since -> today's names.
RENAMED = {
    field.metadata["old"]: name
    for name, field in FIELDS.items()
    if field.metadata.get("old") and name not in DECODING
}
DECODING_RENAMED = {
    FIELDS[name].metadata["old"]: name for name in DECODING if FIELDS[name].metadata.get("old")
}


def check_setting(name, value):
    """Raise `UsageError` (naming the flag, what it takes and what was
    given) unless `value` is what setting `name` declares: one of its
    `choices` (each item of a list), a folder that is not empty, a number
    within its check's bounds; None (not given) passes."""
    declared = FIELDS[name].metadata if name in FIELDS else {}
    if value is None:
        return
    choices = declared.get("choices")
    for item in value if isinstance(value, list) else (value,):
        if choices is not None and item not in choices:
            why = f" ({declared['choices_why']})" if declared.get("choices_why") else ""
            raise UsageError(f"{flag(name)} must be one of {list(choices)}{why}; got {item!r}")
    if declared.get("folder") and value == "":
        raise UsageError(f"{flag(name)} is empty (that would be the current folder): name a folder")
    check = declared.get("check")
    if not check:
        return
    check_number(
        name,
        value,
        integer=check.get("integer", False),
        low=check.get("low"),
        high=check.get("below"),
        low_included=check.get("low_included", True),
    )
    at_most = check.get("at_most")
    if at_most is not None and value > at_most:
        why = f" ({check['why']})" if "why" in check else ""
        raise UsageError(f"{flag(name)} must be at most {at_most}{why}; got {value}")


def upgrade(record, window_rule=True):
    """A `run.json` settings, `config.json` or hyperparameters dict with
    0.2.0's key names (`units`, `kv_heads`, ...) renamed to today's. With
    `window_rule` (a record the recipe wrote), a `sliding_window` recorded
    without `sliding_window_rule` (0.2.x: `|i - j| <= w`) becomes today's
    same window, `w + 1` (`|i - j| < w + 1`, Keras's meaning)."""
    if record is None:
        return None
    record = {RENAMED.get(key, key): value for key, value in record.items()}
    for key in ("tie_embeddings", "shared_vocabulary"):
        # ConvS2S runs recorded null before the families shared these settings
        if record.get("family") == "convs2s" and key in record and record[key] is None:
            record[key] = False
    if window_rule and record.get("sliding_window") is not None and WINDOW_RULE not in record:
        record["sliding_window"] = record["sliding_window"] + 1
        record[WINDOW_RULE] = "keras"
    return record


@dataclasses.dataclass
class TranslationConfig(Settings):
    """Every setting of every command of the translation recipe (`Settings`:
    every group's fields, read flat: `config.beam_width`), a view of each
    group (`group`), and the checks that span several settings
    (`validate`)."""

    @classmethod
    def for_command(cls, command, **settings):
        """The defaults of `command` (`COMMAND_DEFAULTS`), then those of the
        `preset` (`PRESETS`, for the family), then `settings`: a setting
        given wins over its preset's. (The command line passes only the
        flags given for the settings a preset names, and `--epochs` only
        when given: with `--time-budget` and no `--epochs`, the budget alone
        ends training.)"""
        output = "runs/demo" if command == "demo" else "runs/translate"
        merged = {"output": output, **COMMAND_DEFAULTS.get(command, {}), **settings}
        family = trained_family(command, merged)
        if merged.get("hyperparameters") is not None:  # the file's family wins: its preset's
            merged["family"] = family
        name = merged.get("preset")
        if command == "tune":  # the data settings every searched family's preset shares
            families = merged.get("families") or FIELDS["families"].default_factory()
            preset = shared_preset(name, families, settings)
        else:
            preset = dict(PRESETS.get(name, {}).get(family, {}))
        if merged.get("corpus"):  # the dictionary's entries are Ding's
            preset = {key: value for key, value in preset.items() if key not in DING_ONLY}
        merged = {**COMMAND_DEFAULTS.get(command, {}), **preset, **merged}
        width, warmup = merged.get("hidden_dim"), merged.get("warmup")
        paper = command != "tune" and (name, family) in PAPER_RATE  # a trial's: its own
        if paper and "learning_rate" not in settings and _positive_integers(width, warmup):
            # The preset's peak rate is the paper's d^-0.5 · w^-0.5 of the width and
            # warm-up used, also where --hidden-dim or --warmup replaces the preset's.
            merged["learning_rate"] = paper_rate(width, warmup)
        if "epochs" not in merged and merged.get("time_budget"):
            merged["epochs"] = MAX_EPOCHS  # the budget decides
        if name == "none":  # the flags' own defaults: recorded as no preset
            merged["preset"] = None
        return cls(command=command, **merged)

    def replace(self, **changes):
        """A copy with `changes` (the demo runs its commands on copies)."""
        return dataclasses.replace(self, **changes)

    def group(self, name):
        """The settings of group `name` (`settings.GROUPS`: "run", "data",
        "model", "optimization", "training", "decoding", "io", "export",
        "tuning"), as that group's dataclass."""
        if name not in GROUPS:
            raise ValueError(f"`name` must be one of {list(GROUPS)}; got {name!r}")
        fields = dataclasses.fields(GROUPS[name])
        return GROUPS[name](**{field.name: getattr(self, field.name) for field in fields})

    @property
    def trains(self):
        """True for the commands that build a model from these settings."""
        return self.command in ("train", "demo")

    def check_runs_named_once(self):
        """`UsageError` when `--ensemble` (or `--distill-from`) names one run
        twice (`RUN` and `RUN/`, or a link to it: their real paths are
        compared) or names `--output`'s own run, which is always a member:
        each would count one model twice."""
        output = os.path.realpath(self.output) if self.output else None
        for name in ("ensemble", "distill_from"):
            seen = {}
            for run in getattr(self, name) or ():
                real = os.path.realpath(run)
                if real == output:
                    raise UsageError(
                        f"{flag(name)} {run} is --output itself: name the other runs "
                        + (
                            "(the --output run is always a member)"
                            if name == "ensemble"
                            else "(the teacher is another, trained run)"
                        )
                    )
                if real in seen:
                    raise UsageError(
                        f"{flag(name)} names one run twice ({seen[real]} and {run}): it would "
                        "count its model twice; name each run once"
                    )
                seen[real] = run

    def check_preset(self):
        """`UsageError` for a `--preset` the `--family` (tune: one of the
        `--families`) does not have (its name is checked as declared)."""
        families = self.families if self.command == "tune" else [self.family]
        for family in families:
            if self.preset in PRESETS and family not in PRESETS[self.preset]:
                given = "--families includes" if self.command == "tune" else "got --family"
                raise UsageError(
                    f"--preset {self.preset} is the Transformer's only; {given} {family}: "
                    f"its presets are {', '.join(n for n in PRESETS if family in PRESETS[n])}"
                )

    def data_settings(self):
        """What a run's data split and vocabularies are built from (`run.json`)."""
        return {
            **dataclasses.asdict(self.group("data")),
            "corpus": corpus_key(self.corpus),
            "shared_vocabulary": bool(self.shared_vocabulary),
            "distill_from": (
                [os.path.abspath(run) for run in self.distill_from] if self.distill_from else None
            ),
        }

    def check_export_format(self):
        """`UsageError` for an `export` option of the other `--format`: the
        SavedModel's (`--quantize`, `--xla`, `--ensemble`,
        `--num-hypotheses`) with `--format ctranslate2`,
        CTranslate2's (`--quantization`, `--length-penalty`, `--overwrite`)
        with `--format saved_model`."""
        if self.command != "export":
            return
        other = {
            "saved_model": ("quantization", "length_penalty", "overwrite"),
            # CTranslate2 converts one Transformer, and has no nbest signature.
            "ctranslate2": ("quantize", "xla", "ensemble", "num_hypotheses"),
        }[self.format]
        for name in other:
            if getattr(self, name) not in (None, False):
                owner = "ctranslate2" if self.format == "saved_model" else "saved_model"
                raise UsageError(
                    f"{flag(name)} is an option of --format {owner}; got --format {self.format}"
                )

    def validate(self):
        """Raise `UsageError` for the first setting out of range: each
        setting's declaration (`check_setting`), then the checks that span
        several settings, and the model's settings (`model_settings`, without
        `--hyperparameters`, which may change them later)."""
        for name in FIELDS:
            check_setting(name, getattr(self, name))
        self.check_runs_named_once()
        self.check_preset()
        self.check_export_format()
        if self.subword_sampling and self.tokenizer != "sentencepiece":
            raise UsageError(
                "--subword-sampling needs --tokenizer sentencepiece (WordPiece has one "
                f"segmentation); got --tokenizer {self.tokenizer}"
            )
        for run in self.ensemble or ():
            if not os.path.isdir(run):  # before stdin is read for texts
                raise UsageError(
                    f"--ensemble {run}: no run folder there (--ensemble takes every word after "
                    "it: give the texts to translate before it, or after --)"
                )
        beam_width = BEAM_DEFAULTS["beam_width"] if self.beam_width is None else self.beam_width
        for name in ("nbest", "num_hypotheses"):
            value = getattr(self, name)
            if value is not None and value > beam_width:
                raise UsageError(
                    f"{flag(name)} must be at most --beam-width {beam_width}; got {value}"
                )
        if self.trains:
            model_settings(self)
        return self


# The commands that decode a trained run, or convert it with its decoding
# settings: they settle them against the run's before any work.
DECODES = ("evaluate", "translate", "export", "convert")


def trained_family(command, settings):
    """The family `command` trains with the flags `settings`: the one a
    `--hyperparameters` file names (it wins over `--family` there), else
    `--family`, else the command's default, else the flag's."""
    return (
        hyperparameters_family(settings.get("hyperparameters"))
        or settings.get("family")
        or COMMAND_DEFAULTS.get(command, {}).get("family")
        or FIELDS["family"].default
    )


def hyperparameters_family(path):
    """The family a `--hyperparameters` file names, or None (no file, no
    family, or a file `train` will refuse with its reason)."""
    try:
        family = load_hyperparameters(path).get("family")
    except ValueError:
        return None
    return family if family in FAMILIES else None


def shared_preset(name, families, given):
    """The settings of `tune` that preset `name` fills: those its `families`
    share (a setting a family's preset leaves out is that flag's default),
    the data split and vocabulary every trial trains on; `UsageError` for
    one the families' presets give differently and `given` (the flags
    given) does not settle. The model's settings are each trial's
    (`hyperparameter_search.trial_settings`)."""
    presets = PRESETS.get(name, {})
    keys = [key for key in PRESET_KEYS if "tune" in FIELDS[key].metadata["commands"]]
    shared = {}
    for family in (family for family in families if family in presets):  # check_preset: others
        for key in keys:
            value = presets[family].get(key, FIELDS[key].default)
            first, held = shared.setdefault(key, (family, value))
            if held != value and key not in given:
                raise UsageError(
                    f"--preset {name} gives the {first} {flag(key)} {_said(held)} and the "
                    f"{family} {_said(value)}: tune's trials share one data split and "
                    f"vocabulary; give {flag(key)}, or search --families whose presets agree"
                )
    return {key: value for key, (_, value) in shared.items()}


def _said(value):
    """A setting's value as a message says it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unset" if value is None else value


def model_settings(config, hyperparameters=None):
    """The model's settings (`MODEL_KEYS`) of a `TranslationConfig` (or a
    dict of them), overridden by a tuner's `hyperparameters`, with the
    family's defaults filled in; `UsageError` for a setting out of range or
    one the family does not have."""
    if isinstance(config, dict):
        settings = {key: config.get(key) for key in MODEL_KEYS}
    else:  # the groups a run records as its model's settings (`settings.RECORDS`)
        settings = {
            key: value
            for name in RECORDS["model"]
            for key, value in dataclasses.asdict(config.group(name)).items()
        }
    # A hyperparameters file is the user's (tune never searches the window):
    # its `sliding_window` has today's meaning.
    hyperparameters = upgrade(hyperparameters, window_rule=False) or {}
    family = hyperparameters.get("family", settings["family"])
    for key, families in FAMILY_ONLY.items():
        if settings[key] is not None and family not in families:
            raise UsageError(
                f"{flag(key)} does not apply to the {family} family "
                f"(only to {' and '.join(families)})"
                + (": its embedding width is --hidden-dim" if key == "embed_dim" else "")
                + "; leave it out"
            )
    settings.update(
        {  # a tuner's file may hold values of the other families: they do not apply
            key: value
            for key, value in hyperparameters.items()
            # the vocabulary is learned from the flag: a file cannot change it
            if family in FAMILY_ONLY.get(key, FAMILIES) and key not in DATA_KEYS
        }
    )
    check_setting("family", settings["family"])  # a tuner's file may name another
    for key, families in FAMILY_ONLY.items():
        if settings[key] is None and settings["family"] in families:
            settings[key] = FAMILY_DEFAULTS[key]
    own = {"transformer": "multihead", "convs2s": "multistep"}.get(settings["family"])
    if settings["family"] != "rnn" and settings["attention"] not in (None, own):
        raise UsageError(
            "--attention chooses the recurrent model's attention; "
            f"the {settings['family']} family has "
            f"its own ({'multi-head' if own == 'multihead' else 'multi-step'}): "
            "leave --attention out"
        )
    if settings["family"] == "rnn" and settings["attention"] is None:
        settings["attention"] = "general"
    for key in ("word_dropout", "subword_sampling"):  # records made before the flags
        settings[key] = settings[key] or 0.0
    settings["warmup"] = 0 if settings["warmup"] is None else settings["warmup"]
    settings["update_freq"] = settings["update_freq"] or 1  # records made before the flag
    for key in ("learning_rate", "dropout", "label_smoothing"):  # no default: a number is needed
        if settings[key] is None:
            raise UsageError(f"{flag(key)} must be a number; got None")
    settings["decay"] = settings["decay"] or "rsqrt"  # records made before the flag
    for key in MODEL_KEYS:  # each one's declaration: bounds and choices
        check_setting(key, settings[key])
    if settings["family"] == "transformer" and settings["intermediate_dim"] is None:
        settings["intermediate_dim"] = 2 * settings["hidden_dim"]  # what it was before
    _check_widths(settings)
    if settings["sliding_window"] is not None:  # recorded as Keras's window (`upgrade`)
        settings[WINDOW_RULE] = "keras"
    return settings


def _check_widths(settings):
    """`UsageError` when the model's widths do not fit together: the heads
    that share a key/value head, the features of a head, a ConvS2S output
    scored against its embedding table."""
    heads, kv_heads = settings["num_heads"], settings["num_key_value_heads"]
    if kv_heads is not None and heads % kv_heads:
        raise UsageError(
            f"--num-key-value-heads {kv_heads} must divide --num-heads {heads} "
            "(each key/value head serves num-heads/num-key-value-heads query heads)"
        )
    if heads is not None and settings["hidden_dim"] % heads:
        raise UsageError(
            f"--num-heads {heads} must divide --hidden-dim {settings['hidden_dim']} "
            "(each head gets hidden-dim/num-heads features)"
        )
    embed_dim, hidden_dim = settings["embed_dim"], settings["hidden_dim"]
    if settings["family"] == "convs2s" and settings["tie_embeddings"] and embed_dim != hidden_dim:
        raise UsageError(
            f"--tie-embeddings with convs2s needs --embed-dim equal to --hidden-dim (the "
            f"decoder's output is scored against the embedding table); got {embed_dim} and "
            f"{hidden_dim}"
        )


def recorded_defaults(settings):
    """The model settings a `run.json` written before they were flags was
    trained with: a run that lacks one is compared as having this value."""
    family = settings.get("family")
    return {
        # a run from before presets: its values are compared, each on its own;
        # a search from before presets (no family) had none
        "preset": settings.get("preset") if family else None,
        "tokenizer": "wordpiece",
        # runs made before the sample: their vocabularies are there already
        "vocab_sample": FIELDS["vocab_sample"].default,
        **{
            key: FAMILY_DEFAULTS[key] if family in FAMILY_ONLY[key] else None
            for key in (*TRANSFORMER_ONLY[1:], "tie_embeddings", "shared_vocabulary")
        },
        # a tuning run's record has no family: its data settings say False
        **({} if family else {"shared_vocabulary": False}),
        # the feed-forward width before it was a setting
        **(
            {"intermediate_dim": 2 * int(settings["hidden_dim"])}
            if family == "transformer" and settings.get("hidden_dim")
            else {}
        ),
        "warmup": 0,
        "decay": "rsqrt",
        "update_freq": 1,
        "dictionary": 0.0,
        "alternatives": False,
        "protect_numbers": False,
        "word_dropout": 0.0,
        "subword_sampling": 0.0,
        "distill_from": None,
    }


def _positive_integers(*values):
    """True when every value is an integer >= 1 (not a bool): settings the
    checks have not seen yet, used only when they would pass."""
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values)
