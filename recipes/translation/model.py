"""The translation model of a run's settings: the family and its sizes
(`build_model`), Adam with the learning-rate schedule (`learning_rate`),
the masked loss and metrics. Settings are the model's settings dict
(`model_settings`, a run's `config.json`, a tuner trial's)."""

import keras

from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    InverseSquareRootSchedule,
    MaskedAccuracy,
    MaskedCrossEntropy,
    MaskedPerplexity,
    PerUpdateSchedule,
    PlannedCosineDecay,
    RecurrentSeq2Seq,
    TransformerSeq2Seq,
)

from ..runs import UsageError
from .config import FAMILY_DEFAULTS


def build_model(config, source_vocab, target_vocab):
    """The compiled model of the settings `config` (`model_settings`, a
    run's `config.json` or a tuner trial's) for vocabularies of
    `source_vocab` and `target_vocab` pieces, its weights built."""
    family = config["family"]
    units, layers = int(config["hidden_dim"]), int(config["num_layers"])
    if family == "rnn":
        attention = None if config["attention"] == "none" else config["attention"]
        model = RecurrentSeq2Seq(
            source_vocab,
            target_vocab,
            int(config["embed_dim"]),
            units,
            attention=attention,
            style=config["style"],
            num_layers=layers,
            dropout=float(config["dropout"]),
        )
    elif family == "convs2s":
        convolutions = [(units, 3)] * (2 * layers)
        model = ConvS2SSeq2Seq(
            source_vocab,
            target_vocab,
            int(config["embed_dim"]),
            convolutions,
            convolutions,
            max_length=int(config["max_length"]) + 2,
            dropout=float(config["dropout"]),
            # .get: a config.json written before these flags
            tie_embeddings=bool(config.get("tie_embeddings")),
            share_embeddings=bool(config.get("shared_vocabulary")),
        )
    else:
        heads = int(config["num_heads"])
        model = TransformerSeq2Seq(
            source_vocab,
            target_vocab,
            units,
            heads,
            # .get: a config.json or tuner trial written before the setting
            int(config.get("intermediate_dim") or 2 * units),
            layers,
            max_length=int(config["max_length"]) + 2,
            dropout=float(config["dropout"]),
            # .get: a config.json or tuner trial written before these flags
            position=config.get("position") or FAMILY_DEFAULTS["position"],
            num_key_value_heads=config.get("num_key_value_heads"),
            sliding_window=config.get("sliding_window"),
            tie_embeddings=bool(config.get("tie_embeddings")),
            share_embeddings=bool(config.get("shared_vocabulary")),
        )
    # Build the weights now: KerasTuner loads checkpoints into freshly
    # built models, and BackupAndRestore restores.
    model.build()
    update_freq = int(config.get("update_freq") or 1)
    optimizer = keras.optimizers.Adam(
        learning_rate(config),
        global_clipnorm=1.0,  # of the update's gradient, the mean of its batches'
        # Keras's mean of the gradients of K batches; None: every batch updates
        gradient_accumulation_steps=update_freq if update_freq > 1 else None,
    )
    model.compile(
        optimizer,
        MaskedCrossEntropy(label_smoothing=float(config["label_smoothing"])),
        # token accuracy and perplexity (unsmoothed) of each epoch, padding excluded
        metrics=[MaskedAccuracy(), MaskedPerplexity()],
        # TensorFlow runs its step as a graph unless told to compile it with
        # XLA; JAX's step is compiled (run op by op, every op would be a
        # program of its own)
        jit_compile=bool(config.get("jit", False)) or keras.config.backend() == "jax",
    )
    return model


def learning_rate(config):
    """Adam's rate: `learning_rate` constant, or with `warmup` steps of
    warm-up to it then `decay`: 1/sqrt(step) (`InverseSquareRootSchedule`)
    or a cosine to 0 at `total_steps`, the run's last step (Keras's
    `CosineDecay` with its warm-up). A step is an optimizer update: with
    `update_freq` K > 1 the schedule reads the batches over K
    (`PerUpdateSchedule`)."""
    schedule = _schedule(config)
    update_freq = int(config.get("update_freq") or 1)
    if update_freq > 1 and isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return PerUpdateSchedule(schedule, update_freq)
    return schedule


def _schedule(config):
    """`learning_rate`'s schedule of updates."""
    peak, warmup = float(config["learning_rate"]), int(config.get("warmup") or 0)
    if config.get("decay") == "cosine" and config.get("time_budget"):
        # its end moves with the clock
        return PlannedCosineDecay(peak, warmup, config["total_steps"])
    if config.get("decay") == "cosine":
        decay_steps = int(config["total_steps"]) - warmup
        if decay_steps < 1:
            raise UsageError(
                f"--decay cosine needs more training steps than --warmup {warmup}; "
                f"the run has {config['total_steps']}"
            )
        return keras.optimizers.schedules.CosineDecay(
            0.0 if warmup else peak,
            decay_steps,
            warmup_target=peak if warmup else None,
            warmup_steps=warmup,
        )
    return InverseSquareRootSchedule(peak, warmup) if warmup else peak
