"""`--ensemble RUN ...` of evaluate, translate and export: a run ensembled
with a copy of itself translates and scores as the run alone (and
`scores.json` names the members); a run ensembled with
another model of its vocabulary (the run's weights, perturbed) is exported
as one SavedModel whose translations are those of `translate --ensemble`;
runs of another vocabulary, or `--output` itself, are refused in one line."""

import json
import os
import shutil

import keras
import pytest
from keras_attention_recipes.translation.settings import DING

from tests.translation_helpers import TEXTS, cli, export_via_cli, perturbed_copy, run, translations

pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.skipif(not os.path.exists(DING), reason=f"{DING} missing"),
]


@pytest.mark.large
def test_a_run_ensembled_with_its_copy_translates_as_the_run(trained, tmp_path):
    output, _ = trained
    copy = str(tmp_path / "copy")
    shutil.copytree(output, copy, ignore=shutil.ignore_patterns("backup", "checkpoints"))
    alone = translations(run("translate", "--output", output, *TEXTS))
    together = translations(run("translate", "--output", output, *TEXTS, "--ensemble", copy))
    assert together == alone and len(alone) == len(TEXTS)
    # evaluate: the same scores, and scores.json names the members.
    flags = ("--limit-test", "6", "--samples", "1")
    run("evaluate", "--output", copy, *flags)
    alone = json.load(open(os.path.join(copy, "scores.json")))
    log = run("evaluate", "--output", copy, "--ensemble", output, *flags)
    together = json.load(open(os.path.join(copy, "scores.json")))
    assert f"ensemble: {copy} and {output}" in log
    assert together["ensemble"] == [output] and "ensemble" not in alone
    assert (together["bleu"], together["chrf"]) == (alone["bleu"], alone["chrf"])


@pytest.mark.large
def test_an_ensemble_export_serves_what_translate_ensemble_prints(trained, tmp_path):
    import tensorflow as tf

    output, _ = trained
    other = perturbed_copy(output, tmp_path / "other", seed=1)
    flags = ("--output", output, "--ensemble", other, "--beam-width", "2")
    ensembled = translations(run("translate", *TEXTS, *flags))
    args = ["export", *flags, "--export-dir", str(tmp_path / "exports")]
    from keras_attention_recipes import translate

    path = export_via_cli(translate.parser().parse_args(args), log=lambda _: 0)
    served = tf.saved_model.load(path).signatures["serving_default"](text=tf.constant(TEXTS))
    assert [t.decode() for t in served["translation"].numpy()] == ensembled
    # Both members are in it: the variables hold twice the run's weights.
    from keras_attention.serving.records import export_record

    weights = keras.saving.load_model(os.path.join(output, "model.keras")).count_params() * 4
    assert 2 * weights <= export_record(path)["variables_bytes"] < 2.2 * weights


def test_runs_of_another_vocabulary_or_output_itself_are_refused(trained, tmp_path, capsys):
    output, _ = trained
    other = str(tmp_path / "other")
    shutil.copytree(output, other, ignore=shutil.ignore_patterns("backup", "checkpoints"))
    with open(os.path.join(other, "target.spm"), "ab") as handle:
        handle.write(b"\0")
    status, _, err = cli(capsys, "translate", "Hallo", "--output", output, "--ensemble", other)
    assert status == 2
    assert err.startswith(f"error: --ensemble {other}: its vocabulary {other}/target.spm is not")
    status, _, err = cli(capsys, "translate", "Hallo", "--output", output, "--ensemble", output)
    assert status == 2 and "is --output itself" in err
    # Texts after --ensemble are taken for runs: said so, not read as a missing model.
    status, _, err = cli(capsys, "translate", "--output", output, "--ensemble", other, "Hallo")
    assert status == 2
    assert err.startswith("error: --ensemble Hallo: no run folder there") and "before it" in err
