"""The names of 0.2.0's `keras_attention.serving.export`, kept so that code
written for it runs unchanged:

- the versioned, atomic export machinery (`atomic_version_dir`,
  `export_archive`, `next_version`, `write_models_config`, warm-up
  requests...), which now lives in `versions.py`;
- `translator_archive`, `nbest_translations`, `decoding_options` and
  `DECODING_DEFAULTS`, thin wrappers over `serving.Translator` and
  `seq2seq.BeamSearch` (`translator.py`), which hold the code and defaults;
- `empty_batch_as_one_row` and `prefix_ids`, now in `graph.py` (the
  bodies of the Translator's signatures);
- `options_key`, the key of the `decoding_options` output that holds the
  options as JSON, now always `"options"` (kept here for 0.2.0's calls).

New code imports from `versions.py` and `translator.py` (or uses
`Translator.export`). These names are not deprecated: they warn of nothing
and no release is set to remove them (`keras_attention.deprecations` lists
what is deprecated).
"""

from keras_attention.seq2seq.search import BeamSearch
from keras_attention.serving.versions import (  # noqa: F401  (0.2.0's names)
    MODELS_CONFIG_ENTRY,
    PLAIN_NAME,
    STAGING,
    StagedVersion,
    atomic_version_dir,
    check_model_name,
    export_archive,
    next_version,
    read_warmup_requests,
    remove_abandoned_staging,
    write_models_config,
    write_warmup_requests,
)

_BEAM = BeamSearch()  # the defaults of the 0.2.0 signatures below are its own
_MOVED_TO_GRAPH = ("empty_batch_as_one_row", "prefix_ids")


def __getattr__(name):
    if name == "DECODING_DEFAULTS":  # 0.2.0's table, now BeamSearch's defaults
        return decoding_options()
    if name in _MOVED_TO_GRAPH:  # imported on use: the graph functions pull in TensorFlow
        from keras_attention.serving import graph

        return getattr(graph, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _beam_search_options(beam_width=_BEAM.beam_width, num_hypotheses=None, **options):
    """The `BeamSearch` of 0.2.0's export options, checked by it."""
    known = tuple(name for name in _BEAM.decoding_options() if name != "beam_width")
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(
            f"unknown decoding options {unknown}; expected some of "
            f"{sorted(('beam_width', 'num_hypotheses') + known)}"
        )
    if num_hypotheses is None:
        num_hypotheses = beam_width
    return BeamSearch(beam_width=beam_width, num_hypotheses=num_hypotheses, **options)


def decoding_options(beam_width=_BEAM.beam_width, num_hypotheses=None, **options):
    """The decoding options of an exported translator, as the dict its
    `decoding_options` signature returns (0.2.0's function, a thin wrapper
    over `BeamSearch`, which holds the defaults and checks the values):
    `beam_width`, `num_hypotheses` (default `beam_width`), `min_length`,
    `no_repeat_ngram_size`, `repetition_penalty`, `coverage_penalty`,
    `alpha`. `ValueError` for an unknown name or a bad value."""
    from keras_attention.serving.graph import beam_options

    return beam_options(_beam_search_options(beam_width, num_hypotheses, **options))


def nbest_translations(model, source_tokenizer, target_tokenizer, text, max_length, options):
    """`{"translations": (B, N) string, "scores": (B, N), "truncated": (B,)}`:
    the `options["num_hypotheses"]` best hypotheses of beam search (best
    first) for the strings `text`, with `options` from `decoding_options`.
    0.2.0's function, a thin wrapper over `Translator.nbest_function` (what
    the exported `nbest` signature runs)."""
    from keras_attention.serving.translator import Translator

    search = _beam_search_options(**options)
    translator = Translator(
        model, source_tokenizer, target_tokenizer, search, max_source_length=max_length
    )
    return translator.nbest_function(text)


def translator_archive(
    model, source_tokenizer, target_tokenizer, max_length, beam_width=_BEAM.beam_width, **options
):
    """An `ExportArchive` of a `Seq2Seq` translator with its tokenizers:
    0.2.0's function, a thin wrapper over `serving.Translator` with a
    `BeamSearch(beam_width, **options)` and `max_source_length=max_length`
    (see `Translator` for the seven signatures).

    `options` are the decoding options (`decoding_options`): `min_length`,
    `no_repeat_ngram_size`, `repetition_penalty`, `coverage_penalty`,
    `alpha` and `num_hypotheses` (`nbest`, default `beam_width`).
    """
    from keras_attention.serving.translator import Translator

    search = _beam_search_options(beam_width, **options)
    return Translator(
        model, source_tokenizer, target_tokenizer, search, max_source_length=max_length
    ).archive()


def options_key(options=None):
    """The key of the `decoding_options` output holding the options as
    JSON: `"options"`. (In 0.2.0 the key itself was the readable line
    `options: beam_width=4, ...`, so that `saved_model_cli show` displayed
    it, and `out["options"]` was a `KeyError`; that line is now the value of
    the `summary` output, `options_summary`.) `options` is ignored, kept so
    that 0.2.0's calls, `options_key(options)`, run."""
    return "options"
