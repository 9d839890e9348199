"""`bench/serving_load.py` on a tiny export: requests of mixed sizes from
threads, in process and through the serving client's REST path against
`tests/serving_stub.py` (TF Serving's REST API, in this process)."""

import json

import numpy as np
import pytest

from tests.bench_helpers import load_bench

pytestmark = pytest.mark.tensorflow
WORDS = ["ich", "habe", "zeit", ".", "keine", "wo", "ist", "der", "bahnhof", "?"]


@pytest.fixture(scope="module")
def bench():
    return load_bench("serving_load")


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    """`(version folder, words file)`: an untrained tiny translator
    (WordPiece vocabulary of a few words, beam 2, max length 6)."""
    import keras

    from keras_attention.seq2seq import RecurrentSeq2Seq
    from keras_attention.serving.export import export_archive, translator_archive
    from keras_attention.tokenizers import RESERVED, SubwordTokenizer

    directory = tmp_path_factory.mktemp("serving-load")
    vocabulary = directory / "vocab.txt"
    vocabulary.write_text("\n".join(RESERVED + WORDS[:4]) + "\n")
    tokenizer = SubwordTokenizer(str(vocabulary))
    keras.utils.set_random_seed(1)
    model = RecurrentSeq2Seq(8, 8, embed_dim=4, hidden_dim=8, attention="dot")
    model.build()
    archive = translator_archive(model, tokenizer, tokenizer, max_length=6, beam_width=2)
    words = directory / "words.tsv"
    words.write_text("Ich habe keine Zeit .\tI have no time.\nWo ist der Bahnhof ?\tWhere?\n")
    return export_archive(archive, str(directory / "exports"), "translator"), str(words)


# The benchmark's smoke run: large (`make test-large`).
@pytest.mark.large
def test_the_load_bench_reports_every_figure_and_check(bench, tiny_export, tmp_path, capsys):
    export, words = tiny_export
    report_path = tmp_path / "load.json"
    status = bench.main(
        [
            "--export",
            export,
            "--words",
            words,
            "--requests",
            "20",
            "--rest-requests",
            "9",
            "--bad-every",
            "3",
            "--threads",
            "4",
            "--warmup",
            "4",
            "--max-batch",
            "8",
            "--max-words",
            "12",
            "--json",
            str(report_path),
        ]
    )
    report = json.loads(report_path.read_text())
    assert sorted(report) == ["export", "load", "machine", "runs", "settings"]
    # No warm-up file in this export: nothing replayed after loading.
    assert report["load"]["warmup_requests"] == 0 and report["load"]["seconds"] > 0
    assert {"cpu", "cores", "avx512f", "tensorflow"} <= set(report["machine"])
    assert sorted(report["runs"]) == ["rest", "signature"]
    for name, good, bad in (("signature", 20, 0), ("rest", 6, 3)):
        run = report["runs"][name]
        assert {
            "latency_ms",
            "sentences_per_second",
            "rss_mib",
            "rss_growth_percent",
            "errors",
            "row_mismatches",
            "goal_met",
        } <= set(run)
        assert sorted(run["latency_ms"]) == ["max", "p50", "p95", "p99"]
        assert 0 < run["latency_ms"]["p50"] <= run["latency_ms"]["p95"] <= run["latency_ms"]["p99"]
        assert set(run["rss_mib"]) == {"warm", "end", "peak"} and run["rss_mib"]["warm"] > 0
        assert run["requests"] == good and run["sentences_per_second"] > 0
        assert (run["errors"], run["row_mismatches"]) == (0, 0), run
        # Every bad request came back as the client's error with the server's answer.
        assert run["bad_requests"]["sent"] == run["bad_requests"]["refused"] == bad
        assert run["goal_met"] == (run["rss_growth_percent"] < 5.0)
    assert report["runs"]["rest"]["bad_requests"]["kinds"] == sorted(bench.BAD_KINDS)
    # The stub answered the good requests and refused the bad ones.
    assert report["runs"]["rest"]["server"]["error_answers"] == 3
    # The first request is the largest: 8 sentences of 12 words.
    assert report["runs"]["signature"]["sentences"] >= 8
    assert status == (0 if all(r["goal_met"] for r in report["runs"].values()) else 1)
    table = capsys.readouterr().out.splitlines()
    assert table[-2].split()[:3] == [
        "signature",
        "20",
        str(report["runs"]["signature"]["sentences"]),
    ]
    assert table[-1].split()[:2] == ["rest", "6"]


def test_the_checks_catch_wrong_row_counts_blank_rows_and_errors(bench):
    """The bench's checks are not vacuous: a response with a row missing,
    a translation for an empty string, or an exception are counted."""
    texts = ["ich habe", "", "zeit"]
    good = {"translation": np.array([b"a", b"", b"b"], object), "score": np.zeros(3)}
    assert bench.check_rows(texts, good, None) == []
    short = {"translation": np.array([b"a", b""], object), "score": np.zeros(3)}
    assert bench.check_rows(texts, short, None) == ["translation has 2 rows for 3"]
    scores = {"translation": good["translation"], "score": np.zeros(4)}
    assert bench.check_rows(texts, scores, None) == ["score has 4 rows for 3"]
    filled = {"translation": np.array([b"a", b"the", b"b"], object), "score": np.zeros(3)}
    assert bench.check_rows(texts, filled, None) == ["an empty string translated to 'the'"]

    def call(request):
        if request == ["boom"]:
            raise RuntimeError("answered 500: broken\nmore")
        return {"translation": np.array([b"x"] * len(request), object)}

    records = bench.drive(call, [["a"], ["boom"], ["b", "c"]], 2, bench.check_rows)
    assert [record[1] is None for record in records] == [True, False, True]
    assert bench.first_line(records[1][1]) == "answered 500: broken"


def test_requests_mix_sizes_and_hold_the_extremes(bench):
    requests = bench.make_requests(200, 64, 60, ["w"], np.random.default_rng(0))
    assert requests[0] == [" ".join(["w"] * 60)] * 64  # the largest first
    sizes = [len(r) for r in requests]
    lengths = [len(t.split()) for r in requests for t in r]
    assert min(sizes) == 1 and max(sizes) == 64
    assert min(lengths) == 0 and max(lengths) == 60
    assert 0.03 < lengths.count(0) / len(lengths) < 0.08  # about 5% empty strings


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--requests", "0"], "--requests must be a positive integer; received 0"),
        (["--threads", "-1"], "--threads must be a positive integer; received -1"),
        (["--paths", "grpc"], "--paths takes signature and/or rest; received grpc"),
        (["--export", "/nonexistent"], "--export: no saved_model.pb in '/nonexistent'"),
    ],
)
def test_bad_flags_are_one_line_errors(bench, flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(flags)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


@pytest.mark.large(reason="a benchmark's smoke run")
def test_the_client_against_the_stub_in_both_rest_formats(exported):
    """`predict_rest` (what `keras-attention-serving-client` sends) gets the
    signature's own outputs through the stub in both formats (the session's
    shared export, beam 2); the stub answers errors as TF Serving does and
    the client raises them."""
    import requests
    import tensorflow as tf
    from keras_attention_recipes.serving_client import predict_rest

    from tests.serving_stub import ServingStub

    export = exported
    texts = ["ich habe zeit .", "", "habe " * 60]
    loaded = tf.saved_model.load(export)
    direct = loaded.signatures["serving_default"](text=tf.constant(texts))
    text = {"text": np.array([t.encode() for t in texts], dtype=object)}
    with ServingStub(export, loaded=loaded) as stub:
        assert stub.version == "1"
        for style in ("inputs", "instances"):
            got = predict_rest(stub.host, stub.port, "translator", text, "serving_default", style)
            assert sorted(got) == ["score", "translation", "truncated"]
            np.testing.assert_array_equal(got["translation"], direct["translation"].numpy())
            np.testing.assert_allclose(got["score"], direct["score"].numpy(), atol=1e-6)
            assert got["truncated"].tolist() == [False, False, True]
        # A signature without inputs: {"inputs": {}} gets its scalars.
        options = predict_rest(stub.host, stub.port, "translator", {}, "decoding_options")
        assert options["beam_width"] == 2 and options["search"].dtype == object
        base = f"http://{stub.host}:{stub.port}/v1/models"
        status = requests.get(f"{base}/translator", timeout=10).json()
        assert status["model_version_status"][0]["state"] == "AVAILABLE"
        with pytest.raises(RuntimeError, match=r"answered 404: .*Latest\(digits\)"):
            predict_rest(stub.host, stub.port, "digits", text, "serving_default")
        with pytest.raises(RuntimeError, match='answered 400: .*"nope\\\\" not found'):
            predict_rest(stub.host, stub.port, "translator", text, "nope")
        answer = requests.post(f"{base}/translator:predict", data=b"{", timeout=10)
        assert answer.status_code == 400 and "JSON Parse error" in answer.json()["error"]
        answer = requests.post(f"{base}/translator:predict", json={"inputs": [5]}, timeout=10)
        assert answer.json() == {"error": "text: expected a regular array of strings; got [5]"}
        answer = requests.post(f"{base}/translator/versions/1:predict", json={}, timeout=10)
        assert answer.json() == {"error": "Missing 'inputs' or 'instances' key"}
        assert stub.errors == 5
