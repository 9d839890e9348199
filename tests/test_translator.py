"""`serving.Translator`: in process and exported it is the same code, so the
reloaded SavedModel's signatures answer what the in-process methods do, on a
few dozen sentences through real (WordPiece) tokenizers and an untrained
tiny model; both agree with the eager searches of `seq2seq` decoded by the
tokenizer; the search's config round-trips through the export; empty
requests and blank strings."""

import itertools
import json
import os

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow

tf = pytest.importorskip("tensorflow")

WORDS = ["ich", "habe", "zeit", ".", "du", "hast", "keine", "wir", "gehen", "nach", "hause", "?"]
MAX_SOURCE = 7  # [START] + 5 pieces + [END]
OPTIONS = dict(min_length=2, no_repeat_ngram_size=2, repetition_penalty=1.3)


def sentences():
    """36 texts: word pairs and triples, a long one (truncated), an unknown
    word, upper case, blanks."""
    texts = [" ".join(p) for p in itertools.islice(itertools.permutations(WORDS[:6], 2), 20)]
    texts += [" ".join(t) for t in itertools.islice(itertools.permutations(WORDS[4:], 3), 10)]
    texts += ["ich habe keine zeit wir gehen nach hause", "xylophon", "Ich HABE", "", "   ", "."]
    return texts


def word_tokenizer(directory):
    """A `SubwordTokenizer` whose pieces are the reserved tokens and WORDS,
    its vocabulary file written into `directory`; and its size."""
    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    path = os.path.join(str(directory), "vocab.txt")
    with open(path, "w") as handle:
        handle.write("\n".join(RESERVED + WORDS) + "\n")
    return SubwordTokenizer(path), len(RESERVED) + len(WORDS)


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    """`(translator, reloaded export, tokenizer, model)` with a beam of 3."""
    from keras_attention.seq2seq import BeamSearch, RecurrentSeq2Seq
    from keras_attention.serving import Translator

    directory = tmp_path_factory.mktemp("translator")
    tokenizer, size = word_tokenizer(directory)
    keras.utils.set_random_seed(3)
    model = RecurrentSeq2Seq(size, size, embed_dim=8, hidden_dim=16, attention="dot")
    model.build()
    search = BeamSearch(beam_width=3, alpha=1.1, coverage_penalty=0.2, num_hypotheses=3, **OPTIONS)
    translator = Translator(
        model, tokenizer, tokenizer, search, max_source_length=MAX_SOURCE, batch_size=8
    )
    path = translator.export(str(directory / "exports"), "translator")
    assert path.endswith("/translator/1")
    return translator, tf.saved_model.load(path), tokenizer, model


def test_translate_equals_the_export_and_the_eager_search(translator):
    from keras_attention.seq2seq import generate

    translator, loaded, tokenizer, model = translator
    texts = sentences()
    got = translator.translate(texts)  # 5 batches of 8, the last one short
    served = loaded.signatures["serving_default"](text=tf.constant(texts))
    assert got == [t.decode() for t in served["translation"].numpy()]
    # An independent reference: 0.2.0's eager generate, decoded by the tokenizer.
    source, truncated = tokenizer.encode(tf.constant(texts), MAX_SOURCE)
    best = generate(
        model, source, MAX_SOURCE + 1, beam_width=3, alpha=1.1, coverage_penalty=0.2, **OPTIONS
    )
    reference = [t.decode() for t in tokenizer.decode(best["tokens"]).numpy()]
    blank = [not text.strip() for text in texts]
    assert got == ["" if empty else text for text, empty in zip(reference, blank)]
    assert [text for text, empty in zip(got, blank) if empty] == ["", ""]
    assert sum(t != "" for t in got) > 20  # the model says something
    # A blank text's score is 0, not the search's score of `[START] [END]`.
    expected = np.where(blank, 0.0, np.asarray(best["scores"]))
    np.testing.assert_allclose(served["score"].numpy(), expected, rtol=1e-5)
    assert served["truncated"].numpy().tolist() == truncated.numpy().tolist()
    assert truncated.numpy()[texts.index("ich habe keine zeit wir gehen nach hause")]


def test_greedy_and_tokens_signatures_equal_in_process(translator):
    from keras_attention.seq2seq import greedy_search

    translator, loaded, tokenizer, model = translator
    texts = sentences()[:12]
    served = loaded.signatures["greedy"](text=tf.constant(texts))
    assert translator.greedy(texts) == [t.decode() for t in served["translation"].numpy()]
    source, _ = tokenizer.encode(tf.constant(texts), MAX_SOURCE)
    reference = greedy_search(model, source, MAX_SOURCE + 1, **OPTIONS)
    np.testing.assert_allclose(served["score"].numpy(), np.asarray(reference["scores"]), rtol=1e-5)
    ids = source.numpy()
    tokens = loaded.signatures["tokens"](
        token_ids=tf.constant(ids), lengths=tf.constant((ids > 0).sum(1).astype("int32"))
    )["token_ids"].numpy()
    in_process = translator.function("tokens")(
        tf.constant(ids), tf.constant((ids > 0).sum(1).astype("int32"))
    )["token_ids"].numpy()
    np.testing.assert_array_equal(tokens, in_process)


def test_nbest_equals_the_export_and_the_eager_beam(translator):
    from keras_attention.seq2seq import beam_search

    translator, loaded, tokenizer, model = translator
    texts = sentences()
    got = translator.nbest(texts)
    served = loaded.signatures["nbest"](text=tf.constant(texts))
    assert served["translations"].shape == (len(texts), 3)
    assert [[text for text, _ in row] for row in got] == [
        [t.decode() for t in row] for row in served["translations"].numpy()
    ]
    np.testing.assert_allclose(
        [[score for _, score in row] for row in got], served["scores"].numpy(), rtol=1e-6
    )
    # Two of a beam of 3, against the eager beam search.
    two = translator.nbest(texts[:9], 2)
    source, _ = tokenizer.encode(tf.constant(texts[:9]), MAX_SOURCE)
    reference = beam_search(
        model,
        source,
        MAX_SOURCE + 1,
        beam_width=3,
        alpha=1.1,
        coverage_penalty=0.2,
        num_hypotheses=2,
        **OPTIONS,
    )
    decoded = tokenizer.decode(np.asarray(reference["tokens"]).reshape(18, -1)).numpy()
    assert [[text for text, _ in row] for row in two] == [
        [t.decode() for t in decoded[2 * i : 2 * i + 2]] for i in range(9)
    ]
    np.testing.assert_allclose(
        [[score for _, score in row] for row in two], np.asarray(reference["scores"]), rtol=1e-5
    )
    # A wider n than the beam widens it; each row stays best first among finished.
    assert [len(row) for row in translator.nbest(texts[:2], 5)] == [5, 5]
    blank = got[texts.index("")]
    assert blank == [("", 0.0)] * 3


def test_nbest_says_which_hypotheses_finished(translator):
    """The `nbest` signature has `finished (B, N)`, the eager beam
    search's flags (True for blank texts, whose "" is the answer), and
    `Translator.nbest`'s pairs carry it as `.finished`, still unpacking as
    `(translation, score)`."""
    from keras_attention.seq2seq import BeamSearch

    translator, loaded, tokenizer, model = translator
    texts = sentences()
    signature = loaded.signatures["nbest"]
    assert signature.structured_outputs["finished"].dtype == tf.bool
    served = signature(text=tf.constant(texts))
    assert served["finished"].shape == (len(texts), 3)
    source, _ = tokenizer.encode(tf.constant(texts), MAX_SOURCE)
    search = BeamSearch(beam_width=3, alpha=1.1, coverage_penalty=0.2, num_hypotheses=3, **OPTIONS)
    reference = np.asarray(search(model, source)["finished"])
    blank = np.array([not text.strip() for text in texts])
    np.testing.assert_array_equal(served["finished"].numpy(), reference | blank[:, None])
    # With num_hypotheses, an unfinished hypothesis is one cut at max_length.
    lengths = np.asarray(search(model, source)["lengths"])
    assert (lengths[~reference] == MAX_SOURCE + 1).all()
    got = translator.nbest(texts)
    assert [[h.finished for h in row] for row in got] == served["finished"].numpy().tolist()
    first = got[0][0]
    text, score = first
    assert (first.translation, first.score) == (text, score) and first == (text, score)


def test_constrained_equals_the_export_and_starts_with_the_prefix(translator):
    translator, loaded, tokenizer, _ = translator
    texts = sentences()[:24]
    prefixes = (["wir", "", "du hast", "zeit ."] * 6)[: len(texts)]
    got = translator.constrained(texts, prefixes)
    served = loaded.signatures["constrained"](text=tf.constant(texts), prefix=tf.constant(prefixes))
    assert got == [t.decode() for t in served["translation"].numpy()]
    for text, prefix, translation in zip(texts, prefixes, got):
        if text.strip() and prefix:
            assert translation.replace(" ", "").startswith(prefix.replace(" ", "")), translation
    assert translator.constrained(texts, [""] * len(texts)) == translator.translate(texts)
    with pytest.raises(ValueError, match="`prefixes` of Translator.constrained needs one entry"):
        translator.constrained(texts, prefixes[:3])


def test_attention_equals_the_export_and_covers_the_tokens(translator):
    translator, loaded, tokenizer, _ = translator
    texts = ["ich habe zeit .", "wir gehen nach hause", "du"]
    served = loaded.signatures["attention"](text=tf.constant(texts))
    many = translator.attention(texts)
    for row, (text, one) in enumerate(zip(texts, many)):
        alone = translator.attention(text)
        assert alone["translation"] == one["translation"] == translator.translate([text])[0]
        ids = tokenizer.encode([text], MAX_SOURCE)[0]
        pieces = [t.decode() for t in tokenizer.tokens(ids).numpy()[0]]
        assert one["source_tokens"] == [p for p in pieces if p != "[PAD]"]
        assert one["source_tokens"][0] == "[START]" and one["source_tokens"][-1] == "[END]"
        target = [t.decode() for t in served["target_tokens"].numpy()[row]]
        assert one["target_tokens"] == target[: len(one["target_tokens"])]
        assert set(target[len(one["target_tokens"]) :]) <= {"[PAD]"}
        weights = served["attention"].numpy()[row]
        shape = (len(one["target_tokens"]), len(one["source_tokens"]))
        assert one["weights"].shape == shape
        np.testing.assert_array_equal(one["weights"], weights[: shape[0], : shape[1]])
        np.testing.assert_allclose(one["weights"].sum(-1), 1.0, rtol=1e-5)  # over the source
        # One sentence alone and a batch of three split the work differently
        # (the kernels, Eigen's or oneDNN's, pick by shape): equal to float32
        # rounding, not bit for bit (it failed by 1 ulp under Eigen, AVX2 EPYC).
        np.testing.assert_allclose(alone["weights"], one["weights"], rtol=1e-6, atol=1e-7)


def test_the_search_config_round_trips_through_the_export(translator):
    from keras_attention.seq2seq import BeamSearch, get_search

    translator, loaded, _, _ = translator
    outputs = loaded.signatures["decoding_options"]()
    config = json.loads(outputs["search"].numpy().decode())
    rebuilt = keras.saving.deserialize_keras_object(config)
    assert isinstance(rebuilt, BeamSearch)
    assert rebuilt.get_config() == translator.search.get_config()
    assert get_search(config).get_config() == translator.search.get_config()
    # 0.2.0's outputs are all still there.
    scalars = {
        name: value.numpy().item()
        for name, value in outputs.items()
        if name not in ("search", "options", "summary")
    }
    assert scalars == {
        "beam_width": 3,
        "num_hypotheses": 3,
        "min_length": 2,
        "no_repeat_ngram_size": 2,
        "repetition_penalty": pytest.approx(1.3),
        "coverage_penalty": pytest.approx(0.2),
        "alpha": pytest.approx(1.1),
    }


def test_every_decoding_option_reaches_the_nbest_search_and_the_export(translator):
    """`BeamSearch.decoding_options()` is the one list of decoding options:
    the n-best search and the `decoding_options` signature carry each of
    them (the fixture's search sets every one to a value of its own, so a
    new option left at its default fails here until it is given one)."""
    from keras_attention.seq2seq import BeamSearch

    translator, loaded, _, _ = translator
    chosen = translator.search.decoding_options()
    defaults = BeamSearch().decoding_options()
    assert set(chosen) == set(defaults)
    assert all(chosen[name] != defaults[name] for name in defaults), (chosen, defaults)
    assert translator.nbest_search.decoding_options() == chosen
    outputs = loaded.signatures["decoding_options"]()
    exported = json.loads(outputs["options"].numpy().decode())
    assert {name: exported[name] for name in chosen} == pytest.approx(chosen)


def test_empty_requests_and_blank_strings(translator):
    translator, loaded, _, _ = translator
    assert translator.translate([]) == []
    assert translator.nbest([]) == [] and translator.constrained([], []) == []
    assert translator.attention([]) == []
    assert translator.translate(["", " ", "\t"]) == ["", "", ""]
    assert translator.greedy([""]) == [""]
    empty = tf.constant([], tf.string)
    for name in ("serving_default", "greedy", "attention", "nbest"):
        result = loaded.signatures[name](text=empty)
        assert all(value.shape[0] == 0 for value in result.values()), name
    result = loaded.signatures["constrained"](text=empty, prefix=empty)
    assert result["translation"].shape == (0,)
    with pytest.raises(ValueError, match="must be a list of strings; received a single string"):
        translator.translate("ich habe zeit")


def test_a_greedy_translator_and_its_defaults():
    """A search without `max_length` decodes `max_source_length + 1`; a
    `GreedySearch`'s `nbest` is a beam of 1; bad arguments are refused."""
    import tempfile

    from keras_attention.seq2seq import GreedySearch, TransformerSeq2Seq, greedy_search
    from keras_attention.serving import Translator

    with tempfile.TemporaryDirectory() as directory:
        tokenizer, size = word_tokenizer(directory)
        model = TransformerSeq2Seq(size, size, 16, 2, 32, 1, max_length=9)
        model.build()
        translator = Translator(model, tokenizer, tokenizer, GreedySearch())
        assert translator.max_source_length == 8 and translator.max_length == 9
        texts = sentences()[:10]
        source, _ = tokenizer.encode(tf.constant(texts), 8)
        reference = tokenizer.decode(greedy_search(model, source, 9)["tokens"]).numpy()
        assert translator.translate(texts) == [t.decode() for t in reference]
        translator.batch_size = 3  # 4 batches, the last one short: still one trace
        assert translator.translate(texts) == [t.decode() for t in reference]
        assert translator.function("serving_default").experimental_get_tracing_count() == 1
        assert translator.greedy(texts) == translator.translate(texts)
        assert translator.decoding_options()["beam_width"] == 1
        assert [len(row) for row in translator.nbest(texts[:2])] == [1, 1]
        with pytest.raises(ValueError, match="`max_source_length` of Translator must be an int"):
            Translator(model, tokenizer, tokenizer, max_source_length=2)
        with pytest.raises(ValueError, match="`batch_size` of Translator must be a positive"):
            Translator(model, tokenizer, tokenizer, batch_size=0)
        # S and L must fit the model's 9 positions, checked before the first call.
        with pytest.raises(
            ValueError,
            match=r"`max_source_length` of Translator must be at most 8: the model's 9 "
            r"positions \(TransformerSeq2Seq max_length=9\) must also hold the translation.*"
            r"received max_source_length=9",
        ):
            Translator(model, tokenizer, tokenizer, GreedySearch(), max_source_length=9)
        with pytest.raises(ValueError, match=r"`search` of Translator decodes max_length=12"):
            Translator(model, tokenizer, tokenizer, GreedySearch(max_length=12))
        with pytest.raises(
            ValueError, match=r"`max_source_length` of Translator must be at most 9"
        ):
            Translator(
                model, tokenizer, tokenizer, GreedySearch(max_length=5), max_source_length=10
            )
        # With the search's own max_length, S may take all 9 positions.
        fitted = Translator(
            model, tokenizer, tokenizer, GreedySearch(max_length=5), max_source_length=9
        )
        wide, _ = tokenizer.encode(tf.constant(texts[:3]), 9)
        reference = tokenizer.decode(greedy_search(model, wide, 5)["tokens"]).numpy()
        assert fitted.translate(texts[:3]) == [t.decode() for t in reference]
        with pytest.raises(ValueError, match="`n` of Translator.nbest must be a positive"):
            translator.nbest(texts, 0)
        with pytest.raises(ValueError) as raised:  # n hypotheses would need a beam of n
            translator.nbest(texts, 1001)
        assert str(raised.value) == (
            "`n` of Translator.nbest must be a positive integer, at most MAX_BEAM_WIDTH=1000 "
            "(n hypotheses need a beam of n); received n=1001."
        )
        # Items that are not strings: which one, and what it is.
        for call, pattern in [
            (lambda: translator.translate([None]), r"`texts` .* item 0 is NoneType None"),
            (lambda: translator.greedy(["ich", 5]), r"`texts` .* item 1 is int 5"),
            (lambda: translator.nbest([["ich"]]), r"`texts` .* item 0 is list \['ich'\]"),
            (lambda: translator.constrained(["ich"], [b"x", 3.5]), r"`prefixes` .*item 1 is float"),
            (lambda: translator.attention([None]), r"`text` .* item 0 is NoneType"),
            (lambda: translator.translate(5), r"`texts` .* list of strings; received int 5"),
        ]:
            with pytest.raises(ValueError, match=r"of Translator must be a list of strings; "):
                call()
            with pytest.raises(ValueError, match=pattern):
                call()


def test_replace_unknown_copies_the_source_piece_in_process(translator):
    """A search with `replace_unknown`: the translations are the tokenizer's
    decoding of the eager search's tokens with its `replacements`, for the
    best hypothesis and the n-best alike."""
    from keras_attention.seq2seq import BeamSearch, get_search
    from keras_attention.serving import Translator

    _, _, tokenizer, model = translator
    texts = sentences()[:12]
    source, _ = tokenizer.encode(tf.constant(texts), MAX_SOURCE)
    plain = BeamSearch(beam_width=2, min_length=3, max_length=MAX_SOURCE + 1)
    emitted = np.asarray(plain.best(model, source)["tokens"]).reshape(-1)
    unk_id = int(np.bincount(emitted[emitted > 3]).argmax())  # the favourite word plays <unk>
    search = BeamSearch(beam_width=2, replace_unknown=True, min_length=3, unk_id=unk_id)
    copying = Translator(model, tokenizer, tokenizer, search, max_source_length=MAX_SOURCE)
    reference = get_search(search, max_length=MAX_SOURCE + 1).best(model, source)
    assert np.any(np.asarray(reference["replacements"]) >= 0)  # something is copied
    expected = tokenizer.decode(reference["tokens"], replacements=reference["replacements"])
    assert copying.translate(texts) == [t.decode() for t in expected.numpy()]
    plain = get_search(search, replace_unknown=False)
    assert copying.translate(texts) != Translator(
        model, tokenizer, tokenizer, plain, max_source_length=MAX_SOURCE
    ).translate(texts)
    assert [row[0][0] for row in copying.nbest(texts, 1)] == copying.translate(texts)


def test_blank_texts_score_0_in_every_signature(translator):
    """A blank text translates to "" with score 0 (documented), in every
    signature; `attention` gives it no target pieces and weights 0."""
    translator, loaded, _, model = translator
    texts = ["ich habe zeit", "", "  \t"]
    for name in ("serving_default", "greedy"):
        served = loaded.signatures[name](text=tf.constant(texts))
        assert [t.decode() for t in served["translation"].numpy()][1:] == ["", ""], name
        assert served["score"].numpy()[1:].tolist() == [0.0, 0.0], name
        assert served["score"].numpy()[0] < 0, name
    forced = loaded.signatures["constrained"](
        text=tf.constant(texts), prefix=tf.constant(["wir", "wir", ""])
    )
    assert forced["score"].numpy()[1:].tolist() == [0.0, 0.0]
    assert forced["score"].numpy()[0] < 0
    nbest = loaded.signatures["nbest"](text=tf.constant(texts))
    assert nbest["scores"].numpy()[1:].tolist() == [[0.0] * 3] * 2
    assert (nbest["scores"].numpy()[0] < 0).all()
    attention = loaded.signatures["attention"](text=tf.constant(texts))
    assert not attention["attention"].numpy()[1:].any()
    assert attention["attention"].numpy()[0].any()
    assert set(attention["target_tokens"].numpy()[1:].ravel()) == {b"[PAD]"}
    assert translator.nbest([""]) == [[("", 0.0)] * 3]
    assert translator.attention("")["target_tokens"] == []


UNICODE_BLANKS = ["\u00a0\u2003", "\u202e\u200f\u200b", "\u3000", "\u2028", "\ufeff"]


@pytest.mark.large(
    reason=(
        "every blank text through every signature; test_empty_requests_and_blank_strings "
        "and test_blank_texts_score_0_in_every_signature check blank texts in `make test`"
    )
)
def test_texts_of_unicode_spaces_and_format_characters_are_blank(translator):
    """A text of Unicode spaces or invisible format characters only (no-break
    and ideographic spaces, the line separator, a byte order mark, zero
    widths and directional marks) is blank: "" with score 0, in process and
    through the export's signatures."""
    translator, loaded, _, _ = translator
    texts = ["ich habe zeit", *UNICODE_BLANKS]
    assert translator.translate(texts)[1:] == [""] * len(UNICODE_BLANKS)
    assert translator.greedy(texts)[1:] == [""] * len(UNICODE_BLANKS)
    assert translator.nbest(texts)[1:] == [[("", 0.0)] * 3] * len(UNICODE_BLANKS)
    assert translator.constrained(texts, ["wir"] * len(texts))[1:] == [""] * len(UNICODE_BLANKS)
    assert [a["target_tokens"] for a in translator.attention(texts)[1:]] == [[]] * 5
    for name in ("serving_default", "greedy"):
        for outputs in (
            translator.function(name)(tf.constant(texts)),
            loaded.signatures[name](text=tf.constant(texts)),
        ):
            assert [t.decode() for t in outputs["translation"].numpy()][1:] == [""] * 5, name
            assert outputs["score"].numpy()[1:].tolist() == [0.0] * 5, name
            assert outputs["score"].numpy()[0] < 0, name
    forced = loaded.signatures["constrained"](
        text=tf.constant(texts), prefix=tf.constant(["wir"] * len(texts))
    )
    assert [t.decode() for t in forced["translation"].numpy()][1:] == [""] * 5
    assert forced["score"].numpy()[1:].tolist() == [0.0] * 5
    nbest = loaded.signatures["nbest"](text=tf.constant(texts))
    assert nbest["scores"].numpy()[1:].tolist() == [[0.0] * 3] * 5
    assert set(nbest["translations"].numpy()[1:].ravel()) == {b""}
    attention = loaded.signatures["attention"](text=tf.constant(texts))
    assert not attention["attention"].numpy()[1:].any()
    assert set(attention["target_tokens"].numpy()[1:].ravel()) == {b"[PAD]"}


def first_line(signature, **inputs):
    """The first line of the message a refused request gets, as TF Serving
    returns it (the runtime's message, without TensorFlow's `{{node ...}}`
    tags); `None` if the request was accepted."""
    from keras_attention.serving.requests import rule_line

    try:
        signature(**{name: tf.constant(value) for name, value in inputs.items()})
    except tf.errors.InvalidArgumentError as error:
        return rule_line(error.message.splitlines()[0])
    return None


@pytest.fixture
def runtime_messages(monkeypatch):
    """TensorFlow's Python wrapper puts "Graph execution error:" and a
    trace before the runtime's message; TF Serving does not. Switched off
    here, so that `first_line` reads what a server's client reads."""
    from tensorflow.python.eager.polymorphic_function import atomic_function

    monkeypatch.setattr(
        atomic_function.InterpolateRuntimeError, "__exit__", lambda self, *error: False
    )


def test_bad_requests_name_the_input_and_the_rule_in_the_first_line(translator, runtime_messages):
    translator, loaded, _, model = translator
    vocab = model.source_vocab_size
    text_rule = "assertion failed: [text must be a vector of strings [batch]; got shape "
    for name in ("serving_default", "greedy", "attention", "nbest"):
        signature = loaded.signatures[name]
        assert first_line(signature, text=[["a", "b"], ["c", "d"]]) == text_rule + "[2, 2]]", name
        assert first_line(signature, text="ich habe zeit") == text_rule + "[]]", name
        assert first_line(signature, text=[["a"]]) == text_rule + "[1, 1]]", name
    constrained = loaded.signatures["constrained"]
    assert first_line(constrained, text=[["a", "b"]], prefix=["x"]) == text_rule + "[1, 2]]"
    assert first_line(constrained, text=["a"], prefix="x") == (
        "assertion failed: [prefix must be a vector of strings [batch]; got shape []]"
    )
    assert first_line(constrained, text=["a", "b"], prefix=["x"]) == (
        "assertion failed: [prefix must have one entry per text; got 1 prefixes for 2 texts]"
    )
    # A prefix longer than any translation (L = 8 pieces) is refused, not cut.
    assert first_line(constrained, text=["a", "b"], prefix=["", "wir " * 200]) == (
        "assertion failed: [prefix must have at most 8 pieces (the longest translation); "
        "got 200 pieces in row 1]"
    )
    tokens = loaded.signatures["tokens"]
    ids = np.array([[1, 5, 6, 2], [1, 7, 2, 0]], "int32")
    good = np.array([4, 3], "int32")
    lengths_rule = "assertion failed: [lengths must be "
    for token_ids, lengths, expected in [
        (
            ids[0],
            good[:1],
            "assertion failed: [token_ids must be a matrix of int32 ids [batch, length]; "
            "got shape [4]]",
        ),
        (ids, good[:, None], lengths_rule + "a vector of int32 lengths [batch]; got shape [2, 1]]"),
        (
            ids,
            np.array([4, 3, 2], "int32"),
            "assertion failed: [lengths must have one entry per row of token_ids; "
            "got 3 lengths for 2 rows]",
        ),
        (
            ids,
            np.array([4, 0], "int32"),
            lengths_rule + ">= 1 (a source of at least one id); got 0 in row 1]",
        ),
        (
            ids,
            np.array([-3, 3], "int32"),
            lengths_rule + ">= 1 (a source of at least one id); got -3 in row 0]",
        ),
        (
            ids,
            np.array([4, 5], "int32"),
            lengths_rule + "<= the width of token_ids (4); got 5 in row 1]",
        ),
        (
            np.ones((1, 500), "int32"),
            np.array([500], "int32"),
            lengths_rule + "<= 7 (max_source_length: the longest source this export takes); "
            "got 500 in row 0]",
        ),
        (
            np.array([[1, 5, vocab, 2]], "int32"),
            good[:1],
            f"assertion failed: [token_ids must be in [0, {vocab}) (the source vocabulary) "
            f"within the row lengths; got {vocab} in row 0 at position 2]",
        ),
        (
            np.array([[1, 5, 2, 0], [1, -1, 2, 0]], "int32"),
            np.array([3, 3], "int32"),
            f"assertion failed: [token_ids must be in [0, {vocab}) (the source vocabulary) "
            "within the row lengths; got -1 in row 1 at position 1]",
        ),
    ]:
        line = first_line(tokens, token_ids=token_ids, lengths=lengths)
        assert line == expected, (token_ids.shape, lengths, line)
    # Ids past a row's length are not read; a wide matrix of short rows works.
    wide = np.zeros((2, 500), "int32")
    wide[:, :4] = ids
    wide[1, 3:] = -7
    assert first_line(tokens, token_ids=wide, lengths=good) is None
    # In process, the same rules are a ValueError.
    with pytest.raises(
        ValueError, match=r"^Translator \(constrained\): prefix must have at most 8 "
    ):
        translator.constrained(["ich"], ["wir " * 20])


@pytest.mark.parametrize("family", ["transformer", "convs2s"])
def test_every_family_refuses_a_source_longer_than_max_source_length(family):
    """The `tokens` signature of every model family refuses more than S
    ids in a row (the Transformer used to cut them silently, ConvS2S to
    fail inside its positional embedding), and takes S."""
    import tempfile

    from keras_attention.seq2seq import ConvS2SSeq2Seq, GreedySearch, TransformerSeq2Seq
    from keras_attention.serving import Translator
    from keras_attention.serving.requests import rule_line

    with tempfile.TemporaryDirectory() as directory:
        tokenizer, size = word_tokenizer(directory)
    if family == "transformer":
        model = TransformerSeq2Seq(size, size, 8, 2, 16, 1, max_length=9)
    else:
        model = ConvS2SSeq2Seq(size, size, 8, hidden_dim=8, num_layers=1, max_length=9)
    model.build()
    translator = Translator(model, tokenizer, tokenizer, GreedySearch(), max_source_length=8)
    tokens = translator.function("tokens")
    ids = np.full((1, 500), 5, "int32")
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        tokens(tf.constant(ids), tf.constant([500]))
    assert rule_line(error.value.message) == (
        "assertion failed: [lengths must be <= 8 (max_source_length: the longest source this "
        "export takes); got 500 in row 0]"
    )
    out = tokens(tf.constant(ids), tf.constant([8]))["token_ids"]
    assert out.shape == (1, 9)


def test_a_python_caller_finds_the_rule_after_tensorflows_own_first_lines(translator):
    """In Python, TensorFlow's function runtime (in the caller's process,
    not the export) puts `Graph execution error:` and a `Detected at node`
    line before the runtime's message; the rule is the first line that
    starts with `assertion failed:`, which `rule_line` returns (docs/serving.md)."""
    from keras_attention.serving.requests import rule_line

    _, loaded, _, _ = translator
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        loaded.signatures["greedy"](text=tf.constant("ich habe zeit"))
    lines = str(error.value).splitlines()
    assert lines[0] == "Graph execution error:"
    rule = "assertion failed: [text must be a vector of strings [batch]; got shape []]"
    assert next(line for line in lines if line.startswith("assertion failed:")) == rule
    assert rule_line(str(error.value)) == rule
