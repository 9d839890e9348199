"""The translation recipe's tables: the values a setting may take, the
defaults that are not one field's (each command's own, BeamSearch's, the
tuner's search space) and the corpus a run reads unless told otherwise.

Each setting's own default, flag, help and check are declared once, on its
field (`settings.py`); this module holds what several settings share.

The command line is parsed before Keras and TensorFlow are imported (`--help`
and a mistyped flag answer at once), so nothing here imports the library:
these copy its tables (`keras_attention.registry.names()` in
`runs.LIBRARY_ATTENTION`, `seq2seq.transformer.POSITIONS`, `BeamSearch()`'s
decoding options, `seq2seq.search.MAX_BEAM_WIDTH` in `MAX_BEAM`,
`serving.translator.QUANTIZATIONS`, `serving.ctranslate2.QUANTIZATIONS`), and
tests/test_translation_cli.py::test_command_line_tables_are_the_librarys
checks that they do.
"""

import os

from ..runs import LIBRARY_ATTENTION
from ..tuning import ALGORITHMS  # noqa: F401  (the tuner's, offered by --algorithm)

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
FAMILIES = ("rnn", "convs2s", "transformer")
POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "relative")
CT2_QUANTIZATIONS = ("int8", "int8_float32", "float16")
CONVERSIONS = ("ctranslate2",)  # convert --to
QUANTIZATIONS = ("int8",)  # export --quantize: weight-only int8 (Translator.export)
ATTENTION = LIBRARY_ATTENTION + ("none",)  # the RNN's attention, by the library's own names
DECAYS = ("rsqrt", "cosine")  # --decay
STYLES = ("luong", "bahdanau")
PRECISIONS = ("bfloat16", "float16")
# --tokenizer: the suffix of its vocabulary files. A run recorded before the
# flag existed used WordPiece (`config.recorded_defaults`).
TOKENIZERS = {"sentencepiece": "spm", "wordpiece": "vocab"}

# `BeamSearch().decoding_options()`: the decoding options and their defaults.
# The decoding settings (`settings.DECODING`) are declared by these names,
# and a decoding flag not given means "the run's, else this" (`run_decoding`).
BEAM_DEFAULTS = {
    "beam_width": 4,
    "alpha": 0.6,
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "coverage_penalty": 0.0,
}

# `train --members`: at most this many, each a TensorFlow process of its own
# started at once (1000 started two a second and made the load average 151).
MAX_MEMBERS = 8
# `train --workers`: at most this many local worker processes, for the same reason.
MAX_WORKERS = 64
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
MAX_TRIALS = 10_000  # tune --trials, --bleu-trials
MAX_UPDATE_FREQ = 10_000  # batches of one optimizer update (--update-freq)
# --beam-width (and --nbest, --num-hypotheses): `seq2seq.search.MAX_BEAM_WIDTH`, copied.
MAX_BEAM = 1000
# NumPy's seeds are 32-bit (`keras.utils.set_random_seed`), and --members
# seeds its models --seed, --seed + 1, ..., --seed + MAX_MEMBERS - 1.
MAX_SEED = 2**32 - MAX_MEMBERS
# Recorded beside a `sliding_window` since it means Keras's window (`upgrade`).
WINDOW_RULE = "sliding_window_rule"

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


# `--preset`: the Transformers of Vaswani et al., "Attention Is All You
# Need" (2017), Table 3: each fills the settings it names unless their flags
# are given (`TranslationConfig.for_command`). Their rate schedule, d^-0.5 ·
# min(s^-0.5, s · w^-1.5), is the rsqrt decay with --warmup w peaking at
# s = w, so --learning-rate is that peak, d^-0.5 · w^-0.5 (6.99e-4 for
# base, 4.94e-4 for big). Their vocabulary: 32,000 shared byte-pair pieces
# (WMT En-De; here SentencePiece's); the output projection, both embeddings
# one table (their Sec. 3.4).
def paper_rate(width, warmup):
    """The peak of the paper's rate schedule, d^-0.5 · w^-0.5, for the
    model width d (`--hidden-dim`) and warm-up w (`--warmup`)."""
    return (width * warmup) ** -0.5


PAPER = {
    "family": "transformer",
    "num_layers": 6,  # each for the encoder and the decoder
    "vocab_size": 32000,
    "shared_vocabulary": True,
    "tie_embeddings": True,
    "label_smoothing": 0.1,
    "warmup": 4000,
    "decay": "rsqrt",
}
PRESETS = {
    "base": {
        **PAPER,
        "hidden_dim": 512,
        "num_heads": 8,
        "intermediate_dim": 2048,
        "dropout": 0.1,
        "learning_rate": paper_rate(512, 4000),
    },
    "big": {
        **PAPER,
        "hidden_dim": 1024,
        "num_heads": 16,
        "intermediate_dim": 4096,
        "dropout": 0.3,
        "learning_rate": paper_rate(1024, 4000),
    },
}
PRESET_KEYS = tuple(dict.fromkeys(key for preset in PRESETS.values() for key in preset))

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
