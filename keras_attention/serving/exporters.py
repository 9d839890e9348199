"""Exporters as objects, behind one registry (OpenNMT-tf's convention): an
exporter is made once with its options and writes any `Translator` with
one call, `exporter.export(translator, export_dir, ...)`.

    exporter = get_exporter("saved_model", quantize="int8", xla=True)
    exporter.export(translator, "saved_models", "translator")     # .../translator/<n>
    get_exporter("ctranslate2", quantization="int8").export(translator, "ct2_model")

- `SavedModelExporter` ("saved_model"): the Translator's seven signatures
  as a versioned SavedModel for TF Serving; float32, weight-only int8
  (`quantize="int8"`) and XLA shape buckets (`xla=True`, `buckets`) are
  options of the one exporter. `Translator.export` is a thin call on it.
- `CTranslate2Exporter` ("ctranslate2"): a Transformer translator as a
  CTranslate2 model folder (`serving.ctranslate2.convert_to_ctranslate2`),
  its search written as CTranslate2's `translate_batch` options.

`register_exporter(name)` adds an exporter class to the registry;
`get_exporter(name, **options)` makes one.

Length penalties: our beam divides a hypothesis's log-probability by GNMT's
((5 + |Y|) / 6)^alpha, CTranslate2 by |Y|^length_penalty. No
`length_penalty` gives GNMT's penalty for every length, so
`CTranslate2Exporter` refuses a beam search with alpha > 0 unless it is
given CTranslate2's own `length_penalty` (alpha = 0 is the plain sum in
both: `length_penalty=0`).
"""

import math
import os

import numpy as np

from keras_attention.seq2seq.sampling import GreedySearch
from keras_attention.seq2seq.search import BeamSearch
from keras_attention.seq2seq.shortlist import check_shortlist
from keras_attention.serving import ctranslate2 as ct2
from keras_attention.serving.buckets import (
    add_warmup_requests,
    get_buckets,
    write_batching_parameters,
)
from keras_attention.serving.records import QUANTIZATIONS, write_export_record
from keras_attention.serving.versions import export_archive
from keras_attention.validation import check_choice, is_integer, is_number

EXPORTERS = {}  # name -> exporter class (`register_exporter`)
SHORTLIST_FILE = "shortlist.npz"  # a shortlisted export's table, in assets/


def register_exporter(name):
    """A class decorator that registers an `Exporter` subclass under
    `name` for `get_exporter`, and sets its `name`. `ValueError` for a name
    that is not a non-empty string or that another class holds."""

    def register(cls):
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"`name` of register_exporter must be a non-empty string; received name={name!r}."
            )
        if EXPORTERS.get(name, cls) is not cls:
            raise ValueError(
                f"`name` of register_exporter must be a new name; {name!r} is "
                f"{EXPORTERS[name].__name__}'s."
            )
        cls.name = name
        EXPORTERS[name] = cls
        return cls

    return register


def get_exporter(name, **options):
    """The exporter registered as `name` ("saved_model", "ctranslate2", or
    one `register_exporter` added), made with `options` (its constructor's
    arguments). `ValueError` naming the choices for an unknown name."""
    if not isinstance(name, str) or name not in EXPORTERS:
        raise ValueError(
            f"`name` of get_exporter must be one of {sorted(EXPORTERS)}; received name={name!r}."
        )
    return EXPORTERS[name](**options)


class Exporter:
    """The interface of an exporter: options in the constructor, one
    `export(translator, export_dir, ...)` that writes a `Translator` and
    returns the path written, `get_config()` the options."""

    name = None  # set by `register_exporter`

    def export(self, translator, export_dir, **arguments):
        """Write `translator` under `export_dir`; returns the path written."""
        raise NotImplementedError(f"{type(self).__name__}.export")

    def get_config(self):
        """The constructor's arguments: `type(self)(**get_config())` is
        the same exporter."""
        return {}

    def __repr__(self):
        options = ", ".join(f"{key}={value!r}" for key, value in self.get_config().items())
        return f"{type(self).__name__}({options})"


def check_saved_model_options(quantize, xla, buckets, owner):
    """The options of a SavedModel export checked, each `ValueError` naming
    the option and `owner`: `quantize` None or one of `QUANTIZATIONS`,
    `xla` a bool, `buckets` only with `xla`. Returns the `XlaBuckets` of
    `buckets` (None when not given)."""
    check_choice("quantize", quantize, (None, *QUANTIZATIONS), owner)
    check_choice("xla", xla, (False, True), owner)
    if buckets is not None and not xla:
        raise ValueError(f"`buckets` of {owner} needs xla=True; got {buckets!r}.")
    return None if buckets is None else get_buckets(buckets)


@register_exporter("saved_model")
class SavedModelExporter(Exporter):
    """A `Translator` as a versioned SavedModel for TF Serving: its seven
    signatures (`serving.translator`), published atomically as the next
    version of `<export_dir>/<model_name>` (`versions.export_archive`),
    with `assets.extra/keras_attention.json` saying what it is
    (`records.write_export_record`).

    Args:
        quantize: None (the model as it is) or "int8": the signatures over
            a weight-only int8 copy of the model (`Translator.quantized`;
            the Translator's own model is left as it is).
        xla: True: each search compiled by XLA for the shapes of `buckets`
            (`Translator.xla_compiled`), a warm-up request per bucket and
            `<export_dir>/batching_parameters.txt` (`serving.buckets`). A
            Translator that is XLA-compiled already is exported as it is.
        buckets: an `XlaBuckets`, its config or None (the defaults); only
            with `xla=True`.
        shortlist: a `seq2seq.shortlist.Shortlist` of the model's
            vocabularies: every search decodes over the target pieces it
            lists for the request (`Translator.shortlisted`), its table
            written as `assets/shortlist.npz`. None: the whole vocabulary.

    Example:

        SavedModelExporter(quantize="int8").export(translator, "saved_models", "translator")
    """

    def __init__(self, quantize=None, xla=False, buckets=None, shortlist=None):
        self.buckets = check_saved_model_options(quantize, xla, buckets, "SavedModelExporter")
        self.shortlist = check_shortlist(shortlist, None, "SavedModelExporter")
        self.quantize, self.xla = quantize, bool(xla)

    def get_config(self):
        buckets = None if self.buckets is None else self.buckets.get_config()
        return {
            "quantize": self.quantize,
            "xla": self.xla,
            "buckets": buckets,
            "shortlist": self.shortlist,  # a table, not a setting: the object itself
        }

    def prepared(self, translator):
        """The `Translator` whose signatures `export` writes: `translator`,
        its int8 copy (`quantize`), over the `shortlist`, XLA-compiled
        (`xla`). `ValueError` for `quantize` of a model that is quantized
        already, or a shortlist of other vocabularies."""
        if self.quantize is not None:
            if translator.quantization is not None:
                raise ValueError(
                    f"`quantize` of SavedModelExporter: the model is quantized already "
                    f"({translator.quantization}); export it with quantize=None, or quantize "
                    "a float model."
                )
            translator = translator.quantized(self.quantize)
        if self.shortlist is not None:
            translator = translator.shortlisted(self.shortlist)
        if self.xla and translator.bucketed is None:
            translator = translator.xla_compiled(self.buckets)
        return translator

    def export(
        self, translator, export_dir, model_name="translator", version=None, before_publish=None
    ):
        """Write `translator` (`prepared`) as version `version` (default
        the next free number) of `<export_dir>/<model_name>`; returns its
        path. `before_publish(path)` may add files (warm-up requests) to
        the staged version before it is published."""
        translator = self.prepared(translator)
        bucketed = translator.bucketed

        def publish(staging):
            if translator.shortlist is not None:
                os.makedirs(os.path.join(staging, "assets"), exist_ok=True)
                translator.shortlist.save(os.path.join(staging, "assets", SHORTLIST_FILE))
            write_export_record(staging, translator)
            if before_publish is not None:
                before_publish(staging)
            if bucketed is not None:
                add_warmup_requests(staging, model_name, translator)

        path = export_archive(
            translator.archive(), export_dir, model_name, version=version, before_publish=publish
        )
        if bucketed is not None:
            write_batching_parameters(export_dir, bucketed.batch_sizes)
        return path


@register_exporter("ctranslate2")
class CTranslate2Exporter(Exporter):
    """A `Translator` of a `TransformerSeq2Seq` as a CTranslate2 model
    folder (`ctranslate2.convert_to_ctranslate2`), with the Translator's
    search written into its `keras_attention.json` as `translate_batch`
    options (`translate_options`), which
    `ctranslate2.translate_with_ctranslate2` uses. Needs `ctranslate2`.

    Args:
        quantization: None (float32) or one of `ctranslate2.QUANTIZATIONS`
            ("int8", "int8_float32", "float16"), CTranslate2's weight types.
        length_penalty: CTranslate2's own length penalty (a hypothesis's
            log-probability divided by |Y|^length_penalty), needed for a
            beam search with alpha > 0: GNMT's ((5 + |Y|) / 6)^alpha is no
            |Y|^length_penalty, so alpha is never passed as it. None: the
            plain sum (0) for a search with alpha = 0, else a `ValueError`
            at `export`.
        max_positions: rows of the sinusoidal table, the longest sequence
            CTranslate2 can then place (default max(1024, the model's
            max_length)).
        shortlist: a `seq2seq.shortlist.Shortlist`, written as
            CTranslate2's vocabulary map (`vmap.txt`) and decoded with
            (`use_vmap=True` among the `translate_batch` options).

    Example:

        CTranslate2Exporter(quantization="int8").export(
            translator, "ct2_model", source_spm="run/source.spm", target_spm="run/target.spm")
    """

    def __init__(self, quantization=None, length_penalty=None, max_positions=None, shortlist=None):
        check_choice(
            "quantization", quantization, (None, *ct2.QUANTIZATIONS), "CTranslate2Exporter"
        )
        if length_penalty is not None and (
            not is_number(length_penalty) or not math.isfinite(length_penalty)
        ):
            raise ValueError(
                "`length_penalty` of CTranslate2Exporter must be None or a finite number "
                f"(CTranslate2's |Y|^length_penalty); received length_penalty={length_penalty!r}."
            )
        if max_positions is not None and (not is_integer(max_positions) or max_positions < 1):
            raise ValueError(
                "`max_positions` of CTranslate2Exporter must be None or a positive integer; "
                f"received max_positions={max_positions!r}."
            )
        self.quantization = quantization
        self.length_penalty = None if length_penalty is None else float(length_penalty)
        self.max_positions = None if max_positions is None else int(max_positions)
        self.shortlist = check_shortlist(shortlist, None, "CTranslate2Exporter")

    def get_config(self):
        return {
            "quantization": self.quantization,
            "length_penalty": self.length_penalty,
            "max_positions": self.max_positions,
            "shortlist": self.shortlist,
        }

    def translate_options(self, translator):
        """The `ctranslate2.Translator.translate_batch` options that decode
        as `translator`'s search does: `beam_size`, `length_penalty`
        (`length_penalty` given, else 0 for alpha = 0), `coverage_penalty`,
        `repetition_penalty`, `no_repeat_ngram_size`,
        `min_decoding_length`, `max_input_length` (S),
        `max_decoding_length` (L) and, with a shortlist, `use_vmap`.
        `ValueError` for a search other than
        greedy or beam search, and for a beam with alpha > 0 without
        `length_penalty` (see the module docstring)."""
        search = translator.search
        if not isinstance(search, (GreedySearch, BeamSearch)):
            raise ValueError(
                "`translator` of CTranslate2Exporter.export must decode with GreedySearch or "
                f"BeamSearch (CTranslate2's searches); received a {type(search).__name__}."
            )
        beam = search.beam_width if isinstance(search, BeamSearch) else 1
        alpha = search.alpha if isinstance(search, BeamSearch) else 0.0
        length_penalty = self.length_penalty
        if length_penalty is None:
            if beam > 1 and alpha != 0:
                raise ValueError(
                    f"`length_penalty` of CTranslate2Exporter must be given for a beam search "
                    f"with alpha={alpha}: our beam divides by GNMT's ((5 + |Y|) / 6)^alpha, "
                    "CTranslate2 by |Y|^length_penalty, and no length_penalty equals GNMT's "
                    "penalty, so alpha is not passed as it; give CTranslate2Exporter("
                    "length_penalty=...) (CTranslate2's formula) or a search with alpha=0."
                )
            length_penalty = 0.0
        return {
            "beam_size": beam,
            "length_penalty": length_penalty,
            "coverage_penalty": search.coverage_penalty if isinstance(search, BeamSearch) else 0.0,
            "repetition_penalty": search.repetition_penalty,
            "no_repeat_ngram_size": search.no_repeat_ngram_size,
            "min_decoding_length": search.min_length,
            "max_input_length": translator.max_source_length,
            "max_decoding_length": translator.max_length,
            **({"use_vmap": True} if self.shortlist is not None else {}),
        }

    def export(
        self,
        translator,
        export_dir,
        source_spm=None,
        target_spm=None,
        metadata=None,
        overwrite=False,
    ):
        """Write `translator` as the CTranslate2 model folder `export_dir`
        (published whole; `overwrite` as `convert_to_ctranslate2`'s);
        returns its path. `source_spm`, `target_spm`: the SentencePiece
        model files of the tokenizers, copied beside the model (what
        `translate_with_ctranslate2` tokenizes with); without them the
        vocabularies are the tokenizers' pieces. `metadata`: more JSON-able
        notes for `keras_attention.json`, beside `translate_batch`
        (`translate_options`), `alpha` (the search's: what
        `length_penalty` stands in for) and `protect_numbers`."""
        options = self.translate_options(translator)  # refused before any work
        check_shortlist(self.shortlist, translator.model, "CTranslate2Exporter.export")
        search = translator.search
        record = {
            **(metadata or {}),
            "translate_batch": options,
            "alpha": search.alpha if isinstance(search, BeamSearch) else None,
            "length_penalty_set_by": "CTranslate2Exporter",
            "protect_numbers": translator.numbers is not None,
        }
        tokens = {}
        for side, spm, tokenizer in (
            ("source", source_spm, translator.source_tokenizer),
            ("target", target_spm, translator.target_tokenizer),
        ):
            if spm is None:
                pieces = np.asarray(tokenizer.tokens(np.arange(tokenizer.vocab_size)))
                tokens[f"{side}_tokens"] = [piece.decode("utf-8") for piece in pieces.reshape(-1)]
        return ct2.convert_to_ctranslate2(
            translator.model,
            export_dir,
            quantization=self.quantization,
            source_spm=source_spm,
            target_spm=target_spm,
            max_positions=self.max_positions,
            metadata=record,
            overwrite=overwrite,
            shortlist=self.shortlist,
            **tokens,
        )


__all__ = [
    "CTranslate2Exporter",
    "Exporter",
    "SavedModelExporter",
    "check_saved_model_options",
    "get_exporter",
    "register_exporter",
]
