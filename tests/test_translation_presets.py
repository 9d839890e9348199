"""The translation recipe's `--preset small|base|big` (settings that train,
chosen by the corpus's size; base and big are the Transformers of
"Attention Is All You Need") and `--update-freq K` (gradient
accumulation): the presets' shapes and parameter counts against a formula
written here, the choice by corpus size and its line, a resumed run's own
preset, flags winning over a preset, accumulation against one update on
the combined batch, the schedule counting updates, and the run's record."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras_attention_recipes import run_folders, translate
from keras_attention_recipes.runs import UsageError
from keras_attention_recipes.translation import training
from keras_attention_recipes.translation.config import model_settings, recorded_defaults, upgrade
from keras_attention_recipes.translation.model import build_model, learning_rate
from keras_attention_recipes.translation.presets import PRESETS, preset_for, preset_summary
from keras_attention_recipes.translation.settings import DING
from keras_attention_recipes.translation.training import train_settings

from keras_attention.seq2seq import InverseSquareRootSchedule, PerUpdateSchedule
from tests.translation_helpers import TINY, run

pytestmark = pytest.mark.tensorflow  # tf.GradientTape; the recipe trains with TensorFlow


def config_of(*argv):
    """The checked `TranslationConfig` of a command line."""
    return translate.check(translate.parser().parse_args(list(argv)))


def transformer_parameters(vocab, d, f, layers):
    """The parameters of `TransformerSeq2Seq` with one vocabulary of `vocab`
    pieces, one embedding table for the source, the target and the output
    projection (which keeps its own bias), width `d`, feed-forward width
    `f`, `layers` post-norm layers in each stack (sinusoidal positions: no
    weights). Counted from the paper's layers: attention is 4 projections
    d -> d with biases; the feed-forward d -> f -> d with biases; a layer
    norm has a scale and an offset; an encoder layer has one attention
    and two norms, a decoder layer two attentions and three norms."""
    attention = 4 * (d * d + d)
    feed_forward = d * f + f + f * d + d
    norm = 2 * d
    encoder = attention + feed_forward + 2 * norm
    decoder = 2 * attention + feed_forward + 3 * norm
    return vocab * d + vocab + layers * (encoder + decoder)


def test_the_formula_counts_a_built_small_transformer():
    spec = model_settings(
        config_of(
            "train",
            "--preset",
            "none",
            "--family",
            "transformer",
            "--hidden-dim",
            "16",
            "--num-heads",
            "2",
            "--intermediate-dim",
            "24",
            "--num-layers",
            "2",
            "--shared-vocabulary",
            "--tie-embeddings",
        )
    )
    model = build_model(spec, 50, 50)
    assert model.count_params() == transformer_parameters(50, 16, 24, 2)
    assert model.encoder_layers[0].intermediate_dim == 24


def test_the_base_preset_is_the_paper_s_base_model():
    config = config_of("train", "--preset", "base")
    spec = model_settings(config)
    assert (spec["family"], spec["num_layers"], spec["hidden_dim"]) == ("transformer", 6, 512)
    assert (spec["num_heads"], spec["intermediate_dim"], spec["dropout"]) == (8, 2048, 0.1)
    assert spec["tie_embeddings"] and spec["shared_vocabulary"] and config.vocab_size == 32000
    assert (spec["label_smoothing"], spec["warmup"], spec["decay"]) == (0.1, 4000, "rsqrt")
    model = build_model(spec, 32000, 32000)  # a few seconds
    assert len(model.encoder_layers) == len(model.decoder_layers) == 6
    layer = model.decoder_layers[0]
    assert (model.hidden_dim, layer.num_heads, layer.intermediate_dim) == (512, 8, 2048)
    assert model.tie_embeddings and model.share_embeddings
    # 60.6M: the paper's 65M had a vocabulary of about 37,000
    assert model.count_params() == transformer_parameters(32000, 512, 2048, 6) == 60_554_496


def test_the_big_preset_and_the_paper_s_learning_rate():
    spec = model_settings(config_of("train", "--preset", "big"))
    assert (spec["hidden_dim"], spec["num_heads"], spec["intermediate_dim"]) == (1024, 16, 4096)
    assert (spec["num_layers"], spec["dropout"]) == (6, 0.3)
    assert transformer_parameters(32000, 1024, 4096, 6) == 209_157_376  # paper: 213M
    # lr = d^-0.5 · min(s^-0.5, s · w^-1.5) is the rsqrt decay peaking at s = w
    for name, d in (("base", 512), ("big", 1024)):
        peak = PRESETS[name]["transformer"]["learning_rate"]
        schedule = InverseSquareRootSchedule(peak, 4000)
        for step in (1, 1000, 3999, 4000, 20000):
            paper = d**-0.5 * min(step**-0.5, step * 4000**-1.5)
            assert float(schedule(step - 1)) == pytest.approx(paper, rel=1e-5)


def test_a_preset_s_rate_is_the_paper_s_of_the_width_and_warmup_used():
    """`--preset base --hidden-dim 32` kept the peak rate of width 512; the
    paper's peak is d^-0.5 · w^-0.5 of the model trained. A rate given wins."""
    for flags, (d, w) in (
        ((), (512, 4000)),
        (("--hidden-dim", "32"), (32, 4000)),
        (("--warmup", "400"), (512, 400)),
        (("--hidden-dim", "64", "--warmup", "100"), (64, 100)),
    ):
        config = config_of("train", "--preset", "base", *flags)
        assert config.learning_rate == pytest.approx(d**-0.5 * w**-0.5, rel=1e-12), flags
    given = config_of("train", "--preset", "base", "--hidden-dim", "32", "--learning-rate", "1e-3")
    assert given.learning_rate == 1e-3
    assert config_of("train", "--preset", "big", "--hidden-dim", "64").learning_rate == (
        pytest.approx((64 * 4000) ** -0.5)
    )


def test_flags_win_over_a_preset_and_a_family_has_its_own(capsys):
    config = config_of("train", "--preset", "big", "--dropout", "0.1", "--num-layers", "2")
    assert (config.dropout, config.num_layers, config.hidden_dim) == (0.1, 2, 1024)
    # a flag given with the value its default has still wins
    assert config_of("train", "--preset", "big", "--dropout", "0.1").dropout == 0.1
    assert config_of("train", "--preset", "big", "--family", "transformer").num_heads == 16
    without = config_of("train", "--preset", "none")
    assert (without.hidden_dim, without.dropout, without.vocab_size) == (256, 0.1, 8000)
    assert without.preset is None and without.batch_tokens is None and without.warmup == 0
    assert model_settings(without)["intermediate_dim"] == 512  # 2 * --hidden-dim, as before
    base = config_of("demo", "--preset", "base")  # the demo's family: ConvS2S's base
    assert (base.family, base.hidden_dim, base.dropout, base.time_budget) == (
        "convs2s",
        256,
        0.2,
        8.0,
    )
    assert config_of("train", "--preset", "base", "--family", "rnn").hidden_dim == 512
    for family in ("rnn", "convs2s"):
        with pytest.raises(
            UsageError, match=f"--preset big is the Transformer's only; got --family {family}"
        ):
            config_of("train", "--preset", "big", "--family", family)
    with pytest.raises(UsageError, match="--preset must be one of"):
        translate.TranslationConfig.for_command("train", preset="huge").validate()
    with pytest.raises(UsageError, match="--intermediate-dim does not apply to the rnn"):
        config_of("train", "--family", "rnn", "--intermediate-dim", "64")
    with pytest.raises(SystemExit):
        translate.parser().parse_args(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--preset {small,base,big,none}" in help_text and "--update-freq K" in help_text
    assert (
        "small below 100,000, base from there, big (the Transformer) from 10 million" in help_text
    )
    assert "hidden width (default: 256)" in help_text  # a preset's setting still says its default
    assert "a step is an optimizer update" in help_text
    assert "(--update-freq batches) (default: 0)" in help_text  # a default of 0 is said too
    # the switches a preset turns on can be turned off
    off = config_of("train", "--preset", "base", "--no-tie-embeddings", "--no-shared-vocabulary")
    assert (off.tie_embeddings, off.shared_vocabulary, off.hidden_dim) == (False, False, 512)
    on = config_of("train", "--preset", "base")
    assert (on.tie_embeddings, on.shared_vocabulary) == (True, True)


def test_the_small_presets_are_what_results_md_measured_and_the_demo_s_is_one():
    """The demo's settings before presets (a private list of command
    defaults) are ConvS2S's small preset; the Transformer's is the
    family table's (relative positions, tied, rate 3e-3)."""
    demo = config_of("demo")
    before = {
        "family": "convs2s",
        "hidden_dim": 128,
        "embed_dim": 128,
        "vocab_size": 4000,
        "batch_tokens": 1536,
        "dictionary": 0.5,
        "warmup": 400,
        "learning_rate": 5e-3,
        "alpha": 1.2,
        "average_last": 3,
        "time_budget": 8.0,
        "num_layers": 2,
        "dropout": 0.1,
    }
    assert {key: getattr(demo, key) for key in before} == before and demo.preset == "small"
    small = config_of("train", "--preset", "small")
    assert (small.family, small.hidden_dim, small.num_layers, small.num_heads) == (
        "transformer",
        128,
        2,
        4,
    )
    assert (small.intermediate_dim, small.position, small.tie_embeddings) == (256, "relative", True)
    assert (small.learning_rate, small.warmup, small.vocab_size) == (3e-3, 400, 4000)
    rnn = config_of("train", "--preset", "small", "--family", "rnn")
    assert (rnn.hidden_dim, rnn.learning_rate, rnn.batch_tokens) == (128, 1e-2, 1536)
    # a corpus of the user's has no dictionary entries: the preset leaves them out
    assert config_of("train", "--preset", "small", "--corpus", "x.tsv").dictionary == 0.0


def test_train_chooses_its_preset_by_the_corpus_s_pairs_and_says_so(tmp_path):
    assert [preset_for(n, "transformer") for n in (0, 99_999, 100_000, 10**7)] == [
        "small",
        "small",
        "base",
        "big",
    ]
    assert preset_for(10**8, "convs2s") == "base"  # ConvS2S has no big
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("".join(f"Satz {i}.\tSentence {i}.\n" for i in range(1234)))
    lines = []
    argv = ["train", "--corpus", str(corpus), "--output", str(tmp_path / "run"), "--family", "rnn"]
    config = translate.check(translate.parser().parse_args(argv), lines.append)
    assert (config.preset, config.hidden_dim, config.vocab_size, config.dictionary) == (
        "small",
        128,
        4000,
        0.0,
    )
    assert lines[0].startswith("a 1,234-pair corpus: preset small for the rnn (--vocab-size 4000")
    assert lines[0].endswith("; --preset base for 100,000 pairs or more; a flag given wins")
    limited = translate.check(translate.parser().parse_args([*argv, "--limit", "10"]), lines.append)
    assert limited.preset == "small" and lines[-1].startswith("a 10-pair corpus")
    # the demo's preset is its own, said on its first line
    lines.clear()
    translate.check(
        translate.parser().parse_args(["demo", "--output", str(tmp_path)]), lines.append
    )
    assert lines == [
        f"the demo's settings: preset small for the convs2s ({preset_summary('small', 'convs2s')})"
    ]
    assert "--learning-rate 0.005" in lines[0] and "--hidden-dim 128" in lines[0]
    # a corpus that cannot be read chooses nothing: train's checks say why
    missing = ["train", "--corpus", str(tmp_path / "missing.tsv"), "--output", str(tmp_path)]
    assert config_of(*missing).preset is None


def test_a_resumed_run_keeps_its_own_preset(tmp_path):
    """A run claimed with its chosen preset resumes with it; a run recorded
    before presets (no `preset` in run.json) resumes with the flags' own
    defaults, and its record compares equal; --overwrite chooses anew."""
    output = str(tmp_path / "run")
    argv = ["train", "--output", output, "--family", "convs2s"]
    chosen = config_of(*argv)
    settings = train_settings(chosen)[0]
    assert chosen.preset == settings["preset"] == "small"
    run_folders.claim(output, settings, defaults=recorded_defaults(settings), upgrade=upgrade)
    assert config_of(*argv).preset == "small"
    old = str(tmp_path / "old")
    plain = train_settings(config_of("train", "--output", old, "--preset", "none"))[0]
    run_folders.claim(old, {key: value for key, value in plain.items() if key != "preset"})
    resumed = config_of("train", "--output", old)
    assert (resumed.preset, resumed.hidden_dim, resumed.vocab_size) == (None, 256, 8000)
    again = train_settings(resumed)[0]
    run_folders.claim(old, again, defaults=recorded_defaults(again), upgrade=upgrade)
    assert config_of("train", "--output", old, "--overwrite").preset == "small"
    with pytest.raises(ValueError, match="hidden_dim"):
        small = train_settings(config_of("train", "--output", old, "--preset", "small"))[0]
        run_folders.claim(old, small, defaults=recorded_defaults(small), upgrade=upgrade)


def tiny_spec(update_freq, warmup=0):
    return model_settings(
        config_of(
            "train",
            "--preset",
            "none",
            "--hidden-dim",
            "8",
            "--num-heads",
            "2",
            "--num-layers",
            "1",
            "--dropout",
            "0",
            "--learning-rate",
            "0.01",
            "--warmup",
            str(warmup),
            "--update-freq",
            str(update_freq),
        )
    )


def eager_model(spec):
    """A tiny model of `spec` that trains eagerly: tracing the train step
    would take longer than these few steps."""
    model = build_model(spec, 20, 20)
    model.run_eagerly = True
    return model


def first_moments(model):
    """Adam's first moments, in the order of the model's trainable
    variables (`optimizer.variables` orders them otherwise once
    accumulators are among them)."""
    return [m.numpy() for m in model.optimizer._momentums]


def test_accumulating_two_batches_is_one_update_on_both():
    """Keras averages the K gradients (each batch's loss a mean over its
    tokens): with batches of equal token counts that is the gradient of
    the combined batch, so K batches of N are one update of a batch of KN,
    clipped (global norm 1) as that batch's gradient."""
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, (4, 5))
    target = rng.integers(4, 20, (4, 7))
    data = ((source, target[:, :-1]), target[:, 1:])  # no padding: equal token counts
    keras.utils.set_random_seed(1)
    accumulating, combined = eager_model(tiny_spec(2)), eager_model(tiny_spec(1))
    combined.set_weights(accumulating.get_weights())
    before = combined.get_weights()
    with tf.GradientTape() as tape:
        loss = combined.loss(data[1], combined(data[0], training=True))
    gradients = [
        tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, combined.trainable_variables)
    ]
    norm = np.sqrt(sum(np.sum(g**2) for g in gradients))
    assert norm > 1  # the clip (global norm 1) acts
    gradients = [g / norm for g in gradients]
    accumulating.fit(*data, batch_size=2, epochs=1, shuffle=False, verbose=0)
    assert int(accumulating.optimizer.iterations) == 1
    # Adam's first update (Kingma & Ba, Algorithm 1, as Keras writes it):
    # m = (1 - beta_1) g, v = (1 - beta_2) g^2,
    # w -= lr · sqrt(1 - beta_2) / (1 - beta_1) · m / (sqrt(v) + eps)
    for got, gradient in zip(first_moments(accumulating), gradients):
        np.testing.assert_allclose(got, 0.1 * gradient, rtol=1e-4, atol=1e-8)
    for got, old, g in zip(accumulating.get_weights(), before, gradients):
        m, v = 0.1 * g, 0.001 * g**2
        want = old - 0.01 * np.sqrt(0.001) / 0.1 * m / (np.sqrt(v) + 1e-7)
        # the key biases have no gradient (a softmax ignores a constant):
        # their step is rounding noise over rounding noise
        signal = np.abs(g) > 1e-6
        np.testing.assert_allclose(got[signal], want[signal], rtol=0, atol=1e-6)
    # Keras's plain update of the combined batch has the same gradient
    # (unclipped: it takes a sparse embedding gradient's norm, and Adam its
    # square, from its rows before repeated ids are summed, where the mean
    # of K gradients is dense).
    keras.utils.set_random_seed(1)
    accumulating, combined = eager_model(tiny_spec(2)), eager_model(tiny_spec(1))
    combined.set_weights(accumulating.get_weights())
    for model, batch_size in ((accumulating, 2), (combined, 4)):
        model.optimizer.global_clipnorm = None
        model.fit(*data, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(first_moments(accumulating), first_moments(combined)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-8)


def test_the_schedule_counts_updates():
    schedule = learning_rate(tiny_spec(3, warmup=4))
    assert isinstance(schedule, PerUpdateSchedule) and schedule.update_freq == 3
    updates = InverseSquareRootSchedule(0.01, 4)
    for batch in range(12):
        assert float(schedule(batch)) == pytest.approx(float(updates(batch // 3)))
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert float(restored(7)) == pytest.approx(float(schedule(7)))
    assert learning_rate(tiny_spec(3)) == 0.01  # a constant rate needs no counting
    # the optimizer reads it: after 4 batches (1 update + 1 batch) the rate is update 1's
    model = eager_model(tiny_spec(3, warmup=4))
    x = ((np.full((4, 3), 5), np.full((4, 3), 6)), np.full((4, 3), 7))
    model.fit(*x, batch_size=1, epochs=1, shuffle=False, verbose=0)
    assert int(model.optimizer.iterations) == 1
    assert float(model.optimizer.learning_rate) == pytest.approx(float(updates(1)))


def test_the_time_budget_plans_the_cosine_in_updates(tmp_path, monkeypatch):
    """10 batches an epoch, 2 a update: the cosine ends at 5 updates an epoch."""
    from keras_attention_recipes.translation import budget

    from keras_attention.seq2seq import PlannedCosineDecay

    now = [0.0]
    monkeypatch.setattr(budget.time, "perf_counter", lambda: now[0])
    schedule = PlannedCosineDecay(1e-3, 0, 1000)
    callback = budget.TimeBudget(100, 10, 5, str(tmp_path), schedule=schedule, update_freq=2)
    callback.set_model(type("FakeModel", (), {"stop_training": False})())
    callback.on_train_begin()
    now[0] = 10.0  # an epoch of 10 s: all 5 fit
    callback.on_epoch_end(0, {"val_loss": 3.0})
    assert float(schedule.total_steps) == 5 * 10 / 2
    model = build_model(
        {**tiny_spec(2, warmup=1), "decay": "cosine", "time_budget": 1, "total_steps": 50}, 20, 20
    )
    model.optimizer.build(model.trainable_variables)
    assert isinstance(budget.planned_schedule(model), PlannedCosineDecay)


def test_a_run_resumes_only_with_its_own_update_freq(tmp_path):
    """Another K would meet the optimizer's accumulators and its batch
    counter, which the schedule divides by K: refused, naming the setting."""
    output = str(tmp_path / "run")
    claimed = train_settings(config_of("train", "--output", output, "--update-freq", "2"))[0]
    assert claimed["update_freq"] == 2
    run_folders.claim(output, claimed, defaults=recorded_defaults(claimed), upgrade=upgrade)
    again = train_settings(config_of("train", "--output", output, "--update-freq", "2"))[0]
    run_folders.claim(output, again, defaults=recorded_defaults(again), upgrade=upgrade)
    other = train_settings(config_of("train", "--output", output))[0]
    with pytest.raises(ValueError, match="update_freq"):
        run_folders.claim(output, other, defaults=recorded_defaults(other), upgrade=upgrade)
    # a run recorded before the flag updated every batch
    old = str(tmp_path / "old")
    record = {key: value for key, value in other.items() if key != "update_freq"}
    run_folders.claim(old, record)
    run_folders.claim(old, other, defaults=recorded_defaults(other), upgrade=upgrade)
    with pytest.raises(ValueError, match="update_freq"):
        run_folders.claim(old, claimed, defaults=recorded_defaults(claimed), upgrade=upgrade)


def test_update_freq_is_refused_across_replicas(tmp_path, monkeypatch):
    """Keras 3.15's accumulation under MirroredStrategy with two replicas
    raised "merge_call called while defining a new graph" (its update is
    inside a cond): refused before the run is written."""

    class TwoReplicas:
        num_replicas_in_sync = 2

    monkeypatch.setattr(training, "choose_strategy", TwoReplicas)
    output = tmp_path / "run"
    with pytest.raises(UsageError, match="--update-freq 2 trains on one device: .* the 2 replicas"):
        training.train(config_of("train", "--output", str(output), "--update-freq", "2", *TINY))
    assert not output.exists()


# A run of its own: large (`make test-large`); the accumulation itself is
# test_accumulating_two_batches_is_one_update_on_both's, on the recipe's model.
@pytest.mark.large
@pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing")
def test_a_run_with_update_freq_records_it(tmp_path):
    tiny = [*TINY, "--limit", "64", "--batch-size", "16"]  # the later flags win
    run("train", "--output", str(tmp_path), "--epochs", "1", "--update-freq", "2", *tiny)
    record = json.load(open(tmp_path / "config.json"))
    assert record["update_freq"] == 2 and record["intermediate_dim"] == 64
    assert json.load(open(tmp_path / run_folders.RUN_FILE))["settings"]["update_freq"] == 2
