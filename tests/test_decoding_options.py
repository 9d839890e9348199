"""The decoding options of greedy and beam search against brute force: a
scripted model over a tiny vocabulary, every sequence up to the maximum
length enumerated in NumPy, each option applied by its definition, and the
n-best of an exhaustive beam (or the greedy path) compared with it; the
options compiled equal eager; `<unk>` replacement on a scripted alignment;
the errors of bad options. Portable: no TensorFlow import."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

from keras_attention.seq2seq import (
    GreedySearch,
    RecurrentSeq2Seq,
    beam_search,
    generate,
    greedy_search,
    sample,
)
from keras_attention.seq2seq.scheduled_sampling import scheduled_sampling_logits

PAD, SOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5
VOCAB, STEPS, SOURCE_LENGTH = 6, 4, 3
WIDE = 64  # >= half the live candidates of the last step (27 beams · 4 tokens): exhaustive
SOURCE = np.array([[7, 8, 9], [7, 8, 0]], "int32")  # the second row has a padded position


class TableModel:
    """`decode_step`'s logits and attention depend on (step, previous
    token), read from fixed random tables; the attention is a softmax over
    the non-padding source positions."""

    sos_id, eos_id, padding_id = SOS, EOS, PAD

    def __init__(self, seed=0):
        rng = np.random.default_rng(seed)
        self.logits = (2.0 * rng.normal(size=(STEPS, VOCAB, VOCAB))).astype("float32")
        self.scores = (2.0 * rng.normal(size=(STEPS, VOCAB, SOURCE_LENGTH))).astype("float32")

    def encode(self, source, max_length=None):
        batch = ops.shape(source)[0]
        return {"step": ops.zeros((batch,), "int32"), "mask": ops.cast(source, "int32") != PAD}

    def decode_step(self, tokens, state):
        row = state["step"] * VOCAB + ops.cast(tokens, "int32")  # (B,)
        logits = ops.take(ops.reshape(self.logits, (-1, VOCAB)), row, axis=0)
        scores = ops.take(ops.reshape(self.scores, (-1, SOURCE_LENGTH)), row, axis=0)
        attention = ops.softmax(ops.where(state["mask"], scores, -1e9), axis=-1)
        return logits, {"step": state["step"] + 1, "mask": state["mask"]}, attention

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


# -- the brute force: NumPy, each option by its definition ----------------------------


def log_softmax(z):
    z = z - z.max()
    return z - np.log(np.exp(z).sum())


def penalized(model, sequence, t, theta):
    """log p(· | y_<t) under the CTRL repetition penalty θ: the logit z of a
    token already in y_<t becomes z / θ if z > 0, else z · θ."""
    previous = SOS if t == 0 else sequence[t - 1]
    z = model.logits[t, previous].astype("float64").copy()
    for token in set(sequence[:t]):
        z[token] = z[token] / theta if z[token] > 0 else z[token] * theta
    return log_softmax(z)


def attention_at(model, sequence, t, row):
    previous = SOS if t == 0 else sequence[t - 1]
    valid = SOURCE[row] != PAD
    e = np.where(valid, np.exp(model.scores[t, previous].astype("float64")), 0.0)
    return e / e.sum(), valid


def ngrams(sequence, n):
    return [tuple(sequence[i : i + n]) for i in range(len(sequence) - n + 1)]


def allowed(sequence, t, prefix, min_length, ngram, suppress):
    """Whether y_t may be generated: the prefix forces its tokens; otherwise
    never padding, <sos> or a suppressed id, no <eos> before `min_length`
    tokens, and no n-gram ending at t that occurs earlier."""
    token = sequence[t]
    if t < len(prefix):
        return token == prefix[t]
    if token in (PAD, SOS) or token in suppress:
        return False
    if token == EOS and t < min_length:
        return False
    if (
        ngram
        and t + 1 >= ngram
        and tuple(sequence[t + 1 - ngram : t + 1]) in ngrams(sequence[:t], ngram)
    ):
        return False
    return True


def brute_force(
    model, row, alpha=0.0, beta=0.0, theta=1.0, min_length=0, ngram=0, suppress=(), prefix=()
):
    """Every finished sequence (ending with <eos>, at most STEPS tokens) that
    the options allow, with its score log p / lp(|Y|) + cp, best first."""
    results = []
    for length in range(1, STEPS + 1):
        for body in itertools.product((EOS, A, B, C), repeat=length - 1):
            sequence = list(body) + [EOS]
            if EOS in body or not all(
                allowed(sequence, t, prefix, min_length, ngram, suppress) for t in range(length)
            ):
                continue
            log_p = sum(penalized(model, sequence, t, theta)[sequence[t]] for t in range(length))
            score = log_p / ((5 + length) / 6) ** alpha
            if beta:
                coverage = sum(attention_at(model, sequence, t, row)[0] for t in range(length))
                valid = attention_at(model, sequence, 0, row)[1]
                score += beta * np.log(np.minimum(coverage[valid], 1.0)).sum()
            results.append((score, sequence))
    return sorted(results, key=lambda result: -result[0])


def greedy_reference(model, row, theta=1.0, min_length=0, ngram=0, suppress=(), prefix=()):
    """Step by step: the allowed token of highest (penalized) probability."""
    sequence, score = [], 0.0
    for t in range(STEPS):
        log_p = penalized(model, sequence + [PAD], t, theta)
        ok = [allowed(sequence + [v], t, prefix, min_length, ngram, suppress) for v in range(VOCAB)]
        token = int(np.argmax(np.where(ok, log_p, -np.inf)))
        sequence.append(token)
        score += log_p[token]
        if token == EOS:
            break
    return sequence, score


def as_numpy(result):
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


OPTIONS = {
    "length penalty": dict(alpha=1.0),
    "coverage penalty": dict(beta=0.4, alpha=0.6),
    "min length": dict(min_length=2),
    "no repeat n-gram": dict(ngram=1),
    "no repeat bigram": dict(ngram=2, alpha=1.0),
    "repetition penalty": dict(theta=2.5, alpha=1.0),
    "suppressed tokens": dict(suppress=(B,)),
    "several at once": dict(alpha=0.6, theta=1.5, min_length=1, suppress=(C,), beta=0.2),
}


def _keywords(option):
    names = {
        "alpha": "alpha",
        "beta": "coverage_penalty",
        "theta": "repetition_penalty",
        "min_length": "min_length",
        "ngram": "no_repeat_ngram_size",
        "suppress": "suppress_tokens",
    }
    return {names[key]: value for key, value in option.items()}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_decoding_options_exhaustive_beam_equals_brute_force_n_best(name):
    model, option, best = TableModel(), OPTIONS[name], 8
    result = as_numpy(
        beam_search(
            model,
            SOURCE,
            STEPS,
            beam_width=WIDE,
            num_hypotheses=best,
            **_keywords({"alpha": 0.0, **option}),
        )
    )
    assert result["tokens"].shape == (2, best, STEPS)
    for row in range(2):
        expected = brute_force(model, row, **option)[:best]
        assert len(expected) == best
        # The option matters here: the n-best differs from the plain one.
        plain = brute_force(model, row, alpha=option.get("alpha", 0.0))[:best]
        assert name == "length penalty" or expected != plain, name
        assert name != "length penalty" or expected != brute_force(model, row)[:best]
        for (score, sequence), tokens, got in zip(
            expected, result["tokens"][row], result["scores"][row]
        ):
            assert list(tokens) == sequence + [PAD] * (STEPS - len(sequence)), name
            assert got == pytest.approx(score, abs=1e-5), name


def test_decoding_options_prefixes_of_different_lengths_in_one_batch():
    model = TableModel(1)
    prefixes = [(C, A), (B,)]
    prefix = np.array([[C, A], [B, PAD]], "int32")
    beam = as_numpy(
        beam_search(
            model,
            SOURCE,
            STEPS,
            beam_width=WIDE,
            alpha=0.6,
            num_hypotheses=4,
            prefix=prefix,
            return_token_scores=True,
        )
    )
    greedy = as_numpy(greedy_search(model, SOURCE, STEPS, prefix=prefix))
    for row in range(2):
        expected = brute_force(model, row, alpha=0.6, prefix=prefixes[row])[:4]
        assert len(expected) == 4
        for (score, sequence), tokens, got, token_scores in zip(
            expected, beam["tokens"][row], beam["scores"][row], beam["token_scores"][row]
        ):
            assert list(tokens) == sequence + [PAD] * (STEPS - len(sequence))
            assert got == pytest.approx(score, abs=1e-5)
            # token_scores: each token's log-probability, the prefix's included.
            steps = [penalized(model, sequence, t, 1.0)[sequence[t]] for t in range(len(sequence))]
            np.testing.assert_allclose(token_scores[: len(sequence)], steps, atol=1e-5)
            assert np.all(token_scores[len(sequence) :] == 0.0)
        sequence, score = greedy_reference(model, row, prefix=prefixes[row])
        assert list(greedy["tokens"][row][: len(sequence)]) == sequence
        assert greedy["scores"][row] == pytest.approx(score, abs=1e-5)


GREEDY_OPTIONS = {
    "min length": dict(min_length=3),
    "no repeat n-gram": dict(ngram=1),
    "no repeat bigram": dict(ngram=2),
    "repetition penalty": dict(theta=2.5),
    "suppressed tokens": dict(suppress=(B,)),
}


@pytest.mark.parametrize("name", list(GREEDY_OPTIONS))
def test_decoding_options_greedy_equals_step_by_step_reference(name):
    option, changed = GREEDY_OPTIONS[name], False
    for seed in (0, 6, 8):  # tables where each option changes some greedy path
        model = TableModel(seed)
        result = as_numpy(greedy_search(model, SOURCE, STEPS, **_keywords(option)))
        for row in range(2):
            sequence, score = greedy_reference(model, row, **option)
            changed |= sequence != greedy_reference(model, row)[0]
            padded = sequence + [PAD] * (STEPS - len(sequence))
            assert list(result["tokens"][row]) == padded, (name, seed)
            assert result["scores"][row] == pytest.approx(score, abs=1e-5), (name, seed)
    assert changed, name


def test_decoding_options_restrict_sampling():
    # Every draw respects the bans; a forced prefix is always the start.
    source = np.ones((64, 3), "int32")
    drawn = ops.convert_to_numpy(
        sample(
            TableModel(),
            source,
            STEPS,
            seed=0,
            suppress_tokens=[A],
            min_length=2,
            no_repeat_ngram_size=1,
            prefix=np.full((64, 1), C, "int32"),
        )["tokens"]
    )
    assert np.all(drawn[:, 0] == C) and not np.any(drawn == A)
    assert not np.any(drawn[:, :2] == EOS)
    for row in drawn:
        real = [token for token in row if token != PAD]
        assert len(set(real)) == len(real)  # no token (1-gram) twice


def _compiled(function):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True, autograph=False)
    if backend == "jax":
        import jax

        return jax.jit(function)
    pytest.skip(f"no compiled loop to compare on {backend}")


def test_decoding_options_compiled_equal_eager():
    model = TableModel(2)
    prefix = np.array([[C], [PAD]], "int32")
    common = dict(
        min_length=1,
        no_repeat_ngram_size=2,
        repetition_penalty=1.7,
        suppress_tokens=[B],
        prefix=prefix,
        replace_unknown=True,
        unk_id=A,
    )

    def decode(source):
        beams = beam_search(
            model,
            source,
            STEPS,
            beam_width=6,
            coverage_penalty=0.3,
            num_hypotheses=3,
            return_token_scores=True,
            **common,
        )
        return greedy_search(model, source, STEPS, **common), beams

    eager = decode(SOURCE)
    compiled = _compiled(decode)(ops.convert_to_tensor(SOURCE))
    for eager_result, compiled_result in zip(eager, compiled):
        assert set(eager_result) == set(compiled_result)
        for name, value in as_numpy(eager_result).items():
            got = ops.convert_to_numpy(compiled_result[name])
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got, value, atol=1e-5, err_msg=name)
            else:
                np.testing.assert_array_equal(got, value, err_msg=name)


@pytest.mark.tensorflow
def test_decoding_options_export_with_core_ops_and_reload(tmp_path):
    """Every option in a SavedModel: no py_function, no XLA-only op, and the
    reloaded function gives what eager decoding gives."""
    import tensorflow as tf

    model = TableModel(4)
    common = dict(
        min_length=1,
        no_repeat_ngram_size=2,
        repetition_penalty=1.3,
        suppress_tokens=[B],
        replace_unknown=True,
        unk_id=A,
    )

    class Decoder(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((None, None), tf.int32)] * 2, autograph=False)
        def decode(self, source, prefix):
            beams = beam_search(
                model,
                source,
                STEPS,
                beam_width=4,
                coverage_penalty=0.3,
                num_hypotheses=2,
                return_token_scores=True,
                prefix=prefix,
                **common,
            )
            greedy = greedy_search(model, source, STEPS, prefix=prefix, **common)
            return {"beam_" + k: v for k, v in beams.items()} | greedy

    tf.saved_model.save(Decoder(), str(tmp_path))
    reloaded = tf.saved_model.load(str(tmp_path))
    graph = reloaded.decode.get_concrete_function().graph.as_graph_def()
    names = {node.op for node in graph.node}
    for function in graph.library.function:
        names |= {node.op for node in function.node_def}
    assert not {op for op in names if "PyFunc" in op or op.startswith("Xla")}, names
    prefix = np.array([[C], [PAD]], "int32")
    got = reloaded.decode(tf.constant(SOURCE), tf.constant(prefix))
    beams = as_numpy(
        beam_search(
            model,
            SOURCE,
            STEPS,
            beam_width=4,
            coverage_penalty=0.3,
            num_hypotheses=2,
            return_token_scores=True,
            prefix=prefix,
            **common,
        )
    )
    greedy = as_numpy(greedy_search(model, SOURCE, STEPS, prefix=prefix, **common))
    for name, value in ({"beam_" + k: v for k, v in beams.items()} | greedy).items():
        np.testing.assert_allclose(got[name].numpy(), value, atol=1e-5, err_msg=name)
    # A prefix whose width is 0 only when the graph runs forces nothing.
    empty = reloaded.decode(tf.constant(SOURCE), tf.zeros((2, 0), tf.int32))
    greedy = as_numpy(greedy_search(model, SOURCE, STEPS, **common))
    for name, value in greedy.items():
        np.testing.assert_allclose(empty[name].numpy(), value, atol=1e-5, err_msg=name)


class AlignedModel:
    """Emits A, <unk>, B, <unk>, <eos> whatever it is fed, attending at each
    step to one source position: 1, 2, 0, 0, 1."""

    sos_id, eos_id, padding_id, unk_id = SOS, EOS, PAD, C
    OUTPUT, ALIGNED = [A, C, B, C, EOS], [1, 2, 0, 0, 1]

    def encode(self, source, max_length=None):
        return {"step": ops.zeros((ops.shape(source)[0],), "int32")}

    def decode_step(self, tokens, state):
        step = state["step"]
        logits = 5.0 * ops.one_hot(ops.take(np.array(self.OUTPUT, "int32"), step), VOCAB)
        attention = ops.one_hot(ops.take(np.array(self.ALIGNED, "int32"), step), SOURCE_LENGTH)
        return logits, {"step": step + 1}, attention

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


def test_decoding_options_replace_unknown_copies_the_most_attended_source_token():
    source = np.array([[17, 18, 19], [27, 28, 29]], "int32")
    expected = [[-1, 19, -1, 17, -1], [-1, 29, -1, 27, -1]]
    model = AlignedModel()
    greedy = as_numpy(greedy_search(model, source, 5, replace_unknown=True))
    np.testing.assert_array_equal(greedy["tokens"], [AlignedModel.OUTPUT] * 2)
    np.testing.assert_array_equal(greedy["replacements"], expected)
    beams = as_numpy(beam_search(model, source, 5, beam_width=2, replace_unknown=True))
    np.testing.assert_array_equal(beams["tokens"][:, 0], [AlignedModel.OUTPUT] * 2)
    np.testing.assert_array_equal(beams["replacements"][:, 0], expected)
    best = as_numpy(generate(model, source, 5, beam_width=2, replace_unknown=True))
    np.testing.assert_array_equal(best["replacements"], expected)
    # Without the option, no replacements and the same tokens.
    assert "replacements" not in as_numpy(greedy_search(model, source, 5))


def test_decoding_options_generate_passes_them_through():
    model = TableModel(3)
    keywords = dict(min_length=2, repetition_penalty=2.0, suppress_tokens=[A])
    one = as_numpy(generate(model, SOURCE, STEPS, **keywords))
    np.testing.assert_array_equal(
        one["tokens"], as_numpy(greedy_search(model, SOURCE, STEPS, **keywords))["tokens"]
    )
    wide = as_numpy(
        generate(
            model,
            SOURCE,
            STEPS,
            beam_width=WIDE,
            alpha=0.6,
            coverage_penalty=0.2,
            return_token_scores=True,
            **keywords,
        )
    )
    for row in range(2):
        score, sequence = brute_force(
            model, row, alpha=0.6, beta=0.2, theta=2.0, min_length=2, suppress=(A,)
        )[0]
        assert list(wide["tokens"][row][: len(sequence)]) == sequence
        assert wide["scores"][row] == pytest.approx(score, abs=1e-5)
    assert wide["token_scores"].shape == (2, STEPS)


@pytest.mark.parametrize(
    "call,pattern",
    [
        (
            lambda m: beam_search(m, SOURCE, 4, beam_width=3, num_hypotheses=4),
            r"`num_hypotheses` of beam_search must be an integer from 1 to beam_width=3; "
            r"received num_hypotheses=4",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 4, min_length=-1),
            r"`min_length` of greedy_search must be an integer >= 0; received min_length=-1",
        ),
        (
            lambda m: sample(m, SOURCE, 4, repetition_penalty=0.0),
            r"`repetition_penalty` of sample must be > 0 \(1.0 disables it\); "
            r"received repetition_penalty=0.0",
        ),
        (
            lambda m: beam_search(m, SOURCE, 4, no_repeat_ngram_size=-2),
            r"`no_repeat_ngram_size` of beam_search must be an integer >= 0",
        ),
        (
            lambda m: beam_search(m, SOURCE, 4, coverage_penalty=-0.1),
            r"`coverage_penalty` of beam_search must be a number >= 0",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 4, suppress_tokens=[A, -1]),
            r"`suppress_tokens` of greedy_search must be a list of token ids",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 4, suppress_tokens=[VOCAB]),
            r"`suppress_tokens` of greedy_search must be ids below the vocabulary size 6",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 4, prefix=np.ones((2, 1), "float32")),
            r"`prefix` of greedy_search must be int token ids of shape \(B, P\).*float32",
        ),
        (
            lambda m: beam_search(m, SOURCE, 4, prefix=np.ones((3, 1), "int32")),
            r"`prefix` of beam_search must have one row per source row \(2\); "
            r"received prefix with shape \(3, 1\)",
        ),
        (
            lambda m: greedy_search(m, SOURCE, 2, prefix=np.ones((2, 3), "int32")),
            r"`prefix` of greedy_search may be at most max_length=2 tokens long",
        ),
    ],
)
def test_decoding_options_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(TableModel())


class PaddingLovingModel:
    """A scripted `Seq2Seq` whose most probable tokens are padding and <sos>:

        after <sos>: pad 0.4, <sos> 0.3, A 0.2, <eos> 0.1
        after A:     pad 0.35, <sos> 0.35, <eos> 0.2, A 0.05, B 0.05
        otherwise:   <eos> 1

    Without padding and <sos>, greedy reads A <eos> (p = 0.2 · 0.2) and a
    beam of 2 finds <eos> (0.1) and A <eos> (0.04).
    """

    sos_id, eos_id, padding_id = SOS, EOS, PAD

    def __init__(self):
        table = np.full((5, 5), 1e-12)
        table[:, EOS] = 1.0
        table[SOS] = [0.4, 0.3, 0.1, 0.2, 1e-12]
        table[A] = [0.35, 0.35, 0.2, 0.05, 0.05]
        self.log_table = np.log(table / table.sum(1, keepdims=True)).astype("float32")

    def encode(self, source, max_length=None, training=None):
        return {"attention": ops.zeros((ops.shape(source)[0], ops.shape(source)[1]))}

    def decode_step(self, tokens, state, training=None):
        return ops.take(self.log_table, tokens, axis=0), state, state["attention"]

    def reorder_state(self, state, indices):
        return keras.tree.map_structure(lambda t: ops.take(t, indices, axis=0), state)


def _assert_real_tokens_then_padding(tokens, lengths):
    """Each row: `lengths` tokens none of which is padding or <sos>, the
    last of them <eos> unless the row is full, then padding only."""
    for row, length in zip(tokens.reshape(-1, tokens.shape[-1]), lengths.reshape(-1)):
        assert not np.isin(row[:length], [PAD, SOS]).any(), row
        assert (row[length:] == PAD).all(), row
        assert length == len(row) or row[length - 1] == EOS, row


def test_greedy_and_beam_never_generate_padding_or_sos():
    model, source = PaddingLovingModel(), np.ones((2, 3), "int32")
    greedy = {k: ops.convert_to_numpy(v) for k, v in greedy_search(model, source, 4).items()}
    np.testing.assert_array_equal(greedy["tokens"], [[A, EOS, PAD, PAD]] * 2)
    np.testing.assert_array_equal(greedy["lengths"], [2, 2])
    np.testing.assert_allclose(np.exp(greedy["scores"]), [0.04, 0.04], rtol=1e-5)

    beam = beam_search(model, source, 4, beam_width=2, alpha=0.0)
    beam = {k: ops.convert_to_numpy(v) for k, v in beam.items()}
    np.testing.assert_array_equal(beam["tokens"][0], [[EOS, PAD, PAD, PAD], [A, EOS, PAD, PAD]])
    np.testing.assert_allclose(np.exp(beam["scores"][0]), [0.1, 0.04], rtol=1e-5)
    _assert_real_tokens_then_padding(beam["tokens"], beam["lengths"])

    drawn = sample(model, np.ones((64, 3), "int32"), 4, seed=3)
    _assert_real_tokens_then_padding(
        ops.convert_to_numpy(drawn["tokens"]), ops.convert_to_numpy(drawn["lengths"])
    )
    # Scheduled sampling, free running: after <sos> the model's own argmax
    # is A (not padding), so step 1 sees the distribution after A.
    logits = scheduled_sampling_logits(
        model, source, np.full((2, 2), SOS, "int32"), 1.0, draw="argmax"
    )
    np.testing.assert_allclose(ops.convert_to_numpy(logits)[:, 1], model.log_table[[A, A]])


def test_top_k_beyond_the_usable_vocabulary_is_refused_and_a_wider_beam_is_padded():
    model, source = PaddingLovingModel(), np.ones((2, 3), "int32")
    usable = r"must be at most 3, the tokens it can generate \(a vocabulary of 5 less"
    with pytest.raises(ValueError, match=r"`top_k` of sample " + usable):
        sample(model, source, 4, top_k=6)
    with pytest.raises(
        ValueError, match=r"`top_k` of sample must be at most 3, .*received top_k=9"
    ):
        sample(model, np.ones((1, 2), "int32"), 3, top_k=9)
    assert beam_search(model, source, 4, beam_width=3)["tokens"].shape == (2, 3, 4)
    # A beam wider than the hypotheses there are (a wide beam is how an
    # exhaustive search is checked): in one step only <eos>, A and B can be
    # generated, so the fourth entry is empty, never a duplicate.
    beam = beam_search(model, source, 1, beam_width=4, alpha=0.0)
    beam = {k: ops.convert_to_numpy(v) for k, v in beam.items()}
    np.testing.assert_array_equal(beam["tokens"][0], [[EOS], [A], [B], [PAD]])
    np.testing.assert_array_equal(beam["lengths"][0], [1, 1, 1, 0])
    assert beam["scores"][0, 3] <= -1e8


def _tiny(**kwargs):
    """A 10-token RecurrentSeq2Seq with random weights."""
    return RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8, **kwargs)


# Sources and prefixes checked before the search: our message, not the backend's.
BAD_SOURCES = {
    "greedy_search on an empty batch": (
        lambda: greedy_search(_tiny(), np.zeros((0, 3), "int32"), 4),
        r"`source` of greedy_search is an empty batch \(shape \(0, 3\)\)",
    ),
    "source id >= vocabulary": (
        lambda: greedy_search(_tiny(), np.array([[4, 50, 2]]), 4),
        r"`source` of greedy_search must hold token ids in \[0, 10\) .*holding 50 at index "
        r"\(0, 1\)",
    ),
    "negative source id": (
        lambda: greedy_search(_tiny(), np.array([[4, -5, 2]]), 4),
        r"`source` of greedy_search must hold token ids in \[0, 10\) .*holding -5",
    ),
    "prefix id >= vocabulary": (
        lambda: beam_search(_tiny(), np.array([[4, 2]]), 4, prefix=np.array([[40]])),
        r"`prefix` of beam_search must hold token ids in \[0, 10\) .*holding 40",
    ),
    "prefix holding <sos>": (
        lambda: greedy_search(_tiny(), np.array([[4, 2]]), 4, prefix=np.array([[1, 4]])),
        r"`prefix` of greedy_search must not hold 1 \(<sos>",
    ),
    "generate with float source ids": (
        lambda: _tiny().generate(np.array([[4.7, 2.0]], "float32"), GreedySearch(max_length=4)),
        r"`source` of \w+ must be integer token ids; received dtype float32",
    ),
    "beam_search with float source ids": (
        lambda: beam_search(_tiny(), np.array([[4.0, 2.0]]), 4),
        # NumPy's float64, which JAX (without x64) takes as float32
        r"`source` of beam_search must be integer token ids; received dtype "
        + ("float32" if keras.backend.backend() == "jax" else "float64"),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_sources_and_prefixes_that_cannot_be_searched_get_our_messages(case):
    call, pattern = BAD_SOURCES[case]
    with pytest.raises((ValueError, TypeError), match=pattern):
        call()


def test_ban_columns_is_the_select_it_replaces():
    """Two clamps give `where(banned, NEGATIVE, values)` at every value a
    log-probability can take: finite, below NEGATIVE, -inf, +inf, NaN
    where not banned."""
    from keras_attention.seq2seq.decoding_options import NEGATIVE, ban_columns

    values = np.array(
        [[-0.5, -3e9, -np.inf, np.inf, 0.0, np.nan], [np.inf, -np.inf, -2.0, -3e9, 0.5, 1.0]],
        "float32",
    )
    banned = np.array([[False, True, True, True, True, False]])
    got = ops.convert_to_numpy(ban_columns(ops.convert_to_tensor(values), banned))
    np.testing.assert_array_equal(got, np.where(banned, np.float32(NEGATIVE), values))
    # A banned NaN (a broken model) stays NaN, where the select gave NEGATIVE.
    nan = ops.convert_to_tensor(np.array([[np.nan]], "float32"))
    assert np.isnan(ops.convert_to_numpy(ban_columns(nan, np.array([[True]]))))


@pytest.mark.parametrize("width", [2048, 2051, 16000])
def test_blocked_top_k_is_ops_top_k_ties_included(width):
    """`selection.top_k` over long rows picks by the maxima of blocks of 8:
    the same values and indices as `ops.top_k`, with ties (few distinct
    values), -inf entries and a width that is no multiple of the block."""
    from keras_attention.seq2seq import selection

    rng = np.random.default_rng(width)
    k = 8
    assert width >= selection.MIN_BLOCKS_PER_ENTRY * k * selection.BLOCK  # the blocked path
    rows = [
        rng.normal(size=width),
        rng.integers(0, 5, size=width),  # ties everywhere, at every boundary
        np.where(rng.random(width) < 0.999, -np.inf, rng.integers(0, 2, size=width)),  # few finite
        np.full(width, -np.inf),
    ]
    rows = np.stack(rows).astype("float32")
    x = ops.convert_to_tensor(rows)
    values, indices = selection.top_k(x, k)
    want_values, want_indices = ops.top_k(x, k)
    values, indices = ops.convert_to_numpy(values), ops.convert_to_numpy(indices)
    np.testing.assert_array_equal(values, ops.convert_to_numpy(want_values))
    np.testing.assert_array_equal(np.take_along_axis(rows, indices, 1), values)
    assert all(len(set(row)) == k for row in indices.tolist())
    if keras.backend.backend() != "torch":  # torch.topk orders ties as it likes
        np.testing.assert_array_equal(indices, ops.convert_to_numpy(want_indices))


def test_argmax_is_the_lowest_index_of_the_maximum():
    from keras_attention.seq2seq import selection

    rng = np.random.default_rng(0)
    rows = np.stack(
        [rng.normal(size=300), rng.integers(0, 3, size=300), np.full(300, -np.inf)]
    ).astype("float32")
    got = ops.convert_to_numpy(selection.argmax(ops.convert_to_tensor(rows)))
    np.testing.assert_array_equal(got, np.argmax(rows, axis=-1))
    assert got.dtype == np.int32


def test_beam_search_over_blocks_decodes_as_over_ops_top_k(monkeypatch):
    """A beam search whose every top-k goes through the block maxima
    (`MIN_BLOCKS_PER_ENTRY` 0) returns what `ops.top_k`'s search returns:
    tokens, scores and finished flags, on a model whose logits tie often."""
    from keras_attention.seq2seq import BeamSearch, selection

    if keras.backend.backend() == "torch":
        pytest.skip("torch.topk orders ties as it likes: its own search is no reference")
    vocab = 40  # rows of 3 × 40 entries: at least k = 6 blocks of 8

    class Rounded(TableModel):  # logits of a few values: ties at every step
        def decode_step(self, tokens, state):
            row = state["step"] * vocab + ops.cast(tokens, "int32")
            logits = ops.take(ops.reshape(self.table, (-1, vocab)), row, axis=0)
            return logits, {"step": state["step"] + 1, "mask": state["mask"]}, None

    model = Rounded()
    model.table = np.round(np.random.default_rng(3).normal(size=(STEPS, vocab, vocab)))
    model.table = model.table.astype("float32")
    search = BeamSearch(beam_width=3, max_length=STEPS, alpha=0.6)
    want = search(model, SOURCE)
    monkeypatch.setattr(selection, "MIN_BLOCKS_PER_ENTRY", 1)
    got = search(model, SOURCE)
    for key in ("tokens", "scores", "finished"):
        np.testing.assert_array_equal(
            ops.convert_to_numpy(got[key]), ops.convert_to_numpy(want[key])
        )
