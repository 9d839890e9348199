"""The translation recipe's settings groups (`settings.py`,
`command_settings.py`): each setting in one group, every declared choice
and bound enforced by the one checker (`config.check_setting`), and the
records a run writes made of its groups, as they were written before."""

import dataclasses
import re

import pytest
from keras_attention_recipes.runs import UsageError, flag
from keras_attention_recipes.translation.command_settings import FIELDS, DecodingSettings
from keras_attention_recipes.translation.config import (
    DATA_KEYS,
    DECODING,
    MODEL_KEYS,
    TranslationConfig,
    check_setting,
    model_settings,
)
from keras_attention_recipes.translation.settings import GROUPS, RECORDS
from keras_attention_recipes.translation.trained_run import decoding_settings

SETTINGS = list(FIELDS)
CHOICES = [name for name in SETTINGS if FIELDS[name].metadata.get("choices") is not None]
BOUNDED = [name for name in SETTINGS if (FIELDS[name].metadata.get("check") or {}).get("at_most")]


def test_the_settings_with_choices_are_those_the_recipe_offers():
    """An independent list of the settings that take one of a few values:
    a setting that gains or loses its choices fails here."""
    assert set(CHOICES) == {
        "tokenizer",
        "verbose",
        "preset",
        "family",
        "attention",
        "style",
        "position",
        "decay",
        "mixed_precision",
        "to",
        "format",
        "quantize",
        "quantization",
        "algorithm",
        "families",
    }


def test_the_export_formats_are_the_librarys_exporters():
    """`export --format` offers each exporter of `keras_attention.serving`
    (a copy: the command line is parsed before TensorFlow is imported)."""
    from keras_attention_recipes.translation.command_settings import FORMATS

    from keras_attention.serving.exporters import EXPORTERS

    assert sorted(FORMATS) == sorted(EXPORTERS)


def bad_value(name):
    """A value of the setting's type that none of its choices is."""
    field = FIELDS[name]
    if field.type is int:
        return max(field.metadata["choices"]) + 1
    return ["no-such-choice"] if field.type is list else "no-such-choice"


@pytest.mark.parametrize("name", CHOICES)
def test_every_declared_choice_is_enforced_by_the_one_checker(name):
    """A value outside a setting's declared choices is refused by
    `validate` (the command line's check) with the flag, the choices and
    the value given; each declared choice passes."""
    choices = FIELDS[name].metadata["choices"]
    bad = bad_value(name)
    given = bad[0] if isinstance(bad, list) else bad
    message = f"{flag(name)} must be one of {list(choices)}"
    with pytest.raises(UsageError, match=re.escape(message) + r".*; got " + re.escape(repr(given))):
        TranslationConfig(command="train", **{name: bad}).validate()
    for choice in choices:
        check_setting(name, [choice] if FIELDS[name].type is list else choice)
    check_setting(name, None)  # not given


def test_the_model_settings_check_their_choices_without_validate():
    """`model_settings` checks what it is given (a config not validated, a
    record) as the flags are checked."""
    with pytest.raises(UsageError, match=r"--family must be one of \['rnn', 'convs2s'"):
        model_settings(TranslationConfig(family="lstm"))
    with pytest.raises(UsageError, match=r"--decay must be one of \['rsqrt', 'cosine'\]"):
        model_settings(TranslationConfig(decay="linear"))
    with pytest.raises(UsageError, match=r"--position must be one of \['sinusoidal'"):
        model_settings(TranslationConfig(position="absolute"))


@pytest.mark.parametrize("name", BOUNDED)
def test_every_bounded_setting_refuses_one_past_its_largest_value(name):
    """`at_most` passes, `at_most + 1` is refused naming the flag and the
    bound, by `validate` and by the checker itself."""
    at_most = FIELDS[name].metadata["check"]["at_most"]
    check_setting(name, at_most)
    message = re.escape(f"{flag(name)} must be at most {at_most}")
    with pytest.raises(UsageError, match=message):
        check_setting(name, at_most + 1)
    with pytest.raises(UsageError, match=message):
        TranslationConfig(command="train", **{name: at_most + 1}).validate()


@pytest.mark.parametrize("name", [name for name in SETTINGS if FIELDS[name].metadata.get("folder")])
def test_an_empty_folder_is_refused(name):
    with pytest.raises(UsageError, match=f"{flag(name)} is empty"):
        TranslationConfig(command="train", **{name: ""}).validate()


def test_every_setting_belongs_to_exactly_one_group():
    """The groups' fields are the settings, each once, and each field's
    metadata names its group; `recorded` is state, not a setting."""
    members = [field.name for group in GROUPS.values() for field in dataclasses.fields(group)]
    assert sorted(members) == sorted(SETTINGS) and len(members) == len(set(members))
    for name, group in GROUPS.items():
        for field in dataclasses.fields(group):
            assert FIELDS[field.name].metadata["group"] == name, field.name
    assert set(GROUPS) >= {"run", "data", "model", "optimization", "training", "decoding"}


def test_a_group_view_holds_its_settings():
    config = TranslationConfig(command="translate", beam_width=3, alpha=1.5)
    assert config.group("decoding") == DecodingSettings(beam_width=3, alpha=1.5)
    assert dataclasses.asdict(config.group("data"))["vocab_size"] == 8000
    with pytest.raises(ValueError, match="`name` must be one of"):
        config.group("beam")


def test_the_records_are_made_of_their_groups():
    """config.json's model settings are the model and optimization groups,
    data/meta.json's the data group (and shared_vocabulary), the decoding
    record the decoding group."""

    def names(*groups):
        return {field.name for group in groups for field in dataclasses.fields(GROUPS[group])}

    assert RECORDS["model"] == ("model", "optimization")
    assert set(MODEL_KEYS) == names("model", "optimization")
    assert set(DATA_KEYS) == names("data") | {"shared_vocabulary"}
    assert set(DECODING) == names("decoding")


# What the recipe recorded for a default config before its settings were
# grouped, written out.
TRANSFORMER_MODEL = {
    "max_length": 32,
    "family": "transformer",
    "attention": None,
    "style": "luong",
    "embed_dim": None,
    "hidden_dim": 256,
    "num_layers": 2,
    "num_heads": 4,
    "intermediate_dim": 512,
    "position": "sinusoidal",
    "num_key_value_heads": None,
    "sliding_window": None,
    "dropout": 0.1,
    "learning_rate": 0.001,
    "label_smoothing": 0.1,
    "word_dropout": 0.0,
    "subword_sampling": 0.0,
    "update_freq": 1,
    "warmup": 0,
    "decay": "rsqrt",
    "tie_embeddings": False,
    "shared_vocabulary": False,
}
RNN_CHANGES = {
    "family": "rnn",
    "attention": "general",
    "embed_dim": 128,
    "num_heads": None,
    "intermediate_dim": None,
    "position": None,
    "tie_embeddings": None,
    "shared_vocabulary": None,
}
DATA = {
    "corpus": "/usr/share/trans/de-en",
    "reverse": False,
    "limit": None,
    "vocab_size": 8000,
    "tokenizer": "sentencepiece",
    "vocab_sample": 200000,
    "protect_numbers": True,
    "dictionary": 0.0,
    "alternatives": False,
    "shared_vocabulary": False,
    "distill_from": None,
}
DECODING_RECORD = {
    "beam_width": 4,
    "alpha": 0.6,
    "min_length": 0,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "coverage_penalty": 0.0,
}


def test_a_default_config_records_what_it_recorded_before():
    assert model_settings(TranslationConfig()) == TRANSFORMER_MODEL
    assert model_settings(TranslationConfig(family="rnn")) == {**TRANSFORMER_MODEL, **RNN_CHANGES}
    assert TranslationConfig().data_settings() == DATA
    assert list(TranslationConfig().data_settings()) == list(DATA)
    assert decoding_settings(TranslationConfig()) == DECODING_RECORD
    demo = TranslationConfig.for_command("demo")
    assert decoding_settings(demo) == {**DECODING_RECORD, "alpha": 1.2}


def test_the_demos_export_is_a_saved_model_whatever_the_demo_overwrites():
    """`demo --overwrite` retrains the run; its export step still writes a
    SavedModel version (`--overwrite` is CTranslate2's on `export`)."""
    from keras_attention_recipes.translation.commands import DEMO_EXPORT

    demo = TranslationConfig.for_command("demo", overwrite=True)
    export = demo.replace(**DEMO_EXPORT).validate()
    assert (export.command, export.format, export.overwrite) == ("export", "saved_model", False)
    with pytest.raises(UsageError, match="--overwrite is an option of --format ctranslate2"):
        demo.replace(command="export").validate()


@pytest.mark.parametrize(
    "name, value", [("quantize", "int8"), ("xla", True), ("num_hypotheses", 2), ("ensemble", "")]
)
def test_a_ctranslate2_export_refuses_what_only_a_saved_model_has(tmp_path, name, value):
    value = [str(tmp_path)] if name == "ensemble" else value  # a run folder there
    config = TranslationConfig.for_command("export", format="ctranslate2", **{name: value})
    message = f"{flag(name)} is an option of --format saved_model; got --format ctranslate2"
    with pytest.raises(UsageError, match=message):
        config.validate()
