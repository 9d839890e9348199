"""`serving.Translator`: in process and exported it is the same code, so the
reloaded SavedModel's signatures answer what the in-process methods do, on a
few dozen sentences through real (WordPiece) tokenizers and an untrained
tiny model; both agree with the eager searches of `seq2seq` decoded by the
tokenizer; the search's config round-trips through the export; empty
requests and blank strings."""

import itertools
import json

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


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    """`(translator, reloaded export, tokenizer, model)` with a beam of 3."""
    from keras_attention.seq2seq import BeamSearch, RecurrentSeq2Seq
    from keras_attention.serving import Translator
    from keras_attention.serving.text import RESERVED, SubwordTokenizer

    directory = tmp_path_factory.mktemp("translator")
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(RESERVED + WORDS) + "\n")
    tokenizer = SubwordTokenizer(str(vocabulary))
    size = len(RESERVED) + len(WORDS)
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
    np.testing.assert_allclose(served["score"].numpy(), np.asarray(best["scores"]), rtol=1e-5)
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
    assert [text for text, _ in blank] == ["", "", ""]


def test_nbest_says_which_hypotheses_finished(translator):
    """Issue 24: the `nbest` signature has `finished (B, N)`, the eager beam
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
        np.testing.assert_array_equal(alone["weights"], one["weights"])


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
        if name != "search" and not name.startswith("options:")
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
    from keras_attention.serving.text import RESERVED, SubwordTokenizer

    with tempfile.TemporaryDirectory() as directory:
        path = f"{directory}/vocab.txt"
        with open(path, "w") as stream:
            stream.write("\n".join(RESERVED + WORDS) + "\n")
        tokenizer = SubwordTokenizer(path)
        size = len(RESERVED) + len(WORDS)
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
        with pytest.raises(ValueError, match="`n` of Translator.nbest must be a positive"):
            translator.nbest(texts, 0)


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
