"""`Translator`: a `Seq2Seq` model, its source and target tokenizers and a
decoding strategy (`keras_attention.seq2seq.search`), as one object that
translates in process and exports the same graph functions as a SavedModel
for TensorFlow Serving (TensorFlow-specific).

Each exported signature is a graph function defined once here, strings (or
ids) in, a dict of tensors out:

    text (B,) -> encode -> source (B, S) -> search -> tokens -> decode -> (B,) strings

with S = `max_source_length` (`[START] pieces [END]`, padded; longer texts
keep their first pieces and are flagged `truncated`) and L, the decoded
length, the search's `max_length` or S + 1. The in-process methods
(`translate`, `nbest`, `attention`, `constrained`) call those same functions
through one `tf.function` each, traced once per Translator with the batch
dimension unknown, in batches of `batch_size`; `export` adds the same
`tf.function`s to a `keras.export.ExportArchive`. So what a served model
answers is, bit for bit, what the Translator answers in process.

Signatures (inputs longer than S - 2 pieces are truncated and flagged):

- `serving_default`: `text` string `[batch]` -> `translation` string
  `[batch]`, `score` float `[batch]` (the search's best hypothesis),
  `truncated` bool `[batch]`.
- `greedy`: the same with greedy search (the search's shared options).
- `attention`: `text` -> `translation`, `attention` float `[batch, L, S]`
  of the best hypothesis, `source_tokens` and `target_tokens` strings,
  `truncated`.
- `tokens`: `token_ids` int32 `[batch, S']` and `lengths` int32 `[batch]`
  -> `token_ids` int32 `[batch, L]`. Row b is `token_ids[b, :lengths[b]]`;
  an `INVALID_ARGUMENT` unless there is one length per row, `1 <=
  lengths[b] <= min(S', S)` (a longer source is refused in every model
  family, not cut) and those ids are in `[0, source vocabulary size)`.
- `nbest`: `text` -> `translations` string `[batch, N]`, `scores` float
  `[batch, N]` (best first), `finished` bool `[batch, N]` (the hypothesis
  ended with `<eos>`; False for one cut at the maximum length or an
  unfilled slot), `truncated`.
- `constrained`: `text` and `prefix` string `[batch]` -> what
  `serving_default` returns, each translation starting with its `prefix`
  (target-side text; "" = unconstrained). An `INVALID_ARGUMENT` unless both
  have one row each and each prefix has at most L pieces (a longer one is
  refused, not cut).
- `decoding_options`: no input -> `beam_width`, `num_hypotheses`,
  `min_length`, `no_repeat_ngram_size`, `repetition_penalty`,
  `coverage_penalty`, `alpha` as scalars, the same as JSON under the key
  `options`, as one readable line under `summary` (`beam_width=4,
  num_hypotheses=4, ..., alpha=0.6`), and `search`: the JSON of
  `keras.saving.serialize_keras_object(search)`.

Contract of every text function: an empty or blank text translates to ""
with score 0 (`nbest`: N of them; `attention`: weights 0, target tokens
all padding); a request with 0 rows answers 0 rows
(`export.empty_batch_as_one_row`). TF Serving checks neither shapes nor
values, so every rule above is checked in the graph (`serving.requests`):
a bad request is an `INVALID_ARGUMENT` whose first line names the input and
the rule, `assertion failed: [text must be a vector of strings [batch]; got
shape [2, 2]]`; in process the methods raise it as a `ValueError`.
"""

import json
import math
import os
from numbers import Integral

import numpy as np
import tensorflow as tf

from keras_attention.seq2seq.search import BeamSearch, GreedySearch, get_search
from keras_attention.serving.numbers import NumberProtection, sanitize
from keras_attention.serving.requests import (
    checked_count,
    checked_shape,
    refuse_unless,
    rule_text,
)
from keras_attention.serving.versions import export_archive, traced_once
from keras_attention.validation import check_choice

# `Translator.export(quantize=...)`: weight-only int8 (`Seq2Seq.quantize`).
QUANTIZATIONS = ("int8",)
# What an export writes about itself, beside the warm-up requests
# (`assets.extra/` is not loaded by TF Serving): `export_record`.
EXPORT_RECORD = os.path.join("assets.extra", "keras_attention.json")

SIGNATURES = (
    "serving_default",
    "greedy",
    "attention",
    "tokens",
    "nbest",
    "constrained",
    "decoding_options",
)


def _strings(array):
    return [value.decode("utf-8") for value in np.asarray(array).reshape(-1)]


def beam_options(search):
    """The 0.2.0 `decoding_options` of a `BeamSearch`, as Python numbers:
    `beam_width`, `num_hypotheses` (default `beam_width`), `min_length`,
    `no_repeat_ngram_size`, `repetition_penalty`, `coverage_penalty`,
    `alpha`."""
    return {
        "beam_width": search.beam_width,
        "num_hypotheses": search.num_hypotheses or search.beam_width,
        "min_length": search.min_length,
        "no_repeat_ngram_size": search.no_repeat_ngram_size,
        "repetition_penalty": search.repetition_penalty,
        "coverage_penalty": search.coverage_penalty,
        "alpha": search.alpha,
    }


class Translator:
    """A model plus its tokenizers plus a search.

    Args:
        model: a `Seq2Seq` (built), whose source ids are those of
            `source_tokenizer` and target ids those of `target_tokenizer`.
        source_tokenizer, target_tokenizer: `serving.text` tokenizers
            (`SubwordTokenizer` or `SentencePieceTokenizer`).
        search: the decoding strategy: a `Search`, its config or a name
            (`get_search`); default `BeamSearch()` (a beam of 4, α = 0.6).
            `translate`, `attention`, `constrained` and the `tokens`
            signature use its best hypothesis (`Search.best`); `nbest` a
            beam search with its options (its `beam_width`, `alpha`,
            `coverage_penalty` if it is a `BeamSearch`, a beam of 1
            otherwise), N = its `num_hypotheses` or `beam_width`; the
            `greedy` signature a `GreedySearch` with its shared options.
        max_source_length: S, the source ids per text (`[START]` and
            `[END]` included). Default: the search's `max_length` - 1, else
            the model's `max_length` - 1, else an error. A model with
            `max_length` positions takes S <= `max_length` - 1 when the
            translation's length is S + 1 (a search without `max_length`),
            else S <= `max_length`: checked here (`ValueError`).
        batch_size: texts per call of the graph functions in process.
        numbers: a `NumberProtection` for a model trained on protected
            numbers (`serving.numbers`): each digit group of a text becomes
            a placeholder before the model, and the placeholders of a
            translation are filled with the text's numbers, in every text
            signature (a `constrained` prefix's numbers are protected too and
            take the place of the text's first ones: `constrained`). None: texts
            go to the model as they are.

    Example (see `tests/test_translator.py`):

        translator = Translator(model, source_tokenizer, target_tokenizer,
                                BeamSearch(beam_width=4, alpha=1.2), max_source_length=40)
        translator.translate(["Ich habe keine Zeit."])      # ["I have no time."]
        translator.nbest(["Ich habe keine Zeit."], 2)       # [[("I have no time.", -0.4), ...]]
        translator.export("saved_models", "translator")     # .../translator/1
    """

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        search=None,
        max_source_length=None,
        batch_size=64,
        numbers=None,
    ):
        if numbers is not None and not isinstance(numbers, NumberProtection):
            raise ValueError(
                "`numbers` of Translator must be a keras_attention.serving.NumberProtection or "
                f"None; received numbers={numbers!r}."
            )
        self.numbers = numbers
        self.model = model
        self.source_tokenizer, self.target_tokenizer = source_tokenizer, target_tokenizer
        self.search = get_search("beam" if search is None else search)
        if max_source_length is None:
            longest = self.search.max_length or getattr(model, "max_length", None)
            if longest is None:
                raise ValueError(
                    "`max_source_length` of Translator must be given for a model without "
                    "`max_length` and a search without `max_length`; received "
                    "max_source_length=None."
                )
            max_source_length = longest - 1
        if (
            isinstance(max_source_length, bool)
            or not isinstance(max_source_length, Integral)
            or max_source_length < 3
        ):
            raise ValueError(
                "`max_source_length` of Translator must be an integer >= 3 ([START], a piece, "
                f"[END]); received max_source_length={max_source_length!r}."
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, Integral) or batch_size < 1:
            raise ValueError(
                f"`batch_size` of Translator must be a positive integer; received "
                f"batch_size={batch_size!r}."
            )
        self.max_source_length, self.batch_size = int(max_source_length), int(batch_size)
        self.max_length = self.search.max_length or self.max_source_length + 1  # L
        self._check_lengths_fit(model)
        # The searches of the signatures, derived once from `search`.
        fixed = dict(max_length=self.max_length)
        self.best_search = get_search(self.search, return_attention_scores=False, **fixed)
        self.attention_search = get_search(self.search, return_attention_scores=True, **fixed)
        shared = dict(self.search.shared_options(), **fixed, return_attention_scores=False)
        self.greedy_search = GreedySearch(**shared)
        beam = self.search if isinstance(self.search, BeamSearch) else BeamSearch(beam_width=1)
        self.nbest_search = BeamSearch(
            beam_width=beam.beam_width,
            alpha=beam.alpha,
            coverage_penalty=beam.coverage_penalty,
            num_hypotheses=beam.num_hypotheses or beam.beam_width,
            **shared,
        )
        self._functions = {}  # signature name (or ("nbest", n)) -> tf.function
        self.float_model = None  # the model a quantized copy was made of (`quantized`)
        self._placeholder = None if numbers is None else self._placeholder_id()
        pad = tf.constant([[self.model.padding_id]], tf.int32)
        self._source_pad = _strings(source_tokenizer.tokens(pad))[0]
        self._target_pad = _strings(target_tokenizer.tokens(pad))[0]

    def _check_lengths_fit(self, model):
        """S and L within the model's `max_length` (ConvS2S's learned source
        and target positions, the Transformer's positions and decoding
        cache), checked here rather than at the first call, in words of the
        argument that set them: L is the search's `max_length` or
        `max_source_length` + 1."""
        positions = getattr(model, "max_length", None)
        if positions is None:
            return
        owner = type(model).__name__
        if self.search.max_length is not None and self.search.max_length > positions:
            raise ValueError(
                f"`search` of Translator decodes max_length={self.search.max_length} tokens, "
                f"more than the {positions} positions of the model ({owner} max_length="
                f"{positions}); give the search max_length <= {positions}."
            )
        longest = positions if self.search.max_length is not None else positions - 1
        if self.max_source_length > longest:
            why = (
                f"the {positions} positions of the model ({owner} max_length={positions})"
                if self.search.max_length is not None
                else f"the model's {positions} positions ({owner} max_length={positions}) "
                "must also hold the translation, max_source_length + 1 tokens"
            )
            raise ValueError(
                f"`max_source_length` of Translator must be at most {longest}: {why}; "
                f"received max_source_length={self.max_source_length}."
            )

    def _placeholder_id(self):
        """The target id of `serving.numbers.PLACEHOLDER`; `ValueError` unless
        both vocabularies hold it as a piece (vocabularies from
        `serving.text` do)."""
        from keras_attention.serving.numbers import PLACEHOLDER

        found = []
        sides = (("source", self.source_tokenizer), ("target", self.target_tokenizer))
        for side, tokenizer in sides:
            pieces = _strings(tokenizer.tokens(np.arange(tokenizer.vocab_size)))
            if PLACEHOLDER not in pieces:
                raise ValueError(
                    "`numbers` of Translator needs the number placeholder (U+E000) as a piece of "
                    f"both vocabularies; the {side} tokenizer's has none (a vocabulary learned "
                    "before keras_attention 0.3.0): pass numbers=None."
                )
            found.append(pieces.index(PLACEHOLDER))
        return found[1]

    def _best(self, search, text, source, prefix=None, prefix_text=None):
        """`search.best`; with `numbers` and a beam, the best-scored of the
        beam's hypotheses that hold as many placeholders as `text` has
        numbers (or its `prefix_text`, when that has more), so that none is
        dropped while the beam held a hypothesis that kept it (the best
        hypothesis when none does)."""
        if self.numbers is None or not isinstance(search, BeamSearch) or search.is_greedy():
            return search.best(self.model, source, prefix=prefix)
        beam = get_search(search, num_hypotheses=search.beam_width)
        result = beam(self.model, source, prefix=prefix)  # (B, K, ...), best first
        wanted = tf.cast(self.numbers.numbers(text).row_lengths(), tf.int32)
        if prefix_text is not None:
            typed = tf.cast(self.numbers.numbers(prefix_text).row_lengths(), tf.int32)
            wanted = tf.maximum(wanted, typed)
        placed = tf.reduce_sum(
            tf.cast(tf.equal(result["tokens"], self._placeholder), tf.int32), axis=-1
        )
        rank = tf.cast(result["scores"], tf.float32)
        rank += tf.where(tf.equal(placed, wanted[:, None]), 0.0, -1e6)
        choice = tf.argmax(rank, axis=1, output_type=tf.int32)
        return {name: tf.gather(value, choice, batch_dims=1) for name, value in result.items()}

    # -- the graph functions: tensors in, a dict of tensors out ---------------
    @staticmethod
    def checked_text(text, name="text"):
        """`text`, checked at run time to be a vector: the TensorSpec stops
        Python callers, but TF Serving feeds whatever a request holds (a
        matrix gave outputs of mismatched shapes, a scalar a raw "slice
        index 0 of dimension 0 out of bounds"). The error's first line is
        `assertion failed: [<name> must be a vector of strings [batch]; got
        shape [2, 2]]`."""
        return checked_shape(text, name, 1, "a vector of strings [batch]")

    def blank(self, text):
        """`(B,)` bool: the texts that are empty or all space (after
        `clean`; a typed U+E000 or U+0001 counts as space, `sanitize`), which
        translate to "" with score 0 in every signature."""
        return tf.equal(tf.strings.length(self.source_tokenizer.clean(sanitize(text))), 0)

    def encode(self, text):
        """`(source (B, S) int32, truncated (B,) bool)`: `text` sanitized (a
        typed U+E000, the number placeholder, or U+0001 is a space:
        `serving.numbers.sanitize`), numbers protected when the Translator
        has `numbers`."""
        text = sanitize(self.checked_text(text))
        if self.numbers is not None:
            text = self.numbers.protect(text)
        return self.source_tokenizer.encode(text, self.max_source_length)

    def decode(self, text, result, prefix=None):
        """The best hypotheses of `result` as strings (numbers restored from
        `text`, and from `prefix`, the target-side prefixes they were forced
        to start with: `NumberProtection.restore_after_prefix`); "" for an
        empty text."""
        decoded = self._detokenize(result["tokens"], result.get("replacements"))
        if self.numbers is not None and prefix is not None:
            decoded = self.numbers.restore_after_prefix(decoded, text, prefix)
        elif self.numbers is not None:
            decoded = self.numbers.restore(decoded, text)
        return self.source_tokenizer.blank_where_empty(sanitize(text), decoded)

    def _detokenize(self, tokens, replacements=None):
        if replacements is None:
            return self.target_tokenizer.decode(tokens)
        return self.target_tokenizer.decode(
            tokens, replacements=replacements, source_tokenizer=self.source_tokenizer
        )

    def translate_function(self, text):
        """`serving_default`: `text (B,)` -> `translation (B,)`, `score (B,)`,
        `truncated (B,)`."""
        source, truncated = self.encode(text)
        result = self._best(self.best_search, text, source)
        return {
            "translation": self.decode(text, result),
            "score": self._blank_zero(text, result["scores"]),
            "truncated": truncated,
        }

    def greedy_function(self, text):
        """`greedy`: what `serving_default` returns, with greedy search."""
        source, truncated = self.encode(text)
        result = self.greedy_search(self.model, source)
        return {
            "translation": self.decode(text, result),
            "score": self._blank_zero(text, result["scores"]),
            "truncated": truncated,
        }

    def attention_function(self, text):
        """`attention`: `text (B,)` -> `translation (B,)`, `attention (B, L,
        S)` of the best hypothesis, `source_tokens (B, S)` and
        `target_tokens (B, L)` strings (padding included), `truncated`."""
        source, truncated = self.encode(text)
        result = self._best(self.attention_search, text, source)
        # A blank text: no target pieces (padding) and attention 0.
        generated = self._blank_zero(text, result["tokens"], self.model.padding_id)
        return {
            "translation": self.decode(text, result),
            "attention": self._blank_zero(text, result["attention"]),
            "source_tokens": self.source_tokenizer.tokens(source),
            "target_tokens": self.target_tokenizer.tokens(generated),
            "truncated": truncated,
        }

    def tokens_function(self, token_ids, lengths):
        """`tokens`: `token_ids (B, S')` int32 and `lengths (B,)` ->
        `token_ids (B, L)`, the best hypothesis. Row b is `token_ids[b,
        :lengths[b]]` (`[START]` and `[END]` included); an `INVALID_ARGUMENT`
        whose first line names the input and the rule unless `token_ids` is
        a matrix, `lengths` a vector with one length per row, 1 <=
        lengths[b] <= min(S', S) (S = `max_source_length`, in every model
        family: longer sources are refused, not cut) and those ids are in
        [0, source vocabulary size)."""
        # The caller may be TF Serving, which checks nothing: a wrong `lengths`
        # would silently change the batch, an id out of range would wrap
        # around in the embedding, a source longer than S was cut by one
        # family and failed inside another. Core Assert ops make each an
        # INVALID_ARGUMENT naming the input, the rule and the value.
        token_ids = checked_shape(
            token_ids, "token_ids", 2, "a matrix of int32 ids [batch, length]"
        )
        lengths = checked_shape(lengths, "lengths", 1, "a vector of int32 lengths [batch]")
        batch, width = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
        lengths = checked_count(
            lengths, batch, "lengths must have one entry per row of token_ids", "lengths", "rows"
        )
        longest = self.max_source_length
        for bad, rule in [
            (lengths < 1, "lengths must be >= 1 (a source of at least one id)"),
            (lengths > width, "lengths must be <= the width of token_ids ("),
            (
                lengths > longest,
                f"lengths must be <= {longest} (max_source_length: the longest source this "
                "export takes)",
            ),
        ]:
            row, value = _first_where(bad, lengths)
            parts = [rule]
            if rule.endswith("("):
                parts += [tf.strings.as_string(width), ")"]
            check = refuse_unless(
                tf.logical_not(tf.reduce_any(bad)),
                *parts,
                "; got ",
                tf.strings.as_string(value),
                " in row ",
                tf.strings.as_string(row),
            )
            with tf.control_dependencies([check]):
                lengths = tf.identity(lengths)
        mask = tf.sequence_mask(lengths, width)
        vocab = self.model.source_vocab_size
        bad = tf.logical_and(mask, tf.logical_or(token_ids < 0, token_ids >= vocab))
        flat, value = _first_where(tf.reshape(bad, [-1]), tf.reshape(token_ids, [-1]))
        columns = tf.maximum(width, 1)
        check = refuse_unless(
            tf.logical_not(tf.reduce_any(bad)),
            f"token_ids must be in [0, {vocab}) (the source vocabulary) within the row lengths; "
            "got ",
            tf.strings.as_string(value),
            " in row ",
            tf.strings.as_string(flat // columns),
            " at position ",
            tf.strings.as_string(flat % columns),
        )
        with tf.control_dependencies([check]):
            source = tf.where(mask, token_ids, tf.zeros_like(token_ids))
        source = source[:, :longest]  # only padding beyond S: every length is <= S
        return {"token_ids": self.best_search.best(self.model, source)["tokens"]}

    def nbest_function(self, text, search=None):
        """`nbest`: `text (B,)` -> `translations (B, N)` strings and `scores
        (B, N)`, best first (the finished hypotheses, then the best live
        ones; a slot the search could not fill is "" with score -1e9),
        `finished (B, N)` (ended with `<eos>`: the live ones, cut at the
        maximum length, and unfilled slots are False) and `truncated (B,)`.
        An empty or blank text gives N empty strings, all finished."""
        search = self.nbest_search if search is None else search
        text = self.checked_text(text)
        source, truncated = self.encode(text)
        result = search(self.model, source)
        tokens = result["tokens"]  # (B, N, L)
        shape = tf.shape(tokens)
        flat = [shape[0] * shape[1], shape[2]]
        replacements = result.get("replacements")
        decoded = self._detokenize(
            tf.reshape(tokens, flat),
            None if replacements is None else tf.reshape(replacements, flat),
        )
        if self.numbers is not None:  # each text's numbers, once per hypothesis
            rows = tf.range(shape[0] * shape[1]) // shape[1]
            numbers = tf.gather(self.numbers.numbers(text), rows)
            decoded = self.numbers.restore_numbers(decoded, numbers)
        decoded = tf.reshape(decoded, shape[:2])  # (B, N)
        empty = self.blank(text)
        translations = tf.where(empty[:, None], tf.constant(""), decoded)
        scores = self._blank_zero(text, result["scores"])
        return {
            "translations": translations,
            "scores": scores,
            "finished": tf.logical_or(empty[:, None], result["finished"]),
            "truncated": truncated,
        }

    def constrained_function(self, text, prefix):
        """`constrained`: `text (B,)` and `prefix (B,)` target-side strings
        -> what `serving_default` returns, each translation starting with
        its prefix ("" = unconstrained; at most L pieces). An
        `INVALID_ARGUMENT` unless both have as many rows. With `numbers`, a
        prefix's digit groups are protected as the text's are, go to the
        model as placeholders, and are written back as typed in place of
        the text's first groups (`NumberProtection.restore_after_prefix`):
        "I have 3" for "Ich habe 3 Katzen." gives "I have 3 cats.", not
        "I have 3 3 cats."."""
        text, prefix = self.checked_text(text), self.checked_text(prefix, "prefix")
        prefix = checked_count(
            prefix, tf.shape(text)[0], "prefix must have one entry per text", "prefixes", "texts"
        )
        typed = prefix
        prefix = sanitize(prefix)
        if self.numbers is not None:
            prefix = self.numbers.protect(prefix)
        pieces = self.target_tokenizer.pieces(prefix).row_lengths()
        # A prefix longer than a translation can be is refused, not cut.
        row, value = _first_where(pieces > self.max_length, pieces)
        check = refuse_unless(
            tf.reduce_all(pieces <= self.max_length),
            f"prefix must have at most {self.max_length} pieces (the longest translation); got ",
            tf.strings.as_string(value),
            " pieces in row ",
            tf.strings.as_string(row),
        )
        with tf.control_dependencies([check]):
            source, truncated = self.encode(text)
        forced = prefix_ids(self.target_tokenizer, prefix, self.max_length)
        result = self._best(self.best_search, text, source, prefix=forced, prefix_text=typed)
        return {
            "translation": self.decode(text, result, typed),
            "score": self._blank_zero(text, result["scores"]),
            "truncated": truncated,
        }

    def _blank_zero(self, text, values, fill=0):
        """`values` (B, ...) with `fill` (0) in the rows of blank texts: a
        blank text's score is 0 (nothing was translated), not the search's
        score of `[START] [END]`."""
        blank = tf.reshape(self.blank(text), [-1] + [1] * (len(values.shape) - 1))
        return tf.where(blank, tf.fill(tf.shape(values), tf.cast(fill, values.dtype)), values)

    def decoding_options(self):
        """The 0.2.0 `decoding_options` outputs of the nbest search
        (`beam_options`)."""
        return beam_options(self.nbest_search)

    def search_config(self):
        """The JSON of `keras.saving.serialize_keras_object(search)`."""
        import keras

        return json.dumps(keras.saving.serialize_keras_object(self.search), sort_keys=True)

    def options_function(self):
        """`decoding_options`: no input -> the options as named scalars, the
        same as JSON under the key `options`, as one line under `summary`
        (`options_summary`), and `search`, the search's serialized config
        as JSON (`keras.saving.deserialize_keras_object(json.loads(...))`
        rebuilds it)."""
        chosen = self.decoding_options()
        outputs = {name: tf.constant(value) for name, value in chosen.items()}
        outputs[options_key(chosen)] = tf.constant(json.dumps(chosen))
        outputs["summary"] = tf.constant(options_summary(chosen))
        outputs["search"] = tf.constant(self.search_config())
        return outputs

    # -- one tf.function per signature ----------------------------------------
    def function(self, name):
        """The `tf.function` of signature `name`, traced once per Translator
        (the batch dimension unknown; saving it traces only a call of that
        trace, `traced_once`): what `export` writes and the in-process
        methods call."""
        if name not in self._functions:
            self._functions[name] = self._compile(name)
        return self._functions[name]

    def _compile(self, name):
        text = tf.TensorSpec((None,), tf.string, name="text")
        blank = tf.constant([""])
        if name == "decoding_options":
            function = tf.function(self.options_function, input_signature=[], autograph=False)
        elif name == "tokens":
            from keras_attention.serving.text import UNK

            run = empty_batch_as_one_row(
                self.tokens_function, tf.constant([[UNK]]), tf.constant([1])
            )
            function = tf.function(
                # The ranks checked before anything reads a dimension.
                lambda token_ids, lengths: run(
                    checked_shape(
                        token_ids, "token_ids", 2, "a matrix of int32 ids [batch, length]"
                    ),
                    checked_shape(lengths, "lengths", 1, "a vector of int32 lengths [batch]"),
                ),
                input_signature=[
                    tf.TensorSpec((None, None), tf.int32, name="token_ids"),
                    tf.TensorSpec((None,), tf.int32, name="lengths"),
                ],
                autograph=False,
            )
        elif name == "constrained":
            run = empty_batch_as_one_row(self.constrained_function, blank, blank)
            function = tf.function(
                lambda text, prefix: run(
                    self.checked_text(text), self.checked_text(prefix, "prefix")
                ),
                input_signature=[text, tf.TensorSpec((None,), tf.string, name="prefix")],
                autograph=False,
            )
        else:
            if isinstance(name, tuple):  # ("nbest", n): n hypotheses, in process only
                search = get_search(
                    self.nbest_search,
                    num_hypotheses=name[1],
                    beam_width=max(name[1], self.nbest_search.beam_width),
                )
                body = lambda text: self.nbest_function(text, search)  # noqa: E731
            else:
                body = {
                    "serving_default": self.translate_function,
                    "greedy": self.greedy_function,
                    "attention": self.attention_function,
                    "nbest": self.nbest_function,
                }[name]
            run = empty_batch_as_one_row(body, blank)
            function = tf.function(
                lambda text: run(self.checked_text(text)), input_signature=[text], autograph=False
            )
        return traced_once(function)

    def _run(self, name, *columns):
        """`function(name)` over `columns` (lists of equal length) in batches
        of `batch_size`: `{output: numpy array}` concatenated along rows."""
        rows = len(columns[0])
        if any(len(column) != rows for column in columns):
            raise ValueError(
                f"every input of {name} needs one entry per text; received lengths "
                f"{[len(column) for column in columns]}."
            )
        function = self.function(name)
        parts = []
        for start in range(0, max(rows, 1), self.batch_size):
            batch = [
                tf.constant(list(column[start : start + self.batch_size]), tf.string)
                if rows
                else tf.constant([], tf.string)
                for column in columns
            ]
            try:
                outputs = function(*batch)
            except tf.errors.InvalidArgumentError as error:  # a graph check refused the input
                raise ValueError(f"Translator ({name}): {rule_text(error.message)}") from None
            parts.append({key: value.numpy() for key, value in outputs.items()})
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}

    # -- in process ------------------------------------------------------------
    @staticmethod
    def _texts(texts, name):
        """`texts` as a list, each item a `str` (or UTF-8 `bytes`); a
        `ValueError` naming `name` for a single string, something that is no
        list, or the first item that is not a string."""
        if isinstance(texts, (str, bytes)):
            raise ValueError(
                f"`{name}` of Translator must be a list of strings; received a single string "
                f"{texts!r} (wrap it in a list)."
            )
        try:
            texts = list(texts)
        except TypeError:
            raise ValueError(
                f"`{name}` of Translator must be a list of strings; received "
                f"{type(texts).__name__} {texts!r}."
            ) from None
        for index, text in enumerate(texts):
            if not isinstance(text, (str, bytes)):
                raise ValueError(
                    f"`{name}` of Translator must be a list of strings; item {index} is "
                    f"{type(text).__name__} {text!r}."
                )
        return texts

    def translate(self, texts):
        """`list[str]`: the best translation of each text (`serving_default`)."""
        texts = self._texts(texts, "texts")
        return _strings(self._run("serving_default", texts)["translation"]) if texts else []

    def greedy(self, texts):
        """`list[str]`: each text's translation by greedy search (`greedy`)."""
        texts = self._texts(texts, "texts")
        return _strings(self._run("greedy", texts)["translation"]) if texts else []

    def nbest(self, texts, n=None):
        """`list[list[(str, float)]]`: for each text its `n` best
        `(translation, score)` pairs, best first (`nbest`). `n` defaults to
        the `nbest` signature's N; a larger `n` widens the beam to `n`.
        Each pair is a `Hypothesis`, a 2-tuple that also has `.translation`,
        `.score` and `.finished` (the signature's `finished`: False for a
        hypothesis cut at the maximum length or a slot the search could not
        fill)."""
        texts = self._texts(texts, "texts")
        if n is None:
            n = self.nbest_search.num_hypotheses
        if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
            raise ValueError(
                f"`n` of Translator.nbest must be a positive integer; received n={n!r}."
            )
        if not texts:
            return []
        name = "nbest" if n == self.nbest_search.num_hypotheses else ("nbest", int(n))
        result = self._run(name, texts)
        translations = np.asarray(_strings(result["translations"])).reshape(len(texts), n)
        return [
            [
                Hypothesis(str(text), float(score), bool(done))
                for text, score, done in zip(row, scores, flags)
            ]
            for row, scores, flags in zip(translations, result["scores"], result["finished"])
        ]

    def constrained(self, texts, prefixes):
        """`list[str]`: each text's translation starting with its prefix
        (target-side text; "" = unconstrained) (`constrained`). With
        `numbers`, the numbers typed in a prefix take the place of the
        text's first numbers (written as typed), so none is written twice."""
        texts = self._texts(texts, "texts")
        prefixes = self._texts(prefixes, "prefixes")
        if len(prefixes) != len(texts):
            raise ValueError(
                "`prefixes` of Translator.constrained needs one entry per text; received "
                f"{len(prefixes)} prefixes for {len(texts)} texts."
            )
        return _strings(self._run("constrained", texts, prefixes)["translation"]) if texts else []

    def attention(self, text):
        """For a heatmap of `text`'s best translation (`attention`): a dict
        with `translation`, `source_tokens` (the S' source pieces, `[START]`
        and `[END]` included, padding not), `target_tokens` (the T pieces
        generated, `<eos>` included, padding not) and `weights`, the `(T,
        S')` float array of attention over them. A list of texts gives a
        list of such dicts."""
        if not isinstance(text, (str, bytes)):
            texts = self._texts(text, "text")
            if not texts:
                return []
            result = self._run("attention", texts)
            return [self._alignment(result, row) for row in range(len(texts))]
        return self._alignment(self._run("attention", [text]), 0)

    def _alignment(self, result, row):
        source = _strings(result["source_tokens"][row])
        target = _strings(result["target_tokens"][row])
        source = source[: len(source) - _trailing(source, self._source_pad)]
        target = target[: len(target) - _trailing(target, self._target_pad)]
        return {
            "translation": _strings(result["translation"][row : row + 1])[0],
            "source_tokens": source,
            "target_tokens": target,
            "weights": result["attention"][row, : len(target), : len(source)],
        }

    # -- export ----------------------------------------------------------------
    def archive(self):
        """A `keras.export.ExportArchive` with the seven signatures (the
        `tf.function`s of `function`), tracking the tokenizers (their
        vocabularies). The model's variables are those the signatures use,
        saved once: tracking the model as well saved each weight twice (the
        Keras variable and the TensorFlow variable it wraps), so
        `variables/` was twice the model's size."""
        import keras

        archive = keras.export.ExportArchive()
        archive.track(self.source_tokenizer)
        archive.track(self.target_tokenizer)
        for name in SIGNATURES:
            archive.add_endpoint(name, self.function(name))
        return archive

    def export(self, base_dir, model_name, version=None, before_publish=None, quantize=None):
        """Write the SavedModel as version `version` (default the next free
        number) of `<base_dir>/<model_name>`, atomically
        (`export.export_archive`); returns its path. `before_publish(path)`
        may add files (warm-up requests) to the staged version.

        `quantize="int8"` exports the same signatures over a weight-only
        int8 copy of the model (`quantized`; the Translator's own model is
        left as it is). Every export records what it is in
        `assets.extra/keras_attention.json` (`export_record`): its
        quantization and the bytes of its `variables/`, and the float32
        model's beside them."""
        check_choice("quantize", quantize, (None, *QUANTIZATIONS), "Translator.export")
        if quantize is not None:
            translator = self._quantized(quantize, "`quantize` of Translator.export")
            return translator.export(base_dir, model_name, version, before_publish)

        def publish(staging):
            write_export_record(staging, self)
            if before_publish is not None:
                before_publish(staging)

        return export_archive(
            self.archive(), base_dir, model_name, version=version, before_publish=publish
        )

    # -- quantization ------------------------------------------------------------
    @property
    def quantization(self):
        """The model's quantization mode ("int8"), None for a float model."""
        return quantization_of(self.model)

    def quantized(self, mode="int8"):
        """A new `Translator` with the same tokenizers, search and options
        over a quantized copy of the model (`quantized_copy`; the model
        itself is not changed): what `export(..., quantize=mode)` writes,
        in process. `ValueError` for a mode other than "int8" or a model
        that is quantized already."""
        check_choice("mode", mode, QUANTIZATIONS, "Translator.quantized")
        return self._quantized(mode, "`mode` of Translator.quantized")

    def _quantized(self, mode, what):
        if self.quantization is not None:
            raise ValueError(
                f"{what}: the model is quantized already ({self.quantization}); export it "
                "with quantize=None, or quantize a float model."
            )
        translator = Translator(
            quantized_copy(self.model, mode),
            self.source_tokenizer,
            self.target_tokenizer,
            self.search,
            max_source_length=self.max_source_length,
            batch_size=self.batch_size,
            numbers=self.numbers,
        )
        translator.float_model = self.model  # for the float32 size of its export
        return translator


class Hypothesis(tuple):
    """One of `Translator.nbest`'s results: the pair `(translation, score)`
    (so `text, score = hypothesis` works as before), with the attributes
    `translation`, `score` and `finished` (it ended with `<eos>`)."""

    def __new__(cls, translation, score, finished):
        hypothesis = super().__new__(cls, (translation, score))
        hypothesis._finished = finished
        return hypothesis

    def __getnewargs__(self):  # copy and pickle
        return (self[0], self[1], self._finished)

    translation = property(lambda self: self[0])
    score = property(lambda self: self[1])
    finished = property(lambda self: self._finished)

    def __repr__(self):
        return f"Hypothesis({self[0]!r}, {self[1]!r}, finished={self._finished})"


def _first_where(bad, values):
    """`(index, value)`: the first position where the vector `bad` holds
    and `values` there; `(len(bad), 0)` when none does (also for 0 rows)."""
    index = tf.argmax(tf.concat([tf.cast(bad, tf.int32), [1]], 0), output_type=tf.int32)
    value = tf.gather(tf.concat([values, tf.zeros([1], values.dtype)], 0), index)
    return index, value


def _trailing(tokens, pad):
    """How many of the last `tokens` are the padding token `pad`."""
    count = 0
    for token in reversed(tokens):
        if token != pad:
            break
        count += 1
    return count


__all__ = ["SIGNATURES", "Hypothesis", "Translator"]


def quantization_of(model):
    """The quantization mode of `model` or of any of its layers ("int8"),
    None when every layer is float."""
    modes = {getattr(model, "quantization_mode", None)}
    modes |= {getattr(layer, "quantization_mode", None) for layer in model._flatten_layers()}
    modes.discard(None)
    return ", ".join(sorted(modes)) or None


def quantized_copy(model, mode):
    """A copy of the built `model` (its config, built, its weights), then
    quantized in place (`model.quantize(mode)`: weight-only int8); `model`
    is not changed."""
    copy = type(model).from_config(model.get_config())
    copy.build()
    copy.set_weights(model.get_weights())
    copy.quantize(mode)
    return copy


def variables_bytes(version_dir):
    """The bytes of a SavedModel's `variables/` on disk (its checkpoint:
    every weight of the model, and the tokenizers' few)."""
    folder = os.path.join(version_dir, "variables")
    return sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(folder)
        for name in names
    )


def _nbytes(model):
    return sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.variables)


def float32_variables_bytes(version_dir, translator):
    """The bytes `variables/` would take in the float32 export of the
    model a quantized `translator` was made from (`Translator.quantized`):
    the export's, each variable of the quantized copy taken out and each of
    the float model put in (a checkpoint stores them raw, so this is the
    float export's size but for the index entries of the quantized copy's
    extra variables, the scales: tens of bytes each)."""
    return (
        variables_bytes(version_dir) - _nbytes(translator.model) + _nbytes(translator.float_model)
    )


def write_export_record(version_dir, translator):
    """Write `assets.extra/keras_attention.json` into an export of
    `translator`: `keras_attention` and `tensorflow` (the versions that
    wrote it), `quantization` ("int8" or None), `variables_bytes` (its
    `variables/` on disk) and `float32_variables_bytes` (the same model's
    float32 export's; None for a model quantized before the Translator
    was made). Returns the record."""
    import keras_attention

    size = variables_bytes(version_dir)
    quantization = translator.quantization
    if quantization is None:
        float32 = size
    elif translator.float_model is not None:
        float32 = float32_variables_bytes(version_dir, translator)
    else:
        float32 = None
    record = {
        "keras_attention": keras_attention.__version__,
        "tensorflow": tf.__version__,
        "quantization": quantization,
        "variables_bytes": size,
        "float32_variables_bytes": float32,
    }
    path = os.path.join(version_dir, EXPORT_RECORD)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return record


def export_record(version_dir):
    """The record `Translator.export` wrote about a version
    (`write_export_record`): a dict, None for an export without one
    (one written before exports recorded themselves)."""
    path = os.path.join(version_dir, EXPORT_RECORD)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def options_key(options=None):
    """The key of the `decoding_options` output holding the options as
    JSON: `"options"`. (In 0.2.0 the key itself was the readable line
    `options: beam_width=4, ...`, so that `saved_model_cli show` displayed
    it, and `out["options"]` was a `KeyError`; that line is now the value of
    the `summary` output, `options_summary`.) `options` is ignored, kept so
    that 0.2.0's calls run."""
    return "options"


def options_summary(options):
    """The options as one readable line, `beam_width=4, num_hypotheses=4,
    ..., alpha=0.6`: the `summary` output of `decoding_options`."""
    return ", ".join(f"{name}={value}" for name, value in options.items())


def prefix_ids(target_tokenizer, prefix, max_length):
    """`(B, P)` int32 target ids of the `prefix` strings (no `[START]`/`[END]`,
    at most `max_length` pieces), padded with 0; an empty string forces
    nothing (a batch of them gives width 0)."""
    import tensorflow as tf

    pieces = target_tokenizer.pieces(prefix)[:, :max_length]
    return tf.cast(pieces.to_tensor(0), tf.int32)


def empty_batch_as_one_row(function, *fillers):
    """`function` of batched inputs, where a request whose inputs all have
    0 rows runs once on `fillers` (one valid row each) and returns every
    output cut to 0 rows. TensorFlow's oneDNN convolutions on AVX-512 CPUs
    return a wrongly shaped tensor for a batch of 0, so without this an
    empty request to a ConvS2S export fails ("Incompatible shapes")."""
    import tensorflow as tf

    def run(*inputs):
        rows = tf.shape(inputs[0])[0]
        empty = tf.reduce_all(tf.stack([tf.equal(tf.shape(x)[0], 0) for x in inputs]))
        inputs = [
            tf.cond(empty, lambda filler=filler: filler, lambda x=x: x)
            for x, filler in zip(inputs, fillers)
        ]
        return {name: value[:rows] for name, value in function(*inputs).items()}

    return run
