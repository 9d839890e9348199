"""Translating texts on any Keras backend: `TextTranslator`, the twin of
`keras_attention.serving.Translator`'s greedy translation made of the
tokenizers' Python twins (`SentencePieceEncoder`, `NumberRules`) and the
backend-neutral searches of `keras_attention.seq2seq`: the same texts in,
the same translations out, without TensorFlow (what a run trained on JAX
validates and evaluates with; its export then runs the graph's).
"""

import numpy as np

from keras_attention.tokenizers.characters import is_blank
from keras_attention.tokenizers.number_rules import sanitized


class TextTranslator:
    """Translate texts with `model` and `search`, as `Translator` does.

    Each text is read as the graph reads it (a typed number placeholder or
    U+0001 is a space), its numbers protected with `numbers`, encoded to at
    most `max_source_length` pieces, searched for (`search.best`: a
    greedy search, or a beam without number protection), decoded, its
    numbers restored from the text; a blank text translates to "".

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
        beam = getattr(search, "beam_width", 1)
        if numbers is not None and beam > 1:
            raise ValueError(
                "`search` of TextTranslator must be greedy when `numbers` protects numbers "
                "(the beam's placeholder check is the graph Translator's alone); received "
                f"search={search!r}."
            )
        self.model, self.search, self.numbers = model, search, numbers
        self.source_encoder, self.target_encoder = source_encoder, target_encoder
        self.max_source_length, self.batch_size = max_source_length, batch_size

    def translate(self, texts):
        """`list[str]`: the translation of each of `texts` (a list of str)."""
        if isinstance(texts, str):
            raise ValueError(
                "`texts` of TextTranslator.translate must be a list of strings; received "
                f"one string ({texts[:40]!r})."
            )
        texts = list(texts)
        translations = []
        for start in range(0, len(texts), self.batch_size):
            translations += self._translate(texts[start : start + self.batch_size])
        return translations

    def _translate(self, texts):
        read = [sanitized(text) for text in texts]
        if self.numbers is not None:
            read = [self.numbers.protect_text(text) for text in read]
        source, _ = self.source_encoder.encode(read, self.max_source_length)
        result = self.search.best(self.model, source)
        decoded = self.target_encoder.decode(np.asarray(result["tokens"]))
        if self.numbers is not None:
            decoded = [self.numbers.restore(d, text) for d, text in zip(decoded, texts)]
        clean = self.source_encoder.clean
        return ["" if is_blank(clean(sanitized(t))) else d for t, d in zip(texts, decoded)]
