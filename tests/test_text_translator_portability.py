"""`TextTranslator` (recipes/translation/text_translator.py) on every
backend: with number protection, a beam keeps the best-scored hypothesis
that holds as many placeholders as the text has numbers (the graph
`Translator`'s rule), else its best; numbers are restored from the text,
and a blank text is "". Its agreement with the graph `Translator` on
real sentences is tests/test_python_tokenizers.py's (TensorFlow)."""

import numpy as np
import pytest

pytest.importorskip("sentencepiece")  # the `tokenizers` extra; make test installs it

from keras_attention_recipes.translation import text_translator  # noqa: E402

from keras_attention.tokenizers.characters import END, START  # noqa: E402
from keras_attention.tokenizers.number_rules import PLACEHOLDER, NumberRules  # noqa: E402
from keras_attention.tokenizers.pieces import (  # noqa: E402
    SentencePieceEncoder,
    sentencepiece_pieces,
    train_sentencepiece,
)


class ScriptedBeam:
    """A beam of 2 that returns the hypotheses it was given, best first."""

    beam_width, replace_unknown = 2, False

    def __init__(self, tokens, scores):
        self.tokens, self.scores = np.asarray(tokens), np.asarray(scores, np.float32)

    def is_greedy(self):
        return False

    def __call__(self, model, source, prefix=None):
        assert len(source) == len(self.tokens)
        return {"tokens": self.tokens, "scores": self.scores}


def test_a_beam_keeps_the_hypothesis_that_places_the_text_s_numbers(tmp_path, monkeypatch):
    path = str(tmp_path / "m.spm")
    texts = [f"Zimmer {i} ist frei und das Haus ist gross." for i in range(300)]
    train_sentencepiece(texts, path, vocab_size=300)
    encoder = SentencePieceEncoder(path)
    with open(path, "rb") as handle:
        pieces = [piece for piece, _ in sentencepiece_pieces(handle.read())]
    placeholder = pieces.index(PLACEHOLDER)
    word = pieces.index("H")  # a piece that is a letter
    plain = [START, word, END, 0]
    placed = [START, word, placeholder, END]
    # Text 0 has a number: hypothesis 1 (placed) though 0 scores more;
    # text 1 has none: hypothesis 0; text 2 is blank: "".
    other = [START, pieces.index("Z"), placeholder, END]  # what choosing it would show
    beam = ScriptedBeam([[plain, placed], [plain, other], [plain, placed]], [[-1, -2]] * 3)
    monkeypatch.setattr(text_translator, "get_search", lambda search, num_hypotheses: search)
    translator = text_translator.TextTranslator(
        None, encoder, encoder, beam, 16, numbers=NumberRules(swap_separators=True)
    )
    translations = translator.translate(["Zimmer 2,5 frei", "Zimmer frei", "  "])
    assert translations == ["H2.5", "H", ""]
