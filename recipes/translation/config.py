"""The translation recipe's settings: one `TranslationConfig`, every default
and every check in one place.

The command line (`recipes/translate.py`) builds a `TranslationConfig` from
its flags (its defaults are read from here) and hands it down; nothing
below the command line sees argparse. Model settings carry the names of
the model arguments they set (`num_heads`, `num_key_value_heads`,
`sliding_window`, ...); `RENAMED` maps the names 0.2.0 wrote in `run.json`,
`config.json` and `best_hyperparameters.json` to them (`upgrade`).

Example:

    config = TranslationConfig(command="train", family="rnn", attention="additive")
    config.validate()            # UsageError naming the flag, or nothing
    model_settings(config)       # the model's settings, family defaults filled in
"""

import dataclasses
import os

from ..runs import (  # noqa: F401  (the recipe's names for them, as before)
    LIBRARY_ATTENTION,
    UsageError,
    check_number,
    flag,
    read_json,
)
from ..tuning import ALGORITHMS  # noqa: F401  (the tuner's, offered by --algorithm)

# The corpus a run reads unless --corpus names a TSV file: the Ding
# dictionary's example sentences (Debian package `trans-de-en`).
DING = "/usr/share/trans/de-en"
FAMILIES = ("rnn", "convs2s", "transformer")
# The command line is parsed before Keras and TensorFlow are imported (`--help`
# and a mistyped flag answer at once), so this module imports no part of the
# library: these copy the library's tables (`keras_attention.registry.names()`
# in `runs.LIBRARY_ATTENTION`, `seq2seq.transformer.POSITIONS`, `BeamSearch()`'s
# defaults, `serving.translator.QUANTIZATIONS`, `serving.ctranslate2.QUANTIZATIONS`),
# and tests/test_translation_cli.py::test_command_line_tables_are_the_librarys
# checks that they do.
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "relative")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "float16")
CONVERSIONS = ("ctranslate2",)  # convert --to
# `BeamSearch().decoding_options()`: the decoding options and their defaults,
# the one list the decoding flags, `decoding_settings` and
# `decoding.search_from_config` are made from (the test of the copies checks
# it is the library's whole list, so that a new option needs a flag).
BEAM_DEFAULTS = {
    "beam_width": 4,
    "alpha": 0.6,
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "coverage_penalty": 0.0,
}
# The decoding settings, by BeamSearch's argument names (the flags' names).
# A run records them when it trains (`config.json`: "decoding"); the
# commands that decode use the run's unless a flag is given (`run_decoding`).
DECODING = tuple(BEAM_DEFAULTS)
# Decoding flags (and `config.json` "decoding" keys) renamed since they were
# recorded -> BeamSearch's names (`upgrade_decoding`; the old flags still parse).
DECODING_RENAMED = {"no_repeat_ngram": "no_repeat_ngram_size"}
QUANTIZATIONS = ("int8",)  # export --quantize: weight-only int8 (Translator.export)
ATTENTION = LIBRARY_ATTENTION + ("none",)  # the RNN's attention, by the library's own names
DECAYS = ("rsqrt", "cosine")  # --decay
STYLES = ("luong", "bahdanau")
PRECISIONS = ("bfloat16", "float16")
# --tokenizer: the suffix of its vocabulary files. A run recorded before the
# flag existed used WordPiece (`recorded_defaults`).
TOKENIZERS = {"sentencepiece": "spm", "wordpiece": "vocab"}
# 0.2.0's names of the model settings (and flags) -> the model arguments' names.
RENAMED = {
    "units": "hidden_dim",
    "layers": "num_layers",
    "heads": "num_heads",
    "kv_heads": "num_key_value_heads",
    "window": "sliding_window",
}
# Recorded beside a `sliding_window` since it means Keras's window (`upgrade`).
WINDOW_RULE = "sliding_window_rule"
# The settings only some families have: the transformer's embedding width is
# its hidden_dim, only the transformer has several heads (and their variants),
# and the recurrent model's embeddings are not tied.
TRANSFORMER_ONLY = (
    "num_heads",
    "position",
    "num_key_value_heads",
    "sliding_window",
)
FAMILY_ONLY = {
    "embed_dim": ("rnn", "convs2s"),
    **{key: ("transformer",) for key in TRANSFORMER_ONLY},
    "tie_embeddings": ("transformer", "convs2s"),
    "shared_vocabulary": ("transformer", "convs2s"),
}
# Used when the family has the setting and it was not given (`model_settings`).
FAMILY_DEFAULTS = {
    "embed_dim": 128,
    "num_heads": 4,
    "position": "sinusoidal",  # the paper's, and what runs before --position had
    "num_key_value_heads": None,  # one key/value head per query head
    "sliding_window": None,  # self-attention sees every position
    "tie_embeddings": False,  # the output projection is the target embedding table
    "shared_vocabulary": False,  # a vocabulary of each side, and an embedding table of each
}
MODEL_KEYS = (
    "family",
    "attention",
    "embed_dim",
    "hidden_dim",
    "num_layers",
    "num_heads",
    "position",
    "num_key_value_heads",
    "sliding_window",
    "dropout",
    "learning_rate",
    "label_smoothing",
    "word_dropout",
    "subword_sampling",
    "max_length",
    "style",
    "warmup",
    "decay",
    "tie_embeddings",
    "shared_vocabulary",  # a data setting too: the encoder reads the decoder's table
)
DATA_KEYS = (
    "corpus",
    "reverse",
    "limit",
    "vocab_size",
    "tokenizer",
    "dictionary",
    "alternatives",
    "protect_numbers",
    "shared_vocabulary",
)  # and `distill_from`, the teachers of a distilled run (`distillation.py`)
# Checks of the settings (`TranslationConfig.validate`, `model_settings`).
# POSITIVE (integers >= 1) and COUNTS (integers >= 0) are the fields declared
# with `setting(..., check=...)`, listed below `TranslationConfig`.
# `train --members`: at most this many, each a TensorFlow process of its own
# started at once (1000 started two a second and made the load average 151).
MAX_MEMBERS = 8
# The largest values of the real-valued settings, so that none overflows
# where it is used (float32 in the searches, seconds and counts in training):
# `--time-budget 1e308` trained an epoch, then ended in "cannot convert float
# NaN to integer". Each bound is far above any useful value.
UPPER_BOUNDS = {
    "time_budget": 60 * 24 * 365,  # minutes: a year
    "dictionary": 100.0,  # entries per sentence pair
    "alpha": 10.0,
    "coverage_penalty": 10.0,
    "repetition_penalty": 100.0,
    "subword_sampling": 10.0,
}
LOWER_BOUNDS = {"repetition_penalty": 0.01}  # 1e-300 is 0 in float32: a division by it
MODEL_POSITIVE = ("embed_dim", "hidden_dim", "num_layers", "num_heads", "num_key_value_heads")
MODEL_POSITIVE += ("sliding_window", "max_length")
FRACTIONS = ("dropout", "label_smoothing", "word_dropout")  # in [0, 1)
# The demo's own defaults, sized for ten minutes on a quiet 2-core CPU for the
# whole job (`train`'s are larger); what each did to BLEU: RESULTS.md, "The
# demo's settings". Its alpha was chosen on the validation split: 0.6 left
# translations short.
COMMAND_DEFAULTS = {
    "tune": {"epochs": 4, "output": "runs/tune"},  # not train's folder
    "demo": {
        "output": "runs/demo",
        "family": "convs2s",
        "average_last": 3,
        # Training ends on the clock (`budget.py`): 8 minutes of it, so that
        # evaluation and export end within ten minutes of its first step;
        # the epochs are a ceiling that a fast machine may reach.
        "time_budget": 8.0,
        "epochs": 40,
        "hidden_dim": 128,
        "vocab_size": 4000,
        "batch_tokens": 1536,
        "dictionary": 0.5,
        "warmup": 400,
        # 5e-3 against 3e-3 in six paired runs: Ding BLEU level (+0.17 on average),
        # chrF +0.4, the everyday set +1.8 BLEU, validation loss lower in each
        # (RESULTS.md, "The demo's learning rate"). The Transformer's is 3e-3.
        "learning_rate": 5e-3,
        "alpha": 1.2,
        "samples": 5,
    },
}
# The tuner's search space (`tune`); KERAS_ATTENTION_SEARCH_SPACE (a JSON
# object of the same keys) narrows it, as the tests do to keep trials small.
SEARCH_SPACE = {
    "embed_dim": [64, 128],
    "hidden_dim": [64, 128, 256],
    "num_layers": [1, 2, 3],
    "num_heads": [2, 4],
    # 1 (multi-query) and 2 divide both head counts; 2 of 2 is plain multi-head.
    "num_key_value_heads": [1, 2],
}


def corpus_key(corpus):
    """How a run records its corpus (`run.json`, `data/meta.json`): the
    absolute path of a `--corpus` file, else the Ding corpus's path."""
    return os.path.abspath(corpus) if corpus else DING


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


def setting(default, check=None):
    """A `TranslationConfig` field with its `check` declared beside it:
    "positive" (an integer >= 1) or "count" (an integer >= 0), applied by
    `validate` when the setting is given (not None); `POSITIVE` and `COUNTS`
    are made from these."""
    return dataclasses.field(default=default, metadata={"check": check})


@dataclasses.dataclass
class TranslationConfig:
    """Every setting of every command of the translation recipe, with its
    default; `None` for a model setting means "the family's default"
    (`FAMILY_DEFAULTS`), elsewhere "not given". Fields named as the model
    arguments they set; `validate()` holds every check."""

    command: str = "train"
    output: str = "runs/translate"
    # data
    corpus: str = None
    reverse: bool = False
    limit: int = setting(None, check="positive")
    vocab_size: int = setting(8000, check="positive")
    tokenizer: str = "sentencepiece"
    protect_numbers: bool = True  # tokenizers.numbers: digit groups as a placeholder, copied
    batch_size: int = setting(64, check="positive")
    batch_tokens: int = setting(None, check="positive")
    dictionary: float = 0.0
    alternatives: bool = False  # Ding: the other sentences of each entry, as training pairs
    max_length: int = setting(32, check="positive")
    seed: int = 0
    verbose: int = None
    overwrite: bool = False
    # model
    family: str = "transformer"
    attention: str = None  # the RNN's; None: general
    style: str = "luong"
    embed_dim: int = None
    hidden_dim: int = 256
    num_layers: int = 2
    num_heads: int = None
    position: str = None
    num_key_value_heads: int = None
    sliding_window: int = None
    tie_embeddings: bool = None
    shared_vocabulary: bool = None  # one vocabulary of both sides, one embedding table
    distill_from: list = None  # runs whose translations of the training split are its targets
    dropout: float = 0.1
    learning_rate: float = 1e-3
    label_smoothing: float = 0.1
    word_dropout: float = 0.0  # training only: pieces replaced by [UNK] (`data.make_dataset`)
    subword_sampling: float = 0.0  # training only: SentencePiece's sampling alpha (0: off)
    # training
    epochs: int = setting(10, check="positive")  # with time_budget: the most epochs
    time_budget: float = None  # minutes of training (`budget.py`); None or 0: --epochs decide
    warmup: int = 0  # steps of learning-rate warm-up (0: a constant rate)
    decay: str = "rsqrt"  # after the warm-up: 1/sqrt(step), or a cosine to 0 at the last step
    patience: int = setting(None, check="positive")
    hyperparameters: str = None
    mixed_precision: str = None
    jit: bool = False
    valid: str = None
    bleu_every: int = setting(0, check="count")
    bleu_sentences: int = setting(200, check="positive")
    average_last: int = None
    # train: models trained at once, one process each (`members.py`)
    members: int = setting(1, check="positive")
    # decoding (`decoding.search_from_config`); None: not given, so the run's
    # recorded setting (`run_decoding`), else BeamSearch's own (`BEAM_DEFAULTS`)
    beam_width: int = setting(None, check="positive")
    alpha: float = None  # GNMT's length penalty
    min_length: int = setting(None, check="count")
    no_repeat_ngram_size: int = setting(None, check="count")
    repetition_penalty: float = None
    coverage_penalty: float = None
    # evaluate, translate, export, average
    samples: int = setting(5, check="count")
    limit_test: int = setting(None, check="positive")
    test: str = None
    nbest: int = setting(None, check="positive")
    input: str = None
    output_file: str = None
    text: list = dataclasses.field(default_factory=list)
    checkpoints: list = None
    last: int = setting(None, check="positive")
    export_dir: str = "saved_models"
    model_name: str = "translator"
    num_hypotheses: int = setting(None, check="positive")
    ensemble: list = None  # evaluate, translate, export: other runs decoding with --output's
    # convert
    to: str = None
    dir: str = None
    quantization: str = None
    quantize: str = None  # export: None (float32) or one of QUANTIZATIONS
    # tune
    algorithm: str = "hyperband"
    trials: int = setting(10, check="positive")
    families: list = dataclasses.field(default_factory=lambda: list(FAMILIES))
    bleu_trials: int = setting(3, check="count")
    # Not a setting: the --output run's config.json as the command line read
    # it to settle the decoding settings (`trained_run.with_run_decoding`), so
    # that `load_run` does not read it again; None: not read.
    recorded: dict = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def for_command(cls, command, **settings):
        """The defaults of `command` (`COMMAND_DEFAULTS`), then `settings`."""
        output = "runs/demo" if command == "demo" else "runs/translate"
        return cls(
            command=command,
            **{"output": output, **COMMAND_DEFAULTS.get(command, {}), **settings},
        )

    def replace(self, **changes):
        """A copy with `changes` (the demo runs its commands on copies)."""
        return dataclasses.replace(self, **changes)

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

    def data_settings(self):
        """What a run's data split and vocabularies are built from (`run.json`)."""
        return {
            "corpus": corpus_key(self.corpus),
            "reverse": self.reverse,
            "limit": self.limit,
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer,
            "dictionary": self.dictionary,
            "alternatives": self.alternatives,
            "protect_numbers": self.protect_numbers,
            "shared_vocabulary": bool(self.shared_vocabulary),
            "distill_from": (
                [os.path.abspath(run) for run in self.distill_from] if self.distill_from else None
            ),
        }

    def validate(self):
        """Raise `UsageError` for the first setting out of range: sizes >= 1,
        counts >= 0, and the model's settings (`model_settings`, without
        `--hyperparameters`, which may change them later)."""
        for name in POSITIVE:
            value = getattr(self, name)
            if value is not None:
                check_number(name, value, integer=True, low=1)
        if self.average_last is not None:  # 1 would average one epoch
            check_number("average_last", self.average_last, integer=True, low=2)
        for name in COUNTS:
            if getattr(self, name) is not None:  # a decoding flag not given
                check_number(name, getattr(self, name), integer=True, low=0)
        if self.repetition_penalty is not None:
            check_number("repetition_penalty", self.repetition_penalty, low=0, low_included=False)
        check_number("dictionary", self.dictionary, low=0)
        for name in ("output", "export_dir", "dir"):
            if getattr(self, name) == "":
                raise UsageError(
                    f"{flag(name)} is empty (that would be the current folder): name a folder"
                )
        if self.members is not None and self.members > MAX_MEMBERS:
            raise UsageError(
                f"--members must be at most {MAX_MEMBERS} (each member is a TensorFlow process "
                f"of its own, all started at once); got {self.members}"
            )
        for name, high in UPPER_BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                check_number(name, value)  # finite: not inf or nan
                low = LOWER_BOUNDS.get(name)
                if value > high or (low is not None and value < low):
                    where = f"in [{low}, {high}]" if low is not None else f"at most {high}"
                    raise UsageError(f"{flag(name)} must be {where}; got {value}")
        self.check_runs_named_once()
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
        if self.time_budget is not None:  # 0: no budget (the demo's --time-budget 0)
            check_number("time_budget", self.time_budget, low=0)
        for name in ("coverage_penalty", "alpha"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name), low=0)
        if self.quantize is not None and self.quantize not in QUANTIZATIONS:
            raise UsageError(
                f"--quantize must be one of {list(QUANTIZATIONS)} (weight-only int8); "
                f"got {self.quantize!r}"
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


def checked(check):
    """The names of the settings declared with `setting(check=check)`."""
    return tuple(
        field.name
        for field in dataclasses.fields(TranslationConfig)
        if field.metadata.get("check") == check
    )


POSITIVE = checked("positive")  # integers >= 1
COUNTS = checked("count")  # integers >= 0


def decoding_settings(config):
    """The decoding settings a run records when it trains: the flags given,
    BeamSearch's defaults for the others."""
    return {
        name: BEAM_DEFAULTS[name] if getattr(config, name) is None else getattr(config, name)
        for name in DECODING
    }


def upgrade_decoding(recorded):
    """A run's recorded "decoding" dict with the keys renamed since it was
    written (`DECODING_RENAMED`: "no_repeat_ngram") under BeamSearch's names;
    `{}` for a run that recorded none."""
    if not isinstance(recorded, dict):
        return {}
    return {DECODING_RENAMED.get(key, key): value for key, value in recorded.items()}


# The commands that decode a trained run, or convert it with its decoding
# settings: they settle them against the run's before any work.
DECODES = ("evaluate", "translate", "export", "convert")


def run_decoding(config, run_config):
    """The one place where the run's recorded decoding options and the flags
    given are settled: `config` with each decoding setting not given on the
    command line taken from the run (`config.json`'s "decoding", what it was
    trained or demonstrated with, `upgrade_decoding`), else BeamSearch's
    default; validated again. (`decoding.settled_search` makes its BeamSearch.)"""
    recorded = run_config.get("decoding") if isinstance(run_config, dict) else None
    recorded = upgrade_decoding(recorded)
    filled = {
        name: recorded.get(name, BEAM_DEFAULTS[name])
        for name in DECODING
        if getattr(config, name) is None
    }
    return config.replace(**filled).validate()


def model_settings(config, hyperparameters=None):
    """The model's settings (`MODEL_KEYS`) of a `TranslationConfig` (or a
    dict of them), overridden by a tuner's `hyperparameters`, with the
    family's defaults filled in; `UsageError` for a setting out of range or
    one the family does not have."""
    given = config if isinstance(config, dict) else dataclasses.asdict(config)
    settings = {key: given.get(key) for key in MODEL_KEYS}
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
    if settings["family"] not in FAMILIES:
        raise UsageError(f"--family must be one of {list(FAMILIES)}; got {settings['family']!r}")
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
    for key in MODEL_POSITIVE:
        if settings[key] is not None:
            check_number(key, settings[key], integer=True, low=1)
    check_number("learning_rate", settings["learning_rate"], low=0, low_included=False)
    for key in ("word_dropout", "subword_sampling"):  # records made before the flags
        settings[key] = settings[key] or 0.0
    check_number("subword_sampling", settings["subword_sampling"], low=0)
    for key in FRACTIONS:
        check_number(key, settings[key], low=0, high=1)
    settings["warmup"] = 0 if settings["warmup"] is None else settings["warmup"]
    check_number("warmup", settings["warmup"], integer=True, low=0)
    settings["decay"] = settings["decay"] or "rsqrt"
    if settings["decay"] not in DECAYS:
        raise UsageError(f"--decay must be one of {list(DECAYS)}; got {settings['decay']!r}")
    if settings["position"] is not None and settings["position"] not in POSITIONS:
        raise UsageError(
            f"--position must be one of {list(POSITIONS)}; got {settings['position']!r}"
        )
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
    if settings["sliding_window"] is not None:  # recorded as Keras's window (`upgrade`)
        settings[WINDOW_RULE] = "keras"
    return settings


def recorded_defaults(settings):
    """The model settings a `run.json` written before they were flags was
    trained with: a run that lacks one is compared as having this value."""
    family = settings.get("family")
    return {
        "tokenizer": "wordpiece",
        **{
            key: FAMILY_DEFAULTS[key] if family in FAMILY_ONLY[key] else None
            for key in (*TRANSFORMER_ONLY[1:], "tie_embeddings", "shared_vocabulary")
        },
        # a tuning run's record has no family: its data settings say False
        **({} if family else {"shared_vocabulary": False}),
        "warmup": 0,
        "decay": "rsqrt",
        "dictionary": 0.0,
        "alternatives": False,
        "protect_numbers": False,
        "word_dropout": 0.0,
        "subword_sampling": 0.0,
        "distill_from": None,
    }
