"""`train --members N` (recipes/translation/members.py): N runs of one
data split and vocabulary, trained at once by processes pinned to their
share of the cores, with seeds --seed, --seed + 1, ...; a re-run trains only
the members that did not finish, and refuses when all did."""

import filecmp
import os

import keras
import numpy as np
import pytest
from keras_attention_recipes.runs import UsageError
from keras_attention_recipes.translation.cluster import shares
from keras_attention_recipes.translation.members import Prefixed, member_folders
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import TINY, run

pytestmark = pytest.mark.tensorflow


def test_shares_split_the_devices_evenly_and_in_order():
    assert shares([0, 1], 2) == [[0], [1]]
    assert shares(range(5), 2) == [[0, 1, 2], [3, 4]]
    assert shares([4, 6, 7], 3) == [[4], [6], [7]]
    assert shares([0], 2) == [None, None]  # too few: each member gets everything
    assert shares([], 1) == [None]
    # More members than cores: one core each in turn, two to a core here.
    assert shares([0, 1], 4, wrap=True) == [[0], [1], [0], [1]]
    assert shares([2, 5, 7], 4, wrap=True) == [[2], [5], [7], [2]]
    assert shares([0, 1], 2, wrap=True) == [[0], [1]]  # enough cores: as without
    assert shares([], 2, wrap=True) == [None, None]  # nothing to share


def test_member_folders():
    assert member_folders("runs/x", 1) == ["runs/x"]
    assert member_folders("runs/x", 3) == [
        "runs/x",
        os.path.join("runs/x", "members", "2"),
        os.path.join("runs/x", "members", "3"),
    ]


def test_prefixed_prefixes_every_line_once(capsys):
    import sys

    stream = Prefixed(sys.stdout, "[m] ")
    stream.write("one\ntw")
    stream.write("o\n\nthree")
    stream.write("\n")
    assert capsys.readouterr().out == "[m] one\n[m] two\n[m] \n[m] three\n"


def test_members_flag_is_checked():
    with pytest.raises(UsageError, match="--members"):
        run("train", "--output", "unused", "--members", "0")


@pytest.mark.large
@pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing")
def test_members_share_a_vocabulary_differ_by_seed_and_resume(tmp_path):
    output = str(tmp_path / "run")
    flags = ("--output", output, "--family", "convs2s", "--epochs", "1", *TINY)
    # Member 1 trained alone (in this process), as an interrupted `--members`
    # run leaves it: the re-run trains member 2 only, in its own process.
    run("train", *flags)
    first_model = os.path.join(output, "model.keras")
    stamp = os.stat(first_model).st_mtime_ns
    log = run("train", *flags, "--members", "2")
    second = os.path.join(output, "members", "2")
    assert f"member 1: trained already ({output})" in log
    assert f"member 2: training in {second} (seed 1" in log
    if len(os.sched_getaffinity(0)) >= 2:  # its share of this process's cores
        assert "(seed 1, cores [" in log and "all cores" not in log
    assert f"--output {output} --ensemble {second}" in log
    assert os.stat(first_model).st_mtime_ns == stamp
    # One vocabulary and data split; the run's settings; other weights.
    for name in ("source.spm", "target.spm", "run.json", "data/train.tsv", "data/test.tsv"):
        assert filecmp.cmp(os.path.join(output, name), os.path.join(second, name), shallow=False)
    models = [keras.saving.load_model(os.path.join(f, "model.keras")) for f in (output, second)]
    first_weights, second_weights = (m.get_weights() for m in models)
    assert [w.shape for w in first_weights] == [w.shape for w in second_weights]
    assert not all(np.allclose(a, b) for a, b in zip(first_weights, second_weights))
    # Both finished: refused.
    with pytest.raises(UsageError, match="already holds its 2 trained members"):
        run("train", *flags, "--members", "2")
    # The members decode together.
    translated = run("translate", "--output", output, "Ich habe Zeit.", "--ensemble", second)
    assert "-> " in translated
