"""The bodies of `Translator`'s signatures: graph functions, tensors in, a
dict of tensors out, and the `tf.function` of each (TensorFlow-specific).
`SignatureGraph` holds them, assembled from the parts they read, given
explicitly: the model, the two tokenizers, the searches (`Searches`, each
signature's, derived once from the Translator's search), the lengths, the
number protection and, in an XLA export, the shape buckets. `Translator`
(`serving/translator.py`, where the signatures and their contract are
described) holds one and calls its functions in process; the exporters
(`serving/exporters.py`) write the same functions as a SavedModel.

    text (B,) -> encode -> source (B, S) -> search -> tokens -> decode -> (B,) strings

Every search runs through `SignatureGraph.run_search`: as it is, or, in an
XLA export (`bucketed`, a `buckets.BucketedSearch`), as XLA programs of
fixed shapes; with a `shortlist` (`seq2seq.shortlist`), over the target
pieces it lists for each request.
"""

import json

import tensorflow as tf

from keras_attention.seq2seq.sampling import GreedySearch
from keras_attention.seq2seq.search import BeamSearch, get_search
from keras_attention.seq2seq.shortlist import shortlisted_search
from keras_attention.serving.requests import checked_count, checked_shape, refuse_unless
from keras_attention.tokenizers.characters import UNK
from keras_attention.tokenizers.numbers import sanitize

SIGNATURES = (
    "serving_default",
    "greedy",
    "attention",
    "tokens",
    "nbest",
    "constrained",
    "decoding_options",
)


def beam_options(search):
    """The 0.2.0 `decoding_options` of a `BeamSearch`, as Python numbers:
    `beam_width`, `num_hypotheses` (default `beam_width`), then the rest of
    `search.decoding_options()` (`min_length`, `no_repeat_ngram_size`,
    `repetition_penalty`, `coverage_penalty`, `alpha`)."""
    return {
        "beam_width": search.beam_width,
        "num_hypotheses": search.num_hypotheses or search.beam_width,
        **search.decoding_options(),
    }


class Searches:
    """The searches of the signatures, derived once from `search` (a
    `Search`) for translations of `max_length` tokens (L): `best`
    (`serving_default`, `tokens`, `constrained`: its best hypothesis),
    `attention` (the same, returning attention), `greedy` (a `GreedySearch`
    with the search's shared options) and `nbest` (a beam search with its
    options: its own if it is a `BeamSearch`, a beam of 1 otherwise, N =
    its `num_hypotheses` or `beam_width`)."""

    def __init__(self, search, max_length):
        self.search, self.max_length = search, max_length
        fixed = dict(max_length=max_length)
        self.best = get_search(search, return_attention_scores=False, **fixed)
        self.attention = get_search(search, return_attention_scores=True, **fixed)
        shared = dict(search.shared_options(), **fixed, return_attention_scores=False)
        self.greedy = GreedySearch(**shared)
        beam = search if isinstance(search, BeamSearch) else BeamSearch(beam_width=1)
        self.nbest = BeamSearch(
            **{**beam.decoding_options(), **shared},
            num_hypotheses=beam.num_hypotheses or beam.beam_width,
        )


class SignatureGraph:
    """The graph functions of `Translator`'s signatures over the parts they
    read, and one `tf.function` per signature (`function`).

    Args:
        model: the `Seq2Seq` the searches run.
        source_tokenizer, target_tokenizer: `keras_attention.tokenizers`.
        searches: a `Searches` (the signatures' searches and L).
        max_source_length: S, the source ids per text.
        numbers: a `NumberProtection`, or None (texts go to the model as
            they are).
        placeholder: the target id of the number placeholder (with
            `numbers`), else None.
        bucketed: a `buckets.BucketedSearch` (an XLA export: every search
            runs as XLA programs of its shapes), or None.
        shortlist: a `seq2seq.shortlist.Shortlist` (every search decodes
            over the target pieces it lists for the request), or None."""

    def __init__(
        self,
        model,
        source_tokenizer,
        target_tokenizer,
        searches,
        max_source_length,
        numbers=None,
        placeholder=None,
        bucketed=None,
        shortlist=None,
    ):
        self.model, self.shortlist = model, shortlist
        self.source_tokenizer, self.target_tokenizer = source_tokenizer, target_tokenizer
        self.searches = searches
        self.max_source_length, self.max_length = max_source_length, searches.max_length
        self.numbers, self.placeholder, self.bucketed = numbers, placeholder, bucketed

    def with_parts(self, **parts):
        """A new `SignatureGraph` of these parts with `parts` (constructor
        arguments) replaced: another model, or `bucketed` for an XLA export."""
        given = dict(
            model=self.model,
            source_tokenizer=self.source_tokenizer,
            target_tokenizer=self.target_tokenizer,
            searches=self.searches,
            max_source_length=self.max_source_length,
            numbers=self.numbers,
            placeholder=self.placeholder,
            bucketed=self.bucketed,
            shortlist=self.shortlist,
        )
        return SignatureGraph(**{**given, **parts})

    def compile(self, name):
        """A new `tf.function` of signature `name` (or `("nbest", n)`:
        `nbest` with n hypotheses, in process only), the batch dimension
        unknown: the body checked (`checked_text`), with an empty batch run
        as one row (`empty_batch_as_one_row`). `Translator.function` traces
        each once and keeps it."""
        text = tf.TensorSpec((None,), tf.string, name="text")
        blank = tf.constant([""])
        if name == "decoding_options":
            return tf.function(self.options_function, input_signature=[], autograph=False)
        if name == "tokens":
            run = empty_batch_as_one_row(
                self.tokens_function, tf.constant([[UNK]]), tf.constant([1])
            )
            return tf.function(
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
        if name == "constrained":
            run = empty_batch_as_one_row(self.constrained_function, blank, blank)
            return tf.function(
                lambda text, prefix: run(
                    self.checked_text(text), self.checked_text(prefix, "prefix")
                ),
                input_signature=[text, tf.TensorSpec((None,), tf.string, name="prefix")],
                autograph=False,
            )
        if isinstance(name, tuple):  # ("nbest", n): n hypotheses, in process only
            search = get_search(
                self.searches.nbest,
                num_hypotheses=name[1],
                beam_width=max(name[1], self.searches.nbest.beam_width),
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
        return tf.function(
            lambda text: run(self.checked_text(text)), input_signature=[text], autograph=False
        )

    def run_search(self, search, source, prefix=None, best=False):
        """`search(model, source, prefix)` (`search.best` with `best`): in
        the graph as it is, or through `bucketed`'s XLA programs; over the
        `shortlist`'s pieces when there is one."""
        call = search.best if best else search

        def run(source, prefix=None):
            if self.shortlist is not None:
                return shortlisted_search(search, self.model, self.shortlist, source, prefix, best)
            return call(self.model, source, prefix=prefix)

        if self.bucketed is None:
            return run(source, prefix)
        return self.bucketed(run, source, prefix)

    def _best(self, search, text, source, prefix=None, prefix_text=None):
        """`search.best`; with `numbers` and a beam, the best-scored of the
        beam's hypotheses that hold as many placeholders as `text` has
        numbers (or its `prefix_text`, when that has more), so that none is
        dropped while the beam held a hypothesis that kept it (the best
        hypothesis when none does)."""
        if self.numbers is None or not isinstance(search, BeamSearch) or search.is_greedy():
            return self.run_search(search, source, prefix, best=True)
        beam = get_search(search, num_hypotheses=search.beam_width)
        result = self.run_search(beam, source, prefix)  # (B, K, ...), best first
        wanted = tf.cast(self.numbers.numbers(text).row_lengths(), tf.int32)
        if prefix_text is not None:
            typed = tf.cast(self.numbers.numbers(prefix_text).row_lengths(), tf.int32)
            wanted = tf.maximum(wanted, typed)
        placed = tf.reduce_sum(
            tf.cast(tf.equal(result["tokens"], self.placeholder), tf.int32), axis=-1
        )
        rank = tf.cast(result["scores"], tf.float32)
        rank += tf.where(tf.equal(placed, wanted[:, None]), 0.0, -1e6)
        choice = tf.argmax(rank, axis=1, output_type=tf.int32)
        return {name: tf.gather(value, choice, batch_dims=1) for name, value in result.items()}

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
        """`(B,)` bool: the texts that are empty or only blank characters,
        Unicode's spaces and format characters (`tokenizers.base.blank_texts`,
        after `clean`; a typed U+E000 or U+0001 counts as space, `sanitize`),
        which translate to "" with score 0 in every signature."""
        return self.source_tokenizer.blank(sanitize(text))

    def encode(self, text):
        """`(source (B, S) int32, truncated (B,) bool)`: `text` sanitized (a
        typed U+E000, the number placeholder, or U+0001 is a space:
        `tokenizers.numbers.sanitize`), numbers protected when the Translator
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
        result = self._best(self.searches.best, text, source)
        return {
            "translation": self.decode(text, result),
            "score": self._blank_zero(text, result["scores"]),
            "truncated": truncated,
        }

    def greedy_function(self, text):
        """`greedy`: what `serving_default` returns, with greedy search."""
        source, truncated = self.encode(text)
        result = self.run_search(self.searches.greedy, source)
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
        result = self._best(self.searches.attention, text, source)
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
        return {"token_ids": self.run_search(self.searches.best, source, best=True)["tokens"]}

    def nbest_function(self, text, search=None):
        """`nbest`: `text (B,)` -> `translations (B, N)` strings and `scores
        (B, N)`, best first (the finished hypotheses, then the best live
        ones; a slot the search could not fill is "" with score -1e9),
        `finished (B, N)` (ended with `<eos>`: the live ones, cut at the
        maximum length, and unfilled slots are False) and `truncated (B,)`.
        An empty or blank text gives N empty strings, all finished."""
        search = self.searches.nbest if search is None else search
        text = self.checked_text(text)
        source, truncated = self.encode(text)
        result = self.run_search(search, source)
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
        result = self._best(self.searches.best, text, source, prefix=forced, prefix_text=typed)
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
        return beam_options(self.searches.nbest)

    def search_config(self):
        """The JSON of `keras.saving.serialize_keras_object(search)`."""
        import keras

        return json.dumps(keras.saving.serialize_keras_object(self.searches.search), sort_keys=True)

    def options_function(self):
        """`decoding_options`: no input -> the options as named scalars, the
        same as JSON under the key `options`, as one line under `summary`
        (`options_summary`), and `search`, the search's serialized config
        as JSON (`keras.saving.deserialize_keras_object(json.loads(...))`
        rebuilds it)."""
        chosen = self.decoding_options()
        outputs = {name: tf.constant(value) for name, value in chosen.items()}
        outputs["options"] = tf.constant(json.dumps(chosen))
        outputs["summary"] = tf.constant(options_summary(chosen))
        outputs["search"] = tf.constant(self.search_config())
        return outputs


def _first_where(bad, values):
    """`(index, value)`: the first position where the vector `bad` holds
    and `values` there; `(len(bad), 0)` when none does (also for 0 rows)."""
    index = tf.argmax(tf.concat([tf.cast(bad, tf.int32), [1]], 0), output_type=tf.int32)
    value = tf.gather(tf.concat([values, tf.zeros([1], values.dtype)], 0), index)
    return index, value


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
