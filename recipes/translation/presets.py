"""The translation recipe's `--preset`s: the settings each fills, by
model family, and the rule that chooses one by the corpus's size when none
is given (`preset_for`). Nothing here imports the library: the command
line reads it before Keras and TensorFlow are imported."""

# `--preset`: settings that train, by model family and corpus size (each
# fills the settings it names unless their flags are given:
# `TranslationConfig.for_command`). With no --preset, `train` chooses by
# the corpus's pairs (`preset_for`): `small` below 100,000 (Ding's 19,398),
# `base` from there, `big` (the Transformer only) from 10 million.
#
# `small`: what RESULTS.md measured on Ding at an 8-minute budget on 2 CPU
# cores: 128 wide, 4,000 pieces a side, batches of 1,536 pieces, a
# 400-step warm-up, the mean of the last 3 epochs; the Transformer tied and
# with relative positions (the best of the four schemes there), ConvS2S at
# rate 5e-3 (the demo's), the Transformer at 3e-3, the RNN at 1e-2 (at 3e-3
# it is far from trained at 8 minutes: RESULTS.md, "What `train` gives from
# its defaults"). Dictionary entries are Ding's (dropped with --corpus).
SMALL = {
    "vocab_size": 4000,
    "batch_tokens": 1536,
    "dictionary": 0.5,
    "warmup": 400,
    "average_last": 3,
    # GNMT's length penalty, chosen for ConvS2S on the validation split (at
    # 0.6 its translations came out 15% short); the Transformer level at 1.0
    "alpha": 1.2,
}


# `base` and `big` of the Transformer: "Attention Is All You Need" (2017),
# Table 3. Their rate schedule, d^-0.5 · min(s^-0.5, s · w^-1.5), is the
# rsqrt decay with --warmup w peaking at s = w, so --learning-rate is that
# peak, d^-0.5 · w^-0.5 (6.99e-4 for base, 4.94e-4 for big). Their
# vocabulary: 32,000 shared byte-pair pieces (WMT En-De; here
# SentencePiece's); the output projection, both embeddings one table
# (their Sec. 3.4). ConvS2S's and the RNN's `base` scale `small` up to the
# width `make translator` trains (256) with the paper's warm-up; they are
# starting points for a larger corpus, not measured ones.
def paper_rate(width, warmup):
    """The peak of the paper's rate schedule, d^-0.5 · w^-0.5, for the
    model width d (`--hidden-dim`) and warm-up w (`--warmup`)."""
    return (width * warmup) ** -0.5


PAPER = {
    "num_layers": 6,  # each for the encoder and the decoder
    "vocab_size": 32000,
    "shared_vocabulary": True,
    "tie_embeddings": True,
    "label_smoothing": 0.1,
    "warmup": 4000,
    "decay": "rsqrt",
}
LARGER = {"vocab_size": 16000, "batch_tokens": 4096, "warmup": 4000, "average_last": 5}
PRESETS = {
    "small": {
        "transformer": {
            **SMALL,
            "hidden_dim": 128,
            "num_layers": 2,
            "num_heads": 4,
            "intermediate_dim": 256,
            "position": "relative",
            "tie_embeddings": True,
            "learning_rate": 3e-3,
        },
        "convs2s": {**SMALL, "embed_dim": 128, "hidden_dim": 128, "learning_rate": 5e-3},
        "rnn": {**SMALL, "embed_dim": 128, "hidden_dim": 128, "learning_rate": 1e-2},
    },
    "base": {
        "transformer": {
            **PAPER,
            "hidden_dim": 512,
            "num_heads": 8,
            "intermediate_dim": 2048,
            "dropout": 0.1,
            "learning_rate": paper_rate(512, 4000),
        },
        "convs2s": {
            **LARGER,
            "embed_dim": 256,
            "hidden_dim": 256,
            "dropout": 0.2,
            "learning_rate": 2e-3,
            "alpha": 1.2,
        },
        "rnn": {
            **LARGER,
            "embed_dim": 256,
            "hidden_dim": 512,
            "dropout": 0.2,
            "learning_rate": 1e-3,
        },
    },
    "big": {
        "transformer": {
            **PAPER,
            "hidden_dim": 1024,
            "num_heads": 16,
            "intermediate_dim": 4096,
            "dropout": 0.3,
            "learning_rate": paper_rate(1024, 4000),
        },
    },
}
# The presets whose rate is the paper's peak of the width and warm-up used.
PAPER_RATE = {("base", "transformer"), ("big", "transformer")}
# The fewest corpus pairs each preset is chosen for when no --preset is given.
PRESET_PAIRS = {"small": 0, "base": 100_000, "big": 10_000_000}
DING_ONLY = ("dictionary",)  # a preset's settings that only the Ding corpus has
PRESET_KEYS = tuple(
    dict.fromkeys(
        key for families in PRESETS.values() for preset in families.values() for key in preset
    )
)


def preset_for(pairs, family):
    """The preset `train` chooses for a corpus of `pairs` sentence pairs
    and `family`: the largest whose `PRESET_PAIRS` it reaches and that has
    the family."""
    return max(
        (
            name
            for name, fewest in PRESET_PAIRS.items()
            if pairs >= fewest and family in PRESETS[name]
        ),
        key=PRESET_PAIRS.get,
    )


def preset_for_families(pairs, families):
    """The preset `tune` chooses for a corpus of `pairs` sentence pairs and
    the `families` it searches: the smallest of each family's
    `preset_for`, so that every family has it."""
    return min((preset_for(pairs, family) for family in families), key=PRESET_PAIRS.get)


def preset_summary(name, family):
    """The preset's settings as flags, for the line that names it."""
    values = PRESETS[name][family]
    return ", ".join(
        f"--{key.replace('_', '-')}"
        + ("" if value is True else f" {value:g}" if isinstance(value, float) else f" {value}")
        for key, value in values.items()
    )
