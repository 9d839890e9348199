"""`tune --preset`: the preset chosen by the corpus's size as for train and
said per family, the data settings the searched families share (and the
refusal where their presets differ), each trial starting from what `train
--preset` trains (its defaults are train's settings, its rate the preset's
times a factor), the first trial of a random or Bayesian search being
those defaults, `best_hyperparameters.json` as the settings the trial
trained with, and a search from before presets resuming as `none`."""

import json
import os

import keras
import keras_tuner
import pytest
from keras_attention_recipes import run_folders, translate
from keras_attention_recipes.runs import UsageError
from keras_attention_recipes.translation import hyperparameter_search
from keras_attention_recipes.translation.config import model_settings
from keras_attention_recipes.translation.hyperparameter_search import (
    Chosen,
    search_space,
    trial_record,
    trial_settings,
)
from keras_attention_recipes.translation.presets import paper_rate
from keras_attention_recipes.translation.training import train_settings
from keras_attention_recipes.tuning import make_tuner

pytestmark = pytest.mark.tensorflow  # the recipe's modules import its tf.data pipeline

FAMILIES = ("rnn", "convs2s", "transformer")


def config_of(*argv, log=None):
    """The checked `TranslationConfig` of a command line."""
    return translate.check(translate.parser().parse_args(list(argv)), log)


def test_tune_chooses_its_preset_by_the_corpus_and_says_where_each_family_starts(tmp_path):
    lines = []
    output = str(tmp_path / "tune")
    tune = ["tune", "--output", output, "--limit", "200", "--families", "convs2s", "transformer"]
    config = config_of(*tune, log=lines.append)
    assert config.preset == "small" and len(lines) == 3
    assert lines[0] == (
        "a 200-pair corpus: preset small; each trial starts from its family's settings and "
        "searches around them (--preset none: the flags' own defaults):"
    )
    assert lines[1].startswith("  convs2s: --vocab-size 4000, --batch-tokens 1536, ")
    assert "--learning-rate 0.005" in lines[1] and "--learning-rate 0.003" in lines[2]
    assert "--position relative" in lines[2] and lines[2].startswith("  transformer: ")
    # the data settings every trial shares are the preset's; a flag given wins
    assert (config.vocab_size, config.batch_tokens, config.dictionary) == (4000, 1536, 0.5)
    given = config_of(*tune, "--vocab-size", "400", "--batch-tokens", "512")
    assert (given.vocab_size, given.batch_tokens, given.dictionary) == (400, 512, 0.5)
    none = config_of(*tune, "--preset", "none")
    assert none.preset is None and (none.vocab_size, none.batch_tokens) == (8000, None)


def test_tune_refuses_a_preset_whose_families_need_other_data(tmp_path):
    tune = ["tune", "--output", str(tmp_path / "tune"), "--limit", "200"]
    with pytest.raises(UsageError) as refused:
        config_of(*tune, "--preset", "base")
    assert str(refused.value) == (
        "--preset base gives the rnn --vocab-size 16000 and the transformer 32000: tune's "
        "trials share one data split and vocabulary; give --vocab-size, or search --families "
        "whose presets agree"
    )
    # a flag given settles that setting; the next one that differs is named
    with pytest.raises(UsageError, match="the rnn --batch-tokens 4096 and the transformer unset"):
        config_of(*tune, "--preset", "base", "--vocab-size", "16000")
    # ConvS2S and the RNN agree; the Transformer alone has its shared 32,000
    config = config_of(*tune, "--preset", "base", "--families", "rnn", "convs2s")
    assert (config.vocab_size, config.batch_tokens, config.shared_vocabulary) == (16000, 4096, None)
    config = config_of(*tune, "--preset", "base", "--families", "transformer")
    assert (config.vocab_size, config.batch_tokens, config.shared_vocabulary) == (32000, None, True)
    with pytest.raises(UsageError, match="--preset big is the Transformer's only; --families "):
        config_of(*tune, "--preset", "big")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_trial_s_defaults_are_what_train_trains_from_the_preset(family, tmp_path):
    """Every setting, searched or not, against train's own resolution of the
    same command line."""
    hp = keras_tuner.HyperParameters()  # each choice at its default
    spec = trial_settings(hp, [family], search_space("small", [family]), 32, "small")
    output = str(tmp_path / "run")
    train = config_of("train", "--output", output, "--family", family, "--preset", "small")
    assert spec == model_settings(train)
    assert hp.values["learning_rate_scale"] == 1.0 and "learning_rate" not in hp.values


def test_a_trial_scales_its_preset_s_rate_and_keeps_its_ratios():
    space = search_space("small", ["transformer"])
    values = {"family": "transformer", "hidden_dim": 64, "num_layers": 1, "num_heads": 2}
    values.update(position="rope", num_key_value_heads=1, dropout=0.2, label_smoothing=0.0)
    spec = trial_settings(
        Chosen({**values, "learning_rate_scale": 2.0}), ["transformer"], space, 32, "small"
    )
    assert spec["learning_rate"] == pytest.approx(6e-3)  # the preset's 3e-3, twice
    assert (spec["intermediate_dim"], spec["warmup"], spec["tie_embeddings"]) == (128, 400, True)
    assert (spec["num_key_value_heads"], spec["position"], spec["dropout"]) == (1, "rope", 0.2)
    # the paper's Transformer: the peak of the trial's own width and warm-up
    base = search_space("base", ["transformer"])
    assert 512 in base["hidden_dim"] and 8 in base["num_heads"] and 6 in base["num_layers"]
    values = {**values, "hidden_dim": 256, "num_heads": 8, "learning_rate_scale": 0.5}
    spec = trial_settings(Chosen(values), ["transformer"], base, 32, "base", shared=True)
    assert spec["learning_rate"] == pytest.approx(0.5 * paper_rate(256, 4000))
    assert (spec["intermediate_dim"], spec["shared_vocabulary"]) == (1024, True)
    # a narrowed space is taken as given: the preset's sizes do not join it
    os.environ["KERAS_ATTENTION_SEARCH_SPACE"] = json.dumps({"hidden_dim": [16]})
    try:
        assert search_space("base", ["transformer"])["hidden_dim"] == [16]
    finally:
        del os.environ["KERAS_ATTENTION_SEARCH_SPACE"]


def test_a_random_search_from_a_preset_runs_it_first_and_records_settings(tmp_path):
    """The oracle's first trial is every choice's default, the first
    family's preset; the next is drawn. The record is what `train
    --hyperparameters` reads back as the same model."""
    families = ["convs2s", "transformer"]
    space = search_space("small", families)

    def build(hp):
        trial_settings(hp, families, space, 32, "small")
        return keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])

    directory = str(tmp_path / "tuning")
    tuner = make_tuner(build, "random", "val_loss", 5, 1, directory, "p", defaults_trial=True)
    first = tuner.oracle.create_trial("tuner0").hyperparameters.values
    assert first["family"] == "convs2s" and first["learning_rate_scale"] == 1.0
    assert (first["hidden_dim"], first["embed_dim"], first["dropout"]) == (128, 128, 0.1)
    trial = tuner.oracle.create_trial("tuner1")
    build(trial.hyperparameters)  # as the trial does: its family's own choices join its values
    second = trial.hyperparameters.values
    assert second != first
    record = trial_record(dict(second), families, space, 32, "small")
    assert "learning_rate_scale" not in record and None not in record.values()
    rate = {"convs2s": 5e-3, "transformer": 3e-3}[second["family"]]
    assert record["learning_rate"] == pytest.approx(rate * second["learning_rate_scale"])
    path = tmp_path / "best_hyperparameters.json"
    path.write_text(json.dumps(record))
    output = str(tmp_path / "run")
    train = config_of(
        "train", "--output", output, "--preset", "none", "--hyperparameters", str(path)
    )
    _, spec = train_settings(train)
    assert {key: spec[key] for key in record if key in spec} == {
        key: value for key, value in record.items() if key in spec
    }
    assert spec["family"] == second["family"] and spec["warmup"] == 400
    with pytest.raises(ValueError, match="needs a random or bayesian search; got hyperband"):
        make_tuner(build, "hyperband", "val_loss", 5, 1, directory, "q", defaults_trial=True)


def test_a_search_from_before_presets_resumes_as_none(tmp_path, monkeypatch):
    """Its run.json has no preset: the search resumes with the flags' own
    defaults (and is refused with a preset's other data settings)."""

    class Handed(Exception):
        pass

    def handed(*args, **kwargs):
        raise Handed

    monkeypatch.setattr(hyperparameter_search, "datasets", handed)
    output = str(tmp_path / "tune")
    tune = ["tune", "--output", output, "--limit", "200", "--vocab-size", "400"]
    with pytest.raises(Handed):  # claims the run, then stops before the data
        hyperparameter_search.tune(config_of(*tune, "--preset", "none"), log=lambda *_: None)
    path = os.path.join(output, run_folders.RUN_FILE)
    record = json.load(open(path))
    assert record["settings"].pop("preset") is None
    with open(path, "w") as handle:
        json.dump(record, handle)
    lines = []
    resumed = config_of(*tune, log=lines.append)
    assert resumed.preset is None and lines == []
    with pytest.raises(Handed):
        hyperparameter_search.tune(resumed, log=lambda *_: None)
    with pytest.raises(ValueError, match="holds a run built with other settings"):
        hyperparameter_search.tune(config_of(*tune, "--preset", "small"), log=lambda *_: None)


def test_train_hyperparameters_of_another_family_take_that_family_s_preset(tmp_path):
    """A search's best trial of the rnn family, trained by `train
    --hyperparameters` without --family: the preset filled in is the
    rnn's (the Transformer's heads refused it as flags never given)."""
    path = tmp_path / "best_hyperparameters.json"
    path.write_text(json.dumps({"family": "rnn", "attention": "general", "hidden_dim": 32}))
    output = str(tmp_path / "run")
    config = config_of("train", "--output", output, "--hyperparameters", str(path))
    assert (config.family, config.preset, config.num_heads) == ("rnn", "small", None)
    _, spec = train_settings(config)
    assert (spec["family"], spec["attention"], spec["hidden_dim"]) == ("rnn", "general", 32)
    assert spec["embed_dim"] == config.embed_dim is not None  # the rnn preset's
    # A file naming no family keeps the flag's.
    path.write_text(json.dumps({"hidden_dim": 32}))
    assert config_of("train", "--output", output, "--hyperparameters", str(path)).family == (
        "transformer"
    )
