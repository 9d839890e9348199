"""The bottleneck recipe (recipes/bottleneck.py): its task against an
independent statement of it, its scoring against oracles whose accuracy is
known, and a tiny sweep whose saved numbers are recounted from its saved
predictions."""

import json

import numpy as np
import pytest
from keras import ops
from keras_attention_recipes import bottleneck

PAD, SOS, EOS = 0, 1, 2


def expected_target(source):
    """The task, written out: reverse the symbols, then id 3 + i -> 3 + (3 i + 1) mod 10."""
    return [3 + (3 * (token - 3) + 1) % 10 for token in reversed(list(source))]


def unpadded(row):
    return [int(token) for token in row if token != PAD]


def test_the_mapping_is_a_permutation_without_fixed_points():
    symbols = np.arange(3, 13)
    mapped = bottleneck.map_symbols(symbols)
    assert sorted(mapped.tolist()) == symbols.tolist()
    assert not np.any(mapped == symbols)


def test_training_targets_are_the_sources_reversed_and_mapped():
    batches = list(bottleneck.training_batches(7, 5, 16, 5, 23))
    assert len(batches) == 5
    lengths = []
    for source, target_in, target_out in batches:
        assert source.shape[1] in (10, 20, 23)  # padded to a multiple of 10, or to the longest
        assert target_in.shape == target_out.shape == (16, source.shape[1] + 1)
        for row_in, row_source, row_out in zip(target_in, source, target_out):
            symbols = unpadded(row_source)
            lengths.append(len(symbols))
            assert list(row_source[len(symbols) :]) == [PAD] * (len(row_source) - len(symbols))
            assert unpadded(row_in) == [SOS] + expected_target(symbols)
            assert unpadded(row_out) == expected_target(symbols) + [EOS]
    assert min(lengths) >= 5 and max(lengths) <= 23 and len(set(lengths)) > 5
    again = list(bottleneck.training_batches(7, 5, 16, 5, 23))  # the same for every model
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(batches, again))


def test_buckets_and_the_test_set():
    assert bottleneck.length_buckets(5, 30) == [(5, 10), (11, 15), (16, 20), (21, 25), (26, 30)]
    assert bottleneck.length_buckets(5, 60, width=10) == [
        (5, 10),
        (11, 20),
        (21, 30),
        (31, 40),
        (41, 50),
        (51, 60),
    ]
    assert bottleneck.length_buckets(5, 14) == [(5, 10), (11, 14)]
    assert bottleneck.length_buckets(12, 12) == [(12, 12)]
    test = bottleneck.test_set(0, [(5, 10), (11, 14)], 8)
    for (low, high), (sources, references) in test.items():
        assert len(sources) == 8
        assert sorted({len(s) for s in sources}) == list(range(low, high + 1))
        for source, reference in zip(sources, references):
            assert list(reference) == expected_target(source) + [EOS]


class Oracle:
    """The decoding contract, answering from the source: correct for the
    first `correct` tokens, then symbol 3 until the source's length, then
    <eos> (`correct=None`: always right)."""

    sos_id, eos_id, padding_id = SOS, EOS, PAD

    def __init__(self, correct=None):
        self.correct = correct

    def encode(self, source, max_length=None):
        source = np.asarray(source)
        answer = np.zeros((len(source), source.shape[1] + 1), "int32")
        for i, row in enumerate(source):
            target = expected_target(unpadded(row))
            if self.correct is not None:
                target = target[: self.correct] + [3] * (len(target) - self.correct)
            answer[i, : len(target) + 1] = target + [EOS]
        return {"answer": ops.convert_to_tensor(answer), "t": ops.zeros((len(source),), "int32")}

    def decode_step(self, tokens, state):
        t = state["t"][0]
        logits = 20.0 * ops.one_hot(state["answer"][:, t], 13)
        attention = ops.zeros(ops.shape(state["answer"])[:1] + (ops.shape(state["answer"])[1] - 1,))
        return logits, {"answer": state["answer"], "t": state["t"] + 1}, attention

    def reorder_state(self, state, indices):
        return state


def test_a_perfect_model_scores_one():
    test = bottleneck.test_set(3, [(5, 10), (11, 20)], 6)
    predicted = bottleneck.predict(Oracle(), test, batch_size=4)
    for bucket, (_, references) in test.items():
        assert predicted[bucket] == [list(r) for r in references]
        assert bottleneck.score(predicted[bucket], references) == {
            "exact_match": 1.0,
            "token_accuracy": 1.0,
        }


def test_scores_of_a_model_that_forgets_after_four_tokens():
    test = bottleneck.test_set(4, [(3, 6)], 40)
    predicted = bottleneck.predict(Oracle(correct=4), test)[(3, 6)]
    references = test[(3, 6)][1]
    # Counted by hand: the first min(4, L) tokens and <eos> are right; after
    # them a position is right only where the reference has symbol 3.
    right = exact = total = 0
    for reference in references:
        length = len(reference) - 1
        lucky = sum(token == 3 for token in reference[4:length])
        right += min(4, length) + lucky + 1
        exact += lucky == max(0, length - 4)
        total += length + 1
    scores = bottleneck.score(predicted, references)
    assert scores["token_accuracy"] == pytest.approx(right / total)
    assert scores["exact_match"] == pytest.approx(exact / len(references))
    assert 0 < scores["exact_match"] < 1 and 0 < scores["token_accuracy"] < 1
    # A prediction cut short, or running on past <eos>, is wrong where it differs.
    assert bottleneck.score([[5, 6]], [[5, 6, 2]]) == {"exact_match": 0.0, "token_accuracy": 2 / 3}
    assert bottleneck.score([[5, 7, 9, 2]], [[5, 6, 2]]) == {
        "exact_match": 0.0,
        "token_accuracy": 1 / 3,
    }


# The sweep script end to end: large (`make test-large`).
@pytest.mark.large
def test_tiny_sweep_writes_results_that_recount_from_its_predictions(tmp_path, capsys):
    models = ["rnn-none", "rnn-dot"]
    bottleneck.main(["--tiny", "--models", *models, "--output", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    saved = json.loads((tmp_path / "predictions.json").read_text())
    assert results["buckets"] == saved["buckets"] == ["5-10", "11-14"]
    assert list(results["models"]) == list(saved["models"]) == models
    assert results["config"]["steps"] == bottleneck.TINY["steps"]
    for name in models:
        correct = total = exact = count = 0
        for bucket in results["buckets"]:
            sources, references = saved["sources"][bucket], saved["references"][bucket]
            rows = saved["models"][name][bucket]
            assert len(sources) == len(references) == len(rows) == bottleneck.TINY["per_bucket"]
            bucket_right = bucket_exact = bucket_total = 0
            for source, reference, row in zip(sources, references, rows):
                assert reference == expected_target(source) + [EOS]
                padded = row + [PAD] * len(reference)
                matches = [padded[i] == token for i, token in enumerate(reference)]
                bucket_right += sum(matches)
                bucket_exact += all(matches)
                bucket_total += len(reference)
            model = results["models"][name]
            assert model["token_accuracy"][bucket] == pytest.approx(bucket_right / bucket_total)
            assert model["exact_match"][bucket] == pytest.approx(bucket_exact / len(rows))
            correct, total = correct + bucket_right, total + bucket_total
            exact, count = exact + bucket_exact, count + len(rows)
        assert results["models"][name]["overall"]["token_accuracy"] == pytest.approx(
            correct / total
        )
        assert results["models"][name]["overall"]["exact_match"] == pytest.approx(exact / count)
    table = (tmp_path / "table.md").read_text()
    assert table in capsys.readouterr().out
    assert all(f"| {name} | " in table for name in models)
    png = (tmp_path / "bottleneck.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) < 100_000


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "rnn-cosine"], "error: --models: unknown rnn-cosine; choose from rnn-none"),
        (["--models", "transformer", "--units", "10"], "error: --units must be a multiple of 4"),
        (["--max-length", "4"], "error: --max-length must be >= --min-length 5; got 4"),
        (["--steps", "0"], "error: --steps must be >= 1; got 0"),
        (
            ["--transformer-learning-rate", "0"],
            "error: --transformer-learning-rate must be > 0; got 0.0",
        ),
    ],
)
def test_usage_errors(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit:
        bottleneck.main([*argv, "--output", str(tmp_path)])
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith(message)
