"""The translation recipe's files and run folders: unique
temporaries for atomic writes, `--output-file` onto links and read-only
files, the run folder's lock, nothing written by a refused `train`, damaged
run files, vocabularies of another run, `--min-length`, byte order marks,
directories given as files, and warnings on standard error.

None of these trains a model: the commands are refused before that, or
stopped where training would start."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from keras_attention_recipes import run_files, run_folders, runs
from keras_attention_recipes.translation import callbacks, training
from keras_attention_recipes.translation.corpus import CorpusError, read_pairs, tsv_pairs
from keras_attention_recipes.translation.settings import DING
from keras_attention_recipes.translation.splits import prepare
from keras_attention_recipes.translation.text_io import line_writer, read_pair_file, read_sentences

from tests.translation_helpers import ROOT, TINY, cli, run


def corpus(path, pairs=300, bom=False):
    """A TSV corpus of `pairs` distinct pairs (a byte order mark first with `bom`)."""
    text = "".join(f"Satz Nummer {i}.\tSentence number {i}.\n" for i in range(pairs))
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode())
    return str(path)


# -- 1. unique temporaries --------------------------------------------------------------
def test_an_atomic_write_leaves_files_of_the_temporary_s_old_name_alone(tmp_path):
    """`notes.txt` was written through `notes.tmp.txt`, deleting a user's file of that name."""
    from keras_attention.files import write_atomically

    mine = {name: tmp_path / name for name in ("notes.tmp.txt", "data.tsv.tmp", "v.spm.tmp")}
    for path in mine.values():
        path.write_text("mine")
    with line_writer(str(tmp_path / "notes.txt")) as write:
        write(["a", "b"])
    run_files.write_json_atomically(str(tmp_path / "notes.json"), {"a": 1})
    write_atomically(str(tmp_path / "v.spm"), b"pieces")
    assert (tmp_path / "notes.txt").read_text() == "a\nb\n"
    assert json.loads((tmp_path / "notes.json").read_text()) == {"a": 1}
    assert (tmp_path / "v.spm").read_bytes() == b"pieces"
    assert all(path.read_text() == "mine" for path in mine.values())
    assert sorted(os.listdir(tmp_path)) == sorted(
        [*mine, "notes.txt", "notes.json", "v.spm"]
    )  # no temporary left


def test_the_data_split_does_not_touch_files_of_its_old_temporary_names(tmp_path):
    output = tmp_path / "run"
    (output / "data").mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (output / "data" / f"{split}.tsv.tmp").write_text("mine")
    paths = prepare(str(output), corpus(tmp_path / "c.tsv"), log=lambda line: None)
    assert sum(len(read_pairs(path)) for path in paths.values()) <= 300
    for split in ("train", "valid", "test"):
        assert (output / "data" / f"{split}.tsv.tmp").read_text() == "mine"
    assert not [name for name in os.listdir(output / "data") if name.startswith(".")]


def test_two_writers_of_one_file_both_succeed_and_the_last_wins(tmp_path):
    """Both in the middle of their write at once: one failed with `[Errno 2]
    No such file ... 'same.tmp.txt' -> 'same.txt'` (the other had renamed it)."""
    target = str(tmp_path / "same.txt")
    both_writing = threading.Barrier(2)
    errors, finished = [], []

    def writer(text):
        def write(temporary):
            with open(temporary, "w") as handle:
                handle.write(text)
            both_writing.wait(timeout=10)

        try:
            run_files.write_atomically(target, write)
            finished.append(text)
        except Exception as error:  # noqa: BLE001  (the test reports it)
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(text,)) for text in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(finished) == 2
    with open(target) as handle:
        assert handle.read() in ("one", "two")
    assert os.listdir(tmp_path) == ["same.txt"]


def test_overwrite_deletes_temporaries_a_killed_write_left_and_nothing_of_the_user_s(tmp_path):
    left = os.path.basename(run_files.temporary_path(str(tmp_path / "model.keras")))
    assert left.startswith(".model.") and left.endswith(".tmp.keras")
    for name in ("run.json", ".mine.tmp", "mine.tmp.txt"):
        (tmp_path / name).write_text("{}")
    run_folders.delete_run(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [".mine.tmp", "mine.tmp.txt"]


# -- 2. --output-file onto a link or a read-only file -----------------------------------
def test_output_file_writes_through_a_symlink_and_keeps_the_file_s_mode(tmp_path):
    real, link = tmp_path / "real.txt", tmp_path / "link.txt"
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link.symlink_to(real)
    with line_writer(str(link)) as write:
        write(["new"])
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n" and (os.stat(real).st_mode & 0o777) == 0o640


def test_output_file_refuses_a_read_only_file_in_one_line(tmp_path, capsys):
    read_only = tmp_path / "ro.txt"
    read_only.write_text("keep\n")
    os.chmod(read_only, 0o444)
    status, out, err = cli(
        capsys, "translate", "--output", str(tmp_path), "--output-file", str(read_only), "Hallo."
    )
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --output-file {read_only} is read-only (mode -r--r--r--)"), err
    assert read_only.read_text() == "keep\n" and (os.stat(read_only).st_mode & 0o777) == 0o444
    link = tmp_path / "link.txt"  # through a link: the file it points to decides
    link.symlink_to(read_only)
    with pytest.raises(PermissionError, match="is read-only"):
        with line_writer(str(link)) as write:
            write(["new"])
    assert read_only.read_text() == "keep\n"


# -- 3. the run folder's lock ------------------------------------------------------------
HOLD = """
import sys, time
from keras_attention_recipes import run_files, run_folders, runs
with run_folders.locked(sys.argv[1], "train"):
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def test_a_second_train_into_one_folder_is_refused_naming_the_holder(tmp_path, capsys):
    """Both used to prepare the data; the second died in epoch 1 with HDF5's
    "unable to lock file (errno 11)"."""
    output = str(tmp_path / "run")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, output, "60"], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        status, out, err = cli(capsys, "train", "--output", output, *TINY)
        assert status == 2 and err.count("\n") == 1, err
        assert err.startswith(f"error: --output {output} is in use by process {holder.pid} on ")
        assert "(train, since " in err and "choose another --output" in err
        assert os.listdir(output) == [run_folders.LOCK_FILE]  # the second wrote nothing
    finally:
        holder.kill()
        holder.wait()
    # A killed holder's lock is taken over.
    with run_folders.locked(output, "train"):
        with open(os.path.join(output, run_folders.LOCK_FILE)) as handle:
            assert handle.read().startswith(f"process {os.getpid()} on ")
        with pytest.raises(run_folders.RunInUse, match=f"in use by process {os.getpid()} on "):
            with run_folders.locked(output, "train"):
                pass


def test_a_run_records_the_backend_and_keras_that_trained_it(trained):
    import keras

    with open(os.path.join(trained[0], "config.json"), encoding="utf-8") as handle:
        record = json.load(handle)
    assert (record["backend"], record["keras_version"]) == ("tensorflow", keras.__version__)


def test_the_lock_file_is_removed_by_its_holder_alone(tmp_path, trained):
    """`.run.lock` stayed in the run folder after a successful `train`."""
    assert not os.path.exists(os.path.join(trained[0], run_folders.LOCK_FILE))  # the shared run's
    output = str(tmp_path / "run")
    with run_folders.locked(output, "train"):
        with pytest.raises(run_folders.RunInUse):
            with run_folders.locked(output, "train"):
                pass
        # The refused process removed nothing: the holder's file is there.
        with open(os.path.join(output, run_folders.LOCK_FILE)) as handle:
            assert handle.read().startswith(f"process {os.getpid()} on ")
    assert os.listdir(output) == []


def test_a_lock_taken_on_a_file_its_holder_removed_is_taken_again(tmp_path, monkeypatch):
    """A process that opened `.run.lock` just before its holder removed it
    gets the flock of a file no one else can open: it must lock the file
    now at the path instead, or two processes would hold one folder."""
    output = str(tmp_path / "run")
    os.makedirs(output)
    path = os.path.join(output, run_folders.LOCK_FILE)
    flock, calls = run_folders.fcntl.flock, []

    def holder_removes_it_first(descriptor, operation):
        if not calls:  # the holder removes the file and another process creates it anew
            os.remove(path)
            open(path, "w").close()
        calls.append(operation)
        return flock(descriptor, operation)

    monkeypatch.setattr(run_folders.fcntl, "flock", holder_removes_it_first)
    with run_folders.locked(output, "train"):
        monkeypatch.setattr(run_folders.fcntl, "flock", flock)
        assert len(calls) == 2  # locked the removed file, then the one at the path
        with pytest.raises(run_folders.RunInUse):
            with run_folders.locked(output, "train"):
                pass
    assert os.listdir(output) == []


# -- 4. nothing written by a refused train ----------------------------------------------
@pytest.mark.parametrize(
    "flags,message",
    [
        (["--num-heads", "3", "--hidden-dim", "32"], "--num-heads 3 must divide --hidden-dim 32"),
        (["--corpus", "/nonexistent.tsv"], "--corpus /nonexistent.tsv: no such file"),
        (["--corpus", "/tmp"], "--corpus /tmp is a directory; expected a file"),
        (["--valid", "/nonexistent.tsv"], "--valid /nonexistent.tsv: no such file"),
        (["--dictionary", "0.5", "--corpus", "CORPUS"], "the dictionary entries are the Ding"),
        (["--corpus", "SMALL"], "the corpus gave 8 usable pairs"),  # refused after claiming
    ],
)
def test_a_refused_train_leaves_no_run_folder(tmp_path, capsys, flags, message):
    big, small = corpus(tmp_path / "big.tsv"), corpus(tmp_path / "small.tsv", pairs=8)
    flags = [{"CORPUS": big, "SMALL": small}.get(flag, flag) for flag in flags]
    output = str(tmp_path / "run")
    status, out, err = cli(capsys, "train", "--output", output, *flags)
    assert status == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert not os.path.exists(output)


class Reached(Exception):
    """Raised where training would begin."""


def test_the_corrected_train_is_not_refused_after_a_refusal(tmp_path, capsys, monkeypatch):
    """A refused `train` left `run.json` behind, and the corrected command was
    refused as "holds a run built with other settings"."""
    output, user_file = tmp_path / "run", tmp_path / "run" / "mine.txt"
    output.mkdir()
    user_file.write_text("mine")  # a folder the user made: kept, with their file
    small, big = corpus(tmp_path / "small.tsv", pairs=8), corpus(tmp_path / "big.tsv")
    status, out, err = cli(capsys, "train", "--output", str(output), "--corpus", small, *TINY)
    assert status == 2 and "usable pairs" in err
    assert os.listdir(output) == ["mine.txt"]

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(training, "datasets", stop)
    with pytest.raises(Reached):
        run("train", "--output", str(output), "--corpus", big, *TINY)
    assert user_file.read_text() == "mine"


# -- 5. damaged run files ----------------------------------------------------------------
@pytest.mark.parametrize(
    "text,message",
    [
        ("[]", "holds [] where a JSON object is expected: it is damaged"),
        ("{ damaged", "is not valid JSON"),
        ('{"settings": [1]}', "'settings' must be a JSON object; holds [1]: it is damaged"),
    ],
)
def test_a_damaged_run_json_is_one_error_line(tmp_path, capsys, text, message):
    """`[]` in run.json gave an `AttributeError` traceback."""
    (tmp_path / "run.json").write_text(text)
    status, out, err = cli(capsys, "train", "--output", str(tmp_path), *TINY)
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {tmp_path / 'run.json'} (the run's settings)")
    assert message in err


@pytest.mark.parametrize(
    "text,message",
    [
        ("[]", "holds [] where a JSON object is expected"),
        ('{"family": "rnn"}', "has no 'max_length': it is damaged"),
        ('{"max_length": "24"}', "'max_length' must be an integer; holds \"24\""),
        ('{"max_length": 24, "source_vocab": true}', "'source_vocab' must be an integer"),
        ('{"max_length": 0}', "holds max_length 0, family None: it is damaged"),
    ],
)
def test_a_damaged_config_json_is_one_error_line(tmp_path, capsys, text, message):
    (tmp_path / "model.keras").write_text("")
    (tmp_path / "config.json").write_text(text)
    status, out, err = cli(capsys, "translate", "--output", str(tmp_path), "Hallo.")
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert err.startswith(f"error: {tmp_path / 'config.json'} (the trained model's settings)")


def test_damaged_records_of_a_run_in_training_are_named(tmp_path):
    """The best epoch's record and the backup's epoch: a wrong kind was a
    `TypeError` from a comparison, `[]` an `AttributeError`."""
    record = tmp_path / "best.weights.h5.json"
    record.write_text('{"val_loss": "low", "epoch": 1}')
    with pytest.raises(ValueError, match="'val_loss' must be a number; holds \"low\""):
        callbacks.best_weights(str(tmp_path / "best.weights.h5"))
    (tmp_path / "latest.weights.h5").write_bytes(b"")  # the record beside its weights
    (tmp_path / "training_metadata.json").write_text("[]")
    with pytest.raises(ValueError, match=r"\(the backup's epoch\) holds \[\] where a JSON object"):
        runs.backup_position(str(tmp_path))


# -- 6. vocabularies of another run -------------------------------------------------------
def test_a_vocabulary_of_another_size_than_the_model_s_is_refused(tmp_path, capsys):
    """Another run's source.spm beside a model translated with the wrong
    pieces, or ended in `InvalidArgumentError: indices ... is not in [0, 500)`."""
    from keras_attention.tokenizers import train_sentencepiece

    texts = [f"Satz Nummer {i} mit Wörtern über {i * 7} Dinge." for i in range(300)]
    sizes = [train_sentencepiece(texts, str(tmp_path / f"{side}.spm"), 300) for side in "st"]
    os.rename(tmp_path / "s.spm", tmp_path / "source.spm")
    os.rename(tmp_path / "t.spm", tmp_path / "target.spm")
    (tmp_path / "model.keras").write_text("")
    config = {"family": "rnn", "max_length": 24, "source_vocab": 544, "target_vocab": sizes[1]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    status, out, err = cli(capsys, "translate", "--output", str(tmp_path), "Hallo.")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: {tmp_path / 'source.spm'} has {sizes[0]} pieces but the model's source "
        f"vocabulary ({tmp_path / 'config.json'}) has 544: the vocabulary is another run's"
    ), err


@pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing: the trained run needs it")
def test_the_model_s_own_vocabulary_sizes_are_checked(trained, tmp_path, capsys):
    """A run whose config.json does not record the sizes: the loaded
    model's are compared."""
    from keras_attention.tokenizers import train_sentencepiece

    output = tmp_path / "run"
    shutil.copytree(trained[0], output)
    config = json.loads((output / "config.json").read_text())
    model_size = config.pop("source_vocab")
    (output / "config.json").write_text(json.dumps(config))
    texts = [f"Satz Nummer {i} mit Wörtern über {i * 7} Dinge." for i in range(300)]
    size = train_sentencepiece(texts, str(output / "source.spm"), 300)
    assert size != model_size
    status, out, err = cli(capsys, "translate", "--output", str(output), "Hallo.")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: {output / 'source.spm'} has {size} pieces but the model's source vocabulary "
        f"({output / 'model.keras'}) has {model_size}"
    ), err


# -- 7. --min-length beyond the longest translation ----------------------------------------
@pytest.mark.parametrize("command", ["translate", "export"])
def test_min_length_beyond_the_run_s_longest_translation_is_refused(tmp_path, capsys, command):
    (tmp_path / "model.keras").write_text("")
    (tmp_path / "config.json").write_text('{"family": "rnn", "max_length": 24}')
    text = ["Hallo."] if command == "translate" else ["--export-dir", str(tmp_path / "e")]
    status, out, err = cli(
        capsys, command, "--output", str(tmp_path), "--min-length", "1000", *text
    )
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "error: --min-length 1000 is beyond the run's longest translation, 25 pieces"
    ), err


# -- 8. byte order marks -------------------------------------------------------------------
def test_a_byte_order_mark_is_stripped_wherever_files_are_read(tmp_path):
    """A BOM was kept in data/train.tsv as part of the first source sentence."""
    path = corpus(tmp_path / "bom.tsv", bom=True)
    first = next(tsv_pairs(path, []))
    assert first == ("Satz Nummer 0.", "Sentence number 0.")
    assert read_pair_file(path, "--valid", log=lambda line: None)[0] == first
    paths = prepare(str(tmp_path / "run"), path, log=lambda line: None)
    pairs = [pair for split in ("train", "valid", "test") for pair in read_pairs(paths[split])]
    assert len(pairs) > 250 and not any("\ufeff" in s + t for s, t in pairs)
    assert "Satz Nummer 0." in {source for source, _ in pairs}
    sentences = tmp_path / "in.txt"
    sentences.write_bytes("\ufeffHallo.\nWelt.\n".encode())
    assert read_sentences(str(sentences)) == ["Hallo.", "Welt."]
    record = tmp_path / "record.json"
    record.write_bytes('\ufeff{"epoch": 2}'.encode())
    assert run_files.read_json(str(record), "a record") == {"epoch": 2}
    from keras_attention_recipes.tuning import load_hyperparameters

    assert load_hyperparameters(str(record)) == {"epoch": 2}


# -- 9. a directory where a file is expected -------------------------------------------------
@pytest.mark.parametrize(
    "argv,flag",
    [
        (["translate", "--input", "DIR"], "--input"),
        (["evaluate", "--test", "DIR"], "--test"),
        (["train", "--corpus", "DIR"], "--corpus"),
        (["train", "--valid", "DIR"], "--valid"),
        (["train", "--hyperparameters", "DIR"], "--hyperparameters"),
    ],
)
def test_a_directory_given_as_a_file_is_named_a_directory(tmp_path, capsys, argv, flag):
    """`translate --input /tmp` said "no such file"; `--corpus /tmp` gave
    the raw `[Errno 21] Is a directory`."""
    folder = tmp_path / "folder"
    folder.mkdir()
    argv = [str(folder) if arg == "DIR" else arg for arg in argv]
    status, out, err = cli(capsys, *argv, "--output", str(tmp_path / "run"))
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: {flag} {folder} is a directory; expected a file"), err


def test_average_names_a_directory_given_as_a_checkpoint(tmp_path):
    from keras_attention_recipes.translation.averaging import average_run
    from keras_attention_recipes.translation.config import TranslationConfig

    config = TranslationConfig(command="average", checkpoints=[str(tmp_path)])
    with pytest.raises(ValueError, match=f"--checkpoints {tmp_path} is a directory"):
        average_run(config, (None, {}, None, None))


# -- 10. a corpus of copies of one sentence ---------------------------------------------------
def test_a_corpus_of_duplicates_is_told_that_duplicates_land_in_one_split(tmp_path):
    path = tmp_path / "same.tsv"
    path.write_text("Ich habe keine Zeit.\tI have no time.\n" * 600, encoding="utf-8")
    with pytest.raises(CorpusError) as refused:
        prepare(str(tmp_path / "run"), str(path), log=lambda line: None)
    message = str(refused.value)
    assert "600 usable pairs" in message and "only 1 distinct source sentence," in message
    assert "duplicates all land in one split" in message
    assert "larger --limit" not in message


# -- 11. warnings on standard error ----------------------------------------------------------
def test_skipped_corpus_lines_are_warned_of_on_stderr(tmp_path, capsys):
    path = tmp_path / "c.tsv"
    path.write_text("no tab here\n" + open(corpus(tmp_path / "ok.tsv")).read(), encoding="utf-8")
    prepare(str(tmp_path / "run"), str(path))  # the command line's log: print
    out, err = capsys.readouterr()
    assert "warning: " not in out and "corpus: " in out
    assert f"warning: {path}:1: expected 'source<TAB>target', found no tab; skipped" in err


@pytest.mark.parametrize("command", ["train", "tune"])
def test_train_overwrite_leaves_a_ctranslate2_model_folder_alone(tmp_path, capsys, command):
    """A CTranslate2 model's `config.json`, `source.spm` and `target.spm`
    have the names of a run's files, which `--overwrite` deletes."""
    folder = tmp_path / "ct2_model"
    folder.mkdir()
    for name in ("model.bin", "config.json", "source.spm", "target.spm", "keras_attention.json"):
        (folder / name).write_text(name)
    flags = ["--limit", "200"] if command == "tune" else TINY
    status, _, err = cli(capsys, command, *flags, "--output", str(folder), "--overwrite")
    assert status == 2 and err == (
        f"error: --output {folder} holds a CTranslate2 model (model.bin), not a run: "
        "choose another --output\n"
    ), err
    assert sorted(os.listdir(folder)) == sorted(
        ["model.bin", "config.json", "source.spm", "target.spm", "keras_attention.json"]
    )


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_folder_holding_a_run_s_names_but_no_run_is_refused_and_kept(tmp_path, capsys, overwrite):
    """A user's folder that holds files of a run's names (a corpus in data/,
    a config.json) but no run.json is no run: `train` (with or without
    --overwrite) refuses it and deletes none of it, even while abandoning
    the new run it refused."""
    folder = tmp_path / "project"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "corpus.tsv").write_text("Hallo.\tHello.\n")
    (folder / "config.json").write_text("{}")
    (folder / "notes.txt").write_text("mine")
    status, _, err = cli(capsys, "train", *TINY, "--output", str(folder), *overwrite)
    assert status == 2 and err == (
        f"error: --output {folder} holds config.json, data but no run.json: not a run of this "
        "recipe, and a run would write over those names (--overwrite deletes nothing there); "
        "choose another --output or move those files\n"
    ), err
    assert sorted(os.listdir(folder)) == ["config.json", "data", "notes.txt"]
    assert (folder / "data" / "corpus.tsv").read_text() == "Hallo.\tHello.\n"
    assert (folder / "config.json").read_text() == "{}"


def test_a_run_is_not_written_inside_another_run_or_over_a_folder_of_runs(tmp_path, capsys):
    """`train --output RUN/data` put a run inside another run's data,
    which that run's `--overwrite` then deleted; `train --output PARENT`
    wrote a run beside the runs it holds. Both are refused before any
    work, naming --output, for any folder inside a run (not only its own
    entries), also through a link; a run's members/ are runs of their own."""
    run = tmp_path / "tr"
    (run / "data").mkdir(parents=True)
    (run / "members" / "2").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (tmp_path / "link").symlink_to(run / "data")
    for output, message in [
        (run / "data", f"--output {run / 'data'} lies inside the run {run}"),
        (run / "data" / "x", f"--output {run / 'data' / 'x'} lies inside the run {run}"),
        (run / "mine", f"--output {run / 'mine'} lies inside the run {run}"),
        (run / "members" / "mine", f"--output {run / 'members' / 'mine'} lies inside the run"),
        (run / "members" / "1", f"--output {run / 'members' / '1'} lies inside the run {run}"),
        (tmp_path / "link" / "x", f"--output {tmp_path / 'link' / 'x'} lies inside the run {run}"),
        (tmp_path, f"--output {tmp_path} holds runs (tr): a run needs a folder of its own"),
    ]:
        status, _, err = cli(capsys, "train", *TINY, "--output", str(output), "--overwrite")
        assert status == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert sorted(os.listdir(run)) == ["data", "members", "run.json"]
    assert sorted(os.listdir(run / "data")) == []
    assert run_folders.is_member_folder(str(run / "members" / "2"))
    runs.check_output_folder("output", str(run / "members" / "2"))  # a member: accepted
    assert run_folders.enclosing_run(str(run / "checkpoints" / "a")) == str(run)
    assert run_folders.enclosing_run(str(run)) is None


@pytest.mark.parametrize("link", [False, True])
def test_no_command_writes_inside_a_run_folder(tmp_path, capsys, link):
    """One rule for every command that writes a folder or a file
    (`runs.check_outside_runs`): `convert --dir RUN/data/ct` was accepted
    and the next `train --overwrite` deleted it; `export --export-dir
    RUN/exports` was accepted too. Each is refused before any work, also
    through a symbolic link to the run's folder, and the run is untouched."""
    from keras_attention_recipes import bottleneck, spatial_transformer_digits

    run = tmp_path / "tr"
    (run / "data").mkdir(parents=True)
    (run / "run.json").write_text('{"settings": {}}')
    base = tmp_path / "link" if link else run
    if link:
        base.symlink_to(run)
    before = sorted(os.listdir(run))
    cases = {
        "--dir": ["convert", "--output", str(run), "--to", "ctranslate2", "--dir"],
        "--export-dir": ["export", "--output", str(run), "--export-dir"],
        "--output-file": ["translate", "--output", str(run), "Hallo.", "--output-file"],
    }
    for flag, argv in cases.items():
        for inside in (base / "data" / "x", base / "exports"):
            status, _, err = cli(capsys, *argv, str(inside))
            assert status == 2 and err.count("\n") == 1, err
            assert err.startswith(f"error: {flag} {inside} lies inside the run {run}: "), err
            assert "outputs go outside every run folder" in err
    # the versions go to <export-dir>/<model-name>: the run itself there
    status, _, err = cli(
        capsys, "export", "--output", str(run), "--export-dir", str(tmp_path), "--model-name", "tr"
    )
    assert status == 2 and err.startswith(
        f"error: --export-dir {tmp_path} with --model-name tr writes its versions into {run}, "
        "a run's folder: outputs go outside every run folder"
    ), err
    with pytest.raises(SystemExit) as exited:
        spatial_transformer_digits.main(["--export", "--export-dir", str(base / "exports")])
    assert exited.value.code == 2
    assert f"--export-dir {base / 'exports'} lies inside the run {run}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        bottleneck.main(["--tiny", "--output", str(base / "results")])
    assert exited.value.code == 2
    assert f"--output {base / 'results'} lies inside the run {run}" in capsys.readouterr().err
    assert sorted(os.listdir(run)) == before and os.listdir(run / "data") == []


def test_overwrite_removes_a_link_among_a_runs_entries_never_what_it_points_to(tmp_path):
    """A run's `data` that is a symbolic link (made by hand) is removed by
    `--overwrite` as a link: the folder it points to is the user's."""
    run, mine = tmp_path / "tr", tmp_path / "mine"
    run.mkdir()
    mine.mkdir()
    (mine / "corpus.tsv").write_text("Hallo.\tHello.\n")
    (run / "run.json").write_text('{"settings": {}}')
    (run / "data").symlink_to(mine)
    run_folders.delete_run(str(run))
    assert os.listdir(run) == [] and os.listdir(mine) == ["corpus.tsv"]


def test_export_refuses_a_run_folder_its_files_or_a_ctranslate2_model_as_export_dir(
    tmp_path, capsys
):
    run = tmp_path / "tr"
    (run / "data").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    ct2 = tmp_path / "ct2"
    ct2.mkdir()
    (ct2 / "model.bin").write_text("")
    for export_dir, message in [
        (run, f"--export-dir {run} is a run's folder"),
        (run / "data", f"--export-dir {run / 'data'} lies inside the run {run}: "),
        (run / "exports", f"--export-dir {run / 'exports'} lies inside the run {run}: "),
        (ct2, f"--export-dir {ct2} holds a CTranslate2 model (model.bin)"),
    ]:
        status, _, err = cli(
            capsys, "export", "--output", str(run), "--export-dir", str(export_dir)
        )
        assert status == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert sorted(os.listdir(run)) == ["data", "run.json"] and os.listdir(ct2) == ["model.bin"]


def test_a_model_holding_code_is_named_as_such_not_as_damaged(trained, tmp_path, capsys):
    """A `model.keras` that Keras's safe_mode refuses (a Lambda layer) was
    called "damaged; train again with --overwrite": it holds code that is
    not loaded, and the run may come from someone else."""
    import keras

    output = tmp_path / "run"
    shutil.copytree(trained[0], output)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Lambda(lambda x: x * 2)])
    model.save(str(output / "model.keras"))
    status, _, err = cli(capsys, "translate", "--output", str(output), "Hallo.")
    assert status == 2 and err.count("\n") == 1, err
    assert err.startswith(
        f"error: {output / 'model.keras'} holds Python code (a Lambda layer or a function) "
        "that Keras does not load by default (safe_mode): the recipes never save code"
    ), err
    (output / "model.keras").write_bytes(b"not a zip")
    status, _, err = cli(capsys, "translate", "--output", str(output), "Hallo.")
    assert status == 2 and "it is damaged; restore it, or train again with --overwrite" in err, err


# -- 6. every number bounded before any work ---------------------------------------------
HUGE = 10**30
# Numeric settings without a declared upper bound, and why.
UNBOUNDED = {
    "verbose": "its choices are 0, 1 and 2",
    "learning_rate": "a rate too large diverges: one error line, nothing kept, no integer made",
}


def test_every_numeric_setting_refuses_a_huge_value_before_anything_is_written(tmp_path, capsys):
    """`--update-freq 99999999999999999999999` passed the checks, wrote the
    split, vocabularies and shards, then ended in an OverflowError; the
    corrected command was refused since the bad value was recorded."""
    from keras_attention_recipes.runs import UsageError
    from keras_attention_recipes.translation.command_settings import FIELDS
    from keras_attention_recipes.translation.config import TranslationConfig

    numeric = [key for key, field in FIELDS.items() if field.type in (int, float)]
    assert {"update_freq", "epochs", "seed", "batch_size", "limit", "members"} <= set(numeric)
    small = corpus(tmp_path / "corpus.tsv")
    for key in numeric:
        if key in UNBOUNDED:
            continue
        commands = FIELDS[key].metadata["commands"]
        command = "train" if "train" in commands else commands[0]
        huge = HUGE if FIELDS[key].type is int else float(HUGE)
        with pytest.raises(UsageError, match=f"--{key.replace('_', '-')} "):
            TranslationConfig.for_command(command, **{key: huge}).validate()
        output = tmp_path / f"run-{key}"
        argv = [command, "--output", str(output)]
        if command == "train":
            argv += ["--corpus", small, *TINY]
        argv += [f"--{key.replace('_', '-')}", str(huge)]  # after TINY: the last flag wins
        if command == "average" and key != "last":
            argv += ["--last", "2"]
        if command == "convert":
            argv += ["--to", "ctranslate2", "--dir", str(tmp_path / "ct2")]
        if command == "translate":
            argv += ["Hallo."]
        status, out, err = cli(capsys, *argv)
        assert status == 2 and err.startswith(f"error: --{key.replace('_', '-')}"), (key, err)
        assert err.count("\n") == 1, (key, err)
        assert not os.path.exists(output), key


def test_an_update_freq_beyond_an_epoch_s_batches_is_refused_before_training(tmp_path, capsys):
    """With 9 batches an epoch, `--update-freq 1000` trained an epoch without
    one update and wrote the untrained model as "trained"."""
    small = corpus(tmp_path / "corpus.tsv")
    output = tmp_path / "run"
    status, out, err = cli(
        capsys, "train", "--output", str(output), "--corpus", small, *TINY, "--epochs", "1",
        "--update-freq", "1000",
    )  # fmt: skip
    assert status == 2 and err.count("\n") == 1, (out, err)
    assert err.startswith("error: --update-freq 1000 is more than the "), err
    assert "batches of an epoch" in err and "give --update-freq" in err, err
    assert not os.path.exists(output)  # a new run refused before training leaves nothing


# -- 7. a corpus edited after its split was made ------------------------------------------
def edit_in_place(path):
    """Change one sentence of the corpus, keeping its size."""
    text = open(path, encoding="utf-8").read()
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text.replace("Satz Nummer 7.", "Satz Nummer X."))


def test_a_corpus_edited_since_the_split_is_refused_not_silently_ignored(tmp_path):
    """`data/meta.json` recorded the corpus by its path: a run resumed after
    the file changed trained on the old split without a word."""
    source, output = corpus(tmp_path / "corpus.tsv"), str(tmp_path / "run")
    prepare(output, source, log=lambda _: None)
    os.utime(source, ns=(0, 0))  # touched (restored by a copy): the same bytes are accepted
    prepare(output, source, log=lambda _: None)
    edit_in_place(source)
    with pytest.raises(CorpusError, match=f"--corpus {source} changed since the run in"):
        prepare(output, source, log=lambda _: None)
    with open(source, "a", encoding="utf-8") as handle:  # another size: refused as well
        handle.write("Noch ein Satz.\tOne more sentence.\n")
    with pytest.raises(CorpusError, match="pass --overwrite to prepare the data again"):
        prepare(output, source, log=lambda _: None)
    # a split recorded before the fingerprint: its corpus is unknown, and accepted
    meta_path = os.path.join(output, "data", "meta.json")
    meta = json.load(open(meta_path))
    del meta["corpus_file"]
    run_files.write_json_atomically(meta_path, meta)
    prepare(output, source, log=lambda _: None)


def test_the_ding_corpus_upgraded_since_the_split_is_refused(tmp_path, monkeypatch):
    from keras_attention_recipes.translation import splits

    fake = corpus(tmp_path / "de-en")
    monkeypatch.setattr(splits, "DING", fake)
    monkeypatch.setattr(splits, "ding_pairs", lambda: tsv_pairs(fake, []))
    output = str(tmp_path / "run")
    prepare(output, log=lambda _: None)
    edit_in_place(fake)
    with pytest.raises(CorpusError, match=f"the Ding corpus {fake} .* changed since the run"):
        prepare(output, log=lambda _: None)


def test_a_run_resumed_on_an_edited_corpus_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    source, output = corpus(tmp_path / "corpus.tsv"), str(tmp_path / "run")

    def stop(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(training, "fit_streams", stop)  # the run is kept from here on
    with pytest.raises(Reached):
        run("train", "--output", output, "--corpus", source, *TINY, "--epochs", "1")
    edit_in_place(source)
    status, out, err = cli(capsys, "train", "--output", output, "--corpus", source, *TINY)
    assert status == 2 and err.count("\n") == 1, (out, err)
    assert err.startswith(f"error: --corpus {source} changed since the run in {output}"), err
    assert os.path.exists(os.path.join(output, "run.json"))  # nothing of the run is deleted


def test_a_corpus_of_a_format_not_read_is_refused_before_overwrite_deletes(tmp_path, capsys):
    """The compressed, NUL and CR-only refusals came while the data was
    prepared, after `--overwrite` had deleted the old run: they now come
    with the other checks of `train`'s inputs, and the run is kept."""
    run = tmp_path / "tr"
    run.mkdir()
    (run / "run.json").write_text('{"settings": {}}')
    (run / "model.keras").write_text("the old run's model")
    corpora = {
        "c.xz": b"\xfd7zXZ\x00\x00rest",
        "c.tsv": b"Hallo.\tHello.\rJa.\tYes.\r",
        "nul.tsv": b"Hallo.\x00\tHello.\n",
    }
    for name, data in corpora.items():
        (tmp_path / name).write_bytes(data)
        for flag in ("--corpus", "--valid"):
            status, _, err = cli(
                capsys, "train", *TINY, "--output", str(run), "--overwrite",
                flag, str(tmp_path / name),
            )  # fmt: skip
            assert status == 2 and err.startswith(f"error: {flag} {tmp_path / name} "), err
            assert sorted(os.listdir(run)) == ["model.keras", "run.json"]
