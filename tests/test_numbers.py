"""Numbers protected before a model and restored after it
(`keras_attention.tokenizers.numbers`), checked against plain Python `re`, in
the tokenizers, the Translator and the recipe's number-consistency score."""

import re

import numpy as np
import pytest
import tensorflow as tf
from keras_attention_recipes.translation.scores import number_consistency

from keras_attention.tokenizers import build_vocabulary, load_tokenizer, train_sentencepiece
from keras_attention.tokenizers.number_rules import (
    OTHER_DIGITS,
    PLACEHOLDER,
    copied_number,
    numbers_in,
    protect_text,
)
from keras_attention.tokenizers.numbers import NumberProtection

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
    found = [copied_number(n, swap) for n in numbers_in(source)]
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
    from keras_attention_recipes.translation.config import TranslationConfig
    from keras_attention_recipes.translation.data import numbers_to_protect
    from keras_attention_recipes.translation.text_io import write_pair_file

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
    from keras_attention.tokenizers import SubwordTokenizer

    path = tmp_path / "old.vocab"  # as 0.2.0 wrote them: no placeholder
    path.write_text("\n".join(["[PAD]", "[START]", "[END]", "[UNK]", "a", "b"]) + "\n")
    tokenizer = SubwordTokenizer(str(path))
    model = TransformerSeq2Seq(6, 6, hidden_dim=8, num_heads=2, num_layers=1, max_length=16)
    with pytest.raises(ValueError, match="the source tokenizer's has none"):
        Translator(model, tokenizer, tokenizer, "greedy", 8, numbers=NumberProtection())


# Copied numbers, German -> English and English -> German: (source, copied).
SEPARATORS = [
    ("2,5", "2.5"),  # a German decimal comma
    ("2,50", "2.50"),
    ("0,125", "0.125"),
    ("12345,6789", "12345.6789"),
    ("2,500", "2.500"),  # German 2.5 or English 2500: exchanging is right for both
    ("1.000", "1,000"),  # German thousands
    ("1.000.000", "1,000,000"),
    ("12.345.678", "12,345,678"),
    ("1.234,56", "1,234.56"),
    ("1.000,5", "1,000.5"),
    ("1,000", "1.000"),  # English thousands
    ("1,000,000", "1.000.000"),
    ("1,234.56", "1.234,56"),
    ("14.30", "14.30"),  # a German time
    ("24.12", "24.12"),  # a date without its year ("Am 24.12. fahren wir.")
    ("24.12.2019", "24.12.2019"),
    ("2.0", "2.0"),  # versions
    ("3.1.4", "3.1.4"),
    ("2.5", "2.5"),  # an English decimal, or a German version: ambiguous
    ("3.14159", "3.14159"),
    ("01.2019", "01.2019"),
    ("0.500", "0.500"),  # no thousands group after a head of 0
    ("0.125", "0.125"),
    ("1000.000", "1000.000"),  # a head of 4 digits
    ("12.345.67", "12.345.67"),  # a group of 2
    ("1,2,3", "1,2,3"),
    ("192.168.0.1", "192.168.0.1"),
    ("14:35", "14:35"),
    ("1.000:30", "1.000:30"),
    ("10³", "10³"),
    ("٣", "٣"),
    ("2½", "2½"),
]


def test_copied_numbers_follow_one_table_in_the_graph_and_in_python():
    """The separator rule, in both directions, checked on the same table in
    the graph (`NumberProtection.copied` and `restore`), in Python
    (`copied_number`) and on the CTranslate2 path (`restore_numbers`), so
    they cannot drift; without `swap_separators` every number is copied as
    written."""
    from keras_attention.serving.ctranslate2 import restore_numbers

    numbers, expected = [n for n, _ in SEPARATORS], [c for _, c in SEPARATORS]
    swapping, keeping = NumberProtection(swap_separators=True), NumberProtection()
    assert strings(swapping.copied(tf.constant(numbers))) == expected
    assert strings(keeping.copied(tf.constant(numbers))) == numbers
    assert [copied_number(n) for n in numbers] == expected
    assert [copied_number(n, swap_separators=False) for n in numbers] == numbers
    sources = [f"Es sind {n} Stück." for n in numbers]
    assert [numbers_in(text) for text in sources] == [[n] for n in numbers]  # one group each
    translations = [f"There are {P} pieces."] * len(numbers)
    restored = strings(swapping.restore(tf.constant(translations), tf.constant(sources)))
    assert restored == [f"There are {c} pieces." for c in expected]
    assert [restore_numbers(t, s) for t, s in zip(translations, sources)] == restored
    # The sentences, as the demo's model translated them.
    cases = {
        "Um 14.30 Uhr.": (f"It's {P}.", "It's 14.30."),
        "Am 24.12. fahren wir.": (f"It's {P}.", "It's 24.12."),
        "Version 2.0 ist da.": (f"Version {P} is there.", "Version 2.0 is there."),
        "1.000 und 1.000.000": (f"{P} and {P}", "1,000 and 1,000,000"),
    }
    texts = list(cases)
    outputs = [translation for translation, _ in cases.values()]
    restored = strings(swapping.restore(tf.constant(outputs), tf.constant(texts)))
    assert restored == [wanted for _, wanted in cases.values()]
    assert [restore_numbers(t, s) for t, s in zip(outputs, texts)] == restored


def test_digits_of_other_scripts_fractions_and_superscripts_are_protected():
    """`٣`, `½`, `²` were no number: left to a model that hardly saw them,
    they vanished. Now each is a group, or part of the ASCII group it is
    joined to, protected and copied as written, in the graph and in Python;
    the table of such characters is Unicode's number categories."""
    import unicodedata

    text = "x² und 10³ Meter, ٣ Katzen, ½ Kuchen, 2½ Liter, ① und Ⅻ."
    groups = ["²", "10³", "٣", "½", "2½", "①", "Ⅻ"]
    protected = f"x{P} und {P} Meter, {P} Katzen, {P} Kuchen, {P} Liter, {P} und {P}."
    protection = NumberProtection(swap_separators=True)
    assert numbers_in(text) == groups
    assert protection.numbers(tf.constant([text])).to_list() == [[g.encode() for g in groups]]
    assert protect_text(text) == protected
    assert strings(protection.protect(tf.constant([text]))) == [protected]
    translation = f"x{P} and {P} metres, {P} cats, {P} cake, {P} litres, {P} and {P}."
    assert strings(protection.restore(tf.constant([translation]), tf.constant([text]))) == [
        "x² and 10³ metres, ٣ cats, ½ cake, 2½ litres, ① and Ⅻ."
    ]
    listed = {c for first, last in OTHER_DIGITS for c in range(first, last + 1)}
    assert all(unicodedata.category(chr(c)) in ("Nd", "Nl", "No") for c in listed)
    if unicodedata.unidata_version == "14.0.0":  # the table's version: all of them
        every = {c for c in range(0x110000) if unicodedata.category(chr(c)) in ("Nd", "Nl", "No")}
        assert listed == every - {ord(d) for d in "0123456789"}


def test_typed_placeholders_and_marks_forge_nothing():
    """A U+E000 typed in a text was taken for a protected number ("Ich
    habe \ue000 Katzen und 3 Hunde." -> "I have 3 cats and."), and a typed
    U+0001 joined the groups around it in `numbers` but not in `protect`.
    Both are read as spaces, in the graph and in Python."""
    from keras_attention.serving.ctranslate2 import restore_numbers

    texts = ["Ich habe \ue000 Katzen und 3 Hunde.", "3\x014 und 5", "\ue000\ue0007"]
    protected = [f"Ich habe   Katzen und {P} Hunde.", f"{P} {P} und {P}", f"  {P}"]
    found = [["3"], ["3", "4", "5"], ["7"]]
    protection = NumberProtection(swap_separators=True)
    assert strings(protection.protect(tf.constant(texts))) == protected
    assert [protect_text(text) for text in texts] == protected
    assert protection.numbers(tf.constant(texts)).to_list() == [
        [n.encode() for n in row] for row in found
    ]
    assert [numbers_in(text) for text in texts] == found
    # What a model writes for the protected texts; a U+0001 it writes is dropped.
    outputs = [f"I have cats and {P} dogs.", f"{P}\x01 {P} and {P}", f"{P}"]
    wanted = ["I have cats and 3 dogs.", "3 4 and 5", "7"]
    assert strings(protection.restore(tf.constant(outputs), tf.constant(texts))) == wanted
    assert [restore_numbers(t, s) for t, s in zip(outputs, texts)] == wanted


def scripted_translator(tmp_path, continuations=None):
    """A Translator over the untrained model of `shared_vocabulary_model`
    whose search is scripted: it writes the (protected) source back, or,
    with a prefix, the prefix and then row b's continuation: the first of
    `continuations[b]` when the prefix holds no placeholder, the second
    when it does (a model that places each of the source's numbers once)."""
    from keras_attention.seq2seq import GreedySearch
    from keras_attention.serving import Translator

    tokenizer, model = shared_vocabulary_model(tmp_path)
    placeholder = strings(tokenizer.tokens(np.arange(tokenizer.vocab_size))).index(P)

    def ids(lines):
        return tokenizer.encode(tf.constant(lines), 40)[0][:, 1:]  # without [START]

    if continuations:
        plain, typed = (ids([row[k] for row in continuations]) for k in (0, 1))

    class Scripted(GreedySearch):
        def best(self, model, source, prefix=None):
            if prefix is None:
                tokens = source[:, 1:]
            else:
                holds = tf.reduce_any(tf.equal(prefix, placeholder), axis=1, keepdims=True)
                tail = tf.where(holds, typed, plain)
                forced = tf.RaggedTensor.from_tensor(prefix, padding=0)
                tokens = tf.concat([forced, tf.RaggedTensor.from_tensor(tail, padding=0)], 1)
                tokens = tokens.to_tensor(0)
            return {"tokens": tokens, "scores": tf.zeros(tf.shape(tokens)[:1])}

    numbers = NumberProtection(swap_separators=True)
    return Translator(model, tokenizer, tokenizer, Scripted(), 40, numbers=numbers), tokenizer


def test_numbers_typed_in_a_constrained_prefix_are_not_written_twice(tmp_path):
    """`constrained(["Ich habe 3 Katzen."], ["I have 3"])` gave "I have 3 3
    cats.": the prefix went to the model as digits, and the model still
    placed the source's number. The prefix's numbers are protected too and
    fill the first placeholders as typed; the source's later numbers fill
    the rest."""
    texts = [
        "Ich habe 3 Katzen.",
        "Es kostet 2,50 Euro.",
        "Von 3 bis 5 Uhr.",
        "Nur 7.",
        "3 Katzen.",
    ]
    prefixes = ["I have 3", "It costs 2.50", "From 3", "", "Four"]
    continuations = [
        (f" {P} cats.", " cats."),
        (f" {P} euros.", " euros."),
        (f" {P} to {P}.", f" to {P}."),
        (f"Only {P}.", f"Only {P}."),
        (f" {P} cats.", " cats."),
    ]
    translator, tokenizer = scripted_translator(tmp_path, continuations)
    assert translator.constrained(texts, prefixes) == [
        "I have 3 cats.",
        "It costs 2.50 euros.",
        "From 3 to 5.",
        "Only 7.",
        "Four 3 cats.",  # a number in words is no number: the source's is placed
    ]
    # The prefix reaches the model with its number as the placeholder.
    forced = tokenizer.pieces(translator.numbers.protect(tf.constant(prefixes[:1])))
    assert strings(tokenizer.decode(forced.to_tensor(0))) == [f"I have {P}"]
    # A number typed otherwise than the source's is written as typed.
    prefixes = ["I have 4", "It costs 2,50", "From 3", "", "4"]
    assert translator.constrained(texts, prefixes) == [
        "I have 4 cats.",
        "It costs 2,50 euros.",
        "From 3 to 5.",
        "Only 7.",
        "4 cats.",
    ]


class EchoTranslator:
    """A stand-in for `ctranslate2.Translator` that writes each source's
    pieces back: the CTranslate2 path's scripted model."""

    def translate_batch(self, batch, **options):
        from types import SimpleNamespace

        return [SimpleNamespace(hypotheses=[list(pieces)]) for pieces in batch]


def echo_ctranslate2_folder(tmp_path):
    """A folder as `convert_to_ctranslate2` writes one, as far as
    `translate_with_ctranslate2` reads it with a scripted translator: the
    shared SentencePiece model as `source.spm` and `target.spm`."""
    import shutil

    folder = tmp_path / "ct2"
    folder.mkdir()
    for side in ("source", "target"):
        shutil.copyfile(tmp_path / "both.spm", folder / f"{side}.spm")
    return str(folder)


def test_placeholders_typed_and_other_digits_in_every_path(tmp_path):
    """The Translator (the graph functions an export holds) and the
    CTranslate2 path, each over a scripted model that writes its protected
    source back: a typed U+E000 is a space, so "3" keeps its place, and
    `٣`, `½`, `²` are protected and copied, not left to the model."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("sentencepiece")
    from keras_attention.serving.ctranslate2 import translate_with_ctranslate2

    translator, tokenizer = scripted_translator(tmp_path)
    texts = [
        "Ich habe \ue000 Katzen und 3 Hunde.",
        "x² und 10³ Meter, ٣ Katzen, ½ Kuchen.",
        "Um 14.30 Uhr, 2,5 km, 1.000.000 Leute.",
        "\ue000",
    ]
    wanted = [
        "Ich habe Katzen und 3 Hunde.",
        "x² und 10³ Meter, ٣ Katzen, ½ Kuchen.",
        "Um 14.30 Uhr, 2.5 km, 1,000,000 Leute.",
        "",
    ]
    source, _ = translator.encode(tf.constant(texts))
    placeholder = strings(tokenizer.tokens(np.arange(tokenizer.vocab_size))).index(P)
    assert np.sum(source.numpy() == placeholder, axis=1).tolist() == [1, 4, 3, 0]
    assert translator.translate(texts) == wanted
    folder = echo_ctranslate2_folder(tmp_path)
    echo = EchoTranslator()
    assert translate_with_ctranslate2(folder, texts, echo, protect_numbers=True) == wanted


def test_translate_with_ctranslate2_refuses_a_single_string(tmp_path):
    """`translate_with_ctranslate2(dir, "Ich habe keine Zeit.")` translated
    each of its 20 characters."""
    pytest.importorskip("ctranslate2")
    pytest.importorskip("sentencepiece")
    from keras_attention.serving.ctranslate2 import translate_with_ctranslate2

    shared_vocabulary_model(tmp_path)
    folder = echo_ctranslate2_folder(tmp_path)
    with pytest.raises(ValueError) as raised:
        translate_with_ctranslate2(folder, "Ich habe keine Zeit.", EchoTranslator())
    assert str(raised.value) == (
        "`texts` of translate_with_ctranslate2 must be a list of strings; received a single "
        "string 'Ich habe keine Zeit.' (wrap it in a list)."
    )
    with pytest.raises(ValueError, match=r"must be a list of strings; item 1 is int 3\."):
        translate_with_ctranslate2(folder, ["Ja.", 3], EchoTranslator())
    with pytest.raises(ValueError, match=r"item 0 is NoneType None\."):
        translate_with_ctranslate2(folder, [None], EchoTranslator())
    with pytest.raises(ValueError, match=r"received int 5\."):
        translate_with_ctranslate2(folder, 5, EchoTranslator())
    # As Translator.translate: UTF-8 bytes are texts too.
    assert translate_with_ctranslate2(folder, [b"Ja."], EchoTranslator()) == ["Ja."]
    with pytest.raises(ValueError, match=r"`model_dir` .* \(with model.bin\); received "):
        translate_with_ctranslate2(str(tmp_path / "nothing"), ["Ja."])
    assert translate_with_ctranslate2(folder, ["Ich habe keine Zeit."], EchoTranslator()) == [
        "Ich habe keine Zeit."
    ]
