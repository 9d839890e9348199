"""The in-graph tokenizers: WordPiece (lossy) and SentencePiece (lossless),
the latter checked against the `sentencepiece` package's own processor."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_attention.tokenizers import (
    END,
    PAD,
    START,
    UNK,
    SentencePieceTokenizer,
    SubwordTokenizer,
    build_vocabulary,
    load_tokenizer,
    sentencepiece_pieces,
    train_sentencepiece,
)
from keras_attention.tokenizers.pieces import BYTE, NORMAL

TEXTS = [
    "I didn't find the time for it.",
    "I have no time.",
    "Where is the station?",
    "It's fine (really).",
] * 20


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("vocab") / "en.vocab")
    build_vocabulary(TEXTS, path, vocab_size=200)
    return SubwordTokenizer(path)


def test_round_trip(tokenizer):
    ids, truncated = tokenizer.encode(tf.constant(TEXTS[:4]), 24)
    assert ids.dtype == tf.int32 and ids.shape == (4, 24) and not truncated.numpy().any()
    assert (ids.numpy()[:, 0] == START).all()
    decoded = [t.decode() for t in tokenizer.decode(ids).numpy()]
    assert decoded == TEXTS[:4]


def test_truncation_keeps_end_and_is_flagged(tokenizer):
    ids, truncated = tokenizer.encode(
        tf.constant(["I have no time.", "I didn't find the time for it."]), 5
    )
    assert truncated.numpy().tolist() == [True, True]
    assert ids.numpy()[:, -1].tolist() == [END, END]


def test_empty_and_invalid_utf8(tokenizer):
    ids, truncated = tokenizer.encode(tf.constant([b"", b"I have \xff time."]), 12)
    assert ids.numpy()[0].tolist()[:3] == [START, END, PAD]
    assert [t.decode() for t in tokenizer.decode(ids).numpy()] == ["", "I have time."]


@pytest.mark.parametrize("kind", ["tokenizer", "sentencepiece_tokenizer"])
def test_blank_where_empty_blanks_only_texts_with_nothing_to_translate(kind, request):
    """Empty texts and texts of Unicode spaces and format characters only
    get "" whatever the model wrote; any other text keeps its translation."""
    tokenizer = request.getfixturevalue(kind)
    blank = ["", " \t ", "\r\n ", "\u00a0\u2003", "\u202e\u200f\u200b", "\u3000", "\u2028"]
    blank += ["\ufeff", "\u00ad \u2060"]
    kept = ["Hallo", " x ", "a\u200b", "\u0301", "\U0001f600"]
    strings = tf.constant(blank + kept)
    translations = tf.constant([f"t{i}" for i in range(len(blank + kept))])
    blanked = [t.decode() for t in tokenizer.blank_where_empty(strings, translations).numpy()]
    assert blanked == [""] * len(blank) + [f"t{i}" for i in range(len(blank), len(blank + kept))]


def test_blank_is_the_same_in_the_graph_and_in_python():
    """`blank_texts` (the graph) and `is_blank` (Python, the CTranslate2
    path's) agree with each other and with the definition (every character
    a Unicode space, `\\s` of Python's `re`, or a format character, Cf) on
    each such character alone, all of them together, and near misses: a
    letter or a combining mark beside them, an emoji, controls that are
    not spaces, the number placeholder (blank only after `sanitize`), bad
    UTF-8."""
    import unicodedata

    from keras_attention.tokenizers.base import blank_texts
    from keras_attention.tokenizers.characters import BLANK_CHARACTERS, is_blank

    def defined_blank(text):
        return all(re.match(r"\s", c) or unicodedata.category(c) == "Cf" for c in text)

    defined = {c for c in range(0x110000) if defined_blank(chr(c))}
    listed = {c for first, last in BLANK_CHARACTERS for c in range(first, last + 1)}
    assert {0x00A0, 0x1680, 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000} <= listed
    assert {0x0085, 0x00AD, 0x200B, 0x200F, 0x202A, 0x202E, 0x2060, 0x2064, 0xFEFF} <= listed
    if unicodedata.unidata_version == "14.0.0":  # the table's version: all of them
        assert listed == defined
    singles = [chr(c) for c in sorted(listed | defined)]
    near = ["a\u200b", "\u200ba", "\u0301", "\u00a0\u0301", "\U0001f600", "\u200d\U0001f600"]
    near += ["\x00", "\x01", "\x7f", "\ue000", "\ufffd", "\u2581", "\u180b", "\u034f"]
    texts = ["", "".join(singles), *singles, *near]
    graph = blank_texts(tf.constant(texts)).numpy().tolist()
    python = [is_blank(text) for text in texts]
    assert graph == python
    if unicodedata.unidata_version == "14.0.0":
        assert python == [defined_blank(text) for text in texts]
    assert all(python[:2]) and all(is_blank(chr(c)) for c in listed)
    assert not any(python[-len(near) :])
    bad = [b"\xff", b"\xc2\xa0\xe2\x80\x8b", b" \xc2"]
    assert blank_texts(tf.constant(bad)).numpy().tolist() == [is_blank(t) for t in bad]
    assert [is_blank(t) for t in bad] == [False, True, False]


def test_vocabulary_must_start_with_reserved_tokens(tmp_path):
    path = tmp_path / "bad.vocab"
    path.write_text("hello\nworld\n")
    with pytest.raises(ValueError, match=r"must start with the reserved tokens"):
        SubwordTokenizer(str(path))


def test_decode_writes_the_copied_source_piece_for_unk(tokenizer):
    # generation's replace_unknown: "[UNK]" at 3, the source id of "station"
    # copied there; -1 (nothing copied) and a reserved id leave it dropped.
    ids, _ = tokenizer.encode(tf.constant(["Where is the station?"]), 12)
    ids = ids.numpy()[:, 1:]  # the output has no [START]
    station = ids[0, 3]
    ids[0, 3] = UNK
    copied = [[-1] * ids.shape[1]]
    assert [t.decode() for t in tokenizer.decode(ids).numpy()] == ["Where is the?"]
    copied[0][3] = station
    assert tokenizer.decode(ids, copied).numpy()[0].decode() == "Where is the station?"
    copied[0][3] = END
    assert tokenizer.decode(ids, copied).numpy()[0].decode() == "Where is the?"


# -- SentencePiece -----------------------------------------------------------------
TRICKY = [
    "Er wurde am 1988-06-13 geboren.",  # WordPiece: "1988 - 06 - 13"
    "I didn't know it's Tom's.",
    '"Quoted," she said: „Anführung“ and «guillemets» (really?)',
    "Grüße aus Köln, Zürich und Österreich!",
    "two  spaces   and a\ttab",
    "  surrounded by space \t\n",
    "",
    "   ",
    "ＡＢＣ full-width, ﬁ ligature, ① circled, 日本語, 😀",  # NFKC would change these
    "a ▁ mark",
    "Straße 5 % 3,50 € / 2 ½ — ok…",
]


def reference_clean(text):
    """`SentencePieceTokenizer.clean` in plain Python: U+FFFD for bad UTF-8,
    `▁` as a space, stripped of ASCII space, runs of spaces as one."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text.replace("\u2581", " ").strip(" \t\n\v\f\r")
    return re.sub(" +", " ", text)


def ids_of(encoded):
    """The piece ids of each row of `encode`'s output, without
    `[START]`, `[END]` and padding."""
    return [[int(i) for i in row if i > UNK] for row in np.asarray(encoded)]


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("spm") / "en.spm")
    train_sentencepiece(TEXTS + TRICKY, path, vocab_size=400)
    return path


@pytest.fixture(scope="module")
def sentencepiece_tokenizer(sentencepiece_model):
    return load_tokenizer(sentencepiece_model)


def test_load_tokenizer_picks_the_kind_of_the_file(tokenizer, sentencepiece_model, tmp_path):
    assert isinstance(load_tokenizer(sentencepiece_model), SentencePieceTokenizer)
    wordpiece = tmp_path / "wordpiece.vocab"
    wordpiece.write_text("\n".join(["[PAD]", "[START]", "[END]", "[UNK]", "a"]) + "\n")
    assert isinstance(load_tokenizer(str(wordpiece)), SubwordTokenizer)
    damaged = tmp_path / "damaged.spm"
    damaged.write_bytes(open(sentencepiece_model, "rb").read()[:-7])
    for path in (damaged, tmp_path / "text"):
        if not os.path.exists(path):
            path.write_text("{ damaged")
        with pytest.raises(ValueError, match="neither a WordPiece vocabulary nor|is neither"):
            load_tokenizer(str(path))


def test_sentencepiece_reserved_ids(sentencepiece_model, sentencepiece_tokenizer):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    ids = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
    assert ids == (PAD, START, END, UNK) == (0, 1, 2, 3)
    tokens = sentencepiece_tokenizer.tokens(tf.constant([0, 1, 2, 3, 10_000, -1])).numpy()
    assert [t.decode() for t in tokens] == ["[PAD]", "[START]", "[END]", "[UNK]", "[UNK]", "[UNK]"]
    assert sentencepiece_tokenizer.vocab_size == processor.get_piece_size()
    ids, truncated = sentencepiece_tokenizer.encode(tf.constant(["I have no time.", ""]), 12)
    row = ids.numpy()[0].tolist()
    assert row[0] == START and row[row.index(END) + 1 :] == [PAD] * (11 - row.index(END))
    assert ids.numpy()[1].tolist() == [START, END] + [PAD] * 10
    assert not truncated.numpy().any()
    ids, truncated = sentencepiece_tokenizer.encode(tf.constant(["I have no time at all."]), 4)
    assert truncated.numpy().tolist() == [True] and ids.numpy()[0, -1] == END


def test_sentencepiece_tokenizers_survive_a_new_seed(sentencepiece_model):
    """Setting a seed clears eager TensorFlow's kernels; the model resource
    of TensorFlow Text's tokenizer was deleted with its kernel, so every
    tokenizer made before failed. Two tokenizers of one model share it."""
    first, second = load_tokenizer(sentencepiece_model), load_tokenizer(sentencepiece_model)
    expected = first.encode(tf.constant(TEXTS[:2]), 16)[0].numpy()
    del first
    tf.random.set_seed(3)
    np.testing.assert_array_equal(second.encode(tf.constant(TEXTS[:2]), 16)[0], expected)


def test_sentencepiece_round_trip_is_exact(sentencepiece_tokenizer):
    """decode(encode(x)) == clean(x) on dates, contractions, quotes,
    umlauts, spaces, characters outside the vocabulary (byte fallback) and
    empty text; clean against a plain-Python reference."""
    texts = TRICKY + [b"bad \xff byte"]
    cleaned = [t.decode() for t in sentencepiece_tokenizer.clean(tf.constant(texts)).numpy()]
    assert cleaned == [reference_clean(text) for text in texts]
    assert cleaned[4:8] == ["two spaces and a\ttab", "surrounded by space", "", ""]
    ids, truncated = sentencepiece_tokenizer.encode(tf.constant(texts), 128)
    assert not truncated.numpy().any()
    decoded = [t.decode() for t in sentencepiece_tokenizer.decode(ids).numpy()]
    assert decoded == cleaned
    assert decoded[0] == "Er wurde am 1988-06-13 geboren." and decoded[1] == TEXTS[0][:0] + (
        "I didn't know it's Tom's."
    )


def test_sentencepiece_ids_and_text_equal_the_sentencepiece_processor(
    sentencepiece_model, sentencepiece_tokenizer
):
    """The independent reference: the `sentencepiece` package encodes the
    cleaned texts to the same ids and decodes those ids, and random id
    sequences, to the same text."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    texts = TEXTS[:4] + TRICKY
    ids, _ = sentencepiece_tokenizer.encode(tf.constant(texts), 128)
    assert ids_of(ids) == [processor.encode(reference_clean(text)) for text in texts]
    normal = [i for i in range(UNK + 1, processor.get_piece_size()) if not processor.is_byte(i)]
    random = np.random.default_rng(0).choice(normal, size=(20, 9)).tolist()
    for rows in (ids_of(ids), random):
        width = max(len(row) for row in rows)
        padded = [row + [PAD] * (width - len(row)) for row in rows]
        decoded = sentencepiece_tokenizer.decode(tf.constant(padded)).numpy()
        assert [t.decode() for t in decoded] == [processor.decode(row) for row in rows]


def segmentations(text, scores):
    """Every segmentation of `text` into pieces of `scores` (piece -> log
    probability), with its log probability: the unigram model's lattice."""
    if not text:
        return [((), 0.0)]
    return [
        ((text[:end],) + rest, scores[text[:end]] + score)
        for end in range(1, len(text) + 1)
        if text[:end] in scores
        for rest, score in segmentations(text[end:], scores)
    ]


@pytest.mark.parametrize("alpha", [0.3, 1.0])
def test_subword_sampling_draws_segmentations_with_probability_p_to_the_alpha(
    sentencepiece_model, sentencepiece_tokenizer, alpha
):
    """Kudo's subword regularization: a segmentation s of a word is drawn
    with probability P(s)^alpha / sum_s' P(s')^alpha, where log P(s) sums the
    model's piece scores; checked against every segmentation enumerated
    from the `sentencepiece` package's scores, over 4,000 draws. Every draw
    decodes to the text, and sampling 0 gives the best segmentation."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    scores = {
        processor.id_to_piece(i): processor.get_score(i)
        for i in range(processor.get_piece_size())
        if i > UNK and not processor.is_byte(i)
    }
    found = segmentations("\u2581time", scores)
    weights = np.exp(alpha * np.array([score for _, score in found]))
    expected = dict(zip([pieces for pieces, _ in found], weights / weights.sum()))
    assert len(expected) > 5

    draws = 4000
    ids, _ = sentencepiece_tokenizer.encode(tf.constant(["time"] * draws), 16, sampling=alpha)
    assert [t.decode() for t in sentencepiece_tokenizer.decode(ids).numpy()] == ["time"] * draws
    drawn = [tuple(processor.id_to_piece(row)) for row in ids_of(ids)]
    assert set(drawn) <= set(expected)
    for pieces, probability in expected.items():  # 4 standard errors at most
        assert abs(drawn.count(pieces) / draws - probability) < 4 * (0.25 / draws) ** 0.5

    best, _ = sentencepiece_tokenizer.encode(tf.constant(["time"] * 50), 16)
    assert ids_of(best) == [processor.encode("time")] * 50
    assert max(expected, key=expected.get) == tuple(processor.encode("time", out_type=str))
    with pytest.raises(ValueError, match="sampling must be >= 0; got -0.5"):
        sentencepiece_tokenizer.pieces(tf.constant(["time"]), sampling=-0.5)


def test_wordpiece_refuses_subword_sampling(tokenizer):
    with pytest.raises(ValueError, match="sampling needs a SentencePiece model"):
        tokenizer.encode(tf.constant(["I have no time."]), 8, sampling=0.3)


def test_sentencepiece_training_is_deterministic_and_writes_atomically(
    sentencepiece_model, tmp_path
):
    path = str(tmp_path / "again.spm")
    size = train_sentencepiece(TEXTS + TRICKY, path, vocab_size=400)
    assert size == load_tokenizer(sentencepiece_model).vocab_size <= 400
    assert open(path, "rb").read() == open(sentencepiece_model, "rb").read()
    assert os.listdir(tmp_path) == ["again.spm"]  # no temporary file left
    with pytest.raises(ValueError, match="vocab_size=100 on 1 texts"):
        train_sentencepiece(["too few pieces for the bytes"], path, vocab_size=100)
    with pytest.raises(ValueError, match="at least one text"):
        train_sentencepiece(["", "  "], path)


def test_a_sentencepiece_model_without_the_reserved_pieces_is_refused(tmp_path):
    import sentencepiece

    path = str(tmp_path / "default.model")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXTS),
        model_prefix=path[: -len(".model")],
        vocab_size=30,
        minloglevel=2,
    )
    with pytest.raises(ValueError, match=r"must start with the reserved pieces"):
        SentencePieceTokenizer(path)


def test_sentencepiece_decode_writes_copied_source_pieces(
    sentencepiece_model, sentencepiece_tokenizer, tmp_path
):
    """replace_unknown's copies from another model: the source piece's
    surface, not its id; `▁` starts a word, a piece without it joins the
    word before; a byte piece copies its byte if it is a character (ASCII),
    else nothing, as does a reserved id or -1."""
    german = str(tmp_path / "de.spm")
    train_sentencepiece(["Wo ist der Bahnhof in Zürich?"] * 20 + ["Ja."], german, 300)
    source = load_tokenizer(german)
    pieces = [t.decode() for t in source.tokens(tf.range(source.vocab_size)).numpy()]
    word = next(i for i, p in enumerate(pieces) if p.startswith("▁") and p[1:].isalpha())
    inner = next(i for i, p in enumerate(pieces) if p.isalpha() and i > UNK)
    partial, ascii_a = pieces.index("<0xE2>"), pieces.index("<0x41>")  # byte fallback
    # "Where is the [UNK]?": generated ids (no [START]), the [UNK] at `unknown`.
    (target,) = ids_of(sentencepiece_tokenizer.encode(tf.constant(["Where is the?"]), 12)[0])
    assert sentencepiece_tokenizer.tokens(target[-1]).numpy() == b"?"
    unknown = len(target) - 1
    target = np.asarray([target[:unknown] + [UNK, target[-1], END]])
    for copied_id, expected in (
        (word, f"Where is the {pieces[word][1:]}?"),
        (inner, f"Where is the{pieces[inner]}?"),
        (ascii_a, "Where is theA?"),
        (partial, "Where is the?"),
        (END, "Where is the?"),
        (-1, "Where is the?"),
    ):
        copies = np.full_like(target, -1)
        copies[0, unknown] = copied_id
        decoded = sentencepiece_tokenizer.decode(target, copies, source_tokenizer=source)
        assert decoded.numpy()[0].decode() == expected, copied_id
    with pytest.raises(ValueError, match="must be a SentencePieceTokenizer"):
        sentencepiece_tokenizer.decode(target, copies, source_tokenizer=object())


@pytest.mark.large(
    reason=(
        "the whole corpus; test_python_tokenizers.py tokenises the demo's whole split in "
        "`make test`"
    )
)
def test_the_whole_ding_corpus_round_trips(tmp_path):
    """Every example sentence of the Ding corpus, both sides, decodes to
    itself with a model trained on the first 3000 of them: characters the
    model never saw come back through byte fallback."""
    from keras_attention_recipes.translation.corpus import ding_pairs
    from keras_attention_recipes.translation.settings import DING

    if not os.path.exists(DING):
        pytest.skip(f"{DING} missing: make test installs trans-de-en")
    pairs = list(ding_pairs())
    for side in (0, 1):
        texts = [pair[side] for pair in pairs]
        path = str(tmp_path / f"{side}.spm")
        train_sentencepiece(texts[:3000], path, vocab_size=2000)
        tokenizer = load_tokenizer(path)
        ids, truncated = tokenizer.encode(tf.constant(texts), 256)
        assert not truncated.numpy().any()
        decoded = [t.decode() for t in tokenizer.decode(ids).numpy()]
        wrong = [(text, back) for text, back in zip(texts, decoded) if text != back]
        assert not wrong and len(decoded) == len(pairs) > 17_000, wrong[:3]


# -- Numbers: every tokenizer splits digits ---------------------------------------
NUMBERED = [
    "On 1975-06-22 the train left at 14:35.",
    "It costs 49.99 euros, not 1975 euros.",
    "The year 1975 was long.",
] * 30 + ["No numbers here at all."] * 30


def test_sentencepiece_splits_digits_and_keeps_all_ten(tmp_path):
    """No piece holds a digit and anything else, each digit is a normal
    piece (never byte fallback, although 0, 3, 8 never occur in the texts),
    and numbers still come back exactly."""
    path = str(tmp_path / "numbers.spm")
    train_sentencepiece(NUMBERED, path, vocab_size=400)
    pieces = sentencepiece_pieces(open(path, "rb").read())
    with_digits = [(piece, kind) for piece, kind in pieces if re.search("[0-9]", piece)]
    assert sorted(piece for piece, kind in with_digits if kind == NORMAL) == list("0123456789")
    assert {kind for _, kind in with_digits} <= {NORMAL, BYTE}  # <0x30>-<0x39> remain as bytes
    tokenizer = load_tokenizer(path)
    texts = ["Am 24.12.2019 um 14:35 Uhr, Tel. 030 1234567, 3,50 €.", *NUMBERED[:3]]
    ids, _ = tokenizer.encode(tf.constant(texts), 64)
    words = [t.decode() for t in tokenizer.tokens(ids[0]).numpy()]
    numbers = [w.lstrip("\u2581") for w in words if re.search("[0-9]", w) and w[:3] != "<0x"]
    assert numbers == re.findall("[0-9]", texts[0])  # one piece a digit, none left to bytes
    assert [t.decode() for t in tokenizer.decode(ids).numpy()] == texts
    # Without the split, SentencePiece learns whole numbers as pieces.
    train_sentencepiece(NUMBERED, path, vocab_size=400, split_digits=False)
    pieces = [piece for piece, _ in sentencepiece_pieces(open(path, "rb").read())]
    assert any(re.search("[0-9].*[0-9]", piece) for piece in pieces)


def test_wordpiece_splits_digits(tmp_path):
    path = str(tmp_path / "numbers.vocab")
    build_vocabulary(NUMBERED, path, vocab_size=200)
    vocabulary = open(path, encoding="utf-8").read().splitlines()
    with_digits = [token for token in vocabulary if re.search("[0-9]", token)]
    assert sorted(with_digits) == sorted([*"0123456789", *("##" + d for d in "0123456789")])
    tokenizer = SubwordTokenizer(path)
    ids, _ = tokenizer.encode(tf.constant(["The year 2083 was long."]), 16)
    words = [t.decode() for t in tokenizer.tokens(ids[0]).numpy()]
    assert words[3:7] == ["2", "##0", "##8", "##3"]
    assert tokenizer.decode(ids).numpy()[0].decode() == "The year 2083 was long."
    build_vocabulary(NUMBERED, path, vocab_size=200, split_digits=False)
    assert "1975" in open(path, encoding="utf-8").read().splitlines()


def test_sentencepiece_decode_drops_incomplete_byte_sequences(
    sentencepiece_model, sentencepiece_tokenizer
):
    """Byte pieces that form no complete UTF-8 character came out as U+FFFD
    ("x² und 10³ Meter." -> "The 10\ufffd\ufffd\ufffd."). They are dropped,
    in the graph and on the CTranslate2 path alike; SentencePiece's own
    decoder writes U+FFFD for each such byte (the documented difference)."""
    import sentencepiece

    from keras_attention.serving.ctranslate2 import _detokenize

    processor = sentencepiece.SentencePieceProcessor(model_file=sentencepiece_model)
    cases = [
        (["<0xC2>"], "", "\ufffd"),  # a lone lead byte
        (["<0xA3>"], "", "\ufffd"),  # a lone continuation byte
        (["<0xC2>", "<0xA3>"], "£", "£"),  # a valid pair
        (["<0xC2>", "<0xC2>", "<0xA3>"], "£", "\ufffd£"),  # the first lead byte has no pair
        (["<0xE2>", "<0x82>"], "", "\ufffd\ufffd"),  # "€" cut after 2 of its 3 bytes
        (["▁I", "<0xE2>", "<0x82>", "▁", "h", "a", "v", "e"], "I have", "I\ufffd\ufffd have"),
        (["▁I", "<0xE2>", "<0x82>", "<0xAC>"], "I€", "I€"),
    ]
    rows = [[processor.piece_to_id(piece) for piece in pieces] for pieces, _, _ in cases]
    assert all(UNK not in row for row in rows)
    width = max(map(len, rows))
    ids = tf.constant([row + [PAD] * (width - len(row)) for row in rows])
    decoded = [text.decode() for text in sentencepiece_tokenizer.decode(ids).numpy()]
    assert decoded == [ours for _, ours, _ in cases]
    assert [_detokenize(processor, pieces) for pieces, _, _ in cases] == decoded
    assert [processor.decode(row) for row in rows] == [theirs for _, _, theirs in cases]


def test_a_single_string_is_refused_where_a_list_of_texts_is_wanted(tmp_path):
    """A string is an iterable of characters: each was taken for a text."""
    for function in (build_vocabulary, train_sentencepiece):
        with pytest.raises(ValueError) as raised:
            function("Ich habe keine Zeit.", str(tmp_path / "vocab"))
        assert str(raised.value) == (
            f"`texts` of {function.__name__} must be a list of strings; received a single "
            "string 'Ich habe keine Zeit.' (wrap it in a list)."
        )
    assert not os.listdir(tmp_path)


def test_a_new_wordpiece_tokenizer_never_reads_an_earlier_one_s_vocabulary(tmp_path):
    """Its lookup tables are named after the vocabulary's contents: named
    after the vocabulary Asset's address, a later tokenizer could reuse the
    address and then read the earlier (freed) one's vocabulary."""
    import gc

    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    for i in range(6):
        words = [f"w{j}" for j in range(5 if i % 2 else 200)]
        path = tmp_path / f"vocab{i}.txt"
        path.write_text("\n".join(RESERVED + words) + "\n")
        tokenizer = SubwordTokenizer(str(path))
        assert int(tokenizer._tokens.size()) == len(RESERVED) + len(words)
        assert int(tokenizer._ids.size()) == len(RESERVED) + len(words) + 1  # the OOV bucket
        del tokenizer
        gc.collect()
