"""Numbers protected before a model and restored after it
(`keras_attention.serving.numbers`), checked against plain Python `re`, in
the tokenizers, the Translator and the recipe's number-consistency score."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_attention.serving.numbers import PLACEHOLDER, NumberProtection, numbers_in
from keras_attention.serving.text import build_vocabulary, load_tokenizer, train_sentencepiece
from recipes.translation.scores import number_consistency

P = PLACEHOLDER
SOURCES = [
    "Das kostet 2,50 Euro, nicht 1.000.",
    "Um 14:35 Uhr am 24.12.2019.",
    "Keine Zahl.",
    "",
    "Tel. 030 1234567, Zimmer 5.",
    "3,5% von 12 sind 0,42",
    "a1b22c",
    "Version 1.2.3: 10:00, 7, 8",
]


def strings(tensor):
    return [value.decode("utf-8") for value in np.asarray(tensor).reshape(-1)]


def reference_restore(translation, source, swap):
    """Fill the k-th placeholder with the k-th number, in plain Python."""
    found = numbers_in(source)
    if swap:
        found = [
            n.translate(str.maketrans(",.", ".,")) if re.fullmatch(r"\d+[.,]\d+", n) else n
            for n in found
        ]
    parts = translation.split(P)
    filled = "".join(
        part + (found[k] if k < len(found) else "\x01") * (k < len(parts) - 1)
        for k, part in enumerate(parts)
    )
    return re.sub(" ?\x01", "", filled)  # a placeholder beyond the numbers, with its space


def test_protect_and_numbers_match_python_re():
    protection = NumberProtection()
    assert strings(protection.protect(tf.constant(SOURCES))) == [
        re.sub(r"[0-9]+(?:[.,:][0-9]+)*", P, text) for text in SOURCES
    ]
    assert protection.numbers(tf.constant(SOURCES)).to_list() == [
        [n.encode() for n in numbers_in(text)] for text in SOURCES
    ]
    assert numbers_in(SOURCES[1]) == ["14:35", "24.12.2019"]
    assert numbers_in(SOURCES[4]) == ["030", "1234567", "5"]


@pytest.mark.parametrize("swap", [False, True])
def test_restore_fills_placeholders_in_source_order(swap):
    protection = NumberProtection(swap_separators=swap)
    translations = [
        f"It costs {P} euros, not {P}.",  # as many as the source's numbers
        f"At {P} on {P}, and {P} again.",  # one more: left out
        "No number.",
        "",
        f"Phone {P}.",  # fewer: the rest are lost
        f"{P}{P}{P}{P}",
        f"a{P}b",
        f"{P}: {P}, {P}, {P}",
    ]
    restored = strings(protection.restore(tf.constant(translations), tf.constant(SOURCES)))
    assert restored == [reference_restore(t, s, swap) for t, s in zip(translations, SOURCES)]
    if swap:
        assert restored[0] == "It costs 2.50 euros, not 1,000."
        assert restored[1] == "At 14:35 on 24.12.2019, and again."  # two separators: kept
    else:
        assert restored[0] == "It costs 2,50 euros, not 1.000."
    empty = protection.restore(tf.constant([], tf.string), tf.constant([], tf.string))
    assert empty.shape == (0,)


def test_protect_pairs_only_where_both_sides_hold_the_same_numbers():
    protection = NumberProtection()
    sources = tf.constant(["A 3,5 B 7", "x 1 y", "7 und 3", "kein", "am 1.000"])
    targets = tf.constant(["a 3.5 b 7", "x 2", "3 and 7", "none", "on 1,000"])
    protected = [strings(side) for side in protection.protect_pairs(sources, targets)]
    assert protected == [
        [f"A {P} B {P}", "x 1 y", "7 und 3", "kein", f"am {P}"],  # other order: kept as is
        [f"a {P} b {P}", "x 2", "3 and 7", "none", f"on {P}"],
    ]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="swap_separators"):
        NumberProtection(swap_separators="yes")
    assert NumberProtection.from_config(NumberProtection(True).get_config()).swap_separators


@pytest.mark.parametrize("kind", ["sentencepiece", "wordpiece"])
def test_both_tokenizers_keep_the_placeholder_as_one_piece(kind, tmp_path):
    texts = ["Das kostet 5 Euro.", "Der Zug fährt um 9 Uhr.", "Wo ist der Bahnhof?"] * 20
    path = str(tmp_path / ("de.spm" if kind == "sentencepiece" else "de.vocab"))
    if kind == "sentencepiece":
        train_sentencepiece(texts, path, vocab_size=300)
    else:
        build_vocabulary(texts, path, vocab_size=200)
    tokenizer = load_tokenizer(path)
    protected = NumberProtection.protect(tf.constant(["Das kostet 49 Euro."]))
    ids, _ = tokenizer.encode(protected, 32)
    pieces = [p.replace("\u2581", "") for p in strings(tokenizer.tokens(ids[0]))]
    assert pieces.count(P) == 1 and not any(re.search("[0-9]", p) for p in pieces)
    assert strings(tokenizer.decode(ids)) == [f"Das kostet {P} Euro."]


def shared_vocabulary_model(tmp_path):
    """A SentencePiece model of German and English texts with numbers (one
    vocabulary for both sides) and an untrained Transformer over it."""
    from keras_attention.seq2seq import TransformerSeq2Seq

    texts = ["Das kostet 5 Euro.", "It costs 5 euros.", "No number here.", "Wo ist der Bahnhof?"]
    path = str(tmp_path / "both.spm")
    train_sentencepiece(texts * 20, path, vocab_size=300)
    tokenizer = load_tokenizer(path)
    size = tokenizer.vocab_size
    model = TransformerSeq2Seq(
        size, size, hidden_dim=8, num_heads=2, num_layers=1, intermediate_dim=8, max_length=64
    )
    model((np.ones((1, 4), "int32"), np.ones((1, 3), "int32")))
    return tokenizer, model


def test_translator_protects_before_the_model_and_restores_after(tmp_path):
    """Encode sends the placeholder's id to the model; decode fills what the
    model wrote (scripted here: the target ids of a protected text)."""
    from keras_attention.serving import Translator

    tokenizer, model = shared_vocabulary_model(tmp_path)
    translator = Translator(
        model,
        tokenizer,
        tokenizer,
        "greedy",
        max_source_length=40,
        numbers=NumberProtection(swap_separators=True),
    )
    text = tf.constant(["Das kostet 49,90 Euro.", "Keine."])
    source, _ = translator.encode(text)
    placeholder = strings(tokenizer.tokens(np.arange(tokenizer.vocab_size))).index(P)
    assert int(np.sum(source.numpy()[0] == placeholder)) == 1
    scripted, _ = tokenizer.encode(tf.constant([f"It costs {P} euros.", "None."]), 40)
    decoded = translator.decode(text, {"tokens": scripted[:, 1:]})
    assert strings(decoded) == ["It costs 49.90 euros.", "None."]
    with pytest.raises(ValueError, match="`numbers` of Translator"):
        Translator(model, tokenizer, tokenizer, "greedy", 40, numbers=True)


def test_number_consistency_counts_groups_with_either_separator():
    scores = number_consistency(
        ["Das kostet 2,50 Euro.", "Um 14:35 Uhr, Gleis 3 und 3.", "Kein.", "1.000 Leute"],
        ["It costs 2.50 euros.", "At 14:35, platform 3.", "None.", "1,000 people"],
    )
    assert scores == {"number_groups": 5, "numbers_kept": 4, "number_consistency": 80.0}
    assert number_consistency(["Kein."], ["None."])["number_consistency"] is None


def test_a_run_protects_numbers_only_where_its_pairs_copy_them(tmp_path):
    """Ding-like pairs copy their numbers: protected. Spelled-out dates to
    ISO dates do not (`22 juin 1975` -> `1975-06-22`): a model would never
    see the placeholder, so the run goes without."""
    from recipes.translation.config import TranslationConfig
    from recipes.translation.data import numbers_to_protect
    from recipes.translation.text_io import write_pair_file

    copied = tmp_path / "copied.tsv"
    write_pair_file([("Gleis 4", "platform 4"), ("um 14:35", "at 14:35"), ("ja", "yes")], copied)
    dates = tmp_path / "dates.tsv"
    write_pair_file([("22 juin 1975", "1975-06-22"), ("3 mai 2001", "2001-05-03")], dates)
    lines = []
    config = TranslationConfig()
    assert numbers_to_protect(config, str(copied), lines.append).swap_separators
    assert numbers_to_protect(config, str(dates), lines.append) is None
    assert lines == [
        "numbers: protected in 2 of the 2 training pairs with digits, and copied from the "
        "source when translating",
        "numbers: not protected: only 0 of the 2 training pairs with digits hold the same "
        "numbers on both sides",
    ]
    assert numbers_to_protect(config.replace(protect_numbers=False), str(copied)) is None


def test_translator_prefers_the_beam_hypothesis_that_places_every_number(tmp_path):
    """With numbers and a beam, `translate` takes the best-scored of the
    beam's hypotheses with as many placeholders as the text has numbers (a
    scripted beam here), else the best one."""
    from keras_attention.seq2seq import BeamSearch
    from keras_attention.serving import Translator

    tokenizer, model = shared_vocabulary_model(tmp_path)

    def ids(lines):
        return tokenizer.encode(tf.constant(lines), 40)[0][:, 1:]  # without [START]

    class ScriptedBeam(BeamSearch):
        def __call__(self, model, source, prefix=None):
            rows = [
                ["It costs euros.", f"It costs {P} euros.", f"{P} {P}"],  # the 2nd places 49
                ["No number.", f"No {P} number.", "None."],  # no number: the best
            ]
            tokens = tf.stack([ids(row) for row in rows])  # (B, K, L)
            return {"tokens": tokens, "scores": tf.constant([[-1.0, -2.0, -3.0]] * 2)}

        def best(self, model, source, prefix=None):
            return {name: value[:, 0] for name, value in self(model, source, prefix).items()}

    common = (model, tokenizer, tokenizer, ScriptedBeam(beam_width=3))
    sources = ["Das kostet 49 Euro.", "Keine Zahl."]
    protected = Translator(*common, 40, numbers=NumberProtection())
    assert protected.translate(sources) == ["It costs 49 euros.", "No number."]
    plain = Translator(*common, 40)
    assert plain.translate(sources) == ["It costs euros.", "No number."]


def test_a_vocabulary_without_the_placeholder_is_refused(tmp_path):
    from keras_attention.seq2seq import TransformerSeq2Seq
    from keras_attention.serving import Translator
    from keras_attention.serving.text import SubwordTokenizer

    path = tmp_path / "old.vocab"  # as 0.2.0 wrote them: no placeholder
    path.write_text("\n".join(["[PAD]", "[START]", "[END]", "[UNK]", "a", "b"]) + "\n")
    tokenizer = SubwordTokenizer(str(path))
    model = TransformerSeq2Seq(6, 6, hidden_dim=8, num_heads=2, num_layers=1, max_length=16)
    with pytest.raises(ValueError, match="the source tokenizer's has none"):
        Translator(model, tokenizer, tokenizer, "greedy", 8, numbers=NumberProtection())
