"""A `TransformerSeq2Seq` as a CTranslate2 model (`ctranslate2.Translator`).

    convert_to_ctranslate2(model, "ct2_model", quantization="int8",
                           source_spm="run/source.spm", target_spm="run/target.spm")

fills CTranslate2's own `ctranslate2.specs.TransformerSpec` with the
model's weights and saves it with CTranslate2's API (`validate`, `optimize`,
`save`): `model.bin`, `config.json`, the vocabularies, and the two
SentencePiece models copied as `source.spm` and `target.spm`. The folder is
written beside `output_dir` under a temporary name and renamed into place,
so it is the complete model or nothing; `keras_attention.json` marks it
as this function's, and `overwrite=True` replaces only such a folder (or
an empty one), swapping the new one in. `ctranslate2` is imported only
when a model is converted or translated with (`pip install ctranslate2`).

The spec itself, what it carries over and what it refuses, is
`ctranslate2_spec.py` (`build_spec`, re-exported here).
"""

import functools
import json
import os
import shutil
import tempfile

from keras_attention.files import umask_mode
from keras_attention.serving.ctranslate2_spec import (
    build_spec,
    vocabularies,
)
from keras_attention.tokenizers.characters import is_blank
from keras_attention.tokenizers.number_rules import protect_text, restore_text, sanitized
from keras_attention.tokenizers.pieces import clean_text
from keras_attention.validation import check_texts

# What `quantization` may be (None: keep float32): CTranslate2's weight
# types for CPU serving. `recipes/translation/config.py` copies this table.
QUANTIZATIONS = ("int8", "int8_float32", "float16")
METADATA = "keras_attention.json"  # the recipe's notes beside the model
# `METADATA`'s mark of a `length_penalty` that is CTranslate2's own
# (`exporters.CTranslate2Exporter`), not a run's GNMT alpha copied into it.
LENGTH_PENALTY_SET_BY = "CTranslate2Exporter"
# `METADATA`'s mark of a folder `convert_to_ctranslate2` wrote (`not_replaceable`).
CONVERTED_BY = "keras_attention.serving.ctranslate2.convert_to_ctranslate2"
# What a converted model's folder holds (CTranslate2's files and ours).
MODEL_FILES = (
    "model.bin",
    "config.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    "shared_vocabulary.json",
    "source_vocabulary.txt",
    "target_vocabulary.txt",
    "shared_vocabulary.txt",
    "source.spm",
    "target.spm",
)


def convert_to_ctranslate2(
    model,
    output_dir,
    quantization=None,
    source_spm=None,
    target_spm=None,
    source_tokens=None,
    target_tokens=None,
    unk_id=3,
    source_bos_eos=True,
    max_positions=None,
    metadata=None,
    overwrite=False,
    shortlist=None,
):
    """Write `model` (a `TransformerSeq2Seq`) as a CTranslate2 model folder.

    Args:
        model: a built `TransformerSeq2Seq` (float weights).
        output_dir: the folder to write (`ValueError` if it exists, unless
            `overwrite`); published atomically.
        quantization: None (float32), "int8", "int8_float32" or "float16"
            (`QUANTIZATIONS`), CTranslate2's weight types.
        source_spm, target_spm: the SentencePiece models of the run: their
            pieces are the vocabularies, and they are copied beside the
            model as `source.spm` and `target.spm`.
        source_tokens, target_tokens: token strings by id, without
            SentencePiece models (default: `str(id)`, the special ids as
            `[PAD]`, `[START]`, `[END]`, `[UNK]`).
        unk_id: the unknown token's id (the recipe's tokenizers: 3).
        source_bos_eos: CTranslate2 adds `[START]` and `[END]` around each
            source, as our tokenizers' `encode` does (True).
        max_positions: rows of a sinusoidal table (default
            max(1024, model.max_length)): the longest sequence CTranslate2
            can then encode or decode.
        metadata: optional JSON-able dict, written into
            `keras_attention.json` beside the model (the recipe records the
            run's decoding settings there), with `converted_by` and
            `files`, which mark the folder as one this function wrote.
        overwrite: replace an existing `output_dir` (through a symbolic
            link, the folder it names), but only an empty
            folder or a CTranslate2 model this function wrote
            (`not_replaceable`); any other folder is a `ValueError` naming
            it, so that nothing else is ever deleted. The new model is
            written beside it and swapped in.
        shortlist: a `seq2seq.shortlist.Shortlist` of the model's
            vocabularies, written as CTranslate2's vocabulary map
            (`vmap.txt`, which `translate_batch(use_vmap=True)` reads).

    Returns:
        `output_dir`.
    """
    output_dir = _checked_output_dir(output_dir, quantization, overwrite, source_spm, target_spm)
    spec = build_spec(
        model,
        source_tokens,
        target_tokens,
        source_spm,
        target_spm,
        unk_id,
        source_bos_eos,
        max_positions,
    )
    spec.optimize(quantization=quantization)
    vmap = None
    if shortlist is not None:
        tokens = vocabularies(model, source_tokens, target_tokens, source_spm, target_spm, unk_id)
        vmap = shortlist.vocabulary_map(*tokens)
    _publish(spec, output_dir, source_spm, target_spm, metadata, vmap)
    return output_dir


def _checked_output_dir(output_dir, quantization, overwrite, source_spm, target_spm):
    """`convert_to_ctranslate2`'s arguments checked before anything is
    built: returns `output_dir` as the real path it will write."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(
            f"convert_to_ctranslate2: quantization must be None or one of "
            f"{list(QUANTIZATIONS)}; received {quantization!r}"
        )
    if not isinstance(output_dir, (str, bytes, os.PathLike)) or not os.fspath(output_dir):
        raise ValueError(
            f"convert_to_ctranslate2: output_dir must name a folder to write; got {output_dir!r}"
        )
    # A symbolic link is written through, to the folder it names (as a
    # shell's redirection writes through a link to a file).
    output_dir = os.path.realpath(os.fsdecode(output_dir))
    if os.path.exists(output_dir) and not (overwrite and os.path.isdir(output_dir)):
        kind = "folder" if os.path.isdir(output_dir) else "file"
        raise ValueError(
            f"convert_to_ctranslate2: output_dir {output_dir} exists (a {kind}); choose "
            "another folder" + (" or pass overwrite=True" if kind == "folder" else "")
        )
    if os.path.isdir(output_dir):
        why = not_replaceable(output_dir)
        if why:
            raise ValueError(
                f"convert_to_ctranslate2: output_dir {output_dir} {why}: overwrite=True "
                "replaces only an empty folder or a CTranslate2 model convert_to_ctranslate2 "
                "wrote; choose another output_dir"
            )
    for name, path in (("source_spm", source_spm), ("target_spm", target_spm)):
        if path is not None and not os.path.isfile(path):
            raise ValueError(f"convert_to_ctranslate2: {name} {path} is not a file")
    return output_dir


def _publish(spec, output_dir, source_spm, target_spm, metadata, vmap=None):
    """Save `spec`, the SentencePiece models, the vocabulary map (`vmap`,
    lines: `vmap.txt`) and `METADATA` in a temporary
    folder beside `output_dir`, then rename it into place (or swap it with
    the folder `overwrite` replaces), so `output_dir` is the whole model or
    nothing."""
    parent, name = os.path.split(output_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(dir=parent, prefix=f".{name}.", suffix=".tmp")
    try:
        spec.save(staging)
        for path, copy in ((source_spm, "source.spm"), (target_spm, "target.spm")):
            if path is not None:
                shutil.copyfile(path, os.path.join(staging, copy))
        if vmap is not None:
            with open(os.path.join(staging, "vmap.txt"), "w", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in vmap))
        files = sorted([*os.listdir(staging), METADATA])
        marked = {**(metadata or {}), "converted_by": CONVERTED_BY, "files": files}
        with open(os.path.join(staging, METADATA), "w", encoding="utf-8") as handle:
            json.dump(marked, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.chmod(staging, umask_mode(0o777))
        if os.path.isdir(output_dir):  # overwrite: the new folder in, the old one out
            _swap(staging, output_dir)  # `staging` now holds the old model
            shutil.rmtree(staging, ignore_errors=True)
        else:
            os.rename(staging, output_dir)
    finally:
        if os.path.exists(staging):
            shutil.rmtree(staging, ignore_errors=True)


def not_replaceable(folder):
    """Why `convert_to_ctranslate2(..., overwrite=True)` may not replace the
    existing folder `folder`, or None when it may: it is empty, or it is a
    CTranslate2 model the function wrote (its `keras_attention.json` says
    `converted_by` and lists every file the folder holds; a model the
    recipe converted before that record, `converted_from`, holds only
    files such a model has)."""
    entries = sorted(os.listdir(folder))
    if not entries:
        return None
    record = None
    if os.path.isfile(os.path.join(folder, METADATA)):
        try:
            with open(os.path.join(folder, METADATA), encoding="utf-8") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            record = None
    if not isinstance(record, dict) or not (
        record.get("converted_by") == CONVERTED_BY or "converted_from" in record
    ):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        return f"is not a CTranslate2 model convert_to_ctranslate2 wrote (it holds {shown})"
    known = record.get("files") if record.get("converted_by") == CONVERTED_BY else None
    if not isinstance(known, list):  # written before the record listed the files
        known = [*MODEL_FILES, METADATA]
    others = [entry for entry in entries if entry not in known]
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        return f"holds files convert_to_ctranslate2 did not write ({shown})"
    return None


def _swap(new, old):
    """Exchange the folders `new` and `old` (same parent): atomically with
    Linux's renameat2(RENAME_EXCHANGE), so that `old`'s path always holds a
    whole model; elsewhere `old` is renamed away and `new` into its place.
    Afterwards `new`'s path holds the old folder."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (AttributeError, OSError):
        renameat2 = None
    if renameat2 is not None:
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(old), rename_exchange) == 0:
            return
    parent, name = os.path.split(old)
    aside = tempfile.mkdtemp(dir=parent, prefix=f".{name}.", suffix=".old")
    os.rename(old, os.path.join(aside, name))
    os.rename(new, old)
    os.rename(os.path.join(aside, name), new)
    os.rmdir(aside)


def restore_numbers(translation, source):
    """`NumberProtection(swap_separators=True).restore` in Python
    (`number_rules.restore_text`): the k-th placeholder of `translation`
    becomes the k-th digit group of `source`; one beyond them is left out
    with the space before it. The source is read as `sanitized` (a typed
    U+E000 or U+0001 is a space), and a U+0001 in `translation` is dropped,
    as in the graph."""
    return restore_text(translation, source, swap_separators=True)


def checked_translate_options(metadata, options, model_dir):
    """The `translate_batch` options of a folder's `metadata` that go to
    CTranslate2 under the caller's `options`. Our beam's length penalty,
    GNMT's ((5 + |Y|) / 6)^alpha, is not CTranslate2's |Y|^length_penalty,
    so a `length_penalty` is used only when CTranslate2Exporter set it
    (`LENGTH_PENALTY_SET_BY`) or the caller gives one: a folder whose
    `keras_attention.json` copied a run's alpha into `length_penalty` is a
    `ValueError` for a beam search, and so is an `alpha` option."""
    if "alpha" in options:
        raise ValueError(
            "`alpha` of translate_with_ctranslate2 is not a CTranslate2 option: our alpha "
            "is GNMT's ((5 + |Y|) / 6)^alpha, CTranslate2's length_penalty divides by "
            f"|Y|^length_penalty; received alpha={options['alpha']!r}. Pass length_penalty "
            "(CTranslate2's formula; 0 for the plain sum)."
        )
    recorded = dict(metadata.get("translate_batch", {}))
    penalty = recorded.get("length_penalty", 0)
    beam = options.get("beam_size", recorded.get("beam_size", 1))
    if (
        metadata.get("length_penalty_set_by") != LENGTH_PENALTY_SET_BY
        and "length_penalty" not in options
        and penalty
        and beam > 1
    ):
        raise ValueError(
            f"`length_penalty` of translate_with_ctranslate2 must be given for {model_dir}: "
            f"its {METADATA} holds length_penalty={penalty!r}, a run's GNMT alpha copied "
            "into CTranslate2's |Y|^length_penalty, which is a different penalty; pass "
            "length_penalty=... (CTranslate2's formula, 0 for the plain sum), beam_size=1, "
            "or convert again with exporters.CTranslate2Exporter."
        )
    return recorded


@functools.lru_cache(maxsize=8)
def _processors(sentencepiece, model_dir):
    """The folder's two SentencePiece processors, loaded once."""
    return tuple(
        sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, f"{side}.spm"))
        for side in ("source", "target")
    )


def _detokenize(processor, pieces):
    """The text of target `pieces` (strings), as
    `SentencePieceTokenizer.decode` writes it in the graph: a byte piece
    `<0xNN>` is byte NN, a control, unknown or unused piece nothing, any
    other the piece with `▁` as a space; leading spaces removed. Bytes
    that form no complete UTF-8 character (a lead byte without its
    continuation bytes, a lone continuation byte) are dropped, where
    `SentencePieceProcessor.decode` writes U+FFFD for each."""
    surfaces = []
    for piece in pieces:
        index = processor.piece_to_id(piece)
        if processor.is_byte(index):
            surfaces.append(bytes([int(piece[3:-1], 16)]))
        elif not (
            processor.is_control(index) or processor.is_unknown(index) or processor.is_unused(index)
        ):
            surfaces.append(piece.replace("\u2581", " ").encode("utf-8"))
    return b"".join(surfaces).decode("utf-8", "ignore").lstrip(" ")


def translate_with_ctranslate2(model_dir, texts, translator=None, protect_numbers=None, **options):
    """Translate `texts` (a list of strings, or UTF-8 bytes, as
    `Translator.translate` takes; a bare string is a `ValueError`) with a
    folder `convert_to_ctranslate2`
    wrote, as our `Translator.translate` does: SentencePiece pieces in
    (`source.spm`), CTranslate2's search, pieces out (`target.spm`),
    reserved pieces dropped, numbers protected and restored when the run
    did (`protect_numbers`; default: what `keras_attention.json` says).
    A U+E000 or U+0001 in a text is read as a space (`tokenizers.numbers.sanitized`);
    a blank text (only spaces and format characters, `tokenizers.characters.is_blank`)
    translates to "", as in the graph; incomplete UTF-8 byte sequences of
    byte pieces are dropped (`_detokenize`).
    `translator`: a `ctranslate2.Translator` of `model_dir` (default: a new
    one); `options` go to `translate_batch` (default: the run's
    `keras_attention.json` options, else CTranslate2's; a `length_penalty`
    there that is a run's alpha is refused, `checked_translate_options`).
    Needs the `sentencepiece` package."""
    texts = check_texts("texts", texts, "translate_with_ctranslate2")
    texts = [text.decode("utf-8") if isinstance(text, bytes) else text for text in texts]
    if translator is None and not os.path.isfile(os.path.join(model_dir, "model.bin")):
        raise ValueError(
            f"`model_dir` of translate_with_ctranslate2 must be a folder that "
            f"convert_to_ctranslate2 wrote (with model.bin); received model_dir={model_dir!r}."
        )
    import ctranslate2
    import sentencepiece

    metadata = {}
    if os.path.exists(os.path.join(model_dir, METADATA)):
        with open(os.path.join(model_dir, METADATA), encoding="utf-8") as handle:
            metadata = json.load(handle)
    if protect_numbers is None:
        protect_numbers = bool(metadata.get("protect_numbers", False))
    options = {**checked_translate_options(metadata, options, model_dir), **options}
    translator = translator or ctranslate2.Translator(model_dir, device="cpu")
    source_sp, target_sp = _processors(sentencepiece, os.path.abspath(model_dir))
    cleaned = [clean_text(sanitized(text)) for text in texts]
    protected = [clean_text(protect_text(text)) if protect_numbers else text for text in cleaned]
    todo = [index for index, text in enumerate(cleaned) if not is_blank(text)]
    pieces = source_sp.encode([protected[index] for index in todo], out_type=str)
    results = translator.translate_batch(pieces, **options) if todo else []
    reserved = {"[PAD]", "[START]", "[END]", "[UNK]"}
    translations = [""] * len(texts)
    for index, result in zip(todo, results):
        output = [piece for piece in result.hypotheses[0] if piece not in reserved]
        text = _detokenize(target_sp, output)
        translations[index] = restore_numbers(text, cleaned[index]) if protect_numbers else text
    return translations
