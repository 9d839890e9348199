"""The translation recipe on a 200-pair slice of the Ding corpus with tiny
models: train, evaluate, translate, tune, resume, distributed training and
tuning, and bad input."""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from recipes import translate
from recipes.translation_data import DING, SPLITS, split_of, tsv_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "--limit",
    "200",
    "--vocab-size",
    "400",
    "--units",
    "32",
    "--layers",
    "1",
    "--max-length",
    "24",
    "--batch-size",
    "32",
    "--verbose",
    "0",
]

pytestmark = pytest.mark.skipif(
    not os.path.exists(DING), reason=f"{DING} missing: make test installs trans-de-en"
)


def run(*argv):
    """Run the CLI in process, returning what it printed."""
    lines = []
    args = translate.parser().parse_args(list(argv))
    translate.check(args)
    {
        "train": translate.train,
        "evaluate": translate.evaluate,
        "translate": translate.translate_command,
        "tune": translate.tune,
    }[args.command](args, log=lines.append)
    return "\n".join(str(line) for line in lines)


# The fixture run's own validation file (`--valid`): one bad line, reported.
VALID = (
    "Ich habe keine Zeit.\tI have no time.\nkein Tab hier\n"
    "Wo ist der Bahnhof?\tWhere is the station?\nDas ist gut.\tThat is good.\n"
)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """An rnn trained 2 epochs on the tiny slice, validated on `VALID`,
    with validation BLEU each epoch and the mean of its 2 epochs saved as
    the model (issue 12's flags ride on the one run the tests share)."""
    output = str(tmp_path_factory.mktemp("run"))
    valid = str(tmp_path_factory.mktemp("valid") / "valid.tsv")
    with open(valid, "w", encoding="utf-8") as handle:
        handle.write(VALID)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = run(
            "train",
            "--output",
            output,
            "--family",
            "rnn",
            "--attention",
            "additive",
            "--epochs",
            "2",
            "--valid",
            valid,
            "--bleu-every",
            "1",
            "--bleu-sentences",
            "2",
            "--average-last",
            "2",
            *TINY,
        )
    # Keras warns when fit is given `shuffle` with a dataset or a dataset of
    # unknown length: neither is the user's business.
    noise = [str(w.message) for w in caught if re.search("shuffle|ran out of data", str(w.message))]
    assert not noise, noise
    return output, log


def test_ding_corpus_has_the_expected_size():
    from recipes.translation_data import ding_pairs

    pairs = list(ding_pairs())
    assert 17_000 <= len(pairs) <= 20_000
    assert all(de and en and en[-1] in ".!?" for de, en in pairs[:100])


def test_split_is_deterministic_and_stable():
    assert [split_of(s) for s in ("Ich habe keine Zeit.", "Wo ist der Bahnhof?")] == [
        split_of(s) for s in ("Ich habe keine Zeit.", "Wo ist der Bahnhof?")
    ]
    shares = np.bincount([SPLITS.index(split_of(f"Satz Nummer {i}.")) for i in range(4000)]) / 4000
    np.testing.assert_allclose(shares, [0.90, 0.05, 0.05], atol=0.02)


def test_train_writes_a_complete_run(trained):
    output, log = trained
    for name in (
        "model.keras",
        "config.json",
        "source.spm",  # SentencePiece, the default --tokenizer
        "target.spm",
        "data/train.tsv",
        "data/test.tsv",
    ):
        assert os.path.exists(os.path.join(output, name)), name
    assert os.listdir(os.path.join(output, "logs"))  # TensorBoard
    assert "training rnn with additive attention" in log and "validation loss" in log
    assert re.search(r"source vocabulary: \d+ SentencePiece \(unigram\) pieces from \d+ texts", log)
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["tokenizer"] == (
        "sentencepiece"
    )


def test_evaluate_reports_bleu_samples_and_heatmaps(trained):
    output, _ = trained
    log = run("evaluate", "--output", output, "--samples", "2", "--beam-width", "2")
    scores = json.load(open(os.path.join(output, "scores.json")))
    assert 0.0 <= scores["bleu"] <= 100.0 and 0.0 <= scores["chrf"] <= 100.0
    assert "BLEU" in log and "reference:" in log
    assert os.path.getsize(os.path.join(output, "attention", "sample0.png")) > 1000


def test_translate_prints_a_translation(trained):
    output, _ = trained
    log = run("translate", "--output", output, "Ich habe keine Zeit.", "")
    assert log.startswith("Ich habe keine Zeit.\n  -> ")


def test_translating_empty_text_gives_empty_text_as_the_export_does(trained):
    """The export answers "" for empty or all-space text (`check_export`);
    the CLI printed whatever the model generated from `[START] [END]`."""
    output, _ = trained
    sentence = "Ich habe keine Zeit."
    log = run("translate", "--output", output, sentence, "", " \t ", sentence)
    lines = log.split("\n")
    assert lines[3] == "  -> " and lines[5] == "  -> ", lines
    # the sentence is translated as it is alone, before and after the blanks
    # (the tiny model may well write "" for it: what it writes is not tested)
    alone = run("translate", "--output", output, sentence).split("\n")
    assert lines[1] == lines[7] == alone[1], (lines, alone)


def test_translating_in_chunks_traces_the_search_once_and_agrees(trained):
    """A file is translated 64 lines at a time and validation BLEU once an
    epoch: the compiled search is reused, not traced again each call."""
    output, _ = trained
    model, config, source_tokenizer, target_tokenizer = translate.load_run(output)
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?", "Ja.", "", "Das ist gut."]
    common = (model, source_tokenizer, target_tokenizer, texts, config["max_length"], 2)
    whole = translate.translate_texts(*common)
    in_pairs = translate.translate_texts(*common, batch_size=2)
    assert in_pairs == whole and whole[3] == ""
    search = translate.compiled_search(model, config["max_length"], 2, False, {})
    assert search.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("family", ["transformer"])  # convs2s: its export test trains one
def test_other_families_train(tmp_path, family):
    """(With WordPiece, the other --tokenizer: the other tests use SentencePiece.)"""
    flags = ("--family", family, "--epochs", "1", "--tokenizer", "wordpiece")
    log = run("train", "--output", str(tmp_path), *flags, *TINY)
    assert json.load(open(tmp_path / "config.json"))["family"] == family
    assert re.search(r"source vocabulary: \d+ WordPiece tokens from \d+ texts", log)
    assert os.path.exists(tmp_path / "target.vocab") and not os.path.exists(tmp_path / "source.spm")


def test_interrupted_training_resumes(tmp_path):
    command = [
        sys.executable,
        "-m",
        "recipes.translate",
        "train",
        "--output",
        str(tmp_path),
        "--family",
        "rnn",
        "--epochs",
        "30",
        *TINY,
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    backup = tmp_path / "backup"
    deadline = time.time() + 120
    while time.time() < deadline and not (backup.exists() and any(backup.iterdir())):
        time.sleep(0.5)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    output = process.communicate(timeout=240)[0]  # a loaded CI machine
    assert "interrupted: re-run the same command to resume" in output, output[-2000:]
    assert "Traceback" not in output
    log = run("train", "--output", str(tmp_path), "--family", "rnn", "--epochs", "30", *TINY)
    assert "resuming an interrupted run" in log
    assert os.path.exists(tmp_path / "model.keras")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_workers_train_to_identical_weights(tmp_path):
    """Into a fresh --output: the chief prepares the data and vocabularies,
    the other worker waits for them (both preparing at once crashed)."""
    prepared = tmp_path / "run"
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    processes = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "recipes.translate",
                    "train",
                    "--output",
                    str(prepared),
                    "--family",
                    "rnn",
                    "--epochs",
                    "1",
                    "--seed",
                    "3",
                    *TINY,
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=240)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs[0][-2000:] + outputs[1][-2000:]
    assert "on 2 replica(s)" in outputs[0]
    worker_dirs = [d for d in os.listdir(prepared) if d.startswith("worker-")]
    assert len(worker_dirs) == 1

    def weights(path):
        import h5py

        arrays = {}
        with h5py.File(path, "r") as handle:
            handle.visititems(
                lambda name, item: (
                    arrays.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset) else None
                )
            )
        return arrays

    chief = weights(str(prepared / "final.weights.h5"))
    other = weights(str(prepared / worker_dirs[0] / "final.weights.h5"))
    assert chief.keys() == other.keys() and len(chief) > 5
    for name in chief:
        np.testing.assert_array_equal(chief[name], other[name], err_msg=name)


def test_tuning_runs_resumes_and_writes_best_hyperparameters(tmp_path):
    args = [
        "tune",
        "--output",
        str(tmp_path),
        "--algorithm",
        "random",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--families",
        "rnn",
        "transformer",
        "--bleu-trials",
        "1",
        "--limit",
        "200",
        "--vocab-size",
        "400",
        "--max-length",
        "24",
        "--verbose",
        "0",
    ]
    log = run(*args)
    best = json.load(open(tmp_path / "best_hyperparameters.json"))
    assert best["family"] in ("rnn", "transformer") and "learning_rate" in best
    # Only the transformer has heads, and its embedding width is its units.
    assert ("heads" in best) == (best["family"] == "transformer")
    assert ("position" in best) == ("kv_heads" in best) == (best["family"] == "transformer")
    assert ("embed_dim" in best) == (best["family"] != "transformer")
    assert "validation BLEU" in log
    trials = sorted(
        d for d in os.listdir(tmp_path / "tuning" / "translate") if d.startswith("trial_")
    )
    assert len(trials) == 2
    run(*args)  # resumes: nothing left to do
    assert (
        sorted(d for d in os.listdir(tmp_path / "tuning" / "translate") if d.startswith("trial_"))
        == trials
    )
    # train accepts the best hyperparameters
    run(
        "train",
        "--output",
        str(tmp_path / "best"),
        "--hyperparameters",
        str(tmp_path / "best_hyperparameters.json"),
        "--epochs",
        "1",
        *TINY,
    )


def test_distributed_tuning_runs_every_trial_once(tmp_path):
    output, logs = tmp_path / "tune", tmp_path / "logs"
    run(
        "train", "--output", str(output), "--epochs", "1", "--family", "rnn", *TINY
    )  # data and vocabularies once
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipes.distributed_tuning",
            "--workers",
            "2",
            "--port",
            str(free_port()),
            "--logs",
            str(logs),
            "--",
            "--output",
            str(output),
            "--algorithm",
            "random",
            "--trials",
            "3",
            "--epochs",
            "1",
            "--families",
            "rnn",
            "--bleu-trials",
            "0",
            *TINY[:4],
            "--max-length",
            "24",
            "--verbose",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    trial_dirs = [d for d in os.listdir(output / "tuning" / "translate") if d.startswith("trial_")]
    assert len(trial_dirs) == 3
    statuses = [
        json.load(open(output / "tuning" / "translate" / d / "trial.json"))["status"]
        for d in trial_dirs
    ]
    assert statuses == ["COMPLETED"] * 3
    ran = sum(open(logs / f"tuner{i}.log").read().count("Search: Running Trial") for i in range(2))
    assert ran in (0, 3)  # when the log shows trials, each ran exactly once


# -- bad input -------------------------------------------------------------------------
def test_tsv_problems_are_reported_by_line(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(
        b"Hallo Welt.\tHello world.\n\nno tab here\n\xff\xfe broken\tbytes\n"
        b"\tempty source\nGut.\tGood.\n"
    )
    problems = []
    pairs = list(tsv_pairs(str(path), problems))
    assert pairs == [("Hallo Welt.", "Hello world."), ("Gut.", "Good.")]
    assert problems[0].endswith(":3: expected 'source<TAB>target', found no tab; skipped")
    assert (
        ":4: not valid UTF-8" in problems[1]
        and ":5: expected exactly one non-empty source and target" in problems[2]
    )


def test_a_carriage_return_inside_a_line_is_reported_and_skipped(tmp_path):
    """Text-mode reading took a bare \\r for a line end while the TSV reader
    did not: the split file then held a line without a tab (IndexError)."""
    from recipes.translation_data import prepare, read_pairs

    path = tmp_path / "corpus.tsv"
    good = "".join(f"Satz Nummer {i}.\tSentence number {i}.\r\n" for i in range(300))
    path.write_bytes(b"Hallo\rWelt.\tHello world.\n" + good.encode())
    log = []
    paths = prepare(str(tmp_path / "run"), str(path), log=log.append)
    assert any(":1: a carriage return" in line and "skipped" in line for line in log), log
    pairs = [pair for split in SPLITS for pair in read_pairs(paths[split])]
    assert len(pairs) == 300 and all(len(pair) == 2 for pair in pairs)
    assert all("\r" not in source + target for source, target in pairs)


def test_too_small_corpus_stops_with_a_message(tmp_path, capsys):
    path = tmp_path / "corpus.tsv"
    path.write_text("".join(f"Satz {i}.\tSentence {i}.\n" for i in range(8)), encoding="utf-8")
    with pytest.raises(SystemExit) as stop:
        translate.main(["train", "--corpus", str(path), "--output", str(tmp_path / "run")])
    assert stop.value.code == 2
    assert re.search(
        r"^error: the corpus gave 8 usable pairs .* needs at least", capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "argv,message",
    [
        (["train", "--family", "lstm"], "invalid choice: 'lstm'"),
        (["train", "--epochs", "0"], "error: --epochs must be >= 1; got 0"),
        (
            ["train", "--family", "convs2s", "--attention", "additive"],
            "error: --attention chooses the recurrent model",
        ),
        (
            ["train", "--corpus", "/nonexistent.tsv"],
            "error: --corpus /nonexistent.tsv: no such file",
        ),
        (
            ["evaluate", "--output", "/nonexistent-run"],
            "error: no trained model in /nonexistent-run",
        ),
        (["translate", "--output", "/nonexistent-run"], "error: give the text to translate"),
    ],
)
def test_cli_errors_are_messages_not_tracebacks(tmp_path, argv, message):
    argv = argv + (["--output", str(tmp_path)] if "--output" not in argv else [])
    result = subprocess.run(
        [sys.executable, "-m", "recipes.translate", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,  # `translate` reads a standard input that is not a terminal
    )
    assert result.returncode != 0
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr[-1500:]
    if message.startswith("error:"):  # one line: no TensorFlow start-up noise (cuInit, oneDNN)
        assert result.returncode == 2 and result.stderr == message_line(result.stderr)


def message_line(stderr):
    return stderr.splitlines()[-1] + "\n"


def test_mixed_precision_training(tmp_path):
    import keras

    log = run(
        "train",
        "--output",
        str(tmp_path),
        "--family",
        "transformer",
        "--epochs",
        "1",
        "--mixed-precision",
        "bfloat16",
        *TINY,
    )
    assert "validation loss" in log and "nan" not in log.split("validation loss")[1]
    keras.mixed_precision.set_global_policy("float32")


def test_export_loads_in_plain_tensorflow_and_matches_in_process(trained, tmp_path):
    check_export(trained[0], tmp_path)


@pytest.mark.parametrize("family", ["convs2s"])  # the transformer: the test below
def test_export_of_the_other_families(tmp_path, family):
    run("train", "--output", str(tmp_path / "run"), "--family", family, "--epochs", "1", *TINY)
    check_export(str(tmp_path / "run"), tmp_path)


def check_export(output, tmp_path):
    """The exported translator runs in a fresh process that imports only
    tensorflow and tensorflow_text, from a moved directory, and gives the
    in-process model's tokens and scores; an empty request gives empty
    outputs from every signature."""
    import tensorflow as tf

    from keras_attention.seq2seq.generation import greedy_search

    path = translate.export_command(
        translate.parser().parse_args(
            [
                "export",
                "--output",
                output,
                "--export-dir",
                str(tmp_path / "exports"),
                "--beam-width",
                "2",
            ]
        ),
        log=lambda _: 0,
    )
    moved = tmp_path / "moved"
    shutil.move(path, moved)  # assets must be relative
    texts = [
        "Ich habe keine Zeit.",
        "Wo ist der Bahnhof?",
        "",
        "Das ist ein sehr langer Satz " * 10,
    ]
    model, config, source_tokenizer, target_tokenizer = translate.load_run(output)
    source, _ = source_tokenizer.encode(tf.constant(texts), config["max_length"])
    expected = greedy_search(model, source, config["max_length"] + 1)
    expected_text = [t.decode() for t in target_tokenizer.decode(expected["tokens"]).numpy()]
    script = f"""
import json, sys, tensorflow as tf, tensorflow_text
assert "keras_attention" not in sys.modules
loaded = tf.saved_model.load({str(moved)!r})
out = loaded.signatures["greedy"](text=tf.constant({texts!r}))
beam = loaded.signatures["serving_default"](text=tf.constant({texts!r}))
att = loaded.signatures["attention"](text=tf.constant({texts[:1]!r}))
none = tf.constant([], tf.string)
empty = {{name: loaded.signatures[name](text=none)
         for name in ("serving_default", "greedy", "attention", "nbest")}}
empty["constrained"] = loaded.signatures["constrained"](text=none, prefix=none)
empty["tokens"] = loaded.signatures["tokens"](
    token_ids=tf.zeros([0, 5], tf.int32), lengths=tf.zeros([0], tf.int32))
print(json.dumps({{"translation": [t.decode() for t in out["translation"].numpy()],
                  "empty": {{name: {{key: value.shape[0] for key, value in outputs.items()}}
                            for name, outputs in empty.items()}},
                  "score": out["score"].numpy().tolist(),
                  "truncated": beam["truncated"].numpy().tolist(),
                  "beam": [t.decode() for t in beam["translation"].numpy()],
                  "attention": list(att["attention"].shape),
                  "signatures": sorted(loaded.signatures)}}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["signatures"] == [
        "attention",
        "constrained",
        "decoding_options",
        "greedy",
        "nbest",
        "serving_default",
        "tokens",
    ]
    assert (
        got["translation"][:2] == expected_text[:2]
        and got["translation"][2] == ""
        and got["beam"][2] == ""
    )
    np.testing.assert_allclose(got["score"][:2], np.asarray(expected["scores"])[:2], atol=1e-5)
    assert got["truncated"] == [False, False, False, True]
    assert got["attention"][0] == 1
    # An empty request gets empty outputs from every signature (ConvS2S's
    # convolutions fail on a batch of 0 on AVX-512 CPUs without the guard).
    assert sorted(got["empty"]) == [
        "attention",
        "constrained",
        "greedy",
        "nbest",
        "serving_default",
        "tokens",
    ]
    assert {rows for outputs in got["empty"].values() for rows in outputs.values()} == {0}


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    output, _ = trained
    base = str(tmp_path_factory.mktemp("exports"))
    path = translate.export_command(
        translate.parser().parse_args(
            ["export", "--output", output, "--export-dir", base, "--beam-width", "2"]
        ),
        log=lambda _: 0,
    )
    return path


def test_warmup_requests_parse_and_run(exported):
    import tensorflow as tf

    from keras_attention.serving.export import read_warmup_requests

    requests = read_warmup_requests(exported)
    assert [signature for signature, _ in requests] == [
        "serving_default",
        "greedy",
        "attention",
        "tokens",
        "nbest",
        "constrained",
    ]
    loaded = tf.saved_model.load(exported)
    for signature, inputs in requests:
        outputs = loaded.signatures[signature](**{k: tf.constant(v) for k, v in inputs.items()})
        assert outputs and all(
            v.shape[0] == len(next(iter(inputs.values()))) for v in outputs.values()
        )


def test_saved_model_cli_lists_the_signatures(exported):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run(
        [cli, "show", "--dir", exported, "--all"], capture_output=True, text=True
    ).stdout
    for signature in ("serving_default", "greedy", "attention", "tokens"):
        assert f"signature_def['{signature}']" in shown
    assert "inputs['text'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)" in shown
    assert (
        "outputs['translation'] tensor_info:\n        dtype: DT_STRING\n        shape: (-1)"
        in shown
    )
    assert "outputs['score'] tensor_info:\n        dtype: DT_FLOAT" in shown
    assert (
        "inputs['token_ids'] tensor_info:\n        dtype: DT_INT32\n        shape: (-1, -1)"
        in shown
    )


def test_rest_bodies_become_the_signature_inputs(exported):
    import tensorflow as tf

    from recipes.serving_client import parse_rest_response, rest_body, tensors_from_rest_body

    loaded = tf.saved_model.load(exported)
    text = np.array(["Ich habe keine Zeit.".encode(), "Wo ist der Bahnhof?".encode()], dtype=object)
    direct = loaded.signatures["greedy"](text=tf.constant(text))
    for style in ("instances", "inputs"):
        body = json.loads(
            json.dumps(rest_body({"text": text}, "greedy", style))
        )  # through JSON, as sent
        tensors = tensors_from_rest_body(body, ["text"])
        np.testing.assert_array_equal(tensors["text"], text)
        out = loaded.signatures["greedy"](**{k: tf.constant(v) for k, v in tensors.items()})
        np.testing.assert_array_equal(out["translation"].numpy(), direct["translation"].numpy())
    ids = np.array([[1, 5, 6, 2], [1, 7, 2, 0]], "int32")
    body = json.loads(
        json.dumps(
            rest_body(
                {"token_ids": ids, "lengths": np.array([4, 3], "int32")}, "tokens", "instances"
            )
        )
    )
    tensors = tensors_from_rest_body(body, ["token_ids", "lengths"])
    np.testing.assert_array_equal(tensors["token_ids"], ids)
    # Responses in both formats parse back.
    translations = [t.decode() for t in direct["translation"].numpy()]
    rows = {"predictions": [{"translation": t, "score": 0.5} for t in translations]}
    columns = {"outputs": {"translation": translations, "score": [0.5, 0.5]}}
    for response in (rows, columns):
        parsed = parse_rest_response(response)
        assert [t.decode() for t in parsed["translation"]] == translations


@pytest.mark.skipif(
    shutil.which("tensorflow_model_server") is None,
    reason="tensorflow_model_server is not installed (not on PyPI or Debian; see the README's "
    "Docker and apt commands)",
)
def test_real_server_rest_and_grpc(exported, tmp_path):
    from recipes.serving_client import predict_grpc, predict_rest

    base = os.path.dirname(exported)
    grpc_port, rest_port = free_port(), free_port()
    server = subprocess.Popen(
        [
            "tensorflow_model_server",
            f"--port={grpc_port}",
            f"--rest_api_port={rest_port}",
            "--model_name=translator",
            f"--model_base_path={base}",
        ]
    )
    try:
        text = {"text": np.array([b"Ich habe keine Zeit."], dtype=object)}
        for _ in range(60):
            try:
                rest = predict_rest("127.0.0.1", rest_port, "translator", text, "greedy")
                break
            except Exception:
                time.sleep(1)
        grpc_out = predict_grpc("127.0.0.1", grpc_port, "translator", text, "greedy")
        assert rest["translation"][0] == grpc_out["translation"][0]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_export_holds_only_core_and_text_ops(exported):
    """No py_function, no XLA-only ops: what TF Serving has (core TensorFlow
    and TensorFlow Text kernels) is enough."""
    import tensorflow_text  # noqa: F401  (registers the text ops, as the server does)
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import op_def_registry

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(os.path.join(exported, "saved_model.pb"), "rb").read())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    library = {function.signature.name for function in graph.library.function}
    ops -= library  # calls of the graph's own functions
    assert not {op for op in ops if "PyFunc" in op or op.startswith("Xla")}, ops
    unknown = sorted(op for op in ops if op_def_registry.get(op) is None)
    assert not unknown, f"ops no TensorFlow / TensorFlow Text kernel registers: {unknown}"
    assert "SentencepieceTokenizeOp" in ops  # the default --tokenizer


def test_export_passes_the_op_check_of_every_tf_serving_release(exported):
    """`keras_attention.serving.check` against the committed op lists: the
    tokenizer's TF Text ops (SentencePiece's, the default; WordPiece's in
    tests/test_export.py) and the decoding loop are in every release."""
    from keras_attention.serving import check

    ops = check.op_types(check.read_saved_model(exported))
    assert {"SentencepieceOp", "SentencepieceTokenizeOp", "While"} <= set(ops)
    assert os.path.exists(os.path.join(exported, "assets", "source.spm"))  # for `tokens` clients
    assert check.check_export(exported) == {s: [] for s in check.available_servings()}


def test_a_truncated_backup_falls_back_to_the_epoch_before(tmp_path):
    """A kill while the latest backup was written leaves a truncated file:
    training resumes from the previous epoch's backup and says so."""
    import keras

    from recipes.translate import resilient_backup

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = x.sum(1, keepdims=True)

    def model():
        keras.utils.set_random_seed(0)
        built = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        built.compile("sgd", "mse")
        return built

    class StopAfterTwoEpochs(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt

    backup = str(tmp_path / "backup")
    with pytest.raises(KeyboardInterrupt):
        model().fit(
            x, y, epochs=5, verbose=0, callbacks=[resilient_backup(backup), StopAfterTwoEpochs()]
        )
    latest = os.path.join(backup, "latest.weights.h5")
    assert os.path.exists(latest + ".bkp")  # the epoch before is kept
    with open(latest, "r+b") as handle:
        handle.truncate(os.path.getsize(latest) // 2)
    messages = []
    history = model().fit(
        x, y, epochs=5, verbose=0, callbacks=[resilient_backup(backup, messages.append)]
    )
    assert messages and "the last backup did not load" in messages[0]
    assert history.epoch == [1, 2, 3, 4]  # epoch 0 restored, epoch 1 trained again


# -- issue 11 --------------------------------------------------------------------------
def cli(capsys, *argv):
    """Run the CLI in process: (exit status, stdout, stderr)."""
    try:
        translate.main(list(argv))
        status = 0
    except SystemExit as stop:
        status = stop.code
    out, err = capsys.readouterr()
    return status, out, err


def test_a_run_refuses_other_data_settings_and_overwrite_rebuilds(tmp_path):
    """A second `train` with `--reverse` kept the first run's vocabularies
    (and reported validation loss 0.000); now it is refused with the
    differences, and `--overwrite` builds the run again from the reversed
    data: its source vocabulary is learned from the English side."""
    from keras_attention.serving.text import train_sentencepiece
    from recipes.translation_data import read_pairs

    output = str(tmp_path / "run")
    run("train", "--output", output, "--family", "rnn", "--epochs", "1", *TINY)
    english = {target for _, target in read_pairs(os.path.join(output, "data", "train.tsv"))}
    with pytest.raises(ValueError) as refused:
        run("train", "--output", output, "--family", "rnn", "--epochs", "1", "--reverse", *TINY)
    assert "reverse: False in the run, True now" in str(refused.value)
    assert "--overwrite" in str(refused.value)
    flags = ("--family", "rnn", "--epochs", "1", "--reverse", "--overwrite", *TINY)
    log = run("train", "--output", output, *flags)
    assert "deleted the earlier run" in log
    # The vocabulary is the one the reversed split gives (the split hashes
    # the source side, so its pairs differ from the first run's too).
    pairs = read_pairs(os.path.join(output, "data", "train.tsv"))
    assert sum(source in english for source, _ in pairs) > len(pairs) // 2  # English sources
    train_sentencepiece([source for source, _ in pairs], str(tmp_path / "expected.spm"), 400)
    assert (
        open(os.path.join(output, "source.spm"), "rb").read()
        == open(tmp_path / "expected.spm", "rb").read()
    )
    assert json.load(open(os.path.join(output, "run.json")))["settings"]["reverse"] is True


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--max-length", "2"], "error: no train pair fits --max-length 2"),
        (["--learning-rate", "-1"], "error: --learning-rate must be > 0; got -1.0"),
        (["--learning-rate", "nan"], "error: --learning-rate must be a finite number; got nan"),
        (["--dropout", "1.5"], "error: --dropout must be in [0, 1); got 1.5"),
        (["--label-smoothing", "1.0"], "error: --label-smoothing must be in [0, 1); got 1.0"),
        (["--family", "transformer", "--embed-dim", "8"], "error: --embed-dim does not apply"),
        (["--family", "rnn", "--heads", "2"], "error: --heads does not apply to the rnn family"),
        (
            ["--family", "rnn", "--position", "rope"],
            "error: --position does not apply to the rnn family",
        ),
        (["--family", "convs2s", "--kv-heads", "1"], "error: --kv-heads does not apply"),
        (["--family", "convs2s", "--window", "4"], "error: --window does not apply"),
        (["--heads", "4", "--kv-heads", "3"], "error: --kv-heads 3 must divide --heads 4"),
        (["--kv-heads", "0"], "error: --kv-heads must be >= 1; got 0"),
        (["--window", "0"], "error: --window must be >= 1; got 0"),
        (["evaluate", "--samples", "-1"], "error: --samples must be >= 0; got -1"),
    ],
)
def test_bad_numbers_and_empty_splits_stop_with_an_error(tmp_path, capsys, flags, message):
    command = ["train", *TINY] if flags[0] != "evaluate" else []
    status, out, err = cli(capsys, *command, *flags, "--output", str(tmp_path / "run"))
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, (out, err)
    assert not os.path.exists(tmp_path / "run" / "model.keras")


def test_a_diverging_run_stops_and_saves_nothing(tmp_path, capsys):
    flags = ["--family", "rnn", "--epochs", "1", "--learning-rate", "1e30", *TINY]
    flags += ["--batch-size", "4"]  # several steps: the first update makes the weights huge
    status, out, err = cli(capsys, "train", "--output", str(tmp_path), *flags)
    assert status == 2 and err.startswith("error: training diverged"), (out, err)
    assert not os.path.exists(tmp_path / "model.keras")
    assert not os.path.exists(tmp_path / "backup" / "latest.weights.h5")


class Killed(BaseException):
    """What `kill -9` does to the process, at a chosen point."""


def killed_during_final_save(monkeypatch, output, *flags):
    """Train, and stop the process as `kill -9` would after `model.keras`
    is written (to its temporary name) and before anything else."""
    from recipes import runs

    write_atomically = runs.write_atomically

    def write_then_die(path, write):
        if path.endswith("model.keras"):
            write(runs.temporary_path(path))
            raise Killed
        write_atomically(path, write)

    with monkeypatch.context() as patch:
        patch.setattr(runs, "write_atomically", write_then_die)
        with pytest.raises(Killed):
            run("train", "--output", output, *flags)


def test_a_kill_during_the_final_save_loses_nothing(tmp_path, monkeypatch):
    """The old code deleted the backup before saving, and `model.save` left
    a 0-byte file: the run was lost. Now the re-run finds the last epoch
    done, trains nothing, evaluates and saves."""
    output = str(tmp_path)
    flags = ("--family", "rnn", "--epochs", "2", *TINY)
    killed_during_final_save(monkeypatch, output, *flags)
    assert not os.path.exists(tmp_path / "model.keras")
    assert os.path.exists(tmp_path / "backup" / "latest.weights.h5")
    log = run("train", "--output", output, *flags)
    assert "resuming an interrupted run after its epoch 2 of 2" in log
    config = json.load(open(tmp_path / "config.json"))
    assert np.isfinite(config["val_loss"]) and config["val_loss"] > 0
    assert not os.path.exists(tmp_path / "backup")
    model, *_ = translate.load_run(output)  # the saved model loads
    assert model.count_params() > 0


def test_resuming_with_other_flags_says_what_differs(tmp_path, monkeypatch):
    output = str(tmp_path)
    flags = ("--family", "rnn", "--epochs", "2", *TINY)
    killed_during_final_save(monkeypatch, output, *flags)
    with pytest.raises(ValueError) as refused:
        run("train", "--output", output, *flags, "--units", "64")
    message = str(refused.value)
    assert "units: 32 in the run, 64 now" in message
    assert "repeat the run's settings, pass --overwrite" in message
    with pytest.raises(translate.UsageError, match="2 epochs of the run .* are done"):
        run("train", "--output", output, *flags, "--epochs", "1")
    assert os.path.exists(tmp_path / "backup" / "latest.weights.h5")  # kept


def test_cli_mistakes_are_error_lines(trained, tmp_path, capsys):
    """Each gave a traceback before."""
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    hyperparameters = tmp_path / "hp.json"
    hyperparameters.write_text('{"units": "many"}')
    cases = [
        (["train", "--output", str(a_file)], "error: --output "),
        (["export", "--output", output, "--export-dir", str(a_file)], "error: --export-dir "),
        (
            ["train", "--output", str(tmp_path / "new"), "--hyperparameters", str(hyperparameters)],
            "error: --units must be an integer; got 'many'",
        ),
    ]
    for argv, message in cases:
        status, out, err = cli(capsys, *argv)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, (argv, err)
    for name, message in (("config.json", "is not valid JSON"), ("source.spm", "is damaged")):
        with open(os.path.join(output, name), "w") as handle:
            handle.write("{ damaged")
        status, out, err = cli(capsys, "translate", "--output", output, "Hallo.")
        assert status == 2 and err.startswith("error: ") and message in err, err
        assert err.count("\n") == 1
        shutil.copy(os.path.join(trained[0], name), os.path.join(output, name))


def test_interrupting_an_export_says_nothing_was_kept(monkeypatch, capsys):
    def interrupted(args, log=print):
        raise KeyboardInterrupt

    monkeypatch.setattr(translate, "export_command", interrupted)
    with pytest.raises(SystemExit) as stop:
        translate.main(["export", "--output", "runs/none"])
    assert "nothing was kept" in str(stop.value.code)
    assert "resume" not in str(stop.value.code)


def test_help_shows_every_default_and_every_flag_has_help():
    main = translate.parser()
    (subcommands,) = [a for a in main._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in subcommands.choices.items():
        for action in command._actions:
            assert action.help, (name, action.option_strings)
        text = command.format_help()
        for action in command._actions:
            if action.default not in (None, False, argparse.SUPPRESS) and action.option_strings:
                assert f"default: {action.default}" in " ".join(text.split()), (name, action)


# -- issue 13 --------------------------------------------------------------------------
def test_translate_nbest_prints_the_exported_nbest(trained, exported, capsys):
    """`--nbest 2`: two `score<TAB>translation` lines per sentence, best
    first, the same as the export's `nbest` signature (beam 2)."""
    import tensorflow as tf

    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?"]
    flags = ["--output", trained[0], "--beam-width", "2", "--nbest", "2"]
    status, out, err = cli(capsys, "translate", *flags, *texts)
    assert status == 0, err
    lines = out.splitlines()
    assert len(lines) == 4 and all(re.fullmatch(r"-?\d+\.\d{4}\t.*", line) for line in lines)
    scores = [float(line.split("\t")[0]) for line in lines]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]
    served = tf.saved_model.load(exported).signatures["nbest"](text=tf.constant(texts))
    assert [line.split("\t", 1)[1] for line in lines] == [
        t.decode() for t in served["translations"].numpy().reshape(-1)
    ]
    np.testing.assert_allclose(scores, served["scores"].numpy().reshape(-1), atol=1e-4)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["translate", "--beam-width", "2", "--nbest", "3"], "error: --nbest must be at most"),
        (["translate", "--nbest", "0"], "error: --nbest must be >= 1; got 0"),
        (["translate", "--min-length", "-1"], "error: --min-length must be >= 0; got -1"),
        (["translate", "--no-repeat-ngram", "-2"], "error: --no-repeat-ngram must be >= 0"),
        (
            ["translate", "--repetition-penalty", "0"],
            "error: --repetition-penalty must be > 0; got 0.0",
        ),
        (["export", "--coverage-penalty", "-1"], "error: --coverage-penalty must be >= 0"),
        (["export", "--coverage-penalty", "nan"], "error: --coverage-penalty must be a finite"),
        (["export", "--num-hypotheses", "5"], "error: --num-hypotheses must be at most"),
        (["evaluate", "--alpha", "-0.5"], "error: --alpha must be >= 0; got -0.5"),
        (["demo", "--alpha", "inf"], "error: --alpha must be a finite number"),
    ],
)
def test_decoding_flags_are_checked_before_any_work(tmp_path, capsys, argv, message):
    text = ["Hallo."] if argv[0] == "translate" else []
    status, out, err = cli(capsys, *argv, "--output", str(tmp_path / "none"), *text)
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, (out, err)


def test_translate_applies_the_decoding_options_with_and_without_nbest(trained, capsys):
    """The best translation under the decoding flags is the first of
    `--nbest`'s lines under the same flags, and the flags change it (here
    --min-length forces a longer output)."""
    text = "Ich habe keine Zeit."
    flags = ["--output", trained[0], "--beam-width", "2"]
    options = ["--min-length", "12", "--no-repeat-ngram", "2", "--coverage-penalty", "0.2"]
    _, plain, _ = cli(capsys, "translate", *flags, text)
    status, best, err = cli(capsys, "translate", *flags, *options, text)
    assert status == 0, err
    status, nbest, err = cli(capsys, "translate", *flags, *options, "--nbest", "1", text)
    assert status == 0, err
    best = best.splitlines()[1].split("-> ", 1)[1]
    assert nbest.splitlines()[0].split("\t", 1)[1] == best
    assert best != plain.splitlines()[1].split("-> ", 1)[1]


# -- issue 12: SentencePiece -------------------------------------------------------------
def test_a_run_recorded_before_the_tokenizer_flag_is_a_wordpiece_run(tmp_path):
    """run.json of a run made before --tokenizer lacks it: the run used
    WordPiece. It resumes with `--tokenizer wordpiece`, its `.vocab` files
    load as WordPiece tokenizers, and the new default is refused with the
    difference."""
    import tensorflow as tf

    from keras_attention.serving.text import RESERVED, SubwordTokenizer
    from recipes import runs

    def settings(*flags):
        args = translate.parser().parse_args(["train", "--output", str(tmp_path), *flags])
        return translate.train_settings(args)[0]

    new, old = settings(), settings("--tokenizer", "wordpiece")
    assert (new["tokenizer"], old["tokenizer"]) == ("sentencepiece", "wordpiece")
    output = str(tmp_path / "old")
    os.makedirs(output)
    recorded = {key: value for key, value in old.items() if key != "tokenizer"}
    with open(os.path.join(output, "run.json"), "w") as handle:
        json.dump({"settings": recorded}, handle)
    with pytest.raises(ValueError) as refused:
        runs.claim(output, new, defaults=translate.recorded_defaults(new))
    assert "tokenizer: 'wordpiece' in the run, 'sentencepiece' now" in str(refused.value)
    runs.claim(output, old, defaults=translate.recorded_defaults(old))  # resumes
    assert json.load(open(os.path.join(output, "run.json")))["settings"] == old
    for side in ("source", "target"):
        with open(os.path.join(output, f"{side}.vocab"), "w") as handle:
            handle.write("\n".join(RESERVED + ["ich", "zeit"]) + "\n")
    tokenizers = translate.load_tokenizers(output)
    assert all(isinstance(tokenizer, SubwordTokenizer) for tokenizer in tokenizers)
    assert tokenizers[0].encode(tf.constant(["ich zeit"]), 5)[0].numpy().tolist() == [
        [1, 4, 5, 2, 0]
    ]


# -- issue 14 --------------------------------------------------------------------------
def test_a_run_recorded_before_the_position_flags_resumes_with_their_defaults(tmp_path):
    """run.json of a run trained before --position, --kv-heads and --window
    lacks them: it was a sinusoidal, full multi-head transformer (an rnn or
    convs2s run, none of them), and is resumed as one; another position is
    refused with the difference."""
    from recipes import runs

    def settings(*flags):
        args = translate.parser().parse_args(["train", "--output", str(tmp_path), *flags])
        return translate.train_settings(args)[0]

    for family in ("transformer", "rnn"):
        output = str(tmp_path / family)
        old = settings("--family", family)
        assert old["position"] == ("sinusoidal" if family == "transformer" else None)
        assert old["kv_heads"] is None and old["window"] is None
        os.makedirs(output)
        recorded = {k: v for k, v in old.items() if k not in ("position", "kv_heads", "window")}
        with open(os.path.join(output, "run.json"), "w") as handle:
            json.dump({"settings": recorded}, handle)
        runs.claim(output, old, defaults=translate.recorded_defaults(old))  # resumes
        assert json.load(open(os.path.join(output, "run.json")))["settings"] == old
        with open(os.path.join(output, "run.json"), "w") as handle:
            json.dump({"settings": recorded}, handle)
        if family == "transformer":
            new = settings("--family", family, "--position", "rope", "--kv-heads", "2")
            with pytest.raises(ValueError) as refused:
                runs.claim(output, new, defaults=translate.recorded_defaults(new))
            assert "position: 'sinusoidal' in the run, 'rope' now" in str(refused.value)
            assert "kv_heads: None in the run, 2 now" in str(refused.value)


def test_export_of_a_rope_multi_query_windowed_transformer(tmp_path):
    """The transformer family exports, with a position scheme and head
    layout other than the default: the TensorFlow-only process gives the
    in-process translations, and the graph holds only ops every TF Serving
    release with an op list has. (The sinusoidal default's decoding graph is
    exported by `tests/test_bench_decoding.py`'s SavedModel, and every
    family's by `make serving-check`.)"""
    from keras_attention.serving.check import check_export as serving_problems

    output = str(tmp_path / "run")
    flags = ("--family", "transformer", "--position", "rope", "--kv-heads", "1", "--window", "4")
    run("train", "--output", output, *flags, "--epochs", "1", *TINY)
    config = json.load(open(os.path.join(output, "config.json")))
    assert (config["position"], config["kv_heads"], config["window"]) == ("rope", 1, 4)
    model, *_ = translate.load_run(output)
    assert (model.position, model.num_key_value_heads, model.sliding_window) == ("rope", 1, 4)
    check_export(output, tmp_path)
    problems = serving_problems(str(tmp_path / "moved"))
    assert problems and not any(problems.values()), problems


def encoded_rows(tokenizer, texts, length):
    """Each text's ids, unpadded, and whether it was cut (the reference)."""
    import tensorflow as tf

    ids, cut = tokenizer.encode(tf.constant(texts), length)
    return [tuple(int(i) for i in row if i) for row in ids.numpy()], list(cut.numpy())


def epoch_pairs(data):
    """The (source, target) id tuples of one pass over `make_dataset`'s
    batches, unpadded, with the batch shapes."""
    pairs, shapes = [], []
    for (source, target_in), target_out in data.as_numpy_iterator():
        shapes.append((source.shape, target_in.shape, target_out.shape))
        for s, t_in, t_out in zip(source, target_in, target_out):
            target = (int(t_in[0]), *[int(i) for i in t_out if i])  # [START] y [END]
            pairs.append((tuple(int(i) for i in s if i), target))
    return pairs, shapes


def test_batches_are_bucketed_by_length_and_hold_every_pair_once(trained):
    from recipes.translation_data import bucket_boundaries, make_dataset, read_pairs

    output, _ = trained
    source_tokenizer, target_tokenizer = translate.load_tokenizers(output)
    path = os.path.join(output, "data", "train.tsv")
    data, kept, total = make_dataset(
        path, source_tokenizer, target_tokenizer, 48, 8, shuffle=True, batch_tokens=200
    )
    pairs = read_pairs(path)
    sources, source_cut = encoded_rows(source_tokenizer, [p[0] for p in pairs], 48)
    targets, target_cut = encoded_rows(target_tokenizer, [p[1] for p in pairs], 49)
    fits = [(s, t) for s, t, a, b in zip(sources, targets, source_cut, target_cut) if not (a or b)]
    assert total == len(pairs) and kept == len(fits) > 100
    seen, shapes = epoch_pairs(data)
    widths = {b - 1 for b in bucket_boundaries(48)}
    for source, target_in, target_out in shapes:
        assert source[1] in widths and target_in[1] == target_out[1] == source[1] - 1
        assert source[0] == 1 or source[0] * source[1] <= 200  # the token budget
    assert len(shapes) == int(data.cardinality())
    assert sorted(seen) == sorted(fits)  # every pair that fits, once
    # Each pair is padded only to its bucket's width, not to max_length.
    bucket_width = [
        min(b for b in bucket_boundaries(48) if b > max(len(s), len(t))) - 1 for s, t in fits
    ]
    assert sum(s[0] * s[1] for s, _, _ in shapes) == sum(bucket_width) < len(fits) * 48


def test_dictionary_entries_are_extra_pairs_and_never_a_held_out_sentence(tmp_path, trained):
    from recipes.translation_data import _words, make_dataset, prepare, read_pairs

    paths = prepare(str(tmp_path / "run"), limit=300, dictionary=True, log=lambda line: None)
    entries = read_pairs(paths["dictionary"])
    assert len(entries) > 300_000
    assert ("Bahnhof", "railway station") in entries and ("Bahnhöfe", "railway stations") in entries
    held_out = {
        _words(text)
        for split in ("valid", "test")
        for pair in read_pairs(paths[split])
        for text in pair
    }
    assert not any(_words(s) in held_out or _words(t) in held_out for s, t in entries)
    # Each epoch: the sentence pairs plus `extra_ratio` x as many entries, a new draw.
    extra = str(tmp_path / "entries.tsv")
    with open(extra, "w", encoding="utf-8") as handle:
        handle.writelines(f"{s}\t{t}\n" for s, t in entries[:1000])
    source_tokenizer, target_tokenizer = translate.load_tokenizers(trained[0])
    data, kept, _ = make_dataset(
        paths["train"],
        source_tokenizer,
        target_tokenizer,
        48,
        16,
        shuffle=True,
        extra_path=extra,
        extra_ratio=0.5,
    )
    first, shapes = epoch_pairs(data)
    second, _ = epoch_pairs(data)
    assert len(shapes) == int(data.cardinality())
    entry_sources = set(encoded_rows(source_tokenizer, [s for s, _ in entries[:1000]], 48)[0])
    sentences = read_pairs(paths["train"])
    sentence_sources = set(encoded_rows(source_tokenizer, [s for s, _ in sentences], 48)[0])
    drawn = [s for s, _ in first if s in entry_sources - sentence_sources]
    # About half as many as the sentences; an epoch cut or topped up to its
    # expected number of batches (16 pairs each) may hold a few more or less.
    assert 0.5 * kept - 2 * 16 < len(drawn) < 0.5 * kept + 2 * 16
    assert {s for s, _ in first} != {s for s, _ in second}  # a new draw each epoch


def test_bleu_by_source_length_scores_each_bucket_on_its_own_sentences():
    short = ["Ich bin hier.", "Das ist gut so."]  # 3 and 4 words
    long = ["Wir haben gestern den ganzen Tag im Garten gearbeitet."]  # 9 words
    references = ["I am here now.", "That is fine as it is.", "We worked in the garden all day."]
    hypotheses = [references[0], references[1], "No."]
    table = translate.bleu_by_length(short + long, hypotheses, references)
    assert list(table) == ["1-5", "6-10"]  # empty buckets are left out
    assert table["1-5"] == {"bleu": 100.0, "sentences": 2}
    assert table["6-10"]["sentences"] == 1 and table["6-10"]["bleu"] < 1.0


# -- issue 12 --------------------------------------------------------------------------
def test_translate_reads_lines_from_a_file_or_stdin_and_keeps_every_line(
    trained, tmp_path, capsys, monkeypatch
):
    """One output line per input line, empty lines empty, `\r\n` read as
    `\n`; the translations are those of the sentences given as arguments;
    standard input (not a terminal) and `--input -` read the same; the
    output file is written whole, nothing on stdout."""
    import io

    sentences = ["Ich habe keine Zeit.", "", "Wo ist der Bahnhof?", "   ", "Danke."]
    data = ("\r\n".join(sentences[:3]) + "\n" + "\n".join(sentences[3:])).encode()
    path = tmp_path / "in.txt"
    path.write_bytes(data)  # no newline after the last line
    flags = ["--output", trained[0], "--beam-width", "2"]
    _, by_arguments, _ = cli(capsys, "translate", *flags, *sentences)
    expected = [line.split("-> ", 1)[1] for line in by_arguments.splitlines()[1::2]]
    # (the tiny model may also give "" for a sentence; blank lines must)
    assert len(expected) == 5 and expected[1] == expected[3] == ""
    status, out, err = cli(capsys, "translate", *flags, "--input", str(path))
    assert status == 0 and out.splitlines() == expected and out.endswith("\n"), err
    for extra in ([], ["--input", "-"]):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        status, out, err = cli(capsys, "translate", *flags, *extra)
        assert status == 0 and out.splitlines() == expected, (extra, err)
    written = tmp_path / "out.txt"
    status, out, err = cli(
        capsys, "translate", *flags, "--input", str(path), "--output-file", str(written)
    )
    assert status == 0 and out == "" and f"translated 5 lines -> {written}" in err
    assert written.read_text(encoding="utf-8").splitlines() == expected
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]  # no temporary left
    status, out, err = cli(capsys, "translate", *flags, "--input", str(path), "--nbest", "2")
    _, by_arguments, _ = cli(capsys, "translate", *flags, "--nbest", "2", *sentences)
    assert status == 0 and out == by_arguments and len(out.splitlines()) == 10, err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--input", "/nonexistent.txt"], "error: --input /nonexistent.txt: no such file"),
        (["--input", "-", "Hallo."], "error: give the sentences either as arguments or"),
        (["--output-file", "/nonexistent/out.txt", "Hallo."], "error: --output-file /nonexist"),
    ],
)
def test_translate_file_mistakes_are_error_lines(tmp_path, capsys, argv, message):
    status, out, err = cli(capsys, "translate", "--output", str(tmp_path), *argv)
    assert status == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_translate_input_that_is_not_utf8_names_the_line(tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_bytes(b"Hallo.\nkaputt \xff\n")
    status, out, err = cli(capsys, "translate", "--output", str(tmp_path), "--input", str(path))
    assert status == 2 and err.startswith(f"error: --input {path}:2: expected UTF-8 text"), err


def test_progress_goes_to_stderr_a_line_every_n_or_redrawn_on_a_terminal():
    import io

    from recipes.translation_io import Progress

    log = io.StringIO()
    progress = Progress(2500, stream=log, every=1000, quiet_below=0)
    for done in range(64, 2500, 64):
        progress.update(done)
    progress.update(2500)
    progress.close()
    counts = [
        int(re.match(r"translated (\d+)/2500 sentences", line)[1])
        for line in log.getvalue().splitlines()
    ]
    assert counts == [1024, 2048, 2500]

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    progress = Progress(200, stream=screen, quiet_below=0)
    progress.update(64)
    progress.update(200)
    progress.close()
    assert re.fullmatch(r"\rtranslated 64/200 .*\rtranslated 200/200 .*\n", screen.getvalue())
    quiet = io.StringIO()
    Progress(100, stream=quiet).update(100)  # small inputs: nothing
    assert quiet.getvalue() == ""


def test_train_validates_on_the_given_file_and_logs_bleu_accuracy_and_perplexity(trained):
    """The fixture trained with `--valid VALID --bleu-every 1`: its
    validation is the user's file (the bad line reported), and TensorBoard
    holds token accuracy and perplexity for training and validation, and
    validation BLEU, for both epochs."""
    import tensorflow as tf

    output, log = trained
    assert "valid.tsv:2: expected 'source<TAB>target', found no tab; skipped" in log
    assert re.search(r"^valid: \d of 3 pairs fit", log, re.M), log
    bleu = re.findall(r"^epoch \d: validation BLEU \d+\.\d\d \(greedy, 2 sentences", log, re.M)
    assert len(bleu) == 2, log

    def scalars(folder):
        found = {}
        for name in os.listdir(folder):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
                for value in event.summary.value:
                    found.setdefault(value.tag, []).append(float(tf.make_ndarray(value.tensor)))
        return found

    train_scalars = scalars(os.path.join(output, "logs", "train"))
    valid_scalars = scalars(os.path.join(output, "logs", "validation"))
    for found in (train_scalars, valid_scalars):
        assert len(found["epoch_perplexity"]) == 2 and min(found["epoch_perplexity"]) > 1.0
        assert all(0.0 <= value <= 1.0 for value in found["epoch_token_accuracy"])
        # The loss is label-smoothed: exp(loss) is not the perplexity.
        assert not np.allclose(np.exp(found["epoch_loss"]), found["epoch_perplexity"])
    assert len(valid_scalars["epoch_bleu"]) == 2
    assert all(0.0 <= value <= 100.0 for value in valid_scalars["epoch_bleu"])


def test_evaluate_scores_a_given_test_file_and_records_the_signatures(trained, tmp_path, capsys):
    """`scores.json` holds BLEU and chrF as sacrebleu computes them for the
    translations `translate` gives, the sentence count, beam width, test
    file and the exact signatures (also printed)."""
    import sacrebleu

    output, _ = trained
    test = str(tmp_path / "my-test.tsv")
    pairs = [
        ("Ich habe keine Zeit.", "I have no time."),
        ("Wo ist der Bahnhof?", "Where is the station?"),
        ("Das ist gut.", "That is good."),
    ]
    with open(test, "w", encoding="utf-8") as handle:
        handle.write("".join(f"{s}\t{t}\n" for s, t in pairs[:2]) + "bad line\n")
        handle.write(f"{pairs[2][0]}\t{pairs[2][1]}\n")
    flags = ["--output", output, "--beam-width", "2"]
    status, out, err = cli(capsys, "evaluate", *flags, "--test", test, "--samples", "0")
    assert status == 0, err
    scores = json.load(open(os.path.join(output, "scores.json")))
    _, translated, _ = cli(capsys, "translate", *flags, *[source for source, _ in pairs])
    hypotheses = [line.split("-> ", 1)[1] for line in translated.splitlines()[1::2]]
    references = [[target for _, target in pairs]]
    version = re.escape(sacrebleu.__version__)
    assert scores["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, references).score, 2)
    assert scores["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, references).score, 2)
    assert re.fullmatch(
        rf"nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:{version}",
        scores["bleu_signature"],
    )
    assert re.fullmatch(
        rf"nrefs:1\|case:mixed\|eff:yes\|nc:6\|nw:0\|space:no\|version:{version}",
        scores["chrf_signature"],
    )
    assert (scores["sentences"], scores["beam_width"]) == (3, 2)
    assert scores["test"] == os.path.abspath(test)
    assert scores["bleu_signature"] in out and "my-test.tsv:3: expected" in out


@pytest.mark.parametrize("flag", ["--test", "--valid"])
def test_a_missing_or_empty_user_file_is_an_error_line(tmp_path, capsys, flag):
    empty = tmp_path / "empty.tsv"
    empty.write_text("only a line without a tab\n")
    command = ["evaluate"] if flag == "--test" else ["train", *TINY]
    for path, message in (
        (tmp_path / "none.tsv", f"error: {flag} {tmp_path / 'none.tsv'}: no such file"),
        (empty, f"error: {flag} {empty} holds no source<TAB>target pairs (1 lines skipped"),
    ):
        argv = [*command, "--output", str(tmp_path / "run"), flag, str(path)]
        status, out, err = cli(capsys, *argv)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, err


def weight_arrays(path, optimizer=False):
    """The datasets of a Keras `.weights.h5` file, by path: the model's
    (and, with `optimizer`, the optimizer's only)."""
    import h5py

    arrays = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(
            lambda name, item: (
                arrays.__setitem__(name, item[()])
                if isinstance(item, h5py.Dataset) and name.startswith("optimizer/") == optimizer
                else None
            )
        )
    return arrays


def test_the_saved_model_is_the_mean_of_the_last_epochs(trained, tmp_path):
    """`train --average-last 2`: model.keras holds the elementwise mean of
    the two kept epoch files (read with h5py), the optimizer's iteration
    count is the last epoch's, and config.json records both losses."""
    output, log = trained
    epochs = [os.path.join(output, "checkpoints", f"epoch-000{e}.weights.h5") for e in (1, 2)]
    first, second = weight_arrays(epochs[0]), weight_arrays(epochs[1])
    model, *_ = translate.load_run(output)
    model.save_weights(str(tmp_path / "saved.weights.h5"))
    saved = weight_arrays(str(tmp_path / "saved.weights.h5"))
    assert saved.keys() == first.keys() == second.keys() and len(saved) > 5
    assert any(not np.array_equal(first[name], second[name]) for name in saved)
    for name in saved:
        np.testing.assert_allclose(
            saved[name], np.mean([first[name], second[name]], axis=0), rtol=1e-6, atol=1e-7
        )
    iterations = "optimizer/vars/0"  # Adam's step counter: an integer, not averaged
    last = weight_arrays(epochs[1], optimizer=True)[iterations]
    counted = weight_arrays(str(tmp_path / "saved.weights.h5"), optimizer=True)[iterations]
    assert last.dtype.kind == "i" and counted == last
    config = json.load(open(os.path.join(output, "config.json")))
    assert config["averaged"]["epochs"] == [1, 2]
    assert np.isfinite(config["averaged"]["val_loss_last"]) and np.isfinite(config["val_loss"])
    assert "averaged the weights of epochs 1-2: validation loss" in log


def test_average_command_writes_the_mean_of_the_given_checkpoints(trained, tmp_path, capsys):
    """`average --checkpoints A B` and `--last 2` give the same model as
    the training's own average; the model translates."""
    output = str(tmp_path / "run")
    shutil.copytree(trained[0], output)
    folder = os.path.join(output, "checkpoints")
    epochs = [os.path.join(folder, f"epoch-000{e}.weights.h5") for e in (1, 2)]
    # Start from the second epoch's weights, so that an average is visible.
    model, *_ = translate.load_run(output)
    model.load_weights(epochs[1])
    model.save(os.path.join(output, "model.keras"))
    expected = {
        name: np.mean([weight_arrays(path)[name] for path in epochs], axis=0)
        for name in weight_arrays(epochs[0])
    }
    for flags in (["--checkpoints", *epochs], ["--last", "2"]):
        status, out, err = cli(capsys, "average", "--output", output, *flags)
        assert status == 0 and "averaged 2 checkpoints: validation loss" in out, err
        model, *_ = translate.load_run(output)
        model.save_weights(str(tmp_path / "check.weights.h5"))
        got = weight_arrays(str(tmp_path / "check.weights.h5"))
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-6, atol=1e-7)
    status, out, err = cli(capsys, "translate", "--output", output, "Ich habe keine Zeit.")
    assert status == 0 and out.splitlines()[1].startswith("  -> "), err
    for flags, message in (
        (["--last", "3"], "error: --last 3: "),
        (["--checkpoints", str(tmp_path / "none.weights.h5")], "error: --checkpoints "),
    ):
        status, out, err = cli(capsys, "average", "--output", output, *flags)
        assert status == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_results_rewrites_its_table_and_keeps_what_was_written_by_hand(tmp_path):
    from recipes.results import write_generated_part

    path = str(tmp_path / "RESULTS.md")
    write_generated_part(path, "| table 1 |\n")
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("\n## Reading the table\n\nby hand\n")
    write_generated_part(path, "| table 2 |\n")
    text = open(path, encoding="utf-8").read()
    assert "| table 2 |" in text and "| table 1 |" not in text
    assert text.endswith("\n## Reading the table\n\nby hand\n")


def test_kept_epochs_include_the_one_a_resumed_backup_restores(tmp_path):
    """A kill after the backup saved epoch 2 and before epoch 2 was kept:
    the resumed training starts after epoch 2 and keeps it from the
    restored weights (the average missed the last epoch before); later
    epochs keep only the newest `keep`."""
    import keras

    from recipes.averaging import KeepLastEpochs, kept_checkpoints

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    backup = tmp_path / "backup"
    backup.mkdir()
    (backup / "training_metadata.json").write_text('{"epoch": 2, "batch": 0}')
    folder = str(tmp_path / "checkpoints")
    keep = KeepLastEpochs(folder, 2, str(backup))
    keep.set_model(model)
    keep.on_train_begin()
    assert [epoch for epoch, _ in kept_checkpoints(folder)] == [2]
    kernel = weight_arrays(kept_checkpoints(folder)[0][1])
    assert any(np.array_equal(value, model.get_weights()[0]) for value in kernel.values())
    keep.on_epoch_end(2, {"loss": 1.0})
    keep.on_epoch_end(3, {"loss": float("nan")})  # diverged: not kept
    keep.on_epoch_end(3, {"loss": 0.5})
    assert [epoch for epoch, _ in kept_checkpoints(folder)] == [3, 4]


def test_cosine_decay_warms_up_to_the_peak_and_ends_at_zero_on_the_last_step():
    """`--decay cosine`: linear warm-up to --learning-rate, then half a
    cosine down to 0 at `total_steps` (epochs x batches), against the
    formula written out here."""
    args = translate.parser().parse_args(
        ["train", "--warmup", "10", "--decay", "cosine", "--learning-rate", "2e-3", *TINY]
    )
    config = {**translate.model_config(args), "total_steps": 50}
    schedule = translate.learning_rate(config)
    for step in (0, 5, 10, 20, 30, 49, 50):
        if step <= 10:
            expected = 2e-3 * step / 10
        else:
            expected = 2e-3 * 0.5 * (1 + np.cos(np.pi * (step - 10) / 40))
        assert float(schedule(step)) == pytest.approx(expected, abs=1e-9), step
    with pytest.raises(translate.UsageError, match="--decay cosine needs more training steps"):
        translate.learning_rate({**config, "total_steps": 10})
    # the default stays what runs recorded before the flag used
    config = translate.model_config(translate.parser().parse_args(["train", "--warmup", "10"]))
    assert config["decay"] == "rsqrt"
    assert float(translate.learning_rate(config)(39)) == pytest.approx(1e-3 * 0.5)


def test_results_tables_bleu_by_length_and_plots_it(tmp_path):
    """The per-length table has a column per bucket seen in any run,
    shortest first, a dash where a run has no sentence of that length, and
    the plot is a PNG."""
    from recipes.results import length_table, plot_by_length

    rows = [
        (
            "RNN, no attention (bottleneck)",
            {"1-5": {"bleu": 3.5, "sentences": 250}, "6-10": {"bleu": 1.25, "sentences": 538}},
        ),
        (
            "Transformer",
            {
                "26+": {"bleu": 2.0, "sentences": 3},
                "1-5": {"bleu": 9.0, "sentences": 250},
                "6-10": {"bleu": 7.5, "sentences": 538},
            },
        ),
    ]
    table = length_table(rows).splitlines()
    assert "| model | 1-5 (250) | 6-10 (538) | 26+ (3) |" in table
    assert "| RNN, no attention (bottleneck) | 3.50 | 1.25 | — |" in table
    assert "| Transformer | 9.00 | 7.50 | 2.00 |" in table
    assert length_table([("x", {})]) == ""
    path = tmp_path / "by_length.png"
    plot_by_length(rows, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_alpha_reaches_the_search_of_translate_and_evaluate(trained, capsys, tmp_path):
    """`--alpha` (GNMT's length penalty) is the search's: `translate`
    prints what `translate_texts(alpha=...)` gives, for two alphas, and
    `evaluate` records the alpha it scored with."""
    model, config, source, target = translate.load_run(trained[0])
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?"]
    for alpha in ("0", "3"):
        status, out, err = cli(
            capsys, "translate", "--output", trained[0], "--alpha", alpha, *texts
        )
        assert status == 0, err
        expected = translate.translate_texts(
            model, source, target, texts, config["max_length"], 4, alpha=float(alpha)
        )
        assert [line.split("-> ", 1)[1] for line in out.splitlines()[1::2]] == expected
    test = tmp_path / "test.tsv"
    test.write_text("Ich habe keine Zeit.\tI have no time.\n", encoding="utf-8")
    status, _, err = cli(
        capsys, "evaluate", "--output", trained[0], "--test", str(test), "--alpha", "1.5"
    )
    assert status == 0, err
    scores = json.loads(open(os.path.join(trained[0], "scores.json")).read())
    assert scores["alpha"] == 1.5 and scores["beam_width"] == 4


@pytest.mark.parametrize("family", ["convs2s", "transformer", "rnn"])
def test_the_demo_defaults_pass_the_checks_for_every_family(family):
    """`make demo` runs `demo` with its defaults (a ConvS2S model), and
    `demo --family F` must start too: the checks run before any work, so
    a default that does not apply to a family would stop the job at once."""
    args = translate.parser().parse_args(["demo", "--family", family])
    translate.check(args)
    config = translate.model_config(args)
    assert config["family"] == family and args.alpha == 1.2 and args.epochs == 14
    assert config["units"] == 128 and args.average_last == 3
    assert translate.parser().parse_args(["demo"]).family == "convs2s"
