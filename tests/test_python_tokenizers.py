"""The tokenizers' Python twins give what the graph gives, token for token:
`SentencePieceEncoder` (the `sentencepiece` package) against
`SentencePieceTokenizer` (TensorFlow Text's ops) from the same model file,
and `number_rules` against `NumberProtection`. On the demo's whole split
(the Ding sentences: train, validation and test; the dictionary's entries
are left out), the Ding test sentences as the Translator reads them, the
numbers test set, and texts chosen for the corners of cleaning (spaces
that strip or don't, `▁`, characters left to byte fallback)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from keras_attention.tokenizers.number_rules import (
    PLACEHOLDER,
    NumberRules,
    protect_pair,
    protect_text,
    restore_text,
    sanitized,
)
from keras_attention.tokenizers.numbers import NumberProtection, sanitize
from keras_attention.tokenizers.pieces import SentencePieceEncoder, clean_text, train_sentencepiece
from keras_attention.tokenizers.sentencepiece import SentencePieceTokenizer

pytestmark = pytest.mark.tensorflow

DING = "/usr/share/trans/de-en"
NUMBERS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    "recipes",
    "translation",
    "testsets",
    "numbers.tsv",
)
# Where cleaning could differ: Python's `str.strip` strips a no-break space
# or U+3000, the graph's `tf.strings.strip` only ASCII white space.
CORNERS = [
    "  zwei  Leerzeichen  ",
    "\u00a0geschützt\u00a0",
    "\u3000breit\u3000",
    "\tTab\nZeile\r",
    "\vvertikal\f und \x85 und \x1c",
    "a\u2581b \u2581 c",
    "Emoji 🙂 und 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "",
    " ",
    "\u200b",
    "Preis: 3,50 € am 24.12.2019 um 14:35 Uhr, ½ Liter, 10³",
    f"getippt {PLACEHOLDER} und \x01 Marke",
]


def pairs_of(path):
    with open(path, encoding="utf-8") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if "\t" in line]


def graph_pieces(tokenizer, texts):
    return tokenizer.pieces(tf.constant(texts, tf.string)).to_list()


@pytest.fixture(scope="module")
def demo_split(tmp_path_factory):
    """The demo's split of the Ding corpus and its two 4,000-piece models,
    learned as `train` learns them (`load_tokenizers`)."""
    from keras_attention_recipes.translation import splits
    from keras_attention_recipes.translation.data import load_tokenizers, vocabulary_paths

    if not os.path.exists(DING):
        pytest.skip(f"{DING} missing: make test installs trans-de-en")
    output = str(tmp_path_factory.mktemp("demo-split"))
    paths = splits.prepare(output, log=lambda *_: None)
    load_tokenizers(output, paths, vocab_size=4000, log=lambda *_: None)
    models = vocabulary_paths(output, "sentencepiece")
    return {split: pairs_of(path) for split, path in paths.items()}, models


def test_the_demo_split_tokenises_alike_in_python_and_in_the_graph(demo_split):
    """Every training, validation and test pair, numbers protected as the
    training input protects them (`protect_pairs` / `protect_pair`), gives
    the same pieces; at the demo's `--max-length 32` the same ids and the
    same cut pairs."""
    splits, models = demo_split
    pairs = [pair for split in ("train", "valid", "test") for pair in splits[split]]
    assert len(pairs) > 19_000
    graph_numbers = NumberProtection(swap_separators=True)
    sources = tf.constant([source for source, _ in pairs])
    targets = tf.constant([target for _, target in pairs])
    graph_sources, graph_targets = graph_numbers.protect_pairs(sources, targets)
    python_sources, python_targets = zip(*(protect_pair(s, t) for s, t in pairs))
    assert [t.decode() for t in graph_sources.numpy()] == list(python_sources)
    assert [t.decode() for t in graph_targets.numpy()] == list(python_targets)
    assert sum(PLACEHOLDER in text for text in python_sources) > 300  # numbers were protected
    for model, graph_texts, python_texts, length in (
        (models[0], graph_sources, python_sources, 32),
        (models[1], graph_targets, python_targets, 33),
    ):
        graph, python = SentencePieceTokenizer(model), SentencePieceEncoder(model)
        assert graph.pieces(graph_texts).to_list() == python.pieces(list(python_texts))
        graph_ids, graph_cut = graph.encode(graph_texts, length)
        python_ids, python_cut = python.encode(list(python_texts), length)
        np.testing.assert_array_equal(python_ids, graph_ids.numpy())
        np.testing.assert_array_equal(python_cut, graph_cut.numpy())
        assert 0 < python_cut.sum() < len(pairs) // 10  # some pairs are cut, most fit
        assert python.decode(python_ids) == [t.decode() for t in graph.decode(graph_ids).numpy()]


def test_texts_to_translate_tokenise_alike(demo_split):
    """The Ding test sentences, the numbers test set and the corner cases,
    read as the Translator reads them (sanitized, numbers protected), give
    the same pieces and decode alike."""
    splits, models = demo_split
    texts = [source for source, _ in splits["test"]]
    texts += [source for source, _ in pairs_of(NUMBERS)] + CORNERS
    graph_texts = NumberProtection.protect(sanitize(tf.constant(texts)))
    python_texts = [protect_text(text) for text in texts]
    assert [t.decode() for t in graph_texts.numpy()] == python_texts
    graph, python = SentencePieceTokenizer(models[0]), SentencePieceEncoder(models[0])
    assert graph_pieces(graph, python_texts) == python.pieces(python_texts)
    cleaned = graph.clean(tf.constant(CORNERS)).numpy()
    assert [t.decode() for t in cleaned] == [clean_text(text) for text in CORNERS]
    ids, _ = python.encode(python_texts, 64)
    assert python.decode(ids) == [t.decode() for t in graph.decode(ids).numpy()]


def test_restore_and_sanitize_match_the_graph():
    sources = ["Zimmer 4711.", "Gleis 3,5 und 1.000 Euro.", "ohne", f"typed {PLACEHOLDER} 7"]
    translations = [f"Room {PLACEHOLDER}.", f"Track {PLACEHOLDER}, {PLACEHOLDER} {PLACEHOLDER}"]
    translations += [f"none {PLACEHOLDER}", f"typed \x01{PLACEHOLDER}"]
    for swap in (True, False):
        graph = NumberProtection(swap_separators=swap).restore(
            tf.constant(translations), tf.constant(sources)
        )
        python = [restore_text(t, s, swap) for t, s in zip(translations, sources)]
        assert python == [t.decode() for t in graph.numpy()]
        rules = NumberRules(swap_separators=swap)
        assert rules.get_config() == NumberProtection(swap_separators=swap).get_config()
        assert [rules.restore(t, s) for t, s in zip(translations, sources)] == python
    assert restore_text(translations[1], sources[1], True) == "Track 3.5, 1,000"  # one left out
    graph = sanitize(tf.constant(CORNERS)).numpy()
    assert [t.decode() for t in graph] == [sanitized(text) for text in CORNERS]


def test_bytes_and_ids_out_of_the_ordinary_clean_and_decode_alike(demo_split):
    """Bytes that are not UTF-8 clean to the same U+FFFD characters; ids
    outside the model, reserved and lone byte pieces decode alike; an
    empty batch decodes to nothing."""
    _, models = demo_split
    texts = [
        b"ok \xe2\x82 cut",
        b"\xed\xa0\x80 surrogate",
        b"\xc0\xaf over",
        b"\xff\xfe",
        b"\xf4\x90\x80\x80",
    ]
    cleaned = SentencePieceTokenizer.clean(tf.constant(texts)).numpy()
    assert [t.decode() for t in cleaned] == [clean_text(text) for text in texts]
    graph, python = SentencePieceTokenizer(models[1]), SentencePieceEncoder(models[1])
    byte = python.pieces(["\U0001f9ed"])[0]  # a character left to byte fallback
    assert [python.decode([[piece]]) for piece in byte[1:]] == [[""]] * 4  # "▁", 4 bytes
    rows = [[1, *byte, 2, 0], [5, -1, 99_999, 3], [byte[1], 40, 41, byte[-1]]]
    ids = np.array([row + [0] * (8 - len(row)) for row in rows])
    assert python.decode(ids) == [t.decode() for t in graph.decode(ids).numpy()]
    assert python.decode(ids)[0] == "\U0001f9ed"
    assert python.decode(np.zeros((0, 4), np.int32)) == []
    with pytest.raises(
        ValueError, match=r"\(batch, length\) array of integers; received shape \(8,\)"
    ):
        python.decode(ids[0])


def test_bad_arguments_are_refused(tmp_path):
    path = tmp_path / "m.spm"
    train_sentencepiece([f"Wort {i}" for i in range(200)], str(path), vocab_size=280)
    encoder = SentencePieceEncoder(str(path))
    with pytest.raises(ValueError, match=r"`max_length` of .* at least 2 .* max_length=1\."):
        encoder.encode(["a"], max_length=1)
    with pytest.raises(ValueError, match="must be a list of strings; received a single string"):
        encoder.pieces("ein Satz")
    import sentencepiece

    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter([f"Wort {i}" for i in range(200)]),
        model_prefix=str(tmp_path / "other"),
        vocab_size=30,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match=r"must start with the reserved pieces \['\[PAD\]'"):
        SentencePieceEncoder(str(tmp_path / "other.model"))  # SentencePiece's own reserved pieces


def test_shards_written_in_python_are_the_graph_s_byte_for_byte(demo_split, tmp_path, monkeypatch):
    """The demo's training split written into shards by `shards.text_encoder`
    (no TensorFlow) and by the graph's encoder (`pipeline.training_shards`,
    numbers protected), in chunks of 4,000 pairs (so that chunks end
    inside the writers' blocks of lines): the same files."""
    from keras_attention_recipes.translation import shards
    from keras_attention_recipes.translation.pipeline import training_shards
    from keras_attention_recipes.translation.shards import shard_folder, text_encoder, write_shards

    from keras_attention.tokenizers import load_tokenizer

    splits, models = demo_split
    monkeypatch.setattr(shards, "CHUNK", 4000)
    train = str(tmp_path / "train.tsv")
    with open(train, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in splits["train"])
    graph = training_shards(
        train, *map(load_tokenizer, models), 32, NumberProtection(swap_separators=True),
        log=lambda line: None,
    )  # fmt: skip
    encoders = [SentencePieceEncoder(model) for model in models]
    # The twins name the same set: a run prepared on one backend is read on another.
    assert shard_folder(train, encoders, 32, NumberRules(swap_separators=True)) == graph
    python = str(tmp_path / "python-shards")
    encode = text_encoder(*encoders, 32, protect_numbers=True)
    meta = write_shards(python, train, encode, 32, log=lambda line: None)
    assert meta["pairs"] > 15_000 and meta["lines"] == len(splits["train"])
    assert len(meta["files"]) == -(-meta["pairs"] // 4000)
    for name in [*meta["files"], "meta.json"]:
        with (
            open(os.path.join(graph, name), "rb") as a,
            open(os.path.join(python, name), "rb") as b,
        ):
            assert a.read() == b.read(), name


def test_the_text_translator_translates_as_the_graph_translator(demo_split):
    """`TextTranslator` (the Python twins, any backend) and `Translator`
    (the graph's ops) with one model, greedy search and a beam: the same
    translations of the Ding test sentences, the numbers test set and the
    corner cases (a random model: whatever it generates, both decode it)."""
    import keras
    from keras_attention_recipes.translation.text_translator import TextTranslator

    from keras_attention.seq2seq import BeamSearch, GreedySearch, TransformerSeq2Seq
    from keras_attention.serving import Translator

    splits, models = demo_split
    keras.utils.set_random_seed(1)
    model = TransformerSeq2Seq(4000, 4000, hidden_dim=16, num_layers=1, num_heads=2)
    model.build()
    texts = [source for source, _ in splits["test"][:40]] + CORNERS
    texts += [source for source, _ in pairs_of(NUMBERS)][:20]
    graph = Translator(
        model, *map(SentencePieceTokenizer, models), GreedySearch(), max_source_length=32,
        batch_size=16, numbers=NumberProtection(swap_separators=True),
    )  # fmt: skip
    python = TextTranslator(
        model, *map(SentencePieceEncoder, models), GreedySearch(), max_source_length=32,
        batch_size=16, numbers=NumberRules(swap_separators=True),
    )  # fmt: skip
    expected = graph.translate(texts)
    assert python.translate(texts) == expected
    assert sum(translation == "" for translation in expected) >= 3  # the blank corners
    assert len(set(expected)) > 20  # the outputs differ by text
    # A beam: the best hypothesis holding as many placeholders as the text has numbers.
    beam = BeamSearch(beam_width=3, alpha=0.6)
    graph = Translator(
        model, *map(SentencePieceTokenizer, models), beam, max_source_length=32,
        batch_size=16, numbers=NumberProtection(swap_separators=True),
    )  # fmt: skip
    python = TextTranslator(
        model, *map(SentencePieceEncoder, models), beam, max_source_length=32,
        batch_size=16, numbers=NumberRules(swap_separators=True),
    )  # fmt: skip
    assert python.translate(texts) == graph.translate(texts)
