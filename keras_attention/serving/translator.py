"""`Translator`: a `Seq2Seq` model, its source and target tokenizers and a
decoding strategy (`keras_attention.seq2seq.search`), as one object that
translates in process and exports the same graph functions as a SavedModel
for TensorFlow Serving (TensorFlow-specific).

The Translator is assembled from parts: the model, the tokenizers, the
searches each signature runs (`graph.Searches`, derived once from
`search`), the number protection and, for an XLA Translator, the shape
buckets (`buckets.BucketedSearch`); its `graph` (`graph.SignatureGraph`)
holds the signatures' graph functions over those parts, given explicitly.
Exporting is the exporters' (`serving.exporters`): `export` is a thin call
on `SavedModelExporter`.

Each exported signature is a graph function defined once (`serving.graph`),
strings (or ids) in, a dict of tensors out:

    text (B,) -> encode -> source (B, S) -> search -> tokens -> decode -> (B,) strings

with S = `max_source_length` (`[START] pieces [END]`, padded; longer texts
keep their first pieces and are flagged `truncated`) and L, the decoded
length, the search's `max_length` or S + 1. The in-process methods
(`translate`, `nbest`, `attention`, `constrained`) call those same functions
through one `tf.function` each, traced once per Translator with the batch
dimension unknown, in batches of `batch_size`; `archive` adds the same
`tf.function`s to the `keras.export.ExportArchive` the export writes. So
what a served model answers is, bit for bit, what the Translator answers in
process.

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
(`graph.empty_batch_as_one_row`). TF Serving checks neither shapes nor
values, so every rule above is checked in the graph (`serving.requests`):
a bad request is an `INVALID_ARGUMENT` whose first line names the input and
the rule, `assertion failed: [text must be a vector of strings [batch]; got
shape [2, 2]]`; in process the methods raise it as a `ValueError`.
"""

from numbers import Integral

import numpy as np
import tensorflow as tf

from keras_attention.seq2seq.search import MAX_BEAM_WIDTH, get_search
from keras_attention.seq2seq.shortlist import check_shortlist
from keras_attention.serving.buckets import BucketedSearch, get_buckets
from keras_attention.serving.exporters import SavedModelExporter, check_saved_model_options
from keras_attention.serving.graph import (
    SIGNATURES,
    Searches,
    SignatureGraph,
)
from keras_attention.serving.records import (
    QUANTIZATIONS,
    quantization_of,
    quantized_copy,
)
from keras_attention.serving.requests import rule_text
from keras_attention.serving.versions import traced_once
from keras_attention.tokenizers.number_rules import PLACEHOLDER
from keras_attention.tokenizers.numbers import NumberProtection
from keras_attention.validation import check_choice, check_texts


def _strings(array):
    return [value.decode("utf-8") for value in np.asarray(array).reshape(-1)]


class Translator:
    """A model plus its tokenizers plus a search, assembled from those parts:
    its signatures' graph functions are a `graph.SignatureGraph` of them
    (`graph`), which it calls in process; `export` writes them with a
    `exporters.SavedModelExporter`.

    Args:
        model: a `Seq2Seq` (built), whose source ids are those of
            `source_tokenizer` and target ids those of `target_tokenizer`.
        source_tokenizer, target_tokenizer: `keras_attention.tokenizers`
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
            numbers (`tokenizers.numbers`): each digit group of a text becomes
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
        self.searches = Searches(self.search, self.max_length)  # each signature's search
        self.best_search, self.attention_search = self.searches.best, self.searches.attention
        self.greedy_search, self.nbest_search = self.searches.greedy, self.searches.nbest
        self._float_model = None  # the model a quantized copy was made of (`quantized`)
        self.graph = SignatureGraph(
            model,
            source_tokenizer,
            target_tokenizer,
            self.searches,
            self.max_source_length,
            numbers=numbers,
            placeholder=None if numbers is None else self._placeholder_id(),
        )
        self._functions = {}  # signature name (or ("nbest", n)) -> traced tf.function
        pad = tf.constant([[self.model.padding_id]], tf.int32)
        self._source_pad = _strings(source_tokenizer.tokens(pad))[0]
        self._target_pad = _strings(target_tokenizer.tokens(pad))[0]

    @property
    def bucketed(self):
        """The `buckets.BucketedSearch` of an XLA Translator (`xla_compiled`),
        whose searches run as XLA programs of its shapes; None for a plain one."""
        return self.graph.bucketed

    @property
    def shortlist(self):
        """The `seq2seq.shortlist.Shortlist` the searches decode over
        (`shortlisted`), or None: the whole target vocabulary."""
        return self.graph.shortlist

    @property
    def float_model(self):
        """The float model a quantized Translator's model was copied from
        (`quantized`), for its export's record; None otherwise."""
        return self._float_model

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
        """The target id of `tokenizers.numbers.PLACEHOLDER`; `ValueError` unless
        both vocabularies hold it as a piece (vocabularies from
        `keras_attention.tokenizers` do)."""
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

    # -- one tf.function per signature ----------------------------------------
    def function(self, name):
        """The `tf.function` of signature `name` (`graph.compile`), traced
        once per Translator (the batch dimension unknown; saving it traces
        only a call of that trace, `traced_once`): what `export` writes and
        the in-process methods call."""
        if name not in self._functions:
            self._functions[name] = traced_once(self.graph.compile(name))
        return self._functions[name]

    # The signatures' graph functions, those of `graph` (`graph.SignatureGraph`).
    def run_search(self, search, source, prefix=None, best=False):
        """`graph.run_search`: a search in the graph, or through the XLA buckets."""
        return self.graph.run_search(search, source, prefix, best)

    checked_text = staticmethod(SignatureGraph.checked_text)

    def blank(self, text):
        """`graph.blank`: `(B,)` bool, the texts that translate to ""."""
        return self.graph.blank(text)

    def encode(self, text):
        """`graph.encode`: `(source (B, S) int32, truncated (B,) bool)`."""
        return self.graph.encode(text)

    def decode(self, text, result, prefix=None):
        """`graph.decode`: a search's best hypotheses as strings."""
        return self.graph.decode(text, result, prefix)

    def translate_function(self, text):
        """`graph.translate_function`: the body of `serving_default`."""
        return self.graph.translate_function(text)

    def greedy_function(self, text):
        """`graph.greedy_function`: the body of `greedy`."""
        return self.graph.greedy_function(text)

    def attention_function(self, text):
        """`graph.attention_function`: the body of `attention`."""
        return self.graph.attention_function(text)

    def tokens_function(self, token_ids, lengths):
        """`graph.tokens_function`: the body of `tokens`."""
        return self.graph.tokens_function(token_ids, lengths)

    def nbest_function(self, text, search=None):
        """`graph.nbest_function`: the body of `nbest`."""
        return self.graph.nbest_function(text, search)

    def constrained_function(self, text, prefix):
        """`graph.constrained_function`: the body of `constrained`."""
        return self.graph.constrained_function(text, prefix)

    def options_function(self):
        """`graph.options_function`: the body of `decoding_options`."""
        return self.graph.options_function()

    def decoding_options(self):
        """`graph.decoding_options`: the nbest search's 0.2.0 options."""
        return self.graph.decoding_options()

    def search_config(self):
        """`graph.search_config`: the JSON of the search's Keras config."""
        return self.graph.search_config()

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
        return check_texts(name, texts, "Translator")

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
        the `nbest` signature's N; a larger `n` widens the beam to `n` (at
        most `seq2seq.search.MAX_BEAM_WIDTH`, 1000).
        Each pair is a `Hypothesis`, a 2-tuple that also has `.translation`,
        `.score` and `.finished` (the signature's `finished`: False for a
        hypothesis cut at the maximum length or a slot the search could not
        fill)."""
        texts = self._texts(texts, "texts")
        if n is None:
            n = self.nbest_search.num_hypotheses
        if isinstance(n, bool) or not isinstance(n, Integral) or not 1 <= n <= MAX_BEAM_WIDTH:
            raise ValueError(
                f"`n` of Translator.nbest must be a positive integer, at most "
                f"MAX_BEAM_WIDTH={MAX_BEAM_WIDTH} (n hypotheses need a beam of n); "
                f"received n={n!r}."
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

    def export(
        self,
        base_dir,
        model_name,
        version=None,
        before_publish=None,
        quantize=None,
        xla=False,
        buckets=None,
        shortlist=None,
    ):
        """Write the SavedModel as version `version` (default the next free
        number) of `<base_dir>/<model_name>`, atomically
        (`versions.export_archive`); returns its path. `before_publish(path)`
        may add files (warm-up requests) to the staged version.

        `quantize="int8"` exports the same signatures over a weight-only
        int8 copy of the model (`quantized`; the Translator's own model is
        left as it is); `xla=True` with each search compiled by XLA for the
        shapes of `buckets` (`xla_compiled`), adding a warm-up request per
        bucket and `<base_dir>/batching_parameters.txt` (`serving.buckets`).
        Every export records what it is in `assets.extra/keras_attention.json`
        (`export_record`): its quantization, its XLA buckets, its
        shortlist, the bytes of its `variables/` and the float32 model's.
        `shortlist`: every search over the pieces a `Shortlist` lists
        (`shortlisted`).

        A thin call on `exporters.SavedModelExporter(quantize, xla,
        buckets, shortlist).export(self, base_dir, model_name, version,
        before_publish)`."""
        check_saved_model_options(quantize, xla, buckets, "Translator.export")
        exporter = SavedModelExporter(
            quantize=quantize, xla=xla, buckets=buckets, shortlist=shortlist
        )
        return exporter.export(
            self, base_dir, model_name, version=version, before_publish=before_publish
        )

    def xla_compiled(self, buckets=None):
        """A new `Translator` with the same model, tokenizers, search and
        options whose signatures run each search as XLA programs of the
        shapes of `buckets` (`serving.buckets`): what `export(...,
        xla=True)` writes, in process."""
        buckets = get_buckets(buckets)
        lengths = buckets.lengths(self.max_source_length)
        bucketed = BucketedSearch(
            buckets.batch_sizes, lengths, self.max_length, self.model.padding_id
        )
        return self._copy(self.model, float_model=self.float_model, bucketed=bucketed)

    def shortlisted(self, shortlist):
        """A new `Translator` like this one whose searches decode over the
        target pieces `shortlist` (a `seq2seq.shortlist.Shortlist` of the
        model's vocabularies) lists for each request: what `export(...,
        shortlist=...)` writes, in process. `ValueError` for another
        object, other vocabulary sizes or a model that cannot (an
        `Ensemble`)."""
        check_shortlist(shortlist, self.model, "Translator.shortlisted", self.search)
        return self._copy(
            self.model, float_model=self.float_model, bucketed=self.bucketed, shortlist=shortlist
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
        if self.quantization is not None:
            raise ValueError(
                f"`mode` of Translator.quantized: the model is quantized already "
                f"({self.quantization}); export it with quantize=None, or quantize a float model."
            )
        return self._copy(quantized_copy(self.model, mode), float_model=self.model)

    def _copy(self, model, float_model=None, bucketed=None, shortlist=None):
        """A `Translator` of `model` with this one's tokenizers, search and
        options, recording `float_model` (`quantized`), running its
        searches through `bucketed` (`xla_compiled`) when given, and over
        `shortlist` (`shortlisted`; default this one's)."""
        translator = Translator(
            model,
            self.source_tokenizer,
            self.target_tokenizer,
            self.search,
            max_source_length=self.max_source_length,
            batch_size=self.batch_size,
            numbers=self.numbers,
        )
        translator._float_model = float_model
        shortlist = self.shortlist if shortlist is None else shortlist
        translator.graph = translator.graph.with_parts(bucketed=bucketed, shortlist=shortlist)
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


def _trailing(tokens, pad):
    """How many of the last `tokens` are the padding token `pad`."""
    count = 0
    for token in reversed(tokens):
        if token != pad:
            break
        count += 1
    return count


__all__ = ["SIGNATURES", "Hypothesis", "Translator"]
