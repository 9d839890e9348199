"""`train --distill-from RUN ...`: a student trained on its teachers'
translations of the training split (`recipes/translation/distillation.py`).
The teacher is the session's tiny trained run (`trained`)."""

import filecmp
import json
import os

import pytest
from keras_attention_recipes.translation.corpus import read_pairs
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import TINY, cli, run

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)
STUDENT = ["--family", "convs2s", "--embed-dim", "32", "--epochs", "1"]


@pytest.mark.large
def test_a_student_trains_on_what_its_teacher_translates(trained, tmp_path):
    """The student's training targets are the teacher's translations of
    the training split's sources, as `translate --input` prints them; its
    split, validation and vocabularies are the teacher's files; a second
    call reads the translations back instead of translating again."""
    from keras_attention_recipes import translate
    from keras_attention_recipes.translation.distillation import DISTILLED, distilled_split

    teacher, student = trained[0], tmp_path / "student"
    log = run("train", "--output", str(student), "--distill-from", teacher, *STUDENT, *TINY)
    pairs = read_pairs(os.path.join(teacher, "data", "train.tsv"))
    assert f"distillation: {teacher} translates the {len(pairs)} training sentences" in log
    distilled = read_pairs(str(student / "data" / DISTILLED))
    sources = tmp_path / "sources.txt"
    sources.write_text("".join(f"{source}\n" for source, _ in pairs), encoding="utf-8")
    printed = tmp_path / "printed.txt"
    run("translate", "--output", teacher, "--input", str(sources), "--output-file", str(printed))
    translations = printed.read_text(encoding="utf-8").splitlines()
    assert [source for source, _ in distilled] == [source for source, _ in pairs]
    expected = [t if t.strip() else ref for t, (_, ref) in zip(translations, pairs)]
    assert [target for _, target in distilled] == expected
    assert expected != [reference for _, reference in pairs]
    for name in ("data/train.tsv", "data/valid.tsv", "data/test.tsv", "source.spm", "target.spm"):
        assert filecmp.cmp(os.path.join(teacher, name), student / name, shallow=False), name
    settings = json.load(open(student / "run.json"))["settings"]
    assert settings["distill_from"] == [os.path.abspath(teacher)]
    assert (student / "model.keras").exists()
    before = os.stat(student / "data" / DISTILLED).st_mtime_ns
    lines = []
    config = translate.check(
        translate.parser().parse_args(
            ["train", "--output", str(student), "--distill-from", teacher, *STUDENT, *TINY]
        )
    )
    paths = {"train": str(student / "data" / "train.tsv")}
    assert distilled_split(config, paths, lines.append) == str(student / "data" / DISTILLED)
    assert os.stat(student / "data" / DISTILLED).st_mtime_ns == before
    read_back = "distillation: the teachers' translations of the training split: "
    assert lines == [f"{read_back}{student / 'data' / DISTILLED}"]


def test_a_teacher_of_other_data_itself_or_untrained_is_refused(trained, tmp_path, capsys):
    teacher = trained[0]
    status, _, err = cli(capsys, "tune", "--output", str(tmp_path), "--distill-from", teacher)
    assert status == 2 and "unrecognized arguments: --distill-from" in err, err  # train, demo
    output = str(tmp_path / "student")
    other = [*TINY[:4], "--vocab-size", "500", *TINY[6:]]
    status, _, err = cli(capsys, "train", "--output", output, "--distill-from", teacher, *other)
    assert status == 2 and err.count("\n") == 1, err
    assert f"--distill-from {teacher}: the student takes the teachers' data split" in err
    assert "vocab_size: 400 in the run, 500 now" in err
    assert not os.path.exists(output)  # a refused new run leaves nothing
    status, _, err = cli(capsys, "train", "--output", teacher, "--distill-from", teacher, *TINY)
    assert status == 2 and "is --output itself" in err, err
    missing = str(tmp_path / "nothing")
    status, _, err = cli(capsys, "train", "--output", output, "--distill-from", missing, *TINY)
    assert status == 2 and f"--distill-from {missing}: expected a trained run there" in err, err


def test_an_interrupted_distillation_resumes_after_its_last_whole_chunk(
    trained, tmp_path, monkeypatch
):
    """The translations made before an interruption (whole chunks, kept
    outside data/) are kept: only the rest is translated; a partial file
    of other sources is not used."""
    from keras_attention_recipes import translate
    from keras_attention_recipes.translation import distillation

    teacher, student = trained[0], tmp_path / "student"
    monkeypatch.setattr(distillation, "CHUNK", 40)
    argv = ["train", "--output", str(student), "--distill-from", teacher, *STUDENT, *TINY]
    config = translate.check(translate.parser().parse_args(argv))
    distillation.check_teachers(config)
    distillation.adopt_teacher_data(config, ["source.spm", "target.spm"])
    paths = {"train": str(student / "data" / "train.tsv")}
    pairs = read_pairs(paths["train"])
    partial = distillation.partial_path(config)
    with open(partial, "w", encoding="utf-8") as handle:  # 2 whole chunks and a torn line
        handle.writelines(f"{source}\tmade before\n" for source, _ in pairs[:80])
        handle.write(pairs[80][0][:5])
    lines = []
    path = distillation.distilled_split(config, paths, lines.append)
    assert "(resuming after 80)" in lines[0]
    targets = [target for _, target in read_pairs(path)]
    assert targets[:80] == ["made before"] * 80 and "made before" not in targets[80:]
    assert not os.path.exists(partial) and len(targets) == len(pairs)
    os.remove(path)
    with open(partial, "w", encoding="utf-8") as handle:  # another split's sources
        handle.writelines(f"other {source}\tmade before\n" for source, _ in pairs[:80])
    lines.clear()
    targets = [
        target
        for _, target in read_pairs(distillation.distilled_split(config, paths, lines.append))
    ]
    assert "resuming" not in lines[0] and "made before" not in targets
