"""Data preparation that streams and runs once: the split, the vocabularies
learned from a seeded sample, and the training split tokenised once into
shards (`recipes/translation/shards.py`) that training reads.

Tiny generated corpora: each test takes seconds."""

import glob
import os
import random
import socket
import subprocess

import numpy as np
import pytest
from keras_attention_recipes.translation import shards as shards_module
from keras_attention_recipes.translation.data import (
    load_tokenizers,
    numbers_to_protect,
    vocabulary_sample,
)
from keras_attention_recipes.translation.pipeline import make_dataset, training_shards
from keras_attention_recipes.translation.splits import prepare, split_of

from keras_attention.tokenizers import train_sentencepiece

WORDS = "haus baum katze hund maus wald feld berg see fluss stadt dorf weg tag nacht".split()
ENGLISH = "house tree cat dog mouse forest field mountain lake river town village way day".split()


def write_corpus(path, pairs=600, seed=0):
    """A corpus of made-up sentences, some with numbers and some repeated."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(pairs):
            picks = [rng.randrange(len(ENGLISH)) for _ in range(rng.randint(2, 12))]
            number = f" {rng.randint(1, 2000)}" if index % 7 == 0 else ""
            handle.write(
                " ".join(WORDS[i] for i in picks) + number + "\t"
                + " ".join(ENGLISH[i] for i in picks) + number + "\n"
            )  # fmt: skip


class Config:
    protect_numbers = True


def prepared(output, corpus, sample=None, tokenizer="sentencepiece", max_length=12):
    """The split, vocabularies and shard set of a run: `(paths, tokenizers,
    numbers, shard folder)`."""
    logs = []
    paths = prepare(output, corpus, log=logs.append)
    tokenizers = load_tokenizers(output, paths, 300, logs.append, tokenizer, sample=sample)
    numbers = numbers_to_protect(Config, paths["train"], logs.append)
    folder = training_shards(paths["train"], *tokenizers, max_length, numbers, logs.append)
    return paths, tokenizers, numbers, folder


def files_of(output):
    """`{relative path: bytes}` of every file of a run's data and vocabularies."""
    found = {}
    for path in sorted(glob.glob(os.path.join(output, "**", "*"), recursive=True)):
        if os.path.isfile(path):
            found[os.path.relpath(path, output)] = open(path, "rb").read()
    return found


@pytest.mark.parametrize("sample", [None, 150])
def test_the_same_corpus_gives_the_same_split_vocabularies_and_shards(tmp_path, sample):
    corpus = str(tmp_path / "corpus.tsv")
    write_corpus(corpus)
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    prepared(first, corpus, sample)
    folder = prepared(second, corpus, sample)[3]
    made = files_of(first)
    assert made == files_of(second)
    names = sorted(os.path.relpath(path, folder) for path in glob.glob(f"{folder}/*"))
    assert names == ["chunk-00000.npy", "meta.json"]  # a chunk holds up to 65,536 pairs
    assert {"data/train.tsv", "data/valid.tsv", "data/test.tsv", "source.spm"} < set(made)
    assert not [name for name in os.listdir(os.path.dirname(folder)) if ".partial-" in name]


def test_the_vocabulary_sample_is_all_of_a_small_split_and_a_seeded_draw_of_a_large_one(
    tmp_path,
):
    path = str(tmp_path / "train.tsv")
    lines = [f"quelle {i}\tziel {i}" for i in range(1000)]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    pairs = [tuple(line.split("\t")) for line in lines]
    assert vocabulary_sample(path, 1000) == (pairs, 1000)  # all, in order
    drawn, total = vocabulary_sample(path, 100)
    assert total == 1000 and len(drawn) == len(set(drawn)) == 100
    assert drawn == sorted(drawn, key=pairs.index)  # kept in file order
    assert vocabulary_sample(path, 100) == (drawn, 1000)
    assert vocabulary_sample(path, 100, seed=1)[0] != drawn
    assert max(pairs.index(pair) for pair in drawn) > 500  # not the first 100


def test_sentencepiece_with_several_threads_gives_the_same_file_every_time(tmp_path):
    rng = random.Random(0)
    texts = [" ".join(rng.choices(WORDS, k=rng.randint(3, 15))) for _ in range(3000)]
    made = []
    for attempt in range(2):
        path = str(tmp_path / f"{attempt}.spm")
        train_sentencepiece(texts, path, 300, num_threads=4)
        made.append(open(path, "rb").read())
    assert made[0] == made[1]
    sampled = str(tmp_path / "sampled.spm")
    size = train_sentencepiece(texts, sampled, 300, input_sentence_size=500, num_threads=2)
    assert 0 < size <= 300


@pytest.mark.parametrize(  # WordPiece's case is large (`make test-large`)
    "tokenizer", ["sentencepiece", pytest.param("wordpiece", marks=pytest.mark.large)]
)
def test_training_from_shards_gives_the_text_pipeline_s_batches(tmp_path, tokenizer):
    corpus = str(tmp_path / "corpus.tsv")
    write_corpus(corpus)
    paths, tokenizers, numbers, folder = prepared(str(tmp_path / "run"), corpus, None, tokenizer)
    assert numbers is not None  # the corpus's numbers are protected in the shards too
    for shuffle in (False, True):
        made = [
            make_dataset(
                paths["train"], *tokenizers, 12, 8, shuffle, 3, batch_tokens=40,
                numbers=numbers, shards=shards,
            )
            for shards in (None, folder)
        ]  # fmt: skip
        assert made[0][1:] == made[1][1:]  # (kept, total)
        assert made[0][1] < made[0][2]  # some pairs are longer than 12 pieces
        batches = [list(data.as_numpy_iterator()) for data, _, _ in made]
        assert len(batches[0]) == len(batches[1]) == made[0][0].cardinality()
        if not shuffle:  # the same batches
            for ((source, target_in), target_out), shard in zip(*batches):
                assert np.array_equal(source, shard[0][0]) and source.dtype == shard[0][0].dtype
                assert np.array_equal(target_in, shard[0][1])
                assert np.array_equal(target_out, shard[1])
        else:  # the same pairs, in another order
            assert sorted(pairs_of(batches[0])) == sorted(pairs_of(batches[1]))


def pairs_of(batches):
    """Each pair of `((source, target_in), target_out)` batches as bytes."""
    found = []
    for (source, _), target_out in batches:
        for row in range(len(source)):
            found.append((source[row][source[row] > 0].tobytes(), target_out[row].tobytes()))
    return found


def dead_pid():
    """The id of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_shard_set_killed_while_written_is_written_again(tmp_path, monkeypatch):
    corpus = str(tmp_path / "corpus.tsv")
    write_corpus(corpus)
    output = str(tmp_path / "run")
    paths, tokenizers, numbers, folder = prepared(output, corpus)
    whole = files_of(folder)
    # A writer killed before its rename left a partial folder: the next
    # writer removes it; one stopped inside `write_shards` (here: before
    # the record) leaves none of its own.
    partial = f"{folder}.partial-{socket.gethostname()}-{dead_pid()}-x1y2"
    os.rename(folder, partial)
    os.remove(os.path.join(partial, "meta.json"))
    alive = f"{folder}.partial-{socket.gethostname()}-{os.getpid()}-x1y2"
    os.makedirs(alive)  # a writer at work now: left alone

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(shards_module.run_files, "write_json_atomically", killed)
    with pytest.raises(KeyboardInterrupt):
        training_shards(paths["train"], *tokenizers, 12, numbers)
    assert [name for name in os.listdir(os.path.dirname(folder)) if "shards" in name] == [
        os.path.basename(alive)
    ]
    os.rmdir(alive)
    monkeypatch.undo()
    # A folder without its record (not one `write_shards` renamed) is not used either.
    os.makedirs(folder)
    open(os.path.join(folder, "chunk-00000.npy"), "wb").write(b"half")
    assert training_shards(paths["train"], *tokenizers, 12, numbers) == folder
    assert files_of(folder) == whole
    assert [name for name in os.listdir(os.path.dirname(folder)) if "shards" in name] == [
        os.path.basename(folder)
    ]


def test_the_shard_key_follows_what_the_tokens_depend_on(tmp_path):
    corpus = str(tmp_path / "corpus.tsv")
    write_corpus(corpus)
    paths, tokenizers, numbers, folder = prepared(str(tmp_path / "run"), corpus)
    key = shards_module.shard_key
    assert os.path.basename(folder) == f"shards-{key(paths['train'], tokenizers, 12, numbers)}"
    others = {
        key(paths["train"], tokenizers, 13, numbers),
        key(paths["train"], tokenizers, 12, None),
        key(paths["train"], tokenizers[::-1], 12, numbers),
        key(paths["valid"], tokenizers, 12, numbers),
    }
    assert len(others) == 4 and os.path.basename(folder)[7:] not in others


def test_a_held_out_pair_whose_target_is_a_train_target_is_dropped(tmp_path):
    # Two sources of one target, one of them in train and one held out.
    sources = [f"satz nummer {i}" for i in range(400)]
    train = next(s for s in sources if split_of(s) == "train")
    held = next(s for s in sources if split_of(s) == "valid")
    corpus = str(tmp_path / "corpus.tsv")
    with open(corpus, "w", encoding="utf-8") as handle:
        handle.writelines(f"{s}\tsentence {i}\n" for i, s in enumerate(sources))
        handle.write(f"{train}\tthe same target\n{held}\tthe same target\n")
    logs = []
    paths = prepare(str(tmp_path / "run"), corpus, log=logs.append)
    assert "the same target" in open(paths["train"]).read()
    assert "the same target" not in open(paths["valid"]).read()
    assert "(1 held-out pairs dropped" in logs[-1]


def test_the_number_check_counts_a_split_once(tmp_path, monkeypatch):
    from keras_attention.tokenizers import number_rules as numbers_module

    corpus = str(tmp_path / "corpus.tsv")
    write_corpus(corpus)
    paths = prepare(str(tmp_path / "run"), corpus, log=[].append)
    logs = []
    assert numbers_to_protect(Config, paths["train"], logs.append) is not None

    def counted_again(text):
        raise AssertionError("counted again")

    monkeypatch.setattr(numbers_module, "numbers_in", counted_again)
    again = []
    assert numbers_to_protect(Config, paths["train"], again.append) is not None
    assert again == logs
    with open(paths["train"], "a", encoding="utf-8") as handle:
        handle.write("neu 12\tnew 12\n")
    with pytest.raises(AssertionError, match="counted again"):  # another file: counted
        numbers_to_protect(Config, paths["train"], again.append)
