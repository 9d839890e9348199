"""`tune`: a KerasTuner search over the model families and their sizes
(`recipes/tuning.py`), the search space narrowed by
KERAS_ATTENTION_SEARCH_SPACE, then the validation BLEU of the best trials.
"""

import json
import os
import warnings

from keras_attention.registry import names as attention_names
from keras_attention.seq2seq.transformer import POSITIONS

from ..runs import UsageError
from ..tuning import run_search
from .command_settings import SEARCH_SPACE
from .config import DATA_KEYS, TranslationConfig, model_settings
from .corpus import read_pairs
from .data import numbers_to_protect
from .inputs import datasets
from .model import build_model
from .presets import PRESETS
from .trained_run import greedy, translate_texts
from .training import check_inputs, prepared_run

# With a --preset, a trial's rate is its family's preset rate times a
# factor in this range: one hyperparameter for every family's rate (the
# Transformer's 3e-3 and the RNN's 1e-2 in `small`).
RATE_SCALES = (1 / 3, 3.0)


def search_space(preset=None, families=()):
    """The tuner's choices: `SEARCH_SPACE`, with a `preset`'s sizes of the
    searched `families` among them, narrowed by the JSON object in
    KERAS_ATTENTION_SEARCH_SPACE when set (as the tests keep trials small:
    a key it names is taken as given)."""
    narrowed = json.loads(os.environ.get("KERAS_ATTENTION_SEARCH_SPACE") or "{}")
    unknown = set(narrowed) - set(SEARCH_SPACE)
    if unknown:
        raise UsageError(
            f"KERAS_ATTENTION_SEARCH_SPACE names {sorted(unknown)}; "
            f"expected some of {sorted(SEARCH_SPACE)}"
        )
    space = dict(SEARCH_SPACE)
    for key, choices in space.items():
        starts = {PRESETS[preset][family].get(key) for family in families} if preset else set()
        space[key] = sorted(set(choices) | (starts - {None}))
    return {**space, **narrowed}


def tune(config, log=print):
    """A KerasTuner search over families and sizes (`tuning.py`), then the
    validation BLEU of the best trials."""
    check_inputs(config)  # before the run folder is claimed
    chief = os.environ.get("KERASTUNER_TUNER_ID", "chief") == "chief"
    families, preset = list(config.families), config.preset
    shared = bool(config.shared_vocabulary)
    space = search_space(preset, families)
    # What the search's saved state depends on: KerasTuner cannot resume it
    # under another algorithm, epochs, space or trials' starting point (a
    # traceback before). A search from before presets resumes as `none`.
    searched = {
        "algorithm": config.algorithm,
        "epochs": config.epochs,
        "families": families,
        "search_space": space,
        "preset": preset,
    }
    paths, source_tokenizer, target_tokenizer = prepared_run(
        config, {**config.data_settings(), **searched}, chief, log
    )
    numbers = numbers_to_protect(config, paths["train"], log)
    # every trial trains on the same epochs' batches (`batches.epoch_seed`)
    (stream,), valid_data = datasets(
        paths,
        source_tokenizer,
        target_tokenizer,
        config.max_length,
        config.batch_size,
        config.seed,
        log,
        batch_tokens=config.batch_tokens,
        dictionary=config.dictionary,
        numbers=numbers,
        epochs=(0, config.epochs, 0),
    )

    def build(hp):
        spec = trial_settings(hp, families, space, config.max_length, preset, shared)
        return build_model(spec, source_tokenizer.vocab_size, target_tokenizer.vocab_size)

    def record(values):  # best_hyperparameters.json: a preset's trial as its settings
        return trial_record(values, families, space, config.max_length, preset, shared)

    tuner, best = run_search(
        build,
        (stream.dataset, None),
        valid_data,
        steps_per_epoch=stream.steps,
        algorithm=config.algorithm,
        # The validation perplexity, not the loss: a label-smoothed loss is
        # higher by construction, so it would rank the trials without smoothing first.
        objective=("val_perplexity", "min"),
        max_trials=config.trials,
        max_epochs=config.epochs,
        output=config.output,
        project="translate",
        record=record if preset else None,
        # the first trial: the first family's preset (Hyperband's brackets draw theirs)
        defaults_trial=bool(preset) and config.algorithm != "hyperband",
    )
    if best is not None and config.bleu_trials:
        tokenizers = (source_tokenizer, target_tokenizer)
        log_trials_bleu(tuner, config, read_pairs(paths["valid"])[:200], tokenizers, numbers, log)
    return best


def trial_settings(hp, families, space, max_length, preset=None, shared=False):
    """The model settings of a trial: the choices of KerasTuner's `hp`
    among `families` and the search `space`, each family's own (the
    attention of rnn, the heads and positions of transformer) conditional
    on it. With a `preset`, a trial starts from what `train --family F
    --preset P` trains (`preset_start`): each choice's default is its
    value (a search's first trial, `tuning.make_tuner`), what is not
    searched is its (warm-up, decay, tied embeddings, the feed-forward
    width's ratio, ...), and the rate is its times a searched factor
    (`RATE_SCALES`; for the `base` and `big` Transformer, the paper's peak
    of the trial's width); without, a constant rate is searched. With a
    `shared` vocabulary, the Transformer and ConvS2S share their embedding
    table."""
    family = hp.Choice("family", list(families))
    start = preset_start(preset, family) if preset else {}

    def choice(name, values, **conditions):
        default = start.get(name)
        return hp.Choice(name, values, default=default if default in values else None, **conditions)

    transformer = {"parent_name": "family", "parent_values": ["transformer"]}
    # With a preset, 0 key-value heads: one per head, the preset's plain multi-head.
    key_value_heads = [0, *space["num_key_value_heads"]] if preset else space["num_key_value_heads"]
    searched = {
        "family": family,
        "attention": choice(
            "attention", list(attention_names()), parent_name="family", parent_values=["rnn"]
        )
        if family == "rnn"
        else None,
        # The transformer's embedding width is its hidden_dim; only it has heads.
        "embed_dim": choice(
            "embed_dim", space["embed_dim"], parent_name="family", parent_values=["rnn", "convs2s"]
        )
        if family != "transformer"
        else None,
        "hidden_dim": choice("hidden_dim", space["hidden_dim"]),
        "num_layers": choice("num_layers", space["num_layers"]),
        "num_heads": choice("num_heads", space["num_heads"], **transformer)
        if family == "transformer"
        else None,
        "position": choice("position", list(POSITIONS), **transformer)
        if family == "transformer"
        else None,
        "num_key_value_heads": choice("num_key_value_heads", key_value_heads, **transformer) or None
        if family == "transformer"
        else None,
        "dropout": hp.Float("dropout", 0.0, 0.3, step=0.1, default=start.get("dropout", 0.0)),
        "learning_rate": hp.Float("learning_rate", 3e-4, 3e-3, sampling="log")
        if preset is None
        else hp.Float("learning_rate_scale", *RATE_SCALES, sampling="log", default=1.0),
        "label_smoothing": choice("label_smoothing", [0.0, 0.1]),
        "max_length": max_length,
        "style": "luong",
    }
    # the shared vocabulary is the data's, not train's
    spec = {**start, **searched, "shared_vocabulary": shared if family != "rnn" else None}
    if preset is None:
        return spec
    if family == "transformer":
        ratio = start["intermediate_dim"] / start["hidden_dim"]
        spec["intermediate_dim"] = int(ratio * spec["hidden_dim"])
    # the preset's rate at the trial's width (`for_command`: the paper's peak for base and big)
    at_width = TranslationConfig.for_command(
        "train", family=family, preset=preset, hidden_dim=spec["hidden_dim"]
    )
    spec["learning_rate"] = (
        at_width.learning_rate * searched["learning_rate"]
    )  # the searched factor
    return spec


def preset_start(preset, family):
    """What a trial of `family` starts from with `preset`: the model's
    settings that `train --family F --preset P` trains with."""
    return model_settings(TranslationConfig.for_command("train", family=family, preset=preset))


class Chosen:
    """A finished trial's values in place of KerasTuner's `hp`: what
    `trial_settings` chose, so that it gives the settings the trial trained
    with."""

    def __init__(self, values):
        self.values = values

    def Choice(self, name, *args, **kwargs):  # noqa: N802 (KerasTuner's names)
        return self.values[name]

    Float = Choice


def trial_record(values, families, space, max_length, preset, shared=False):
    """A trial's `best_hyperparameters.json` with a preset: the model's
    settings it trained with (its rate, not the factor), what `train
    --hyperparameters` reads, whatever train's own preset."""
    settings = trial_settings(Chosen(values), families, space, max_length, preset, shared)
    # the data's settings (the shared vocabulary) are train's own flags
    return {
        key: value for key, value in settings.items() if value is not None and key not in DATA_KEYS
    }


def log_trials_bleu(tuner, config, pairs, tokenizers, numbers, log):
    """Log the BLEU on `pairs` (validation pairs) of the `config.bleu_trials`
    best trials of `tuner`, each translating greedily."""
    import sacrebleu

    log(
        f"\nvalidation BLEU of the {config.bleu_trials} best trials "
        f"(beam 1, {len(pairs)} sentences):"
    )
    with warnings.catch_warnings():
        # Only the weights are loaded, for inference: the optimizer's state
        # is not needed (Keras warns that it skips it).
        warnings.filterwarnings("ignore", "Skipping variable loading for optimizer", UserWarning)
        models = tuner.get_best_models(config.bleu_trials)
    for trial, model in zip(tuner.oracle.get_best_trials(config.bleu_trials), models):
        hypotheses = translate_texts(
            model, *tokenizers, [p[0] for p in pairs], config.max_length, greedy(), numbers=numbers
        )
        log(
            f"  trial {trial.trial_id}: BLEU "
            f"{sacrebleu.corpus_bleu(hypotheses, [[p[1] for p in pairs]]).score:.2f}"
        )
