"""keras_attention.compat: the old names still work, warn with the new one,
and compute what the new names compute (0.1.0's files are
tests/test_compatibility.py)."""

import warnings

import keras
import numpy as np
import pytest

from keras_attention import (
    AttentionDecoder,
    ConvS2SDecoder,
    ConvS2SEncoder,
    GeneralAttention,
    LocalAttention,
    TransformerSeq2Seq,
)


def numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "make",
    [lambda: LocalAttention(3, mode="last"), lambda: LocalAttention(score=3, mode="last")],
)
def test_local_attention_with_the_window_first(rng, make):
    with pytest.warns(DeprecationWarning, match=r"LocalAttention\(window, \.\.\.\) with"):
        old = make()
    new = LocalAttention(window=3, mode="last")
    assert (old.window, type(old.scorer)) == (new.window, type(new.scorer))
    query, value = rng.normal(size=(2, 4)), rng.normal(size=(2, 7, 4))
    np.testing.assert_allclose(numpy(old(query, value)), numpy(new(query, value)), atol=1e-6)


def test_local_attention_with_a_score_does_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert type(LocalAttention(GeneralAttention(), window=2).scorer) is GeneralAttention


def test_attention_decoder_initial_state_is_init_cache(rng):
    decoder = AttentionDecoder(12, 4, 6, attention="additive")
    memory = rng.normal(size=(2, 5, 6)).astype("float32")
    encoder_state = [rng.normal(size=(2, 6)).astype("float32") for _ in range(2)]
    cache = decoder.init_cache(memory, encoder_state)
    with pytest.warns(
        DeprecationWarning, match=r"AttentionDecoder.initial_state is deprecated .*: use "
    ):
        old = decoder.initial_state(memory, encoder_state)
    keras.tree.map_structure(
        lambda a, b: np.testing.assert_array_equal(numpy(a), numpy(b)), old, cache
    )
    tokens = np.array([1, 3])
    logits, weights, _ = decoder.step(tokens, cache)
    with pytest.warns(DeprecationWarning, match=r"`state` of AttentionDecoder.step .*`cache`"):
        old_logits, old_weights, _ = decoder.step(tokens, state=cache)
    np.testing.assert_array_equal(numpy(old_logits), numpy(logits))
    np.testing.assert_array_equal(numpy(old_weights), numpy(weights))


def test_convs2s_decoder_step_index_is_cache_index(rng):
    encoder = ConvS2SEncoder(20, 8, [(12, 3)], max_length=16)
    decoder = ConvS2SDecoder(20, 8, [(12, 3)], max_length=16)
    keys, values = encoder(rng.integers(1, 20, (2, 5)))
    target = rng.integers(1, 20, (2, 3))
    full = numpy(decoder(target, keys, values))
    cache = decoder.init_cache(keys, values)
    _, _, cache = decoder.step(target[:, 0], cache, cache_index=0)
    with pytest.warns(DeprecationWarning, match=r"`index` of ConvS2SDecoder.step .*`cache_index`"):
        logits, _, _ = decoder.step(target[:, 1], cache, index=1)
    np.testing.assert_allclose(numpy(logits), full[:, 1], atol=1e-5)


def test_old_and_new_keyword_together_is_an_error(rng):
    decoder = AttentionDecoder(12, 4, 6, attention="dot")
    cache = decoder.init_cache(np.zeros((1, 3, 6), "float32"), [np.zeros((1, 6), "float32")] * 2)
    with pytest.raises(TypeError, match=r"AttentionDecoder.step: pass `cache` only"):
        decoder.step(np.array([1]), cache=cache, state=cache)


def test_teacher_forced_return_attention_is_return_attention_scores(rng):
    model = TransformerSeq2Seq(12, 12, hidden_dim=8, num_heads=2, num_layers=1)
    source, target = rng.integers(3, 12, (2, 4)), rng.integers(3, 12, (2, 3))
    logits, scores = model.teacher_forced(source, target, return_attention_scores=True)
    with pytest.warns(DeprecationWarning, match=r"`return_attention` of TransformerSeq2Seq"):
        old_logits, old_scores = model.teacher_forced(source, target, return_attention=True)
    np.testing.assert_array_equal(numpy(old_logits), numpy(logits))
    np.testing.assert_array_equal(numpy(old_scores["layer 1"]), numpy(scores["layer 1"]))


def test_old_and_new_name_together_is_an_error():
    with pytest.raises(ValueError, match=r"pass `hidden_dim` only .*width=8 and hidden_dim=12"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            TransformerSeq2Seq(12, 12, hidden_dim=12, width=8, num_heads=2)


def test_old_names_read_as_attributes_and_configs_load_quietly():
    with pytest.warns(DeprecationWarning):
        model = TransformerSeq2Seq(12, 12, width=8, num_heads=2)
    assert model.width == model.hidden_dim == 8
    config = {**model.get_config(), "width": 8}
    del config["hidden_dim"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert TransformerSeq2Seq.from_config(config).hidden_dim == 8


def test_a_keras_file_with_a_0_2_window_loads_and_computes_as_before(tmp_path):
    """A `.keras` file written by 0.2.x with `sliding_window=w` (keys
    |i - j| <= w, no `sliding_window_rule` in its config) loads as the
    window w + 1 of today and gives the outputs it gave."""
    import json
    import zipfile

    from keras_attention.seq2seq import TransformerSeq2Seq

    source, target = np.array([[3, 4, 5, 6, 7, 2]]), np.array([[1, 3, 4, 5, 6]])
    model = TransformerSeq2Seq(9, 9, 8, 2, 16, 1, max_length=8, sliding_window=3)
    expected = np.asarray(model((source, target)))
    path = str(tmp_path / "new.keras")
    model.save(path)
    old = str(tmp_path / "old.keras")
    with zipfile.ZipFile(path) as new_file, zipfile.ZipFile(old, "w") as old_file:
        for item in new_file.infolist():
            data = new_file.read(item.filename)
            if item.filename == "config.json":  # as 0.2.x wrote it: w = 2 for |i - j| <= 2
                config = json.loads(data)
                assert config["config"].pop("sliding_window_rule") == "keras"
                config["config"]["sliding_window"] = 2
                data = json.dumps(config)
            old_file.writestr(item, data)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # read quietly
        restored = keras.saving.load_model(old)
    assert restored.sliding_window == 3
    np.testing.assert_allclose(np.asarray(restored((source, target))), expected, atol=1e-6)
