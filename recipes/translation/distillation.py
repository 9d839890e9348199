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
import hashlib
import json
import os
import time

from .. import run_files, run_folders
from ..runs import UsageError
from .cluster import given
from .config import DATA_KEYS, DECODING, recorded_defaults, upgrade
from .corpus import read_pairs
from .text_io import append_pairs, write_pair_file
from .trained_run import (
    REMEDY,
    TrainedRun,
    check_one_vocabulary,
    check_same_numbers,
    finished,
)

DISTILLED = "train.distilled.tsv"  # in the run's data/ folder
# What to do about a teacher's damaged run.json.
TEACHER_REMEDY = "restore it, or name another trained run with --distill-from"
CHUNK = 1024  # sentences translated between two progress lines


def check_teachers(config):
    """`UsageError` before any work: each teacher must hold a finished
    trained run whose data settings (`run.json`) are the student's (the
    student takes its split and vocabularies), the teachers must share
    one vocabulary and number protection (they translate as one
    ensemble), none may be `--output` itself, and a `TF_CONFIG` cluster
    is refused (its workers would each translate the split)."""
    if given():
        raise UsageError(
            "--distill-from translates the training split in one process: train the student "
            "without a TF_CONFIG cluster"
        )
    current = {key: value for key, value in config.data_settings().items() if key in DATA_KEYS}
    first = config.distill_from[0]
    for teacher in config.distill_from:
        records = [os.path.join(teacher, name) for name in (run_folders.RUN_FILE, "config.json")]
        if not finished(teacher) or not all(os.path.exists(path) for path in records):
            raise UsageError(
                f"--distill-from {teacher}: expected a trained run there (model.keras, "
                f"config.json and run.json, no unfinished backup); found none: train it first"
            )
        recorded = run_files.read_json(
            os.path.join(teacher, run_folders.RUN_FILE),
            "the teacher's record",
            remedy=TEACHER_REMEDY,
        )
        recorded = upgrade(recorded.get("settings", {}))
        # a recurrent run records None: it has no shared vocabulary either
        recorded["shared_vocabulary"] = bool(recorded.get("shared_vocabulary"))
        differences = run_folders.differences(recorded, current, recorded_defaults(recorded))
        if differences:
            raise UsageError(
                f"--distill-from {teacher}: the student takes the teachers' data split and "
                f"vocabularies, so its data flags must be theirs ({'; '.join(differences)})"
            )
        check_one_vocabulary(first, teacher, "--distill-from", f"{first}'s")
        teacher_config, first_config = (
            run_files.read_json(
                os.path.join(run, "config.json"), "the trained model's settings", remedy=REMEDY
            )
            for run in (teacher, first)
        )
        check_same_numbers(first_config, teacher_config, teacher, "--distill-from", f"{first}'s")


def adopt_teacher_data(config, vocabularies):
    """Give `config.output` the first teacher's data split and vocabulary
    files (`vocabularies`: their names), copied when `--output` has none,
    else checked to be the same files (`check_teachers` has checked that
    the settings they were made with are the student's)."""
    teacher = config.distill_from[0]
    names = ("data", *vocabularies)
    held = [name for name in names if os.path.exists(os.path.join(config.output, name))]
    run_files.copy_missing(teacher, config.output, names, ignore=(DISTILLED,))
    for name in held:
        mine, theirs = os.path.join(config.output, name), os.path.join(teacher, name)
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


def partial_path(config):
    """Where the translations made so far are kept while the teachers
    translate: in `--output`, outside `data/` (which a new run that stops
    before its first epoch gives up), named by the teachers' paths and
    their models' times, so that other or retrained teachers start anew."""
    key = [
        (os.path.abspath(teacher), os.stat(os.path.join(teacher, "model.keras")).st_mtime_ns)
        for teacher in config.distill_from
    ]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:12]
    return os.path.join(config.output, f"distillation-{digest}.partial.tsv")


def distilled_split(config, paths, log=print):
    """The path of the training split with the teachers' translations as
    targets, made now unless the run has it (a pair whose translation came
    out empty keeps its reference, and is counted). The translations are
    appended to `partial_path` as they come, a chunk at a time: an
    interrupted run resumes from the last whole chunk."""
    path = os.path.join(os.path.dirname(paths["train"]), DISTILLED)
    if os.path.exists(path):
        log(f"distillation: the teachers' translations of the training split: {path}")
        return path
    teachers = config.distill_from
    teacher_config = dataclasses.replace(
        config,
        output=teachers[0],
        ensemble=list(teachers[1:]) or None,
        distill_from=None,  # the teachers decode: naming them again would name --output
        **dict.fromkeys(DECODING),  # the teachers' recorded decoding
    )
    teacher = TrainedRun(teacher_config)
    pairs = read_pairs(paths["train"])
    partial = partial_path(config)
    done = read_pairs(partial)[: len(pairs)] if os.path.exists(partial) else []
    done = done[: len(done) - len(done) % CHUNK]  # whole chunks only
    sources = [pair[0] for pair in done]
    if any(len(pair) != 2 for pair in done) or sources != [s for s, _ in pairs[: len(done)]]:
        done = []  # not this split's: start again
    what = "an ensemble of " + " and ".join(teachers) if len(teachers) > 1 else teachers[0]
    log(
        f"distillation: {what} translates the {len(pairs)} training sentences"
        + (f" (resuming after {len(done)})" if done else "")
        + " ..."
    )
    write_pair_file(done, partial)
    started, translations = time.perf_counter(), [target for _, target in done]
    for start in range(len(done), len(pairs), CHUNK):
        sources = [source for source, _ in pairs[start : start + CHUNK]]
        chunk = teacher.translate(sources)
        append_pairs(zip(sources, chunk), partial)
        translations += chunk
        rate = (len(translations) - len(done)) / (time.perf_counter() - started)
        log(f"distillation: {len(translations)}/{len(pairs)} sentences ({rate:.1f}/s)")
    empty = sum(1 for translation in translations if not translation.strip())
    distilled = [
        (source, translation if translation.strip() else reference)
        for (source, reference), translation in zip(pairs, translations)
    ]
    write_pair_file(distilled, path)
    os.remove(partial)
    log(
        f"distillation: {len(pairs)} pairs with the teachers' translations -> {path}"
        + (f" ({empty} empty translations kept their references)" if empty else "")
    )
    return path
