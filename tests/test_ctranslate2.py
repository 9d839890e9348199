"""`keras_attention.serving.ctranslate2` and `keras-attention-translate
convert --to ctranslate2`: every configuration CTranslate2's
TransformerSpec expresses decodes to the same ids in CTranslate2 (float32)
as in our searches; what it cannot express is refused in one line."""

import ast
import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="ctranslate2 is not installed (pip install 'keras_attention[recipes]')"
)

from keras_attention.seq2seq import ConvS2SSeq2Seq, RecurrentSeq2Seq
from keras_attention.seq2seq.sampling import GreedySearch
from keras_attention.seq2seq.search import BeamSearch
from keras_attention.seq2seq.transformer import TransformerSeq2Seq
from keras_attention.serving.ctranslate2 import (
    QUANTIZATIONS,
    convert_to_ctranslate2,
    restore_numbers,
    translate_with_ctranslate2,
)
from keras_attention.serving.ctranslate2_spec import default_vocabulary
from tests.translation_helpers import TINY, cli, run

V, L = 40, 10  # vocabulary, longest output (tokens, <eos> included)
TOKENS = default_vocabulary(V, {0: "[PAD]", 1: "[START]", 2: "[END]", 3: "[UNK]"})
CONFIGURATIONS = {
    "sinusoidal, post-norm, separate embeddings": {},
    "learned positions": {"position": "learned"},
    "relative positions (Shaw)": {"position": "relative"},
    "rotary": {"position": "rope"},
    "pre-norm": {"norm_first": True},
    "tied embeddings": {"tie_embeddings": True},
    "three-way tied (one vocabulary)": {"tie_embeddings": True, "share_embeddings": True},
    "grouped-query": {"num_key_value_heads": 2},
    "multi-query, rotary": {"num_key_value_heads": 1, "position": "rope"},
}


def random_model(**settings):
    """A tiny Transformer with random weights large enough that each step's
    argmax is clear (no near-ties), `<eos>` likely enough that outputs
    end at various lengths, and padding and `<sos>` (which our searches
    never generate and whose mass they do not renormalise) improbable."""
    model = TransformerSeq2Seq(
        V,
        V,
        hidden_dim=16,
        num_heads=4,
        intermediate_dim=32,
        num_layers=2,
        max_length=L + 1,
        **settings,
    )
    model.build()
    rng = np.random.default_rng(1)
    for weight in model.weights:
        centre = 1.0 if "gamma" in weight.path else 0.0
        weight.assign(rng.normal(centre, 0.4, weight.shape).astype("float32"))
    bias = model.output_bias if model.tie_embeddings else model.output_projection.bias
    values = np.asarray(bias)
    values[2] += 3.0  # <eos>
    values[:2] = -30.0  # padding, <sos>
    bias.assign(values)
    return model


def sources():
    rng = np.random.default_rng(5)
    ids = np.zeros((8, 8), "int32")
    for row in ids:
        n = rng.integers(2, 7)
        row[0], row[1 : n + 1], row[n + 1] = 1, rng.integers(4, V, n), 2
    return ids


def ours(result, beam=False):
    """Our search's ids without `<eos>` and padding, and scores."""
    tokens, scores = np.asarray(result["tokens"]), np.asarray(result["scores"])
    if beam:
        tokens, scores = tokens[:, 0], scores[:, 0]
    rows = []
    for row in tokens:
        ids = [int(t) for t in row if t != 0]
        rows.append(ids[:-1] if ids and ids[-1] == 2 else ids)
    return rows, scores


def theirs(translator, source, beam_size):
    batch = [[TOKENS[t] for t in row if t > 2] for row in source]  # it adds [START], [END]
    results = translator.translate_batch(
        batch,
        beam_size=beam_size,
        length_penalty=0,  # no length penalty, as alpha=0 (see docs/deploying.md)
        min_decoding_length=0,  # CTranslate2's default is 1, ours 0
        max_decoding_length=L,
        max_input_length=0,
        return_scores=True,
    )
    rows = [[TOKENS.index(t) for t in result.hypotheses[0]] for result in results]
    return rows, np.array([result.scores[0] for result in results])


# `make test` converts the plain Transformer, relative positions, pre-norm,
# one vocabulary and multi-query rotary attention; the variants those cover
# (learned and rotary positions alone, two-way tying, grouped queries) are
# large (`make test-large`).
LARGE_CONFIGURATIONS = ("learned positions", "rotary", "tied embeddings", "grouped-query")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.large if name in LARGE_CONFIGURATIONS else ())
        for name in CONFIGURATIONS
    ],
)
def test_converted_models_search_to_the_same_ids_and_scores(name, tmp_path):
    """Greedy: the same ids and scores. Beam search (no length penalty:
    GNMT's and CTranslate2's differ): the same ids and scores, except where
    the documented rule differs: CTranslate2 finishes a hypothesis only when
    its <eos> ranks among the beam_size best candidates of a step, ours
    among the 2 * beam_size best, so ours may return a finished hypothesis
    CTranslate2 never admitted, and then only one that scores higher."""
    model = random_model(**CONFIGURATIONS[name])
    folder = convert_to_ctranslate2(model, str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(folder, device="cpu", intra_threads=1)
    source = sources()
    greedy, greedy_scores = ours(GreedySearch(max_length=L)(model, source))
    their_greedy, their_greedy_scores = theirs(translator, source, 1)
    assert their_greedy == greedy
    np.testing.assert_allclose(their_greedy_scores, greedy_scores, atol=2e-3)
    assert any(greedy)  # not all empty
    result = BeamSearch(beam_width=3, alpha=0.0, max_length=L)(model, source)
    beam, beam_scores = ours(result, True)
    their_beam, their_scores = theirs(translator, source, 3)
    same = [a == b for a, b in zip(beam, their_beam)]
    np.testing.assert_allclose(their_scores[same], beam_scores[same], atol=2e-3)
    finished = np.asarray(result["finished"])[:, 0]
    for index in np.flatnonzero(~np.array(same)):
        assert finished[index] and beam_scores[index] > their_scores[index] + 0.1, index
    assert any(same)


def test_teacher_forced_log_probabilities_agree(tmp_path):
    """CTranslate2's `score_batch` and our model give each target token the
    same log-probability (the bans renormalise: padding and <sos> ~0)."""
    from keras import ops

    model = random_model(position="relative", norm_first=True)
    folder = convert_to_ctranslate2(model, str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(folder, device="cpu")
    source = sources()
    target = np.array([[1, 5, 6, 7, 2]] * len(source))
    log_probs = np.asarray(ops.log_softmax(model((source, target[:, :-1])), axis=-1))
    expected = np.take_along_axis(log_probs, target[:, 1:, None], axis=-1)[..., 0]
    batch = [[TOKENS[t] for t in row if t > 2] for row in source]
    scored = translator.score_batch(batch, [["5", "6", "7"]] * len(source))
    np.testing.assert_allclose([r.log_probs for r in scored], expected, atol=1e-4)


def test_int8_quantization_is_smaller_and_still_decodes(tmp_path):
    model = random_model()
    # A short sinusoidal table: CTranslate2 keeps position tables in float32.
    plain = convert_to_ctranslate2(model, str(tmp_path / "float32"), max_positions=L + 1)
    small = convert_to_ctranslate2(
        model, str(tmp_path / "int8"), quantization="int8", max_positions=L + 1
    )
    size = os.path.getsize
    assert size(os.path.join(small, "model.bin")) < 0.5 * size(os.path.join(plain, "model.bin"))
    translator = ctranslate2.Translator(small, device="cpu", compute_type="int8")
    rows, _ = theirs(translator, sources(), 1)
    assert len(rows) == 8 and all(0 <= t < V for row in rows for t in row)


def test_output_is_published_whole_and_not_over_an_existing_folder(tmp_path):
    model = random_model()
    target = tmp_path / "ct2"
    convert_to_ctranslate2(model, str(target), metadata={"note": "x"})
    record = json.loads((target / "keras_attention.json").read_text())
    assert record["note"] == "x" and record["files"] == sorted(os.listdir(target))
    with pytest.raises(ValueError, match="output_dir .* exists .*overwrite=True"):
        convert_to_ctranslate2(model, str(target))
    convert_to_ctranslate2(model, str(target), quantization="int8", overwrite=True)
    record = json.loads((target / "keras_attention.json").read_text())
    assert "note" not in record  # the new folder, whole
    assert sorted(os.listdir(tmp_path)) == ["ct2"]  # no temporaries left


def test_overwrite_replaces_only_an_empty_folder_or_a_model_it_wrote(tmp_path, monkeypatch):
    """`overwrite=True` deleted whatever folder `output_dir` named: a run,
    the current folder (`""`), a folder of the user's files."""
    model = random_model()
    ours = tmp_path / "ours"
    convert_to_ctranslate2(model, str(ours), max_positions=L + 1)
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "precious.txt").write_text("keep")
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    for name in ("run.json", "model.keras", "config.json"):
        (run / name).write_text("{}")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    for folder in (precious, run):
        with pytest.raises(ValueError) as error:
            convert_to_ctranslate2(model, str(folder), max_positions=L + 1, overwrite=True)
        message = str(error.value)
        assert f"output_dir {folder} is not a CTranslate2 model" in message, message
        assert "choose another output_dir" in message and "\n" not in message
    monkeypatch.chdir(precious)
    with pytest.raises(ValueError, match="output_dir must name a folder to write; got ''"):
        convert_to_ctranslate2(model, "", max_positions=L + 1, overwrite=True)
    # Its own model with a file of the user's put in it: refused too.
    (ours / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files convert_to_ctranslate2 did not write"):
        convert_to_ctranslate2(model, str(ours), max_positions=L + 1, overwrite=True)
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert after == {**before, ours / "notes.txt": b"mine"}
    (ours / "notes.txt").unlink()
    # Its own model, a model the recipe converted before the record listed
    # its files, and an empty folder are replaced, whole.
    convert_to_ctranslate2(model, str(ours), max_positions=L + 1, overwrite=True)
    legacy = tmp_path / "legacy"
    shutil.copytree(ours, legacy)
    (legacy / "keras_attention.json").write_text(json.dumps({"converted_from": "run"}))
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (legacy, empty):
        convert_to_ctranslate2(model, str(folder), max_positions=L + 1, overwrite=True)
        assert (folder / "model.bin").exists()
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]


def test_what_ctranslate2_cannot_express_is_refused_in_one_line(tmp_path):
    out = str(tmp_path / "ct2")
    refusals = [
        (ConvS2SSeq2Seq(20, 20, embed_dim=8, hidden_dim=8), "family='ConvS2SSeq2Seq'"),
        (RecurrentSeq2Seq(20, 20, embed_dim=8, hidden_dim=8), "family='RecurrentSeq2Seq'"),
        (TransformerSeq2Seq(20, 20, 8, 2, 16, position="alibi"), "position='alibi'"),
        (TransformerSeq2Seq(20, 20, 8, 2, 16, sliding_window=3), "sliding_window=3"),
    ]
    for model, named in refusals:
        with pytest.raises(ValueError) as error:
            convert_to_ctranslate2(model, out)
        message = str(error.value)
        assert named in message and "not supported" in message and "\n" not in message
    model = TransformerSeq2Seq(20, 20, 8, 2, 16)
    with pytest.raises(ValueError, match="quantization must be None or one of"):
        convert_to_ctranslate2(model, out, quantization="int4")
    with pytest.raises(ValueError, match="source vocabulary has 3 tokens; .* 20"):
        convert_to_ctranslate2(model, out, source_tokens=["a", "b", "c"])
    assert not os.path.exists(out)
    assert QUANTIZATIONS == ("int8", "int8_float32", "float16")


def test_numbers_are_restored_as_our_number_protection_restores_them():
    from keras_attention.tokenizers.number_rules import PLACEHOLDER
    from keras_attention.tokenizers.numbers import NumberProtection

    sources = ["Das kostet 2,50 Euro, nicht 1.000.", "um 14:35 Uhr", "nichts"]
    translations = [
        f"It costs {PLACEHOLDER} euros, not {PLACEHOLDER}.",
        f"at {PLACEHOLDER}",
        f"nothing {PLACEHOLDER} here",
    ]
    expected = NumberProtection(swap_separators=True).restore(translations, sources).numpy()
    assert [restore_numbers(t, s) for t, s in zip(translations, sources)] == [
        text.decode() for text in expected
    ]


def test_blank_texts_are_not_sent_to_ctranslate2(trained, tmp_path):
    """A text of Unicode spaces or format characters only (or of typed
    placeholders and marks, or `▁`) is blank, as in the graph
    (`tokenizers.base.is_blank`): "" without asking CTranslate2."""
    import types

    for side in ("source", "target"):
        shutil.copy(os.path.join(trained[0], f"{side}.spm"), tmp_path / f"{side}.spm")
    asked = []

    class Recorder:  # a ctranslate2.Translator that records what it is asked
        def translate_batch(self, pieces, **options):
            asked.extend(pieces)
            return [types.SimpleNamespace(hypotheses=[["▁x"]]) for _ in pieces]

    blanks = ["\u00a0\u2003", "\u202e\u200f\u200b", "\u3000", "\u2028", "\ufeff", "\u2581\u200b"]
    blanks += ["\ue000\x01", ""]
    texts = ["Guten Morgen.", *blanks, "a\u200b"]
    got = translate_with_ctranslate2(str(tmp_path), texts, translator=Recorder())
    assert got[1:-1] == [""] * len(blanks)
    assert len(asked) == 2 and all(asked)


# -- the command line ------------------------------------------------------------------
@pytest.fixture(scope="module")
def transformer_run(tmp_path_factory):
    """A tiny Transformer run of the recipe (SentencePiece, numbers
    protected), trained for two epochs in seconds."""
    output = str(tmp_path_factory.mktemp("ct2") / "run")
    run("train", "--output", output, "--family", "transformer", "--epochs", "2", *TINY)
    return output


def test_convert_cli_translates_a_test_file_as_our_translate_does(
    transformer_run, tmp_path, capsys, monkeypatch
):
    out = str(tmp_path / "ct2")
    convert = ["convert", "--output", transformer_run, "--to", "ctranslate2", "--dir", out]
    # The run's beam (width 4, alpha 0.6): GNMT's penalty is not CTranslate2's.
    status, _, stderr = cli(capsys, *convert)
    assert status == 2 and stderr.startswith("error: alpha 0.6 (the run's beam search")
    assert "give --length-penalty P" in stderr and not os.path.exists(out)
    status, stdout, stderr = cli(capsys, *convert, "--length-penalty", "1.0")
    assert status == 0, stderr
    record = json.loads(open(os.path.join(out, "keras_attention.json")).read())
    assert record["translate_batch"]["length_penalty"] == 1.0 and record["alpha"] == 0.6
    last = stdout.strip().splitlines()[-1]
    assert last.startswith(f"converted {transformer_run} to CTranslate2 (float32, --dir {out})")
    for name in ("model.bin", "config.json", "source.spm", "target.spm", "keras_attention.json"):
        assert name in last and os.path.exists(os.path.join(out, name))
    with open(os.path.join(transformer_run, "data", "test.tsv"), encoding="utf-8") as handle:
        texts = [line.split("\t")[0] for line in handle.read().splitlines()]
    texts += ["", "Es kostet 3,50 Euro."]  # nothing to translate; a protected number
    test_file, ours_file = tmp_path / "test.txt", tmp_path / "ours.txt"
    test_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
    run(
        "translate", "--output", transformer_run, "--beam-width", "1",
        "--input", str(test_file), "--output-file", str(ours_file),
    )  # fmt: skip
    expected = ours_file.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(expected) == len(texts) >= 5
    assert translate_with_ctranslate2(out, texts, beam_size=1) == expected
    # int8 passes through; the folder is replaced whole with --overwrite.
    status, stdout, _ = cli(
        capsys, *convert, "--length-penalty", "1.0", "--quantization", "int8", "--overwrite",
    )  # fmt: skip
    assert status == 0 and "(int8, --dir" in stdout.splitlines()[-1]
    assert len(translate_with_ctranslate2(out, texts, beam_size=1)) == len(texts)
    # docs/deploying.md's snippet (marked not run there: it needs a converted
    # model) runs on this one, from a folder where it is `ct2_model`.
    page = pathlib.Path(__file__).resolve().parents[1] / "docs" / "deploying.md"
    snippet = re.search(r"<!-- not run -->\n```python\n(.*?)^```", page.read_text(), re.S | re.M)
    os.symlink(out, tmp_path / "ct2_model")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    exec(compile(snippet.group(1), "deploying.md", "exec"), {})
    printed = ast.literal_eval(capsys.readouterr().out.strip())
    assert len(printed) == 2 and all(isinstance(text, str) for text in printed)


def test_export_format_ctranslate2_writes_what_convert_writes(transformer_run, tmp_path, capsys):
    """`export --format ctranslate2` writes `<export-dir>/<model-name>/`, the
    folder `convert --to ctranslate2 --dir` writes, and translates as it;
    each format's own options are refused with the other."""
    exports = tmp_path / "exports"
    status, stdout, stderr = cli(
        capsys, "export", "--output", transformer_run, "--format", "ctranslate2",
        "--export-dir", str(exports), "--model-name", "ct2", "--alpha", "0",
    )  # fmt: skip
    assert status == 0, stderr
    folder = exports / "ct2"
    assert f"--export-dir {folder})" in stdout and (folder / "model.bin").exists()
    status, _, stderr = cli(
        capsys, "convert", "--output", transformer_run, "--to", "ctranslate2",
        "--dir", str(tmp_path / "converted"), "--alpha", "0",
    )  # fmt: skip
    assert status == 0, stderr
    texts = ["Ich habe keine Zeit.", "Wo ist der Bahnhof?"]
    assert translate_with_ctranslate2(str(folder), texts) == translate_with_ctranslate2(
        str(tmp_path / "converted"), texts
    )
    for flags, message in (
        (["--format", "ctranslate2", "--xla"], "--xla is an option of --format saved_model"),
        (["--quantization", "int8"], "--quantization is an option of --format ctranslate2"),
        (["--length-penalty", "1"], "--length-penalty is an option of --format ctranslate2"),
    ):
        status, _, stderr = cli(
            capsys, "export", "--output", transformer_run, "--export-dir", str(exports), *flags
        )
        assert status == 2 and stderr == f"error: {message}; got --format " + (
            "ctranslate2\n" if "ctranslate2" in flags else "saved_model\n"
        ), stderr


def test_convert_cli_mistakes_are_one_line_with_status_2(transformer_run, tmp_path, capsys):
    def error(*argv):
        status, stdout, stderr = cli(capsys, "convert", "--to", "ctranslate2", *argv)
        assert status == 2 and len(stderr.strip().splitlines()) == 1, stderr
        return stderr.strip()

    existing = tmp_path / "exists"
    existing.mkdir()
    assert "--dir" in error("--output", transformer_run, "--dir", str(existing))
    assert "--overwrite" in error("--output", transformer_run, "--dir", str(existing))
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert "is a file" in error("--output", transformer_run, "--dir", str(a_file))
    assert "no trained model" in error("--output", str(tmp_path / "none"), "--dir", "x")
    wordpiece = tmp_path / "wordpiece"
    shutil.copytree(transformer_run, wordpiece)
    os.replace(wordpiece / "source.spm", wordpiece / "source.vocab")
    assert "WordPiece" in error("--output", str(wordpiece), "--dir", str(tmp_path / "w"))
    status, _, stderr = cli(capsys, "convert", "--output", transformer_run, "--dir", "x")
    assert status == 2 and "--to" in stderr.splitlines()[-1]  # argparse: usage, then one line
    status, _, stderr = cli(
        capsys, "convert", "--to", "ctranslate2", "--dir", "x", "--quantization", "int4"
    )
    assert status == 2 and "invalid choice: 'int4'" in stderr.splitlines()[-1]
    assert not os.path.exists(tmp_path / "w") and not os.path.exists("x")


def test_a_shortlist_of_a_recurrent_run_is_refused_in_flag_words(trained, tmp_path, capsys):
    exports = str(tmp_path / "exports")
    status, _, stderr = cli(
        capsys, "export", "--output", trained[0], "--export-dir", exports, "--shortlist", "100"
    )
    assert status == 2 and stderr.strip() == (
        f"error: --shortlist decodes one Transformer or ConvS2S over a shortlist; --output "
        f"{trained[0]} with these flags is a --family rnn model: drop --shortlist"
    )
    assert not os.path.exists(exports)


def test_convert_cli_refuses_a_recurrent_run_naming_the_family(trained, tmp_path, capsys):
    """In flag words (it said `convert_to_ctranslate2: family='ConvS2SSeq2Seq'`),
    from the run's config.json, before the model is loaded."""
    convs2s = tmp_path / "convs2s"
    shutil.copytree(trained[0], convs2s)
    record = json.loads((convs2s / "config.json").read_text())
    (convs2s / "config.json").write_text(json.dumps({**record, "family": "convs2s"}))
    for output, family in ((trained[0], "rnn"), (str(convs2s), "convs2s")):
        status, _, stderr = cli(
            capsys, "convert", "--output", output, "--to", "ctranslate2",
            "--dir", str(tmp_path / "ct2"),
        )  # fmt: skip
        assert status == 2
        assert stderr.strip() == (
            f"error: --output {output} holds a --family {family} model: convert --to "
            "ctranslate2 converts the transformer family only (CTranslate2 has no spec for "
            "ConvS2S or the recurrent models); train one with --family transformer"
        )
    assert not os.path.exists(tmp_path / "ct2")


def test_convert_overwrite_never_deletes_what_convert_did_not_write(
    trained, tmp_path, capsys, monkeypatch
):
    """`convert --overwrite` deleted whatever `--dir` named: the run itself,
    the current folder (`--dir ''`), a folder of the user's files. Each is
    refused in one line naming --dir, before any work, and nothing changes."""
    run = tmp_path / "runs" / "tr"
    shutil.copytree(trained[0], run)
    sand = tmp_path / "sand"
    sand.mkdir()
    (sand / "notes.txt").write_text("mine")
    nonempty = tmp_path / "nonempty"
    nonempty.mkdir()
    (nonempty / "precious.txt").write_text("mine")
    holder = tmp_path / "holder" / "other"
    holder.mkdir(parents=True)
    (holder / "run.json").write_text("{}")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    monkeypatch.chdir(sand)
    cases = [
        (str(run), f"--dir {run} is --output's run folder"),
        (str(run) + "/", f"--dir {run}/ is --output's run folder"),
        (str(tmp_path / "runs"), f"--dir {tmp_path / 'runs'} is a folder that holds --output"),
        ("", "--dir is empty (that would be the current folder)"),
        (str(nonempty), f"--dir {nonempty} is not a CTranslate2 model convert wrote"),
        (str(holder / ".."), f"--dir {holder / '..'} is not a CTranslate2 model convert wrote"),
        (str(holder), f"--dir {holder} holds a run (run.json)"),
    ]
    for directory, message in cases:
        status, _, stderr = cli(
            capsys, "convert", "--output", str(run), "--to", "ctranslate2",
            "--dir", directory, "--overwrite",
        )  # fmt: skip
        assert status == 2 and stderr.count("\n") == 1, stderr
        assert stderr.startswith(f"error: {message}"), stderr
        assert "convert_to_ctranslate2" not in stderr and "output_dir" not in stderr
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert after == before


@pytest.mark.large
def test_bench_deploying_smoke_prints_every_route(transformer_run, capsys):
    """bench/deploying.py --smoke: every route translates the same test
    sentences; CTranslate2 float32 greedy scores as our SavedModel greedy."""
    from tests.bench_helpers import load_bench

    bench = load_bench("deploying")
    rows = bench.main(["--output", transformer_run, "--smoke"])
    table = {(route, search): (speed, bleu, chrf) for route, search, speed, bleu, chrf in rows}
    routes = ("SavedModel float32", "CTranslate2 float32", "CTranslate2 int8")
    assert set(table) == {(r, s) for r in routes for s in ("beam 4", "greedy")}
    assert all(speed > 0 for speed, _, _ in table.values())
    assert table["CTranslate2 float32", "greedy"][1:] == table["SavedModel float32", "greedy"][1:]
    assert "| route | search | tokens/s | BLEU | chrF |" in capsys.readouterr().out


@pytest.mark.large(reason="a run quantized and converted for one message")
def test_convert_cli_refuses_a_quantized_run_in_flag_words(transformer_run, tmp_path, capsys):
    """It said `pass quantization='int8'`, the library's argument."""
    import keras

    import keras_attention  # noqa: F401  (registers the model classes)

    quantized = tmp_path / "quantized"
    shutil.copytree(transformer_run, quantized)
    model = keras.saving.load_model(str(quantized / "model.keras"), compile=False)
    model.quantize("int8")
    model.save(str(quantized / "model.keras"))
    status, _, stderr = cli(
        capsys, "convert", "--output", str(quantized), "--to", "ctranslate2",
        "--dir", str(tmp_path / "ct2"), "--alpha", "0",
    )  # fmt: skip
    assert status == 2 and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"error: --output {quantized} holds a model quantized in place (int8)")
    assert "add --quantization int8" in stderr and "quantization=" not in stderr
    assert not os.path.exists(tmp_path / "ct2")


def test_a_symbolic_link_is_written_through_and_nothing_is_left_beside_it(tmp_path):
    """`output_dir` a link to a model it wrote: the model it names is
    replaced (the link stays a link, no temporary beside it); a dangling
    link makes the folder it names."""
    model = random_model()
    real = tmp_path / "models" / "ct2"
    convert_to_ctranslate2(model, str(real), metadata={"note": "old"})
    link = tmp_path / "link"
    link.symlink_to(real)
    convert_to_ctranslate2(model, str(link), metadata={"note": "new"}, overwrite=True)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads((real / "keras_attention.json").read_text())["note"] == "new"
    assert sorted(os.listdir(tmp_path)) == ["link", "models"]
    assert sorted(os.listdir(tmp_path / "models")) == ["ct2"]
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "models" / "later")
    assert convert_to_ctranslate2(model, str(dangling)) == str(tmp_path / "models" / "later")
    assert (tmp_path / "models" / "later" / "model.bin").is_file()


def test_a_shortlist_exports_and_converts_as_one_table(transformer_run, tmp_path, capsys):
    """`export --shortlist K` and `convert --shortlist K`: the SavedModel
    (op-checked for TF Serving) holds its table and decodes each request
    as the plain export does whenever the plain one's output is listed for
    it; CTranslate2's vocabulary map is the same table, and with it
    CTranslate2 translates as without it whenever its output is among the
    map's candidates."""
    import sentencepiece
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the tokenizers' ops)

    from keras_attention.seq2seq import Shortlist
    from keras_attention.serving import check
    from keras_attention.tokenizers.pieces import SentencePieceEncoder, read_model

    with open(os.path.join(transformer_run, "data", "test.tsv"), encoding="utf-8") as handle:
        texts = [line.split("\t")[0] for line in handle.read().splitlines()]
    texts = [text for text in texts if not re.search(r"[0-9]", text)][:16]
    exports = str(tmp_path / "exports")
    common = ["--output", transformer_run, "--beam-width", "1", "--export-dir", exports]
    status, _, stderr = cli(capsys, "export", *common, "--shortlist", "100000")
    assert status == 2 and "error: --shortlist 100000 is more than the run's" in stderr
    run("export", *common, "--model-name", "plain")
    run("export", *common, "--model-name", "short", "--shortlist", "300")
    short = os.path.join(exports, "short", "1")
    record = json.load(open(os.path.join(short, "assets.extra", "keras_attention.json")))
    assert record["shortlist"]["size"] == 300 and record["shortlist"]["frequent"] == 75
    pieces = [piece for piece, _ in read_model(os.path.join(transformer_run, "target.spm"))[1]]
    assert record["shortlist"]["always"] == [pieces.index("\ue000")]  # the number placeholder
    assert check.check_export(short) == {s: [] for s in check.available_servings()}
    shortlist = Shortlist.load(os.path.join(short, "assets", "shortlist.npz"))
    plain = tf.saved_model.load(os.path.join(exports, "plain", "1")).signatures["tokens"]
    shortened = tf.saved_model.load(short).signatures["tokens"]
    encoder = SentencePieceEncoder(os.path.join(transformer_run, "source.spm"))
    listed_cases = 0
    for text in texts:  # one request each: its own list
        ids, _ = encoder.encode([text], 16)
        request = dict(token_ids=tf.constant(ids), lengths=tf.constant([(ids > 0).sum()]))
        full = plain(**request)["token_ids"].numpy()
        got = shortened(**request)["token_ids"].numpy()
        listed = set(np.asarray(shortlist.columns(ids)).tolist())
        assert set(got.ravel().tolist()) <= listed
        if set(full.ravel().tolist()) <= listed:
            listed_cases += 1
            np.testing.assert_array_equal(got, full)
    assert listed_cases >= 1
    # CTranslate2: the same table as its vocabulary map, decoded with.
    out = str(tmp_path / "ct2")
    convert = [
        "convert",
        "--output",
        transformer_run,
        "--to",
        "ctranslate2",
        "--length-penalty",
        "1",
    ]
    run(*convert, "--dir", out, "--shortlist", "300")
    record = json.load(open(os.path.join(out, "keras_attention.json")))
    assert record["translate_batch"]["use_vmap"] is True and "vmap.txt" in record["files"]
    pieces = [
        [piece for piece, _ in read_model(os.path.join(transformer_run, f"{side}.spm"))[1]]
        for side in ("source", "target")
    ]
    vmap = open(os.path.join(out, "vmap.txt"), encoding="utf-8").read().splitlines()
    assert vmap == shortlist.vocabulary_map(*pieces)
    fixed = set(vmap[0].split("\t")[1].split()) | {"[START]", "[END]", "[UNK]"}
    rules = dict(line.split("\t") for line in vmap[1:])
    translator = ctranslate2.Translator(out, device="cpu", intra_threads=1)
    source_sp = sentencepiece.SentencePieceProcessor(os.path.join(out, "source.spm"))
    restricted = 0
    for text in texts:  # one sentence a batch: its own candidates
        pieces = source_sp.encode(text, out_type=str)
        candidates = fixed.union(*(rules.get(piece, "").split() for piece in pieces))
        options = dict(beam_size=1, max_decoding_length=20)
        full = translator.translate_batch([pieces], **options)[0].hypotheses[0]
        mapped = translator.translate_batch([pieces], use_vmap=True, **options)[0].hypotheses[0]
        assert set(mapped) <= candidates, text
        if set(full) <= candidates:
            assert mapped == full, text
        restricted += not set(full) <= candidates
    assert restricted >= 1  # the map is read: without it, pieces outside it come
