"""Translating texts on any Keras backend: `TextTranslator`, the twin of
`keras_attention.serving.Translator`'s `translate` made of the
tokenizers' Python twins (`SentencePieceEncoder`, `NumberRules`) and the
backend-neutral searches of `keras_attention.seq2seq`: the same texts in,
the same translations out, without TensorFlow (what a run trained on JAX
validates and evaluates with; its export then runs the graph's).
"""

import keras
import numpy as np

from keras_attention.seq2seq.search import get_search
from keras_attention.tokenizers.characters import is_blank
from keras_attention.tokenizers.number_rules import PLACEHOLDER, numbers_in, sanitized
from keras_attention.tokenizers.pieces import read_model


class TextTranslator:
    """Translate texts with `model` and `search`, as `Translator` does.

    Each text is read as the graph reads it (a typed number placeholder or
    U+0001 is a space), its numbers protected with `numbers`, encoded to at
    most `max_source_length` pieces, searched for (`search.best`; a beam
    with `numbers` keeps the best of its hypotheses that holds as many
    placeholders as the text has numbers, as `Translator` does), decoded,
    its numbers restored from the text; a blank text translates to "".

    Args:
        model: a trained `Seq2Seq` model.
        source_encoder, target_encoder: `SentencePieceEncoder`s of the
            run's vocabularies.
        search: a search object (`GreedySearch`, `BeamSearch`).
        max_source_length: pieces of a source at most, `[START]` and
            `[END]` included (the run's `--max-length`).
        batch_size: texts searched at once.
        numbers: a `NumberRules`, or None.
    """

    def __init__(
        self,
        model,
        source_encoder,
        target_encoder,
        search,
        max_source_length,
        batch_size=64,
        numbers=None,
    ):
        self.model, self.search, self.numbers = model, search, numbers
        self.source_encoder, self.target_encoder = source_encoder, target_encoder
        self.max_source_length, self.batch_size = max_source_length, batch_size
        self.placeholder = None
        if numbers is not None:
            pieces = [piece for piece, _ in read_model(target_encoder.model_path)[1]]
            if PLACEHOLDER not in pieces:
                raise ValueError(
                    "`numbers` of TextTranslator needs the number placeholder (U+E000) as a "
                    f"piece of the target vocabulary; {target_encoder.model_path} has none: pass "
                    "numbers=None."
                )
            self.placeholder = pieces.index(PLACEHOLDER)

    def translate(self, texts):
        """`list[str]`: the translation of each of `texts` (a list of str)."""
        texts = self._texts(texts, "translate")
        translations = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            translations += self._written(self._best(self._source(batch), batch), batch)
        return translations

    def nbest(self, texts, n):
        """`list[list[(str, float)]]`: for each text its `n` best
        `(translation, score)` pairs, best first, as `Translator.nbest`
        gives them (a blank text: `n` empty strings scored 0). The search
        must be a beam; one narrower than `n` is widened to `n`."""
        texts = self._texts(texts, "nbest")
        search = self.search
        if not hasattr(search, "beam_width"):
            raise ValueError(
                "TextTranslator.nbest needs a beam search; this translator's search is "
                f"{type(search).__name__}."
            )
        beam = get_search(search, beam_width=max(n, search.beam_width), num_hypotheses=n)
        rows = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            result = beam(self.model, self._source(batch))  # (B, n, ...), best first
            tokens = keras.ops.convert_to_numpy(result["tokens"])
            scores = keras.ops.convert_to_numpy(result["scores"]).astype(np.float32)
            repeated = [text for text in batch for _ in range(n)]
            written = self._written(tokens.reshape(len(batch) * n, -1), repeated)
            blank = [self._blank(text) for text in batch]
            rows += [
                [
                    (written[row * n + k], 0.0 if blank[row] else float(scores[row, k]))
                    for k in range(n)
                ]
                for row in range(len(batch))
            ]
        return rows

    @staticmethod
    def _texts(texts, method):
        if isinstance(texts, str):
            raise ValueError(
                f"`texts` of TextTranslator.{method} must be a list of strings; received "
                f"one string ({texts[:40]!r})."
            )
        return list(texts)

    def _source(self, texts):
        """The pieces of `texts` `(B, S)` as the graph reads them: sanitised,
        numbers protected, encoded (cut at `max_source_length`)."""
        read = [sanitized(text) for text in texts]
        if self.numbers is not None:
            read = [self.numbers.protect_text(text) for text in read]
        return self.source_encoder.encode(read, self.max_source_length)[0]

    def _blank(self, text):
        return is_blank(self.source_encoder.clean(sanitized(text)))

    def _written(self, tokens, texts):
        """The text of each row of `tokens` `(B, L)`, translating `texts`:
        decoded, numbers restored from its text, "" for a blank text."""
        decoded = self.target_encoder.decode(tokens)
        if self.numbers is not None:
            decoded = [self.numbers.restore(d, text) for d, text in zip(decoded, texts)]
        return ["" if self._blank(text) else d for text, d in zip(texts, decoded)]

    def _best(self, source, texts):
        """The best hypothesis's tokens `(B, L)` of each source; with
        `numbers` and a beam, the best-scored of the beam's hypotheses that
        hold as many placeholders as the text has numbers (the best when
        none does): `Translator`'s rule, in float32 as there."""
        search = self.search
        if self.numbers is None or not hasattr(search, "beam_width") or search.is_greedy():
            return keras.ops.convert_to_numpy(search.best(self.model, source)["tokens"])
        beam = get_search(search, num_hypotheses=search.beam_width)
        result = beam(self.model, source)  # (B, K, ...), best first
        tokens = keras.ops.convert_to_numpy(result["tokens"])
        wanted = np.array([len(numbers_in(text)) for text in texts])
        placed = (tokens == self.placeholder).sum(-1)
        rank = keras.ops.convert_to_numpy(result["scores"]).astype(np.float32)
        rank = rank + np.where(placed == wanted[:, None], 0.0, -1e6).astype(np.float32)
        return tokens[np.arange(len(tokens)), rank.argmax(1)]
