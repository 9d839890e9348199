"""Decoding: the recipe's one home for searches, translations and the export.

`search_from_config(config)` is the one place where the decoding flags
become a search: a `keras_attention.seq2seq.BeamSearch`, whose defaults
are the flags' defaults (`config.py` reads them from it). Everything else
goes through a `keras_attention.serving.Translator` (the model, its
tokenizers and that search), the same object whose graph functions the
export writes, so what the recipe prints in process is what TF Serving
answers. One `Translator` is kept per model and search, so a file
translated in chunks or a BLEU computed each epoch traces its search once.

Example:

    search = search_from_config(config)       # BeamSearch(beam_width=4, alpha=0.6, ...)
    translator_for(model, source, target, 32, search).translate(["Ich habe keine Zeit."])
"""

import json
import sys
import time
import weakref

from keras_attention.seq2seq.search import BeamSearch, GreedySearch, get_search

from .config import DECODING, run_decoding

GREEDY = GreedySearch()  # validation BLEU and the tuner's: plain greedy search

_TRANSLATORS = weakref.WeakKeyDictionary()  # model -> {(tokenizers, length, search): Translator}


def search_from_config(config, beam_width=None, num_hypotheses=None):
    """The search the decoding flags of a `TranslationConfig` chose: a
    `BeamSearch` of its decoding settings (`settings.DECODING`, BeamSearch's
    decoding options; one not given is BeamSearch's default) and
    `num_hypotheses`; `beam_width` overrides the config's. (A beam of 1
    without a coverage penalty decodes its best hypothesis greedily, as
    0.2.0's `generate` did.)"""
    options = {name: getattr(config, name) for name in DECODING}
    if beam_width:
        options["beam_width"] = beam_width
    options = {name: value for name, value in options.items() if value is not None}
    return BeamSearch(**options, num_hypotheses=num_hypotheses)


def settled_search(config, run_config, num_hypotheses=None):
    """`(config, search)`: `config` with its decoding settings settled
    against the run's `run_config` (`config.run_decoding`: a flag given, else
    the run's recorded setting, else BeamSearch's default), unless the
    command line settled them (`config.recorded`), and the one `BeamSearch`
    they make (`search_from_config`)."""
    if config.recorded is None:
        config = run_decoding(config, run_config)
    return config, search_from_config(config, num_hypotheses=num_hypotheses)


def number_protection(run_config):
    """The `NumberProtection` of a trained run whose `config.json` says
    `protect_numbers` (what `data.numbers_to_protect` decided when it
    trained), else None (runs of 0.2.0, `--no-protect-numbers`, corpora
    whose numbers are not copied). German <-> English: a copied number's
    `.` and `,` are exchanged where its form says decimal or thousands
    separators (`2,50` -> `2.50`, `1.000` <-> `1,000`), and times, dates
    and versions stay as written (`tokenizers.numbers.copied_number`)."""
    from keras_attention.tokenizers.numbers import NumberProtection

    if not run_config.get("protect_numbers", False):
        return None
    return NumberProtection(swap_separators=True)


def translator_for(
    model, source_tokenizer, target_tokenizer, max_length, search, batch_size=64, numbers=None
):
    """The `Translator` of `model` with these tokenizers, sources of at most
    `max_length` pieces, `search` (a search object, its config or name) and
    `numbers` (`number_protection`), made once and then reused (its graph
    functions are traced once)."""
    from keras_attention.serving import Translator

    search = get_search(search)
    config = (type(search), repr(sorted(search.get_config().items())))
    protection = None if numbers is None else json.dumps(numbers.get_config(), sort_keys=True)
    key = (id(source_tokenizer), id(target_tokenizer), max_length, config, batch_size, protection)
    translators = _TRANSLATORS.setdefault(model, {})
    if key not in translators:
        translators[key] = Translator(
            model,
            source_tokenizer,
            target_tokenizer,
            search,
            max_source_length=max_length,
            batch_size=batch_size,
            numbers=numbers,
        )
    return translators[key]


def translate_texts(
    model,
    source_tokenizer,
    target_tokenizer,
    texts,
    max_length,
    search=None,
    batch_size=64,
    numbers=None,
):
    """The best translation of each string of `texts` with `search`
    (`search_from_config`; None: `BeamSearch()`), in batches of
    `batch_size` (the exported `serving_default`, run in process)."""
    search = BeamSearch() if search is None else search
    translator = translator_for(
        model, source_tokenizer, target_tokenizer, max_length, search, batch_size, numbers
    )
    return translator.translate(list(texts))


def attention_maps(
    model, source_tokenizer, target_tokenizer, texts, max_length, search, numbers=None
):
    """For a heatmap of each text's best translation: `Translator.attention`'s
    dicts (`translation`, `source_tokens`, `target_tokens`, `weights`); a
    protected number's piece is labelled `<num>` (fonts have no glyph for
    the private-use placeholder)."""
    from keras_attention.tokenizers.numbers import PLACEHOLDER

    translator = translator_for(
        model, source_tokenizer, target_tokenizer, max_length, search, numbers=numbers
    )
    maps = translator.attention(list(texts))
    for alignment in maps:
        for side in ("source_tokens", "target_tokens"):
            alignment[side] = [token.replace(PLACEHOLDER, "<num>") for token in alignment[side]]
    return maps


def nbest_lines(
    model, source_tokenizer, target_tokenizer, texts, max_length, search, n, numbers=None
):
    """`score<TAB>translation` lines: `n` per text, best first, texts in order
    (the `nbest` signature's translations and scores, computed in process)."""
    translator = translator_for(
        model, source_tokenizer, target_tokenizer, max_length, search, numbers=numbers
    )
    return [
        f"{score:.4f}\t{text}" for row in translator.nbest(list(texts), n) for text, score in row
    ]


def line_translator(
    model, source_tokenizer, target_tokenizer, max_length, search, nbest=None, numbers=None
):
    """`sentences -> lines` with a model: a translation each, or `nbest` N
    `score<TAB>translation` lines each."""
    common = (model, source_tokenizer, target_tokenizer)
    if nbest:
        return lambda texts: nbest_lines(*common, texts, max_length, search, nbest, numbers=numbers)
    return lambda texts: translate_texts(*common, texts, max_length, search, numbers=numbers)


def export_translator(
    model,
    source_tokenizer,
    target_tokenizer,
    max_length,
    search,
    export_dir,
    model_name,
    warmup,
    numbers=None,
    quantize=None,
    xla=False,
):
    """Write the model as the next version `<export_dir>/<model_name>/<n>/`
    of a TF Serving model (`Translator.export` with `search`, published
    atomically with its `warmup` requests); returns its path. `quantize`
    ("int8"): export a quantized copy of the model (`Translator.quantized`).
    `xla`: compile each search with XLA for the default buckets
    (`Translator.xla_compiled`; the export adds a warm-up request per
    bucket and writes `<export_dir>/batching_parameters.txt`)."""
    from keras_attention.serving.translator import SIGNATURES
    from keras_attention.serving.versions import write_warmup_requests

    translator = translator_for(
        model, source_tokenizer, target_tokenizer, max_length, search, numbers=numbers
    )
    # Most of an export is tracing each signature's search, then the save
    # (which traces only a call of each, `traced_once`): say which step is
    # running (stderr).
    started = time.perf_counter()
    if quantize is not None:
        progress(f"export: quantizing a copy of the model ({quantize}) ...")
        translator = translator.quantized(quantize)
    if xla:
        translator = translator.xla_compiled()
    for index, name in enumerate(SIGNATURES, 1):
        progress(f"export: tracing signature {index}/{len(SIGNATURES)} ({name}) ...")
        translator.function(name)  # traced once; `export` reuses it
    progress("export: writing the SavedModel and its warm-up requests ...")
    path = translator.export(
        export_dir,
        model_name,
        before_publish=lambda staging: write_warmup_requests(staging, model_name, warmup),
    )
    progress(f"export: done in {time.perf_counter() - started:.0f}s")
    return path


def progress(line):
    """A progress line of a long step, on stderr (stdout holds results)."""
    print(line, file=sys.stderr, flush=True)
