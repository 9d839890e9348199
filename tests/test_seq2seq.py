"""The Seq2Seq families: incremental decoding, state reordering, learning a
reversal task, scheduled sampling, the loss, saving, bad input."""

import os
import tempfile

import keras
import numpy as np
import pytest

from keras_attention.positional import TokenAndPositionEmbedding
from keras_attention.rnn_encoder import reverse_valid
from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    InverseSquareRootSchedule,
    MaskedAccuracy,
    MaskedCrossEntropy,
    MaskedPerplexity,
    RecurrentSeq2Seq,
    ScheduledSampling,
    TransformerSeq2Seq,
)
from keras_attention.seq2seq.generation import greedy_search
from keras_attention.seq2seq.scheduled_sampling import scheduled_sampling_logits
from tests import reference

VOCAB, PAD, SOS, EOS = 13, 0, 1, 2

FAMILIES = {
    "rnn-luong-general": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention="general", style="luong"
    ),
    "rnn-luong-no-feeding": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention="dot", style="luong", input_feeding=False
    ),
    "rnn-bahdanau-additive": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention="additive", style="bahdanau"
    ),
    "rnn-concat-gru-2layers": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention="concat", cell="gru", num_layers=2
    ),
    "rnn-bidirectional-reversed": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention="multihead", bidirectional=True, reverse_source=True
    ),
    "rnn-local": lambda: RecurrentSeq2Seq(VOCAB, VOCAB, 16, 16, attention="local"),
    "rnn-no-attention": lambda: RecurrentSeq2Seq(
        VOCAB, VOCAB, 16, 16, attention=None, context_input=True
    ),
    "convs2s": lambda: ConvS2SSeq2Seq(
        VOCAB, VOCAB, 16, [(16, 3)] * 2, [(16, 3)] * 2, max_length=16
    ),
    "transformer": lambda: TransformerSeq2Seq(VOCAB, VOCAB, 16, 2, 32, 2, max_length=16),
    "transformer-pre-norm": lambda: TransformerSeq2Seq(
        VOCAB, VOCAB, 16, 2, 32, 1, max_length=16, norm_first=True
    ),
    # Positions inside every self-attention instead of in the embeddings,
    # grouped-query heads, sliding windows (combined, to keep the suite short).
    "transformer-rope-gqa": lambda: TransformerSeq2Seq(
        VOCAB, VOCAB, 16, 4, 32, 1, max_length=16, position="rope", num_key_value_heads=2
    ),
    "transformer-alibi-window": lambda: TransformerSeq2Seq(
        VOCAB, VOCAB, 16, 2, 32, 1, max_length=16, position="alibi", sliding_window=2
    ),
    "transformer-relative": lambda: TransformerSeq2Seq(
        VOCAB, VOCAB, 16, 2, 32, 1, max_length=16, position="relative"
    ),
}


def batch(rng, n=3, source_length=6, target_length=5):
    source = rng.integers(3, VOCAB, (n, source_length))
    source[0, 4:] = PAD  # sources of different lengths
    target_in = rng.integers(3, VOCAB, (n, target_length))
    target_in[:, 0] = SOS
    return source.astype("int32"), target_in.astype("int32")


@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_decoding_equals_teacher_forcing(rng, family):
    model = FAMILIES[family]()
    source, target_in = batch(rng)
    full = np.asarray(model((source, target_in)))
    state = model.encode(source, max_length=target_in.shape[1])
    for t in range(target_in.shape[1]):
        logits, state, _ = model.decode_step(target_in[:, t], state)
        np.testing.assert_allclose(np.asarray(logits), full[:, t], atol=1e-5)
    weights = model.attention_weights(source, target_in)
    for value in weights.values():
        value = np.asarray(value)
        np.testing.assert_allclose(value.sum(-1), 1.0, atol=1e-5)
        assert np.all(value[0, ..., 4:] == 0.0)  # padded source positions get no weight


@pytest.mark.parametrize("family", ["rnn-bahdanau-additive", "convs2s", "transformer"])
def test_reorder_state_equals_permuted_batch(rng, family):
    model = FAMILIES[family]()
    source, target_in = batch(rng)
    order = np.array([2, 0, 0])
    full = np.asarray(model((source[order], target_in[order])))
    state = model.encode(source, max_length=5)
    for t in range(2):
        _, state, _ = model.decode_step(target_in[:, t], state)
    state = model.reorder_state(state, order)
    for t in range(2, 5):
        logits, state, _ = model.decode_step(target_in[order, t], state)
        np.testing.assert_allclose(np.asarray(logits), full[:, t], atol=1e-5)


def test_reverse_valid_keeps_padding_in_place():
    x = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 8]])
    np.testing.assert_array_equal(
        np.asarray(reverse_valid(x, np.array([3, 5]))), [[3, 2, 1, 0, 0], [8, 7, 6, 5, 4]]
    )


def test_reversed_source_reads_backwards_but_returns_source_order(rng):
    forward = RecurrentSeq2Seq(VOCAB, VOCAB, 8, 8, attention="general")
    backward = RecurrentSeq2Seq(VOCAB, VOCAB, 8, 8, attention="general", reverse_source=True)
    source, target_in = batch(rng)
    forward((source, target_in))
    backward((source, target_in))
    backward.set_weights(forward.get_weights())
    flipped = np.asarray(reverse_valid(source, (source != 0).sum(1)))
    memory_forward, _ = forward.encoder(flipped)
    memory_backward, _ = backward.encoder(source)
    np.testing.assert_allclose(
        np.asarray(reverse_valid(memory_forward, (source != 0).sum(1))),
        np.asarray(memory_backward),
        atol=1e-6,
    )


# -- learning a task ------------------------------------------------------------
def reversal_data(rng, count, length=8):
    source = rng.integers(3, VOCAB, (count, length))
    target = source[:, ::-1]
    target_in = np.concatenate([np.full((count, 1), SOS), target], 1)
    target_out = np.concatenate([target, np.full((count, 1), EOS)], 1)
    return source.astype("int32"), target_in.astype("int32"), target_out.astype("int32")


LEARNERS = {
    "rnn": lambda: RecurrentSeq2Seq(VOCAB, VOCAB, 32, 64, attention="general", style="luong"),
    "convs2s": lambda: ConvS2SSeq2Seq(
        VOCAB, VOCAB, 64, [(64, 3)] * 3, [(64, 3)] * 3, max_length=16
    ),
    # One layer: tracing the training step, not the epochs, is most of the
    # test's time, and one layer learns the task in as few epochs as two.
    "transformer": lambda: TransformerSeq2Seq(VOCAB, VOCAB, 64, 4, 128, 1, max_length=16),
}


# ConvS2S's case runs in `make test`; the RNN's and the Transformer's are
# large (`make test-large`): the session's shared recipe run trains an RNN,
# and test_portability.py trains each family, in `make test`.
@pytest.mark.parametrize(
    "family",
    [pytest.param(f, marks=pytest.mark.large if f != "convs2s" else ()) for f in LEARNERS],
)
def test_each_family_learns_to_reverse(family):
    # Seeded, so the weights do not depend on what ran before in the process:
    # how sharply the RNN's attention settles on the anti-diagonal varies
    # with the initial weights (JAX, seeds 0-5: 0.70, 0.56, 0.97, 0.92, 0.74,
    # 0.83 before the recurrent family's speed-ups, the same but 0.73 for seed 2 after;
    # seed 1 misses the 0.6 below both times).
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    source, target_in, target_out = reversal_data(rng, 2000)
    test_source, _, test_out = reversal_data(rng, 300)
    model = LEARNERS[family]()
    model.compile(keras.optimizers.Adam(3e-3), MaskedCrossEntropy())
    for _ in range(10):  # stops early once it has learned
        model.fit((source, target_in), target_out, batch_size=64, epochs=1, verbose=0)
        predicted = np.asarray(greedy_search(model, test_source, max_length=9)["tokens"])
        exact = (predicted == test_out).all(1).mean()
        if exact >= 0.98:
            break
    assert exact >= 0.95, f"{family} reached only {exact:.2f} exact match"
    if family == "rnn":  # the alignment of reversal is the anti-diagonal
        weights = np.asarray(model.attention_weights(test_source[:50], target_in[:50])["attention"])
        anti_diagonal = np.mean([weights[:, t, 7 - t] for t in range(8)])
        assert anti_diagonal > 0.6, f"mean weight on the anti-diagonal {anti_diagonal:.2f}"


# -- scheduled sampling -----------------------------------------------------------
@pytest.mark.parametrize("family", ["rnn-luong-general", "convs2s", "transformer"])
def test_scheduled_sampling_extremes(rng, family):
    model = FAMILIES[family]()
    source, target_in = batch(rng)
    teacher = np.asarray(model((source, target_in)))
    np.testing.assert_allclose(
        np.asarray(scheduled_sampling_logits(model, source, target_in, 0.0)), teacher, atol=1e-5
    )
    free = np.asarray(scheduled_sampling_logits(model, source, target_in, 1.0, draw="argmax"))
    # Free running: each step's input is the previous step's argmax, as greedy decoding does;
    # neither ever picks padding or <sos>.
    greedy = np.asarray(greedy_search(model, source, max_length=5, eos_id=-1)["tokens"])
    allowed = free.copy()
    allowed[..., [model.padding_id, model.sos_id]] = -np.inf
    np.testing.assert_array_equal(allowed.argmax(-1), greedy)
    assert not np.allclose(free, teacher, atol=1e-3)


def test_schedules():
    linear = ScheduledSampling("linear", start=0.0, end=0.5, steps=100)
    np.testing.assert_allclose(
        [float(linear(s)) for s in (0, 50, 100, 500)], [0.0, 0.25, 0.5, 0.5], atol=1e-6
    )
    assert float(ScheduledSampling("constant", probability=0.3)(1234)) == pytest.approx(0.3)
    inverse = ScheduledSampling("inverse_sigmoid", k=10.0)
    for step in (0, 10, 50):
        assert float(inverse(step)) == pytest.approx(1 - 10 / (10 + np.exp(step / 10)), abs=1e-6)


def test_fit_with_scheduled_sampling(rng):
    source, target_in, target_out = reversal_data(rng, 64)
    model = RecurrentSeq2Seq(
        VOCAB,
        VOCAB,
        8,
        8,
        attention="general",
        scheduled_sampling=ScheduledSampling("constant", probability=0.5, seed=3),
    )
    model.compile(keras.optimizers.Adam(1e-2), MaskedCrossEntropy())
    before = [np.array(w) for w in model.get_weights()] if model.built else None
    history = model.fit((source, target_in), target_out, batch_size=32, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert before is None or any(not np.allclose(a, b) for a, b in zip(before, model.get_weights()))


# -- loss ---------------------------------------------------------------------------
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_cross_entropy_matches_reference(rng, smoothing):
    logits = rng.normal(size=(2, 4, 6)).astype("float32")
    labels = np.array([[3, 4, 2, 0], [5, 2, 0, 0]])
    loss = float(MaskedCrossEntropy(label_smoothing=smoothing)(labels, logits))
    log_probs = np.log(reference.softmax(logits))
    target = np.eye(6)[labels] * (1 - smoothing) + smoothing / 6
    token = -(target * log_probs).sum(-1)
    mask = labels != 0
    assert loss == pytest.approx(token[mask].mean(), rel=1e-5)


@pytest.mark.tensorflow
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_masked_cross_entropy_gradient_matches_the_closed_form(rng, smoothing):
    """d L / d z = ((1 - ε)(p - onehot(y)) + ε (p - 1/V)) / N on real tokens, 0 on
    padding: the logsumexp form (the target logit selected, not gathered)
    gives the label-smoothed gradient exactly; a -inf logit (a banned
    token) leaves the loss finite."""
    import tensorflow as tf

    logits = tf.constant(rng.normal(size=(2, 4, 6)).astype("float32"))
    labels = np.array([[3, 4, 2, 0], [5, 2, 0, 0]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = MaskedCrossEntropy(label_smoothing=smoothing)(labels, logits)
    gradient = tape.gradient(loss, logits).numpy()
    probs = reference.softmax(logits.numpy())
    mask = (labels != 0)[..., None]
    expected = (1 - smoothing) * (probs - np.eye(6)[labels]) + smoothing * (probs - 1 / 6)
    np.testing.assert_allclose(gradient, expected * mask / mask.sum(), atol=1e-6)
    banned = logits.numpy().copy()
    banned[..., 1] = -np.inf  # never a target here
    assert np.isfinite(float(MaskedCrossEntropy()(labels, banned)))


def test_masked_token_metrics_match_reference_over_several_batches(rng):
    """Accumulated per token over batches of different lengths (not a
    mean of batch means), padding excluded, sample weights per sentence."""
    batches = [
        (np.array([[3, 4, 2, 0], [5, 2, 0, 0]]), rng.normal(size=(2, 4, 6)).astype("float32")),
        (np.array([[4, 4, 4, 4, 2, 0]]), rng.normal(size=(1, 6, 6)).astype("float32")),
    ]
    for weights in (None, [np.array([1.0, 3.0]), np.array([0.5])]):
        accuracy, perplexity = MaskedAccuracy(), MaskedPerplexity()
        right, nll, count = 0.0, 0.0, 0.0
        for index, (labels, logits) in enumerate(batches):
            weight = None if weights is None else weights[index]
            accuracy.update_state(labels, logits, sample_weight=weight)
            perplexity.update_state(labels, logits, sample_weight=weight)
            token_weight = (labels != 0) * (1.0 if weight is None else weight[:, None])
            right += ((logits.argmax(-1) == labels) * token_weight).sum()
            log_probs = np.log(reference.softmax(logits))
            chosen = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]  # (B, T)
            nll -= (chosen * token_weight).sum()
            count += token_weight.sum()
        assert float(accuracy.result()) == pytest.approx(right / count, rel=1e-6)
        assert float(perplexity.result()) == pytest.approx(np.exp(nll / count), rel=1e-5)
    accuracy.reset_state()
    assert float(accuracy.result()) == 0.0
    restored = MaskedPerplexity.from_config(MaskedPerplexity(padding_id=3).get_config())
    assert (restored.name, restored.padding_id) == ("perplexity", 3)


def test_perplexity_is_the_exponential_of_the_unsmoothed_loss(rng):
    logits = rng.normal(size=(2, 5, 7)).astype("float32")
    labels = np.array([[3, 4, 2, 0, 0], [5, 6, 1, 2, 0]])
    metric = MaskedPerplexity()
    metric.update_state(labels, logits)
    plain = float(MaskedCrossEntropy()(labels, logits))
    smoothed = float(MaskedCrossEntropy(label_smoothing=0.1)(labels, logits))
    assert float(metric.result()) == pytest.approx(np.exp(plain), rel=1e-5)
    assert abs(np.exp(smoothed) - np.exp(plain)) > 0.1  # what a smoothed loss would have given


# -- saving -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "family",
    [
        "rnn-bahdanau-additive",
        "convs2s",
        "transformer",
        "transformer-relative",  # the variant with weights of its own; the others: below
    ],
)
def test_keras_file_round_trip(rng, family):
    model = FAMILIES[family]()
    source, target_in = batch(rng)
    expected = np.asarray(model((source, target_in)))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.keras")
        model.save(path)
        loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(np.asarray(loaded((source, target_in))), expected, atol=1e-6)
    assert type(loaded) is type(model) and loaded.get_config() == model.get_config()


def test_transformer_variants_config_round_trip():
    for family in ("transformer-rope-gqa", "transformer-alibi-window"):
        model = FAMILIES[family]()
        config = model.get_config()
        assert TransformerSeq2Seq.from_config(config).get_config() == config


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["rnn-luong-general", "convs2s", "transformer"])
def test_error_empty_source(family):
    model = FAMILIES[family]()
    with pytest.raises(ValueError, match=r"`source` of .* is empty \(shape \(2, 0\)\)"):
        model.encode(np.zeros((2, 0), "int32"))


def test_error_source_longer_than_learned_positions():
    model = ConvS2SSeq2Seq(VOCAB, VOCAB, 8, [(8, 3)], [(8, 3)], max_length=6)
    with pytest.raises(
        ValueError, match=r"max_length=6\) has positions 0..5; received positions 0..8"
    ):
        model.encode(np.ones((1, 9), "int32"))


def test_error_decoding_past_the_cache():
    model = TransformerSeq2Seq(VOCAB, VOCAB, 8, 2, 8, 1, max_length=6)
    with pytest.raises(
        ValueError, match=r"`max_length` 9 exceeds TransformerSeq2Seq's max_length 6"
    ):
        model.encode(np.ones((1, 3), "int32"), max_length=9)


def test_error_unknown_attention():
    with pytest.raises(ValueError, match=r"`attention` of RecurrentSeq2Seq must be one of"):
        RecurrentSeq2Seq(VOCAB, VOCAB, attention="cosine")


@pytest.mark.large(reason="test_fit_with_scheduled_sampling trains with it in `make test`")
def test_scheduled_sampling_with_unknown_length_is_differentiable(rng):
    import tensorflow as tf

    model = FAMILIES["rnn-luong-general"]()
    source, target_in = batch(rng)
    expected = np.asarray(model((source, target_in)))

    @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)] * 2)
    def loss_and_grads(source, target_in):
        with tf.GradientTape() as tape:
            logits = scheduled_sampling_logits(model, source, target_in, 0.0)
            loss = tf.reduce_sum(logits)
        return logits, tape.gradient(loss, model.trainable_variables)

    logits, grads = loss_and_grads(source, target_in)
    np.testing.assert_allclose(np.asarray(logits), expected, atol=1e-5)  # p = 0: teacher forcing
    assert all(
        g is not None and np.all(np.isfinite(np.asarray(tf.convert_to_tensor(g)))) for g in grads
    )


# -- the redesign: presets, 0.1.0 names, training inside call --------------------------
def test_convs2s_from_preset():
    from keras_attention.convs2s import PRESETS

    model = ConvS2SSeq2Seq.from_preset("tiny", VOCAB, VOCAB, max_length=16)
    assert model.embed_dim == PRESETS["tiny"]["embed_dim"]
    assert model.encoder.convolutions == PRESETS["tiny"]["encoder"]
    assert model.decoder.convolutions == PRESETS["tiny"]["decoder"]
    with pytest.raises(ValueError, match=r"`preset` must be one of \['fconv_iwslt_de_en'"):
        ConvS2SSeq2Seq.from_preset("fconv_big", VOCAB, VOCAB)


@pytest.mark.parametrize(
    "make,old,new,value",
    [
        (lambda: RecurrentSeq2Seq(VOCAB, VOCAB, units=12), "units", "hidden_dim", 12),
        (
            lambda: RecurrentSeq2Seq(VOCAB, VOCAB, 8, 8, encoder_layers=2),
            "encoder_layers",
            "num_layers",
            2,
        ),
        (
            lambda: TransformerSeq2Seq(VOCAB, VOCAB, width=12, num_heads=2),
            "width",
            "hidden_dim",
            12,
        ),
    ],
)
def test_0_1_0_constructor_names_still_work_with_a_warning(make, old, new, value):
    removed = r"is deprecated and will be removed in keras_attention 0\.4\.0"
    with pytest.warns(DeprecationWarning, match=rf"`{old}` of \w+ {removed}: use `{new}`"):
        model = make()
    assert getattr(model, new) == value
    assert old not in model.get_config()


def test_training_call_follows_the_schedule(rng):
    """With p = 1 and argmax, a training call is free running; the counter
    the schedule reads advances once per training call; inference calls
    are teacher-forced and do not count."""
    sampling = ScheduledSampling("constant", probability=1.0, draw="argmax")
    model = RecurrentSeq2Seq(VOCAB, VOCAB, 16, 16, attention="general", scheduled_sampling=sampling)
    source, target_in = batch(rng)
    teacher = np.asarray(model((source, target_in)))
    assert int(model.sampling_step.numpy()) == 0
    trained = np.asarray(model((source, target_in), training=True))
    free = np.asarray(scheduled_sampling_logits(model, source, target_in, 1.0, draw="argmax"))
    np.testing.assert_allclose(trained, free, atol=1e-5)
    assert not np.allclose(trained, teacher, atol=1e-3)
    assert int(model.sampling_step.numpy()) == 1
    linear = RecurrentSeq2Seq(
        VOCAB,
        VOCAB,
        8,
        8,
        scheduled_sampling=ScheduledSampling("linear", start=0.0, end=1.0, steps=4),
    )
    linear.build()
    for _ in range(3):
        linear((source, target_in), training=True)
    assert float(linear.scheduled_sampling(linear.sampling_step.numpy())) == pytest.approx(0.75)


# Tied and shared tables: each family's tables (source, target), and where
# its output projection and the tied one's bias are (paths below the model).
TABLES = {
    "transformer": ("source_embedding", "target_embedding", "output_projection", "output_bias"),
    "convs2s": (
        "encoder/token_embedding",
        "decoder/token_embedding",
        "decoder/output_projection",
        "decoder/output_bias",
    ),
}
TYING = {
    "transformer": lambda **kw: TransformerSeq2Seq(VOCAB, VOCAB, 16, 2, 32, 1, max_length=16, **kw),
    "convs2s": lambda **kw: ConvS2SSeq2Seq(
        VOCAB, VOCAB, 16, hidden_dim=16, num_layers=2, max_length=16, **kw
    ),
}


@pytest.mark.parametrize("family", sorted(TYING))
@pytest.mark.parametrize("share", [False, True], ids=["tied", "three-way"])
def test_tied_and_shared_tables_are_the_target_embedding_table(family, share):
    """Tied logits (and, three-way, the source side) equal those of an
    untied, unshared model whose output projection holds the transposed
    target table and the tied model's bias, and whose source table is a
    copy of the target table."""
    source, target_in = np.array([[3, 4, 5, 0]]), np.array([[1, 6, 7]])
    tied = TYING[family](tie_embeddings=True, share_embeddings=share)
    plain = TYING[family]()
    tied.build(), plain.build()
    assert tied.count_params() == plain.count_params() - 16 * VOCAB * (2 if share else 1)
    source_table, target_table, projection, bias = TABLES[family]

    def below_model(weight):
        return weight.path.split("/", 1)[1]

    weights = {below_model(w): w for w in tied.weights}
    weights[bias].assign(np.random.default_rng(0).normal(size=VOCAB))
    table = keras.ops.convert_to_numpy(weights[f"{target_table}/embeddings"])
    copies = {
        f"{projection}/kernel": table.T,
        f"{projection}/bias": keras.ops.convert_to_numpy(weights[bias]),
        **({f"{source_table}/embeddings": table} if share else {}),
    }
    for weight in plain.weights:
        name = below_model(weight)
        weight.assign(copies[name] if name in copies else weights[name])
    assert set(copies) | set(weights) - {bias} == {below_model(w) for w in plain.weights}
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(tied((source, target_in))),
        keras.ops.convert_to_numpy(plain((source, target_in))),
        atol=1e-5,
    )


@pytest.mark.parametrize("family", sorted(TYING))
def test_a_shared_table_is_one_variable_that_both_sides_train(family):
    """One step of training moves the shared table by the gradient of both
    sides: the rows of tokens seen only in the source change (the encoder's
    gradient), rows of tokens not in the batch do not (the projection is
    untied here), and the model holds the table once."""
    model = TYING[family](share_embeddings=True)
    model.build()
    source_table, target_table, _, _ = TABLES[family]
    names = [w.path.split("/", 1)[1] for w in model.trainable_weights]
    assert f"{target_table}/embeddings" in names and f"{source_table}/embeddings" not in names
    table = next(
        w for w in model.trainable_weights if w.path.endswith(f"{target_table}/embeddings")
    )
    before = keras.ops.convert_to_numpy(table).copy()
    model.compile(keras.optimizers.SGD(0.5), MaskedCrossEntropy())
    source, target_in, target_out = [[9, 10, 11]], [[1, 3, 4]], [[3, 4, 2]]
    model.fit((np.array(source), np.array(target_in)), np.array(target_out), verbose=0)
    moved = np.abs(keras.ops.convert_to_numpy(table) - before).max(axis=1)
    assert (moved[[9, 10, 11]] > 0).all() and (moved[[1, 3, 4]] > 0).all()
    assert (moved[[5, 6, 7, 8, 12]] == 0).all()


def test_tying_and_sharing_refuse_what_cannot_be_one_table():
    with pytest.raises(
        ValueError, match="source_vocab_size` equal to `target_vocab_size`.*13 and 14"
    ):
        ConvS2SSeq2Seq(VOCAB, VOCAB + 1, 16, hidden_dim=16, num_layers=1, share_embeddings=True)
    with pytest.raises(ValueError, match="source_vocab_size` equal to `target_vocab_size`"):
        TransformerSeq2Seq(VOCAB + 1, VOCAB, 16, 2, 32, 1, share_embeddings=True)
    with pytest.raises(
        ValueError, match="output width must be embed_dim = 16.*received output width 32"
    ):
        ConvS2SSeq2Seq(VOCAB, VOCAB, 16, hidden_dim=32, num_layers=1, tie_embeddings=True)
    layer = TokenAndPositionEmbedding(VOCAB, 8, 16)
    with pytest.raises(ValueError, match=r"vocab_size and embed_dim \(13, 8\); received \(13, 4\)"):
        layer.share_token_table(TokenAndPositionEmbedding(VOCAB, 4, 16))
    layer.build((1, 3))
    with pytest.raises(ValueError, match="before the layer is built"):
        layer.share_token_table(TokenAndPositionEmbedding(VOCAB, 8, 16))


def test_inverse_square_root_schedule_warms_up_then_decays():
    schedule = InverseSquareRootSchedule(2e-3, warmup_steps=40)
    steps = np.array([0, 9, 39, 40, 159, 3999])
    s = steps + 1.0
    expected = 2e-3 * np.minimum(s / 40, np.sqrt(40 / s))
    got = [float(keras.ops.convert_to_numpy(schedule(step))) for step in steps]
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert max(got) == pytest.approx(2e-3)
    again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert float(keras.ops.convert_to_numpy(again(159))) == pytest.approx(got[4])
    with pytest.raises(ValueError, match="warmup_steps"):
        InverseSquareRootSchedule(1e-3, warmup_steps=0)


@pytest.mark.large(reason="an XLA compilation for one refusal")
@pytest.mark.tensorflow
def test_convs2s_past_max_length_under_xla_raises_when_the_length_is_static():
    import tensorflow as tf

    model = ConvS2SSeq2Seq(12, 12, 8, hidden_dim=8, num_layers=1, max_length=6)
    model.teacher_forced(np.full((1, 3), 4, "int32"), np.full((1, 3), 4, "int32"))
    translate = tf.function(lambda s: greedy_search(model, s, 2)["tokens"], jit_compile=True)
    assert translate(np.full((1, 6), 4, "int32")).shape == (1, 2)
    with pytest.raises(ValueError, match=r"max_length=6\) has positions 0..5"):
        translate(np.full((1, 10), 4, "int32"))


def _tiny(family="recurrent", **kwargs):
    if family == "recurrent":
        return RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8, **kwargs)
    if family == "transformer":
        return TransformerSeq2Seq(
            10, 10, hidden_dim=8, num_heads=2, intermediate_dim=8, num_layers=1, **kwargs
        )
    return ConvS2SSeq2Seq(10, 10, 8, hidden_dim=8, num_layers=1, **kwargs)


@pytest.mark.parametrize("family", ["recurrent", "transformer", "convolutional"])
@pytest.mark.parametrize(
    "ids, pattern",
    [
        ({"sos_id": 2, "eos_id": 2}, r"`sos_id` and `eos_id` of \w+ must differ"),
        ({"eos_id": 0}, r"`eos_id` and `padding_id` of \w+ must differ"),
        ({"eos_id": 10}, r"`eos_id` of \w+ must be a token id in \[0, 10\)"),
        ({"padding_id": -1}, r"`padding_id` of \w+ must be a token id in \[0, 10\)"),
        ({"sos_id": np.int64(11)}, r"`sos_id` of \w+ must be a token id in \[0, 10\)"),
    ],
)
def test_every_family_refuses_special_ids_that_cannot_work(family, ids, pattern):
    with pytest.raises(ValueError, match=pattern):
        _tiny(family, **ids)


BAD_SETTINGS = {
    "TransformerSeq2Seq hidden_dim=10, num_heads=4": (
        lambda: TransformerSeq2Seq(10, 10, hidden_dim=10, num_heads=4),
        r"`hidden_dim` of TransformerSeq2Seq must be divisible by `num_heads`.*"
        r"hidden_dim=10, num_heads=4",
    ),
    "InverseSquareRootSchedule peak=inf": (
        lambda: InverseSquareRootSchedule(float("inf"), 10),
        r"`peak_learning_rate` of InverseSquareRootSchedule must be a finite number > 0",
    ),
    "InverseSquareRootSchedule peak=nan": (
        lambda: InverseSquareRootSchedule(float("nan"), 10),
        r"`peak_learning_rate` of InverseSquareRootSchedule must be a finite number > 0",
    ),
    "ScheduledSampling k=inf": (
        lambda: ScheduledSampling(schedule="inverse_sigmoid", k=float("inf")),
        r"`k` of ScheduledSampling must be a finite number > 0",
    ),
    "ScheduledSampling probability='0.5'": (
        lambda: ScheduledSampling(probability="0.5"),
        r"`probability` of ScheduledSampling must be in \[0, 1\]; received probability='0.5'",
    ),
    "model call with target ids >= vocabulary": (
        lambda: _tiny()((np.array([[4, 2]]), np.array([[1, 12]]))),
        r"`target_in` of RecurrentSeq2Seq must hold token ids in \[0, 10\) .*holding 12",
    ),
    "encode with float source ids": (
        lambda: _tiny("transformer").encode(np.array([[4.0, 2.0]], "float32")),
        r"`source` of TransformerSeq2Seq must be integer token ids; received dtype float32",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_meaningless_settings_and_ids_get_our_messages(case):
    call, pattern = BAD_SETTINGS[case]
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()


@pytest.mark.tensorflow
def test_target_ids_past_the_vocabulary_fail_in_the_graph_with_our_message():
    import tensorflow as tf

    import keras_attention.serving  # noqa: F401  (installs the run-time check)

    model = _tiny()
    model((np.array([[4, 2]]), np.array([[1, 4]])))
    spec = tf.TensorSpec((None, None), tf.int32)
    run = tf.function(lambda s, t: model((s, t)), input_signature=[spec, spec])
    assert run(np.array([[4, 2]], "int32"), np.array([[1, 4]], "int32")).shape == (1, 2, 10)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`target_in` of RecurrentSeq2Seq"):
        run(np.array([[4, 2]], "int32"), np.array([[1, 12]], "int32"))


def test_fit_with_target_ids_past_the_vocabulary_names_the_array():
    model = _tiny()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    source, target_in = np.array([[4, 2]]), np.array([[1, 4]])
    with pytest.raises(ValueError, match=r"`y \(target_out\)` of RecurrentSeq2Seq.fit must hold"):
        model.fit((source, target_in), np.array([[4, 12]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`x\[0\] \(source\)` of RecurrentSeq2Seq.fit .*-1"):
        model.fit((np.array([[-1, 2]]), target_in), np.array([[4, 2]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`x\[0\] \(source\)` of .*fit must be integer token ids"):
        model.fit((source + 0.7, target_in), np.array([[4, 2]]), epochs=1, verbose=0)
    with pytest.raises(ValueError, match=r"`y \(target_out\)` of .*fit must be integer token ids"):
        model.fit((source, target_in), np.array([[4.0, 2.0]]), epochs=1, verbose=0)
