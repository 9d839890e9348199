"""The settings groups of what the commands do with a model (training,
decoding, input and output, export, tuning) and the tables they use, each
declared as `settings.py`'s groups are; `Settings`, every group in one.

Nothing here imports the library: these copy its tables (`BeamSearch()`'s
decoding options, `seq2seq.search.MAX_BEAM_WIDTH` in `MAX_BEAM`,
`serving.records.QUANTIZATIONS`, `serving.ctranslate2.QUANTIZATIONS`), and
tests/test_translation_cli.py::test_command_line_tables_are_the_librarys
checks that they do. Example:

    FIELDS["alpha"].metadata["commands"]  # ('train', 'evaluate', 'translate', 'export', 'demo')
    FIELDS["alpha"].metadata["group"]     # 'decoding'
"""

import dataclasses

from ..tuning import ALGORITHMS
from .settings import (
    DATA,
    DECODING_FLAGS,
    FAMILIES,
    GROUPS,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_LENGTH,
    MAX_LINE,
    MAX_MEMBERS,
    MAX_PAIRS,
    MAX_STEPS,
    MAX_VOCABULARY,
    MODEL,
    SEARCHING,
    group,
    setting,
)

# `BeamSearch().decoding_options()`: the decoding options and their defaults.
# The decoding group is declared by these names, and a decoding flag not
# given means "the run's, else this" (`trained_run.settle_decoding`).
BEAM_DEFAULTS = {
    "beam_width": 4,
    "alpha": 0.6,
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "coverage_penalty": 0.0,
}
# --beam-width (and --nbest, --num-hypotheses): `seq2seq.search.MAX_BEAM_WIDTH`, copied.
MAX_BEAM = 1000
# `train --workers`: at most this many local worker processes, each a
# TensorFlow process of its own started at once (as `settings.MAX_MEMBERS`).
MAX_WORKERS = 64
MAX_TRIALS = 10_000  # tune --trials, --bleu-trials
PRECISIONS = ("bfloat16", "float16")
QUANTIZATIONS = ("int8",)  # export --quantize: weight-only int8 (Translator.export)
CT2_QUANTIZATIONS = ("int8", "int8_float32", "float16")
# export --format: the library's exporters (`serving.exporters.EXPORTERS`)
FORMATS = ("saved_model", "ctranslate2")
CONVERSIONS = ("ctranslate2",)  # convert --to

# Each command's defaults where they differ from the fields' (`for_command`).
# The demo's are sized for ten minutes on a quiet 2-core CPU for the whole
# job (`train`'s are larger); what each did to BLEU: RESULTS.md, "The demo's
# settings". Its alpha was chosen on the validation split: 0.6 left
# translations short.
COMMAND_DEFAULTS = {
    "tune": {"epochs": 4, "output": "runs/tune"},  # not train's folder
    "demo": {
        "output": "runs/demo",
        "family": "convs2s",
        "preset": "small",  # the demo's settings (RESULTS.md, "The demo's settings")
        # Training ends on the clock (`budget.py`): 8 minutes of it, so that
        # evaluation and export end within ten minutes of its first step.
        "time_budget": 8.0,
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


@group("training")
class TrainingSettings:
    """How training runs: its length, batches, backups, validation,
    processes and checkpoints; not recorded (a resume may change them)."""

    epochs: int = setting(
        10,
        "epochs to train (default: 10; with --time-budget: the most, and without --epochs "
        "the budget alone ends training)",
        (*MODEL, "tune"),
        check="positive",
        at_most=MAX_EPOCHS,
        help_for={"tune": "most epochs a trial trains"},
    )
    batch_size: int = setting(64, "pairs per batch", DATA, check="positive", at_most=MAX_BATCH)
    batch_tokens: int = setting(
        None,
        "size batches by this many subword pieces per side instead of --batch-size (batches "
        "are bucketed by length either way)",
        DATA,
        check="positive",
        at_most=MAX_BATCH,
    )
    time_budget: float = setting(  # minutes (`budget.py`); None or 0: --epochs decide
        None,
        "train for about this many minutes: training ends at the last step that fits, "
        "inside an epoch if that is where the budget ends (its validation still runs), and "
        "the cosine decay's end and averaging follow the clock (the run records what fit); "
        "0: no budget, --epochs decide (at most {at_most}, a year; the demo's default is 8)",
        MODEL,
        # a year: a larger budget overflows the epochs planned from it (a NaN count)
        check={"low": 0, "at_most": 60 * 24 * 365},
        metavar="MINUTES",
    )
    save_every: int = setting(  # the backup's steps (`runs.resilient_backup`), not the model's
        0,
        "back the run up every N training steps as well as at each epoch end: a killed run "
        "resumes from the last backup mid-epoch, without training again the batches done; "
        "with --average-last, the last backups are the checkpoints averaged "
        "(0: at epoch ends only)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
        metavar="STEPS",
    )
    validate_every: int = setting(  # `steps.StepValidation`
        0,
        "every N training steps, validation loss (on the first validation batches) and greedy "
        "BLEU (on the first --bleu-sentences validation pairs), logged, in "
        "validation_steps.jsonl and in TensorBoard (logs/steps) (0: at epoch ends only)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
        metavar="STEPS",
    )
    patience: int = setting(
        None,
        "stop after this many epochs without a better validation loss (the best epoch's "
        "weights are kept either way)",
        MODEL,
        check="positive",
        at_most=MAX_EPOCHS,
    )
    mixed_precision: str = setting(
        None, "compute in this precision (variables stay float32)", MODEL, choices=PRECISIONS
    )
    jit: bool = setting(
        False, "compile training with XLA on TensorFlow (JAX always compiles its steps)", MODEL
    )
    valid: str = setting(
        None,
        "validate on this TSV file of source<TAB>target lines instead of the split (lines "
        f"longer than {MAX_LINE} are skipped)",
        ("train", "average"),
        help_for={
            "average": f"report validation loss on this TSV file (lines longer than {MAX_LINE} "
            "are skipped)"
        },
        metavar="FILE",
    )
    bleu_every: int = setting(
        0,
        "validation BLEU (greedy) every K epochs, logged as val_bleu (0: off)",
        ("train",),
        check="count",
        at_most=MAX_EPOCHS,
    )
    bleu_sentences: int = setting(
        200,
        "validation pairs --bleu-every translates",
        ("train",),
        check="positive",
        at_most=MAX_PAIRS,
    )
    average_last: int = setting(  # 1 would average one epoch
        None,
        "keep the last N epochs' weights (checkpoints/) and save their mean as the model "
        "(with --save-every: the last N backups')",
        ("train",),
        check={"integer": True, "low": 2, "at_most": MAX_EPOCHS},
    )
    members: int = setting(  # models trained at once, one process each (`members.py`)
        1,
        "train N models at once (seeds --seed, --seed + 1, ...), one process each on its "
        "share of the cores: the first in --output, the others in --output/members/K, all "
        "of one vocabulary, for --ensemble (default 1; at most {at_most})",
        ("train",),
        check={
            "integer": True,
            "low": 1,
            "at_most": MAX_MEMBERS,
            "why": "each member is a TensorFlow process of its own, all started at once",
        },
    )
    workers: int = setting(  # one model, several processes (`workers.py`); not recorded
        1,
        "train one model in N worker processes of this machine, each on its share of the "
        "cores: a MultiWorkerMirroredStrategy cluster on loopback, as TF_CONFIG makes one "
        "across machines; --batch-size/--batch-tokens stay the global batch, split among "
        "the workers (default: 1, one process; at most {at_most})",
        ("train",),
        check={
            "integer": True,
            "low": 1,
            "at_most": MAX_WORKERS,
            "why": "each worker is a TensorFlow process of its own, all started at once",
        },
    )
    distill_from: list = setting(  # the data record holds it (`TranslationConfig.data_settings`)
        None,
        "train on these trained runs' translations of the training split instead of its "
        "references (sequence-level distillation; several runs translate as an ensemble); "
        "the run takes their data split and vocabularies",
        MODEL,
        nargs="+",
        metavar="RUN",
    )
    checkpoints: list = setting(
        None,
        ".weights.h5 files of the run's model",
        ("average",),
        nargs="+",
        metavar="FILE",
        exclusive="checkpoints",
    )
    last: int = setting(
        None,
        "the last N epoch (or step) checkpoints train --average-last kept (N >= 2, as "
        "--average-last: one checkpoint is no mean)",
        ("average",),
        check={"integer": True, "low": 2, "at_most": MAX_EPOCHS},
        exclusive="checkpoints",
    )


@group("decoding")
class DecodingSettings:
    """BeamSearch's decoding options, by its names (`trained_run.search_from_config`),
    recorded in `config.json` when a run trains. None: not given, so the
    run's recorded setting (`trained_run.settle_decoding`), else `BEAM_DEFAULTS`."""

    beam_width: int = setting(
        None,
        "beam search width",
        SEARCHING,
        check="positive",
        at_most=MAX_BEAM,
        help_for={"export": "beam width of serving_default and nbest"},
    )
    alpha: float = setting(
        None,
        "GNMT's length penalty of beam search: hypotheses are ranked by "
        "log p / ((5 + length) / 6)^alpha (0 to {at_most}; 0: the plain sum)",
        SEARCHING,
        check={"low": 0, "at_most": 10.0},
    )
    min_length: int = setting(
        None,
        "at least this many target pieces before the end (>= 0)",
        DECODING_FLAGS,
        check="count",
        at_most=MAX_LENGTH,
    )
    no_repeat_ngram_size: int = setting(
        None,
        "never repeat an n-gram of this many pieces (0: off)",
        DECODING_FLAGS,
        check="count",
        at_most=MAX_LENGTH,
        old="no_repeat_ngram",
    )
    repetition_penalty: float = setting(
        None,
        "CTRL's penalty on pieces already generated (0.01 to {at_most}; 1: off)",
        DECODING_FLAGS,
        # 1e-300 is 0 in float32: a division by it
        check={"low": 0.01, "at_most": 100.0},
    )
    coverage_penalty: float = setting(
        None,
        "GNMT's coverage penalty beta of beam search (0 to {at_most}; 0: off)",
        DECODING_FLAGS,
        check={"low": 0, "at_most": 10.0},
    )


@group("io")
class InputOutputSettings:
    """What evaluate and translate read and write: test sentences, samples,
    the texts and translations, n-best lists."""

    samples: int = setting(
        5, "sample translations and heatmaps shown", ("evaluate",), check="count", at_most=MAX_PAIRS
    )
    limit_test: int = setting(
        None,
        "evaluate only the first N test sentences",
        ("evaluate", "demo"),
        check="positive",
        at_most=MAX_PAIRS,
        help_for={"demo": "evaluate only the first N test sentences (default: all)"},
    )
    test: str = setting(
        None,
        "score this TSV file of source<TAB>target lines instead of the test split (lines "
        f"longer than {MAX_LINE} are skipped)",
        ("evaluate",),
        metavar="FILE",
    )
    nbest: int = setting(
        None,
        "print the N best hypotheses of each sentence instead: N lines per sentence, "
        "sentences in order, best first, each `score<TAB>translation` (score: "
        "log-probability over the length penalty, plus the coverage penalty; an unfilled "
        "slot is -1000000000.0 and empty); N <= --beam-width",
        ("translate",),
        check="positive",
        at_most=MAX_BEAM,
        aliases=("--num-hypotheses",),
    )
    input: str = setting(
        None,
        "translate the lines of FILE (-: standard input, also read when it is not a terminal "
        f"and no text is given): a line out for each line in; a line longer than {MAX_LINE} "
        "is refused",
        ("translate",),
        metavar="FILE",
    )
    output_file: str = setting(
        None,
        "write the translations there, a line each, atomically (default: stdout)",
        ("translate",),
        metavar="FILE",
    )
    text: list = setting(
        help="the sentences to translate",
        commands=("translate",),
        factory=list,
        positional=True,
        nargs="*",
    )


@group("export")
class ExportSettings:
    """The export for TensorFlow Serving and the conversion for CTranslate2."""

    format: str = setting(
        "saved_model",
        "what to write: a versioned SavedModel for TF Serving (<export-dir>/<model-name>/<n>/), "
        "or a CTranslate2 model folder (<export-dir>/<model-name>/, the transformer family; "
        "as `convert --to ctranslate2`)",
        ("export",),
        choices=FORMATS,
    )
    export_dir: str = setting(
        "saved_models", "base directory: <dir>/<name>/<version>/", ("export",), folder=True
    )
    model_name: str = setting("translator", "the served model's name", ("export",))
    num_hypotheses: int = setting(
        None,
        "hypotheses the nbest signature returns (default: --beam-width; at most that)",
        ("export",),
        check="positive",
        at_most=MAX_BEAM,
    )
    quantize: str = setting(
        None,
        "export a weight-only int8 copy of the model (per-channel float scales, float32 "
        "arithmetic; variables/ about 4x smaller; the run's model is kept; default: float32)",
        ("export",),
        choices=QUANTIZATIONS,
        choices_why="weight-only int8",
    )
    xla: bool = setting(
        False, "XLA-compiled searches (serve with --xla_cpu_compilation_enabled=true)", ("export",)
    )
    to: str = setting(
        None, "the runtime to convert for", ("convert",), choices=CONVERSIONS, required=True
    )
    dir: str = setting(
        None,
        "the model folder to write (with the run's source.spm and target.spm)",
        ("convert",),
        folder=True,
        metavar="OUT",
        required=True,
    )
    quantization: str = setting(
        None,
        "CTranslate2's weight type (--format ctranslate2; default: float32)",
        ("convert", "export"),
        choices=CT2_QUANTIZATIONS,
    )
    length_penalty: float = setting(
        None,
        "CTranslate2's length penalty: hypotheses ranked by log p / length^P (--format "
        "ctranslate2). A beam search with --alpha > 0 needs it: GNMT's penalty is not "
        "CTranslate2's, so --alpha is never passed as it (0 to {at_most})",
        ("convert", "export"),
        check={"low": 0, "at_most": 10.0},
    )
    shortlist: int = setting(
        None,
        "decode each request over this many target pieces (a vocabulary shortlist: the "
        "reserved pieces, the most frequent quarter, then the candidates of the request's "
        "source pieces learned from the run's training split; CTranslate2 gets the same "
        "table as its vocabulary map, vmap.txt, and decodes over its candidates for the "
        "batch, however many). Default: the whole target vocabulary (8 to {at_most})",
        ("convert", "export"),
        check={"integer": True, "low": 8, "at_most": MAX_VOCABULARY},
    )


@group("tuning")
class TuningSettings:
    """The KerasTuner search of `tune`."""

    algorithm: str = setting("hyperband", "the search algorithm", ("tune",), choices=ALGORITHMS)
    trials: int = setting(
        10, "trials for bayesian/random", ("tune",), check="positive", at_most=MAX_TRIALS
    )
    families: list = setting(
        help="families searched",
        commands=("tune",),
        factory=lambda: list(FAMILIES),
        nargs="+",
        choices=FAMILIES,
    )
    bleu_trials: int = setting(
        3, "report validation BLEU of the N best", ("tune",), check="count", at_most=MAX_TRIALS
    )


# Every group in one, the fields in the groups' order (a dataclass takes its
# bases' fields from the last base to the first).
@dataclasses.dataclass
class Settings(*reversed(GROUPS.values())):
    """Every setting of every command of the translation recipe: the fields
    of every group (`GROUPS`), at the top level."""


FIELDS = {field.name: field for field in dataclasses.fields(Settings)}
