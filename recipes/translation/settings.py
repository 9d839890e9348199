"""The translation recipe's settings, in groups, as fairseq's grouped
dataclass configs (`DatasetConfig`, `GenerationConfig`, ...): how a setting
is declared (`setting`, `group`), the commands and named checks, the tables
the declarations use, and the groups a run's data and model are made from
(run, data, model, optimization); `command_settings.py` declares the other
groups and composes them all (`Settings`).

Each field carries its default and, in its metadata, its flag's help, the
commands that take it, its bounds and choices, the families that have it
and its earlier name; `group` adds its group and the records that hold it
(`RECORDS`). The command line (`recipes/translate.py`), the one checker
(`config.check_setting`) and the name lists (`config.MODEL_KEYS`, ...) are
made from them; `config.TranslationConfig` adds the behaviour.

The command line is parsed before Keras and TensorFlow are imported, so
nothing here imports the library: these copy its tables
(`keras_attention.registry.names()` in `runs.LIBRARY_ATTENTION`,
`seq2seq.transformer.POSITIONS`), and
tests/test_translation_cli.py::test_command_line_tables_are_the_librarys
checks that they do.
"""

import dataclasses
import os
import types

from ..runs import LIBRARY_ATTENTION
from .presets import PRESETS

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
SEARCHING = ("train", "evaluate", "translate", "export", "convert", "demo")  # beam width, alpha
DECODING_FLAGS = ("train", "translate", "export", "convert")  # every decoding option
RUNS = ("evaluate", "translate", "export")  # the commands that decode one run or an ensemble

# The named checks a setting may declare (`config.check_setting`).
CHECKS = {
    "positive": {"integer": True, "low": 1},
    "count": {"integer": True, "low": 0},
    "fraction": {"low": 0, "below": 1},  # in [0, 1)
}
# What a run records, each record the settings of its groups: config.json's
# (and run.json's) model settings, data/meta.json's data settings, and
# config.json's decoding options. A field may be held by another record too
# (`also_records`).
RECORDS = {"model": ("model", "optimization"), "data": ("data",), "decoding": ("decoding",)}
GROUPS = {}  # each group's name -> its dataclass, in declaration order (`group`)

# The largest value of each kind of count a setting takes: far beyond any
# real run, and small enough that nothing overflows the 32- and 64-bit
# integers of NumPy, TensorFlow and SentencePiece later, after the run has
# written its data, where a refusal would come too late.
MAX_PAIRS = 10**9  # sentence pairs: --limit, --vocab-sample, --limit-test, ...
MAX_STEPS = 10**9  # training steps: --warmup, --save-every, --validate-every
MAX_EPOCHS = 100_000  # --epochs, --patience, --bleu-every, --average-last, --last
MAX_LENGTH = 10_000  # subword pieces of a sentence: --max-length, --min-length, ...
MAX_WIDTH = 65_536  # a model's widths (--hidden-dim, ...) and head counts
MAX_VOCABULARY = 1_000_000  # subword pieces of a vocabulary (--vocab-size)
MAX_BATCH = 10**8  # pairs (--batch-size) or pieces (--batch-tokens) of a batch
# `train --members`: at most this many, each a TensorFlow process of its own
# started at once: more than a few per core overload the machine before any
# of them trains.
MAX_MEMBERS = 8
# NumPy's seeds are 32-bit (`keras.utils.set_random_seed`), and --members
# seeds its models --seed, --seed + 1, ..., --seed + MAX_MEMBERS - 1.
MAX_SEED = 2**32 - MAX_MEMBERS


def setting(
    default=None,
    help=None,
    commands=(),
    *,
    check=None,
    at_most=None,
    choices=None,
    choices_why=None,
    also_records=(),
    families=None,
    family_default=None,
    old=None,
    folder=False,
    help_for=None,
    factory=None,
    **argument,
):
    """A field of a settings group: its `default` and its declaration.

    Args:
        default: the value when the flag is not given (a command's own
            default: `command_settings.COMMAND_DEFAULTS`).
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
        choices: the values it may take (each item of a list); the flag
            offers them, and `config.check_setting` refuses any other.
        choices_why: said when a value not in `choices` is refused; the
            flag then takes any word, so that this message answers.
        also_records: records beside its group's that hold it (`RECORDS`).
        families: the model families that have it (`FAMILY_ONLY`); None: all.
        family_default: its value for those families when not given.
        old: the name 0.2.0 gave it (its flag still parses, with a note; a
            record under it is read under today's name).
        folder: a folder path (an empty one is refused).
        factory: a default made fresh for each object (a list).
        **argument: `argparse` arguments: metavar, nargs, required, aliases
            (more option strings), positional, and exclusive (the name of a
            required mutually exclusive group).
    """
    check = (CHECKS[check] if isinstance(check, str) else check) or {}
    if at_most is not None:
        check = {**check, "at_most": at_most}
    if choices is not None:
        choices = tuple(choices)
        if choices_why is None:
            argument["choices"] = choices
        else:
            argument.setdefault("metavar", "{" + ",".join(map(str, choices)) + "}")
    placeholders = {"family_default": family_default, "at_most": check.get("at_most")}
    metadata = {
        "help": help and help.format(**placeholders),
        "help_for": {name: text.format(**placeholders) for name, text in (help_for or {}).items()},
        "commands": commands,
        "check": check,
        "choices": choices,
        "choices_why": choices_why,
        "also_records": also_records,
        "families": families,
        "family_default": family_default,
        "old": old,
        "folder": folder,
        "argument": argument,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def group(name):
    """A class decorator: the dataclass of the settings group `name`,
    entered in `GROUPS`, each field's metadata given its "group" and the
    "records" that hold it (`RECORDS`, `also_records`)."""

    def declare(cls):
        cls = dataclasses.dataclass(cls)
        for field in dataclasses.fields(cls):
            also = field.metadata.get("also_records", ())
            records = tuple(
                record for record, groups in RECORDS.items() if name in groups or record in also
            )
            field.metadata = types.MappingProxyType(
                {**field.metadata, "group": name, "records": records}
            )
        GROUPS[name] = cls
        return cls

    return declare


# The corpus a run reads unless --corpus names a TSV file: the Ding
# dictionary's example sentences (Debian package `trans-de-en`).
DING = "/usr/share/trans/de-en"
# The longest line a user's text file (--corpus, --valid, --test, translate
# --input) may hold, in bytes before its `\n`: a sentence pair is far shorter
# (the model reads --max-length pieces), and a reader keeps no more than this
# of a line in memory, however long it is (`corpus.bounded_lines`).
MAX_LINE_BYTES = 1 << 20


def size_in_words(size):
    """`size` bytes in words: `1 MiB` for whole mebibytes, else `1000 bytes`."""
    return f"{size >> 20} MiB" if size and size % (1 << 20) == 0 else f"{size} bytes"


MAX_LINE = size_in_words(MAX_LINE_BYTES)  # in the help's words


def corpus_key(corpus):
    """How a run records its corpus (`run.json`, `data/meta.json`): the
    absolute path of a `--corpus` file, else the Ding corpus's path."""
    return os.path.abspath(corpus) if corpus else DING


# --tokenizer: the suffix of its vocabulary files. A run recorded before the
# flag existed used WordPiece (`config.recorded_defaults`).
TOKENIZERS = {"sentencepiece": "spm", "wordpiece": "vocab"}
FAMILIES = ("rnn", "convs2s", "transformer")
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "relative")
ATTENTION = LIBRARY_ATTENTION + ("none",)  # the RNN's attention, by the library's own names
STYLES = ("luong", "bahdanau")
DECAYS = ("rsqrt", "cosine")  # --decay
# Recorded beside a `sliding_window` since it means Keras's window (`upgrade`).
WINDOW_RULE = "sliding_window_rule"


@group("run")
class RunSettings:
    """The command, its run folder, where settings come from (a preset, a
    tuner's file) and how the process runs; none recorded as a group."""

    command: str = "train"
    output: str = setting(
        "runs/translate",
        "the run's folder (data split, vocabularies, checkpoints, model)",
        EVERY,
        folder=True,
    )
    preset: str = setting(  # applied by `TranslationConfig.for_command`, tune's trials
        None,
        "settings that train, for the --family: small (128 wide, 4,000 pieces a side, batches "
        "of 1,536 pieces, warm-up 400, the mean of the last 3 epochs; Ding: dictionary "
        "entries), base (the Transformer base of 'Attention Is All You Need', 6 layers of "
        "512, 32,000 shared pieces, warm-up 4000, rate d^-0.5 * w^-0.5 of the --hidden-dim d "
        "and --warmup w used; ConvS2S and the RNN 256 wide) or big (the paper's Transformer "
        "big); none: the flags' own defaults. Default: chosen by the corpus's sentence "
        "pairs, small below 100,000, base from there, big (the Transformer) from 10 million; "
        "a run resumes with its own. A flag given wins",
        (*MODEL, "tune"),
        help_for={
            "tune": "settings each trial starts from, for its family: small, base or big as "
            "for train (the searched families must share its data settings); none: the "
            "flags' own defaults and the fixed search space. Default: chosen by the corpus's "
            "sentence pairs as for train; a search resumes with its own",
        },
        choices=(*PRESETS, "none"),
    )
    hyperparameters: str = setting(None, "best_hyperparameters.json from `tune`", MODEL)
    seed: int = setting(0, "random seed (0 to {at_most})", DATA, check="count", at_most=MAX_SEED)
    verbose: int = setting(
        None,
        "Keras fit verbosity (default: a progress bar on a terminal, else a line per epoch)",
        DATA,
        choices=[0, 1, 2],
    )
    overwrite: bool = setting(
        False,
        "delete what an earlier run wrote in --output and start again",
        (*DATA, "convert", "export"),
        help_for={
            "convert": "replace OUT if it exists (atomically)",
            "export": "with --format ctranslate2: replace the model folder if it exists "
            "(atomically)",
        },
    )
    ensemble: list = setting(
        None,
        "decode with these runs' models and --output's as one: each step's next-piece "
        "probabilities averaged (seq2seq.Ensemble); every run needs --output's vocabulary "
        "files (train them with the same data settings)",
        RUNS,
        nargs="+",
        metavar="RUN",
    )


@group("data")
class DataSettings:
    """What a run's data split and vocabularies are built from: recorded in
    `data/meta.json` (and `run.json`); a run resumes only with the same."""

    corpus: str = setting(
        None,
        f"a TSV file of source<TAB>target lines, or its gzip file; lines longer than {MAX_LINE} "
        "are skipped (default: Ding de-en)",
        DATA,
    )
    reverse: bool = setting(False, "swap the direction (Ding: English -> German)", DATA)
    limit: int = setting(
        None,
        "use only the first N pairs of the corpus (default: all)",
        DATA,
        check="positive",
        at_most=MAX_PAIRS,
    )
    vocab_size: int = setting(
        8000, "subword vocabulary size target", DATA, check="positive", at_most=MAX_VOCABULARY
    )
    tokenizer: str = setting(
        "sentencepiece",
        "subword vocabulary: SentencePiece (decodes to the exact input text) or WordPiece "
        "(loses where spaces were; the only one before this flag)",
        DATA,
        choices=TOKENIZERS,
    )
    vocab_sample: int = setting(
        200_000,
        "learn the vocabularies from a seeded sample of at most this many training pairs "
        "(sentences per side; a smaller split: all of it)",
        DATA,
        check="positive",
        at_most=MAX_PAIRS,
    )
    protect_numbers: bool = setting(
        True,
        "train on digit groups replaced by a placeholder, and copy the source's numbers into "
        "the translations",
        DATA,
    )
    dictionary: float = setting(
        0.0,
        "Ding only: per epoch, add this many of the dictionary's word and phrase entries per "
        "sentence pair as training pairs (a new random draw each epoch; 0: off; at most "
        "{at_most})",
        DATA,
        check={"low": 0, "at_most": 100.0},
    )
    alternatives: bool = setting(
        False,
        "Ding only: also train on the other sentences of each training pair's entry (its `;` "
        "alternatives, every German one with every English one); validation and test are "
        "unchanged",
        DATA,
    )


@group("model")
class ModelSettings:
    """The model's architecture; `None` means "the family's default"
    (`family_default`). Recorded in `config.json` with the optimization
    group, named as the model arguments they set."""

    max_length: int = setting(
        32,
        "longest sentence in subword pieces (longer pairs are left out)",
        DATA,
        check="positive",
        at_most=MAX_LENGTH,
    )
    family: str = setting("transformer", "the model family", MODEL, choices=FAMILIES)
    attention: str = setting(
        None,
        "the recurrent model's attention ('none': the bottleneck baseline; default: general)",
        MODEL,
        choices=ATTENTION,
    )
    style: str = setting(
        "luong", "where the recurrent decoder applies attention", MODEL, choices=STYLES
    )
    embed_dim: int = setting(
        None,
        "embedding width (default: {family_default}; rnn and convs2s only: the transformer's "
        "is --hidden-dim)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        families=("rnn", "convs2s"),
        family_default=128,
    )
    hidden_dim: int = setting(
        256, "hidden width", MODEL, check="positive", at_most=MAX_WIDTH, old="units"
    )
    num_layers: int = setting(
        2,
        "layers per stack",
        MODEL,
        check="positive",
        at_most=1000,  # a 1000-layer stack is far deeper than any translation model's
        old="layers",
    )
    num_heads: int = setting(
        None,
        "attention heads (default: {family_default}; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        families=("transformer",),
        family_default=4,
        old="heads",
    )
    intermediate_dim: int = setting(
        None,
        "the feed-forward width of each layer (default: 2 * --hidden-dim; transformer only)",
        MODEL,
        check="positive",
        at_most=4 * MAX_WIDTH,  # the paper's 4 * d_model
        families=("transformer",),
        family_default=None,  # 2 * hidden_dim (`config.model_settings`)
    )
    position: str = setting(
        None,
        "how the transformer places tokens: added to the embeddings (sinusoidal, learned) or "
        "in every self-attention (rope, alibi, relative) (default: {family_default}; "
        "transformer only)",
        MODEL,
        families=("transformer",),
        family_default="sinusoidal",  # the paper's, and what runs before --position had
        choices=POSITIONS,
    )
    num_key_value_heads: int = setting(
        None,
        "key/value heads, dividing --num-heads: grouped-query attention (1: multi-query; "
        "default: one per head; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_WIDTH,
        families=("transformer",),
        family_default=None,  # one key/value head per query head
        old="kv_heads",
    )
    sliding_window: int = setting(
        None,
        "sliding window w: each self-attention sees positions less than w away, as Keras's "
        "sliding_window (default: all; transformer only)",
        MODEL,
        check="positive",
        at_most=MAX_LENGTH + 1,  # sees every position of the longest sentence
        families=("transformer",),
        family_default=None,  # self-attention sees every position
        old="window",
    )
    dropout: float = setting(0.1, "in [0, 1)", MODEL, check="fraction")
    tie_embeddings: bool = setting(
        None,
        "the output projection is the target embedding table (transformer and convs2s)",
        MODEL,
        families=("transformer", "convs2s"),
        family_default=False,
    )
    shared_vocabulary: bool = setting(
        None,
        "one vocabulary learned from both sides, and one embedding table that the encoder "
        "and decoder share (with --tie-embeddings: three-way tying; transformer and convs2s)",
        (*MODEL, "tune"),
        help_for={
            "tune": "one vocabulary learned from both sides, whose one embedding table the "
            "encoder and decoder of the Transformer and ConvS2S trials share",
        },
        also_records=("data",),  # the vocabularies are learned from it
        families=("transformer", "convs2s"),
        family_default=False,  # a vocabulary of each side, and an embedding table of each
    )


@group("optimization")
class OptimizationSettings:
    """How the weights are updated: the rate, its schedule, the
    regularisation of training; recorded in `config.json` with the model."""

    learning_rate: float = setting(
        1e-3,
        "Adam's learning rate (> 0)",
        MODEL,
        # no upper bound: a rate too large (even inf in float32) makes training
        # diverge, which stops it with one error line and keeps nothing
        # (`training._check_finite`); no integer is made of it
        check={"low": 0, "low_included": False},
    )
    label_smoothing: float = setting(0.1, "in [0, 1)", MODEL, check="fraction")
    word_dropout: float = setting(  # applied by `data.make_dataset`
        0.0,
        "training only: replace each source piece and each piece of the decoder's input by "
        "[UNK] with this probability, in [0, 1) (default: 0)",
        MODEL,
        check="fraction",
    )
    subword_sampling: float = setting(
        0.0,
        "training only (SentencePiece): segment each training sentence anew every epoch, "
        "drawing a segmentation with probability proportional to P(segmentation)^ALPHA "
        "(subword regularization; e.g. 0.3, at most {at_most}; default 0: the best)",
        MODEL,
        check={"low": 0, "at_most": 10.0},
        metavar="ALPHA",
    )
    update_freq: int = setting(  # Keras's gradient_accumulation_steps (`model.build_model`)
        1,
        "update the weights once every K batches, with the mean of their gradients "
        "(gradient accumulation: the batch of an update is K batches, in the memory of one); "
        "--warmup and the decay count updates; an interrupted run resumes with its own K. "
        "K is at most {at_most} and at most an epoch's batches (a larger K is refused "
        "before training starts: it would train an epoch without an update); the batches "
        "after the run's last full K, fewer than K, make no update, and training says so",
        MODEL,
        check="positive",
        at_most=10_000,  # batches of one update
        metavar="K",
    )
    warmup: int = setting(
        0,
        "learning-rate warm-up steps, then --decay (--learning-rate is the peak; 0 with "
        "rsqrt: a constant rate); a step is an optimizer update (--update-freq batches)",
        MODEL,
        check="count",
        at_most=MAX_STEPS,
    )
    decay: str = setting(
        "rsqrt",
        "the rate after the warm-up: as 1/sqrt(step), or along a cosine to 0 at the last "
        "step of --epochs",
        MODEL,
        choices=DECAYS,
    )
