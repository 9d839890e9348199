"""Sequence-level knowledge distillation (Kim and Rush, 2016): a student
trains on its teacher's translations of the training split instead of the
references.

`train --distill-from RUN [RUN ...]`: the runs (one model, or an ensemble
of several, as `--ensemble` decodes them) translate the source side of
the training split with their recorded decoding settings (beam search),
and the student trains on `data/train.distilled.tsv`, those translations
beside their sources; validation, the test split and the dictionary
entries stay the corpus's. The student takes the teachers' data split and
vocabularies (copied into a new `--output`), so its data flags must be
theirs. The translations are made once per run: a resumed or re-run
student reads them back.

Example (a demo-sized model from the translator's two members):

    keras-attention-translate demo --output runs/distilled \\
        --distill-from runs/translator runs/translator/members/2
"""

import dataclasses
import filecmp
import os
import shutil
import time

from .. import runs
from .config import DATA_KEYS, UsageError, recorded_defaults, upgrade

DISTILLED = "train.distilled.tsv"  # in the run's data/ folder
CHUNK = 1024  # sentences translated between two progress lines


def check_teachers(config):
    """`UsageError` before any work: each teacher must hold a trained
    model, none may be `--output` itself, and a `TF_CONFIG` cluster is
    refused (its workers would each translate the split)."""
    for teacher in config.distill_from:
        if os.path.realpath(teacher) == os.path.realpath(config.output):
            raise UsageError(
                f"--distill-from {teacher} is --output itself: the teacher is another, trained run"
            )
        if not os.path.exists(os.path.join(teacher, "model.keras")):
            raise UsageError(
                f"--distill-from {teacher}: no trained model there "
                f"({os.path.join(teacher, 'model.keras')} is missing)"
            )
    if os.environ.get("TF_CONFIG"):
        raise UsageError(
            "--distill-from translates the training split in one process: train the student "
            "without a TF_CONFIG cluster"
        )


def adopt_teacher_data(config, vocabularies):
    """Give `config.output` the first teacher's data split and vocabulary
    files (`vocabularies`: their names), copied when `--output` has none,
    else checked to be the same files. `UsageError` when the teacher's
    data settings (`run.json`) are not the student's: its split and
    vocabularies would not be what the student's run records."""
    teacher = config.distill_from[0]
    recorded = runs.read_json(os.path.join(teacher, runs.RUN_FILE), "the teacher's run record")
    recorded = upgrade(recorded.get("settings", {}))
    current = {key: value for key, value in config.data_settings().items() if key in DATA_KEYS}
    # a recurrent run records None: it has no shared vocabulary either
    recorded["shared_vocabulary"] = bool(recorded.get("shared_vocabulary"))
    differences = runs.differences(recorded, current, recorded_defaults(recorded))
    if differences:
        raise UsageError(
            f"--distill-from {teacher}: the student takes its data split and vocabularies, "
            f"so its data flags must be the teacher's ({'; '.join(differences)})"
        )
    os.makedirs(config.output, exist_ok=True)
    for name in ("data", *vocabularies):
        mine, theirs = os.path.join(config.output, name), os.path.join(teacher, name)
        if not os.path.exists(mine):
            temporary = runs.temporary_path(mine)
            if name == "data":
                os.remove(temporary)  # copytree makes the folder
                shutil.copytree(theirs, temporary, ignore=shutil.ignore_patterns(DISTILLED))
            else:
                shutil.copyfile(theirs, temporary)
            os.replace(temporary, mine)
            continue
        same = (
            filecmp.cmp(os.path.join(mine, "train.tsv"), os.path.join(theirs, "train.tsv"), False)
            if name == "data"
            else filecmp.cmp(mine, theirs, shallow=False)
        )
        if not same:
            raise UsageError(
                f"--distill-from {teacher}: --output {config.output} already holds another "
                f"{'data split' if name == 'data' else 'vocabulary'} ({mine}); distil into a "
                "new --output"
            )


def distilled_split(config, paths, log=print):
    """The path of the training split with the teachers' translations as
    targets, made now unless the run has it (a pair whose translation came
    out empty keeps its reference, and is counted)."""
    from .config import run_decoding
    from .data import read_pairs
    from .decoding import number_protection, search_from_config, translate_texts
    from .training import load_decoder

    path = os.path.join(os.path.dirname(paths["train"]), DISTILLED)
    if os.path.exists(path):
        log(f"distillation: the teachers' translations of the training split: {path}")
        return path
    teachers = config.distill_from
    decoding = {name: None for name in ("beam_width", "alpha", "min_length")}
    decoding.update(no_repeat_ngram=None, repetition_penalty=None, coverage_penalty=None)
    teacher_config = dataclasses.replace(
        config, output=teachers[0], ensemble=list(teachers[1:]) or None, **decoding
    )
    model, run_config, source_tokenizer, target_tokenizer = load_decoder(teacher_config)
    search = search_from_config(run_decoding(teacher_config, run_config))
    pairs = read_pairs(paths["train"])
    what = "an ensemble of " + " and ".join(teachers) if len(teachers) > 1 else teachers[0]
    log(f"distillation: {what} translates the {len(pairs)} training sentences ...")
    started, translations = time.perf_counter(), []
    for start in range(0, len(pairs), CHUNK):
        sources = [source for source, _ in pairs[start : start + CHUNK]]
        translations += translate_texts(
            model,
            source_tokenizer,
            target_tokenizer,
            sources,
            run_config["max_length"],
            search,
            numbers=number_protection(run_config),
        )
        seconds = time.perf_counter() - started
        log(
            f"distillation: {len(translations)}/{len(pairs)} sentences "
            f"({len(translations) / seconds:.1f}/s)"
        )
    empty = sum(1 for translation in translations if not translation.strip())

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as handle:
            for (source, reference), translation in zip(pairs, translations):
                handle.write(f"{source}\t{translation if translation.strip() else reference}\n")

    runs.write_atomically(path, write)
    log(
        f"distillation: {len(pairs)} pairs with the teachers' translations -> {path}"
        + (f" ({empty} empty translations kept their references)" if empty else "")
    )
    return path
