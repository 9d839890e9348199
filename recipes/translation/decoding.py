"""Decoding: the recipe's one home for searches, translations and the export.

Every call of the library's decoding functions from the recipe is here;
the commands hand over plain values: the run's model and tokenizers, and a
search (`search_settings(config)`, a dict of generation's option names).
`search_settings` is the one place that turns the decoding flags into a
search; the rest of the recipe never names a decoding option.

Example:

    search = search_settings(config)          # {"beam_width": 4, "alpha": 0.6, ...}
    translate_texts(model, source, target, ["Ich habe keine Zeit."], 32, search)
"""

import weakref

# TranslationConfig field -> (generation's option, its "off" value)
DECODING_FLAGS = {
    "alpha": ("alpha", 0.6),  # not off: GNMT's usual length penalty, beam search's default
    "min_length": ("min_length", 0),
    "no_repeat_ngram": ("no_repeat_ngram_size", 0),
    "repetition_penalty": ("repetition_penalty", 1.0),
    "coverage_penalty": ("coverage_penalty", 0.0),
}
GREEDY = {"beam_width": 1}  # validation BLEU and the tuner's: plain greedy search

_SEARCHES = weakref.WeakKeyDictionary()  # model -> {decoding settings: tf.function}


def search_settings(config, beam_width=None, num_hypotheses=None):
    """The search a `TranslationConfig` chose, by generation's names:
    `{"beam_width": ..., "alpha": ..., "min_length": ..., ...}` (with
    `num_hypotheses` when given); `beam_width` overrides the config's."""
    search = {"beam_width": beam_width or config.beam_width}
    search.update(
        {option: getattr(config, name, off) for name, (option, off) in DECODING_FLAGS.items()}
    )
    if num_hypotheses is not None:
        search["num_hypotheses"] = num_hypotheses
    return search


def _options(search):
    """`search` without the beam width and the hypotheses count."""
    return {k: v for k, v in search.items() if k not in ("beam_width", "num_hypotheses")}


def compiled_search(model, max_length, beam_width, return_attention, options):
    """The model's search as one graph (in eager mode its loop would run op
    by op), traced once per model and settings: a file translated in chunks
    or a BLEU computed each epoch reuses it. The batch dimension is left
    unknown, so a last, shorter batch needs no second trace."""
    import tensorflow as tf

    from keras_attention.seq2seq.generation import generate

    searches = _SEARCHES.setdefault(model, {})
    key = (max_length, beam_width, return_attention, tuple(sorted(options.items())))
    if key not in searches:
        searches[key] = tf.function(
            lambda source: generate(
                model,
                source,
                max_length + 1,
                beam_width,
                return_attention=return_attention,
                **options,
            ),
            input_signature=[tf.TensorSpec([None, max_length], tf.int32)],
        )
    return searches[key]


def translate_texts(
    model,
    source_tokenizer,
    target_tokenizer,
    texts,
    max_length,
    search=None,
    batch_size=64,
    return_attention=False,
):
    """Translate a list of strings with `search` (`search_settings`; None:
    beam search of width 4 with generation's defaults); returns the best
    translations (and, with `return_attention`, token ids and attention of
    each)."""
    import numpy as np
    import tensorflow as tf

    search = {"beam_width": 4, **(search or {})}
    compiled = compiled_search(
        model, max_length, search["beam_width"], return_attention, _options(search)
    )
    translations, details = [], []
    for start in range(0, len(texts), batch_size):
        source, _ = source_tokenizer.encode(
            tf.constant(texts[start : start + batch_size]), max_length
        )
        result = compiled(source)
        tokens, attention = result["tokens"], result.get("attention")
        text = target_tokenizer.blank_where_empty(
            tf.constant(texts[start : start + batch_size]), target_tokenizer.decode(tokens)
        )
        translations += [t.decode("utf-8") for t in text.numpy()]
        if return_attention:
            details += list(zip(np.asarray(source), np.asarray(tokens), np.asarray(attention)))
    return (translations, details) if return_attention else translations


def nbest_lines(model, source_tokenizer, target_tokenizer, texts, max_length, search, n):
    """`score<TAB>translation` lines: `n` per text, best first, texts in order
    (the `nbest` signature's translations and scores, computed in process)."""
    import tensorflow as tf

    from keras_attention.serving.export import decoding_options as export_options
    from keras_attention.serving.export import nbest_translations

    options = export_options(search["beam_width"], num_hypotheses=n, **_options(search))
    result = nbest_translations(
        model, source_tokenizer, target_tokenizer, tf.constant(texts), max_length, options
    )
    lines = []
    for translations, scores in zip(result["translations"].numpy(), result["scores"].numpy()):
        lines += [
            f"{score:.4f}\t{text.decode('utf-8')}" for text, score in zip(translations, scores)
        ]
    return lines


def line_translator(model, source_tokenizer, target_tokenizer, max_length, search, nbest=None):
    """`sentences -> lines` with a model: a translation each, or `nbest` N
    `score<TAB>translation` lines each."""
    common = (model, source_tokenizer, target_tokenizer)
    if nbest:
        return lambda texts: nbest_lines(*common, texts, max_length, search, nbest)
    return lambda texts: translate_texts(*common, texts, max_length, search)


def export_translator(
    model, source_tokenizer, target_tokenizer, max_length, search, export_dir, model_name, warmup
):
    """Write the model as the next version `<export_dir>/<model_name>/<n>/`
    of a TF Serving model (`translator_archive` with `search`'s options,
    published atomically with its `warmup` requests); returns its path."""
    from keras_attention.serving.export import (
        export_archive,
        translator_archive,
        write_warmup_requests,
    )

    archive = translator_archive(
        model,
        source_tokenizer,
        target_tokenizer,
        max_length,
        search["beam_width"],
        num_hypotheses=search.get("num_hypotheses"),
        **_options(search),
    )
    return export_archive(
        archive,
        export_dir,
        model_name,
        before_publish=lambda staging: write_warmup_requests(staging, model_name, warmup),
    )
