"""A trained run, opened once: `TrainedRun` reads its record, settles its
decoding settings against the flags given (`settle_decoding`, the one place
that does), makes its search (`search_from_config`), loads its model (or
the ensemble `--ensemble` names) when first needed, and translates,
scores, exports and converts it. The commands are thin calls on it.

Below it, what reading a run needs: its model (`load_run`), the checks
that runs decode as one (`check_one_vocabulary`, `check_same_numbers`) and
that a run's vocabularies are its model's (`check_vocabularies`), whether
a run has finished training (`finished`), and the `Translator` kept per
model and search (`translator_for`: a file translated in chunks, or a BLEU
computed each epoch, traces its search once).

Example:

    run = TrainedRun(config)          # config.json read, decoding settled
    run.search                        # BeamSearch(beam_width=4, alpha=0.6, ...)
    run.translate(["Ich habe keine Zeit."])

Keras is imported when a search is made or a model loaded, not with the
module: `finished` and the checks serve `train --members`, whose processes
set their share of the CPU before TensorFlow starts.
"""

import filecmp
import functools
import json
import os
import sys
import time
import weakref

from .. import run_files, runs
from ..runs import UsageError
from .command_settings import BEAM_DEFAULTS
from .config import DECODING, DECODING_RENAMED, upgrade
from .data import graph_tokenizers, load_tokenizers, number_rules, vocabulary_paths
from .scores import bleu_by_length, corpus_scores, number_consistency
from .settings import FAMILIES
from .shortlists import learn_shortlist
from .text_translator import TextTranslator

# What to do about a damaged config.json or model.keras of a trained run.
REMEDY = "restore it, or train again with --overwrite"

_TRANSLATORS = weakref.WeakKeyDictionary()  # model -> {(tokenizers, length, search): Translator}


class TrainedRun:
    """The trained run in `config.output` (a `TranslationConfig` of a
    command that decodes it), with the runs of `config.ensemble` as the
    members of one `Ensemble`.

    Opening it reads the run's `config.json` (once: every later use reads
    what was read) and settles the decoding settings: `config` is the given
    one with each decoding setting not given taken from the run's record
    (`settle_decoding`: a flag given, else the run's recorded setting, else
    BeamSearch's default), validated, and `search` the `BeamSearch` it
    makes. The runs' files are checked when first needed (`records`), and
    the model and tokenizers load on first use (`model`, `tokenizers`):
    after the caller's own checks of its inputs.

    Attributes:
        output: the run's folder.
        config: the settled `TranslationConfig`.
        search: the `BeamSearch` of `config` (`search_from_config`).
    """

    def __init__(self, config):
        self.output = config.output
        # The flags are checked at once, against the run's record if it has
        # one; the run itself (its files, the ensemble) when first needed,
        # after the caller's checks of its inputs (`records`).
        recorded = os.path.exists(os.path.join(self.output, "config.json"))
        self._own = read_run_config(self.output) if recorded else None
        self.config = settle_decoding(config, self._own or {})
        self.search = search_from_config(self.config)
        self._loaded = None

    @functools.cached_property
    def records(self):
        """`{folder: config.json}` of the run and its `--ensemble` runs,
        checked: each is trained, holds the run's vocabulary and protects
        numbers as it does, and `--min-length` fits its translations."""
        check_trained(self.output)
        own = self._own or read_run_config(self.output)
        records = {self.output: own}
        for other in self.config.ensemble or ():
            check_one_vocabulary(self.output, other, "--ensemble", "--output's")
            check_trained(other)
            records[other] = read_run_config(other)
            check_same_numbers(own, records[other], other, "--ensemble", "--output's")
        check_min_length(self.config, records)
        return records

    @property
    def record(self):
        """The run's `config.json`; an ensemble's has its members' shortest
        `max_length` and their folders under "ensemble"."""
        own = self.records[self.output]
        if not self.config.ensemble:
            return own
        shortest = min(record["max_length"] for record in self.records.values())
        return {**own, "max_length": shortest, "ensemble": list(self.config.ensemble)}

    @property
    def max_length(self):
        """The longest source, in pieces, the run translates."""
        return self.record["max_length"]

    @property
    def numbers(self):
        """The run's `NumberProtection`, or None (`number_protection`)."""
        return number_protection(self.record)

    def _load(self):
        if self._loaded is None:
            from keras_attention.seq2seq import Ensemble  # Keras: loaded when a run is

            models = []
            for output, record in self.records.items():
                model, _, source, target = load_run(output, compile=False, record=record)
                models.append(model)
                if output == self.output:
                    tokenizers = (source, target)
            self._loaded = (models[0] if len(models) == 1 else Ensemble(models), tokenizers)
        return self._loaded

    @property
    def model(self):
        """The run's model, or the `Ensemble` of the runs' models."""
        return self._load()[0]

    @property
    def tokenizers(self):
        """`(source, target)`: the run's tokenizers (an ensemble shares them)."""
        return self._load()[1]

    def translator(self, search=None, batch_size=64):
        """The `Translator` of the run with `search` (None: `self.search`),
        made once per search and batch size (`translator_for`); without
        TensorFlow (`data.graph_tokenizers`), its twin `TextTranslator`,
        which translates alike (no unknown-word replacement)."""
        search = self.search if search is None else search
        self._needs_the_graph("a search that replaces unknown pieces", search.replace_unknown)
        return translator_for(
            self.model, *self.tokenizers, self.max_length, search, batch_size, self.numbers
        )

    @staticmethod
    def _needs_the_graph(what, given=True):
        """`UsageError` where `what`, `given`, needs the graph's Translator
        and TensorFlow is not installed."""
        if given and not graph_tokenizers():
            raise UsageError(
                f"{what} needs TensorFlow (the graph's Translator): install tensorflow and "
                "tensorflow-text, or leave it out"
            )

    def translate(self, texts):
        """The best translation of each of `texts` (`serving_default`, in
        process)."""
        return self.translator().translate(list(texts))

    def nbest(self, texts, n):
        """`score<TAB>translation` lines: `n` per text, best first, texts in
        order (the `nbest` signature, in process)."""
        rows = self.translator().nbest(list(texts), n)
        return [f"{score:.4f}\t{text}" for row in rows for text, score in row]

    def lines(self, nbest=None):
        """`sentences -> lines`: a translation each, or `nbest` N
        `score<TAB>translation` lines each."""
        if nbest:
            return lambda texts: self.nbest(texts, nbest)
        return self.translate

    def attention(self, texts):
        """For a heatmap of each text's best translation: `Translator.attention`'s
        dicts (`translation`, `source_tokens`, `target_tokens`, `weights`); a
        protected number's piece is labelled `<num>` (fonts have no glyph
        for the private-use placeholder)."""
        from keras_attention.tokenizers.number_rules import PLACEHOLDER

        self._needs_the_graph("attention heatmaps")
        maps = self.translator().attention(list(texts))
        for alignment in maps:
            for side in ("source_tokens", "target_tokens"):
                alignment[side] = [t.replace(PLACEHOLDER, "<num>") for t in alignment[side]]
        return maps

    @property
    def has_attention(self):
        """False for the bottleneck baseline (an RNN without attention)."""
        return not (self.record["family"] == "rnn" and self.record.get("attention") == "none")

    def evaluate(self, pairs):
        """`(scores, hypotheses)` of the run on `(source, reference)` pairs:
        corpus BLEU and chrF with their signatures, number consistency, BLEU
        by source length, and the settings they were decoded with."""
        sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
        hypotheses = self.translate(sources)
        scores = {
            **corpus_scores(hypotheses, references),
            **number_consistency(sources, hypotheses),
            "sentences": len(pairs),
            "beam_width": self.config.beam_width,
            "alpha": self.config.alpha,
            "bleu_by_source_length": bleu_by_length(sources, hypotheses, references),
            **({"ensemble": self.record["ensemble"]} if "ensemble" in self.record else {}),
        }
        return scores, hypotheses

    def shortlist(self, size):
        """The run's vocabulary `Shortlist` of `size` pieces per request
        (`shortlists.learn_shortlist`), or None for no `size`."""
        if size is None:
            return None
        return learn_shortlist(self.output, self.records[self.output], size, log=progress)

    def export(self, export_dir, model_name, warmup, quantize=None, xla=False, shortlist=None):
        """Write the run as the next version `<export_dir>/<model_name>/<n>/`
        of a TF Serving model with its `search` (`num_hypotheses` from the
        config), published atomically with its `warmup` requests; returns
        its path. `quantize` ("int8"): a quantized copy of the model.
        `xla`: each search compiled with XLA for the default buckets (a
        warm-up request per bucket, and `<export_dir>/batching_parameters.txt`).
        `shortlist`: each request decoded over that many target pieces
        (`shortlist`)."""
        from keras_attention.serving.exporters import get_exporter
        from keras_attention.serving.graph import SIGNATURES
        from keras_attention.serving.versions import write_warmup_requests

        search = search_from_config(self.config, num_hypotheses=self.config.num_hypotheses)
        # Most of an export is tracing each signature's search, then the
        # save (which traces only a call of each): say which step is running.
        started = time.perf_counter()
        if quantize is not None:
            progress(f"export: quantizing a copy of the model ({quantize}) ...")
        exporter = get_exporter(
            "saved_model", quantize=quantize, xla=xla, shortlist=self.shortlist(shortlist)
        )
        translator = exporter.prepared(self.translator(search))
        for index, name in enumerate(SIGNATURES, 1):
            progress(f"export: tracing signature {index}/{len(SIGNATURES)} ({name}) ...")
            translator.function(name)  # traced once; the export reuses it
        progress("export: writing the SavedModel and its warm-up requests ...")
        path = get_exporter("saved_model").export(  # `translator` is prepared already
            translator,
            export_dir,
            model_name,
            before_publish=lambda staging: write_warmup_requests(staging, model_name, warmup),
        )
        progress(f"export: done in {time.perf_counter() - started:.0f}s")
        return path

    def convert(
        self, directory, quantization=None, length_penalty=None, overwrite=False, shortlist=None
    ):
        """Write the run as the CTranslate2 model folder `directory`
        (`CTranslate2Exporter`), with its SentencePiece models beside it
        and its search as CTranslate2's `translate_batch` options; returns
        its path. `length_penalty`: CTranslate2's own (|Y|^length_penalty),
        which a beam search with alpha > 0 needs (GNMT's penalty is not
        CTranslate2's: alpha is never passed as it). `shortlist`: that many
        target pieces per request, as CTranslate2's vocabulary map."""
        from keras_attention.serving.exporters import get_exporter

        exporter = get_exporter(
            "ctranslate2",
            quantization=quantization,
            length_penalty=length_penalty,
            shortlist=self.shortlist(shortlist),
        )
        return exporter.export(
            self.translator(),
            directory,
            source_spm=os.path.join(self.output, "source.spm"),
            target_spm=os.path.join(self.output, "target.spm"),
            metadata={"converted_from": os.path.abspath(self.output)},
            overwrite=overwrite,
        )


def settle_decoding(config, record):
    """The one place where a run's recorded decoding options and the flags
    given are settled: `config` with each decoding setting not given on the
    command line taken from the run (`record`, its `config.json`: its
    "decoding", what it was trained or demonstrated with,
    `upgrade_decoding`), else BeamSearch's default; then validated."""
    recorded = upgrade_decoding(record.get("decoding") if isinstance(record, dict) else None)
    filled = {
        name: recorded.get(name, BEAM_DEFAULTS[name])
        for name in DECODING
        if getattr(config, name) is None
    }
    return config.replace(**filled).validate()


def decoding_settings(config):
    """The decoding settings a run records when it trains: the flags given,
    BeamSearch's defaults for the others."""
    return {
        name: BEAM_DEFAULTS[name] if getattr(config, name) is None else getattr(config, name)
        for name in DECODING
    }


def upgrade_decoding(recorded):
    """A run's recorded "decoding" dict with the keys renamed since it was
    written (`DECODING_RENAMED`: "no_repeat_ngram") under BeamSearch's names;
    `{}` for a run that recorded none."""
    if not isinstance(recorded, dict):
        return {}
    return {DECODING_RENAMED.get(key, key): value for key, value in recorded.items()}


def check_min_length(config, records):
    """`UsageError` when `--min-length` is beyond the longest translation
    of a run of `records` ({folder: config.json}): no translation could end."""
    for record in records.values():
        longest = record["max_length"] + 1
        if config.min_length is not None and config.min_length > longest:
            raise UsageError(
                f"--min-length {config.min_length} is beyond the run's longest translation, "
                f"{longest} pieces (its --max-length {record['max_length']} + 1): no "
                "translation could end; choose a smaller --min-length"
            )


def greedy():
    """Plain greedy search: what validation BLEU and the tuner decode with."""
    from keras_attention.seq2seq.sampling import GreedySearch

    return GreedySearch()


def search_from_config(config, beam_width=None, num_hypotheses=None):
    """The search the decoding flags of a `TranslationConfig` chose: a
    `BeamSearch` of its decoding settings (`DECODING`, BeamSearch's
    decoding options; one not given is BeamSearch's default) and
    `num_hypotheses`; `beam_width` overrides the config's. (A beam of 1
    without a coverage penalty decodes its best hypothesis greedily.)"""
    from keras_attention.seq2seq.search import BeamSearch

    options = {name: getattr(config, name) for name in DECODING}
    if beam_width:
        options["beam_width"] = beam_width
    options = {name: value for name, value in options.items() if value is not None}
    return BeamSearch(**options, num_hypotheses=num_hypotheses)


def number_protection(record):
    """The number protection of a trained run whose `config.json` says
    `protect_numbers` (what `data.numbers_to_protect` decided when it
    trained; `data.number_rules`), else None (`--no-protect-numbers`,
    corpora whose numbers are not copied). German <-> English: a copied
    number's `.` and `,` are exchanged where its form says decimal or
    thousands separators (`2,50` -> `2.50`, `1.000` <-> `1,000`), and
    times, dates and versions stay as written
    (`tokenizers.number_rules.copied_number`)."""
    if not record.get("protect_numbers", False):
        return None
    return number_rules()


def translator_for(
    model, source_tokenizer, target_tokenizer, max_length, search, batch_size=64, numbers=None
):
    """The `Translator` of `model` with these tokenizers, sources of at most
    `max_length` pieces, `search` (a search object, its config or name) and
    `numbers` (`number_protection`), made once and then reused (its graph
    functions are traced once); without TensorFlow (`data.graph_tokenizers`),
    its twin `TextTranslator`, which translates alike."""
    from keras_attention.seq2seq.search import get_search

    make = TextTranslator
    if graph_tokenizers():
        from keras_attention.serving import Translator

        make = Translator
    search = get_search(search)
    config = (type(search), repr(sorted(search.get_config().items())))
    protection = None if numbers is None else json.dumps(numbers.get_config(), sort_keys=True)
    key = (id(source_tokenizer), id(target_tokenizer), max_length, config, batch_size, protection)
    translators = _TRANSLATORS.setdefault(model, {})
    if key not in translators:
        translators[key] = make(
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
    search,
    batch_size=64,
    numbers=None,
):
    """The best translation of each string of `texts` with `search`, in
    batches of `batch_size` (the exported `serving_default`, run in
    process): what training's validation BLEU and the tuner use."""
    translator = translator_for(
        model, source_tokenizer, target_tokenizer, max_length, search, batch_size, numbers
    )
    return translator.translate(list(texts))


def progress(line):
    """A progress line of a long step, on stderr (stdout holds results)."""
    print(line, file=sys.stderr, flush=True)


def check_trained(output):
    """The path of the run's `model.keras`; `UsageError` saying how to make
    it when that or `config.json` is missing."""
    for name in ("model.keras", "config.json"):
        path = os.path.join(output, name)
        if not os.path.exists(path):
            raise UsageError(
                f"no trained model in {output} ({path} is missing): run `train --output {output}`"
            )
    return os.path.join(output, "model.keras")


def load_run(output, compile=True, record=None):
    """The trained model, its config and tokenizers from an --output folder:
    `(model, config, source, target)`. Every file is checked first (a
    damaged one is a `ValueError` naming it) and the vocabularies' sizes
    against the model's (`check_vocabularies`). `record`: the run's
    `config.json` when already read (`read_run_config`), so that it is
    read once. `compile=False` for a model that only decodes (no loss,
    metrics or optimizer state: faster to load, and no optimizer
    warning)."""
    import keras

    import keras_attention  # noqa: F401  (registers the model classes for loading)

    model_path = check_trained(output)
    config = read_run_config(output) if record is None else record
    source, target = load_tokenizers(output)
    check_vocabularies(output, (source, target), config, "config.json")
    try:
        model = keras.saving.load_model(model_path, compile=compile)
    except runs.DAMAGED_FILE_ERRORS as error:
        raise runs.unloadable_model(model_path, error, REMEDY) from None
    sizes = {f"{side}_vocab": getattr(model, f"{side}_vocab_size", None) for side in SIDES}
    check_vocabularies(output, (source, target), sizes, "model.keras")
    return model, config, source, target


def read_run_config(output):
    """The run's `config.json`, checked (`CONFIG_FIELDS`, a `max_length` >= 1,
    a known family) and `upgrade`d: the one read of it a command makes
    (`TrainedRun`, else `load_run`)."""
    config_path = os.path.join(output, "config.json")
    config = upgrade(
        run_files.read_json(
            config_path, "the trained model's settings", CONFIG_FIELDS, ("max_length",), REMEDY
        )
    )
    if config["max_length"] < 1 or config.get("family", "rnn") not in FAMILIES:
        raise UsageError(
            f"{config_path} (the trained model's settings) holds max_length "
            f"{config['max_length']!r}, family {config.get('family')!r}: it is damaged"
        )
    return config


def check_one_vocabulary(first, other, flag, whose):
    """`UsageError` unless run `other` (named with `flag`) holds the
    vocabulary files of run `first` (`whose`: how the message names it),
    byte for byte: runs that decode as one ensemble share one vocabulary,
    one segmentation (`--ensemble`, `--distill-from`)."""
    for mine, theirs in zip(vocabulary_paths(first), vocabulary_paths(other)):
        if not os.path.exists(theirs) or not filecmp.cmp(mine, theirs, shallow=False):
            raise UsageError(
                f"{flag} {other}: its vocabulary {theirs} is not {whose} ({mine}); "
                "an ensemble decodes with one vocabulary: train its runs with the same "
                "data settings (--vocab-size, --tokenizer, --limit, --dictionary, --alternatives)"
            )


def check_same_numbers(first_config, other_config, other, flag, whose):
    """`UsageError` unless the run `other` (its `config.json`:
    `other_config`) protects numbers as the first run does: an ensemble
    restores them once, for all its members."""
    protects = bool(other_config.get("protect_numbers"))
    if protects != bool(first_config.get("protect_numbers")):
        raise UsageError(
            f"{flag} {other} protects numbers {'' if protects else 'not '}as {whose} run "
            "does not: train them with the same --protect-numbers setting"
        )


SIDES = ("source", "target")
# What `load_run` reads from config.json, and of which JSON kind.
CONFIG_FIELDS = {
    "family": str,
    "attention": (str, None),
    "max_length": int,
    "protect_numbers": bool,
    "source_vocab": int,
    "target_vocab": int,
}


def check_vocabularies(output, tokenizers, recorded, where):
    """`UsageError` naming both sizes when a tokenizer of the run in
    `output` has another vocabulary size than `recorded` (`source_vocab`,
    `target_vocab`: the model's, as `where` records them): a vocabulary
    file of another run beside this model would translate with the wrong
    pieces, or fail on ids beyond the model's vocabulary."""
    paths = vocabulary_paths(output)
    for side, tokenizer, path in zip(SIDES, tokenizers, paths):
        size = recorded.get(f"{side}_vocab")
        if size is not None and size != tokenizer.vocab_size:
            raise UsageError(
                f"{path} has {tokenizer.vocab_size} pieces but the model's {side} vocabulary "
                f"({os.path.join(output, where)}) has {size}: the vocabulary is another run's; "
                "put the run's own vocabulary files beside its model"
            )


def finished(output):
    """True when `output` holds a trained model and no backup of an
    unfinished training."""
    backup = os.path.join(output, "backup")
    return os.path.exists(os.path.join(output, "model.keras")) and not (
        os.path.isdir(backup) and os.listdir(backup)
    )
