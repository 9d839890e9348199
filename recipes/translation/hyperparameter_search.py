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
from .corpus import read_pairs
from .data import numbers_to_protect
from .model import build_model
from .pipeline import datasets
from .trained_run import greedy, translate_texts
from .training import check_inputs, prepared_run


def search_space():
    """The tuner's choices: `SEARCH_SPACE`, narrowed by the JSON object in
    KERAS_ATTENTION_SEARCH_SPACE when set (the tests keep trials small)."""
    narrowed = json.loads(os.environ.get("KERAS_ATTENTION_SEARCH_SPACE") or "{}")
    unknown = set(narrowed) - set(SEARCH_SPACE)
    if unknown:
        raise UsageError(
            f"KERAS_ATTENTION_SEARCH_SPACE names {sorted(unknown)}; "
            f"expected some of {sorted(SEARCH_SPACE)}"
        )
    return {**SEARCH_SPACE, **narrowed}


def tune(config, log=print):
    """A KerasTuner search over families and sizes (`tuning.py`), then the
    validation BLEU of the best trials."""
    check_inputs(config)  # before the run folder is claimed
    chief = os.environ.get("KERASTUNER_TUNER_ID", "chief") == "chief"
    space = search_space()
    # What the search's saved state depends on: KerasTuner cannot resume it
    # under another algorithm, epochs or space (a traceback before).
    searched = {
        "algorithm": config.algorithm,
        "epochs": config.epochs,
        "families": list(config.families),
        "search_space": space,
    }
    paths, source_tokenizer, target_tokenizer = prepared_run(
        config, {**config.data_settings(), **searched}, chief, log
    )
    numbers = numbers_to_protect(config, paths["train"], log)
    data = datasets(
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
    )

    def build(hp):
        spec = trial_settings(hp, config.families, space, config.max_length)
        return build_model(spec, source_tokenizer.vocab_size, target_tokenizer.vocab_size)

    tuner, best = run_search(
        build,
        (data[0], None),
        data[1],
        algorithm=config.algorithm,
        objective="val_loss",
        max_trials=config.trials,
        max_epochs=config.epochs,
        output=config.output,
        project="translate",
    )
    if best is not None and config.bleu_trials:
        tokenizers = (source_tokenizer, target_tokenizer)
        log_trials_bleu(tuner, config, read_pairs(paths["valid"])[:200], tokenizers, numbers, log)
    return best


def trial_settings(hp, families, space, max_length):
    """The model settings of a trial: the choices of KerasTuner's `hp`
    among `families` and the search `space`, each family's own (the
    attention of rnn, the heads and positions of transformer) conditional
    on it."""
    family = hp.Choice("family", list(families))
    transformer = {"parent_name": "family", "parent_values": ["transformer"]}
    return {
        "family": family,
        "attention": hp.Choice(
            "attention", list(attention_names()), parent_name="family", parent_values=["rnn"]
        )
        if family == "rnn"
        else None,
        # The transformer's embedding width is its hidden_dim; only it has heads.
        "embed_dim": hp.Choice(
            "embed_dim",
            space["embed_dim"],
            parent_name="family",
            parent_values=["rnn", "convs2s"],
        )
        if family != "transformer"
        else None,
        "hidden_dim": hp.Choice("hidden_dim", space["hidden_dim"]),
        "num_layers": hp.Choice("num_layers", space["num_layers"]),
        "num_heads": hp.Choice("num_heads", space["num_heads"], **transformer)
        if family == "transformer"
        else None,
        "position": hp.Choice("position", list(POSITIONS), **transformer)
        if family == "transformer"
        else None,
        "num_key_value_heads": hp.Choice(
            "num_key_value_heads", space["num_key_value_heads"], **transformer
        )
        if family == "transformer"
        else None,
        "dropout": hp.Float("dropout", 0.0, 0.3, step=0.1),
        "learning_rate": hp.Float("learning_rate", 3e-4, 3e-3, sampling="log"),
        "label_smoothing": hp.Choice("label_smoothing", [0.0, 0.1]),
        "max_length": max_length,
        "style": "luong",
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
