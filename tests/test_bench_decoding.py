"""`bench/decoding.py --smoke` runs: ours only (tf.function and the exported
SavedModel) on a tiny Transformer, with the forced-length check; no peers'
virtualenv needed."""

import importlib.util
import os

import pytest

BENCH = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "decoding.py"
)


@pytest.mark.tensorflow
def test_decoding_bench_smoke(capsys):
    spec = importlib.util.spec_from_file_location("bench_decoding", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    table = [line.split() for line in lines if line.startswith(("greedy", "beam4"))]
    assert [row[:2] for row in table] == [["greedy", "2"], ["beam4", "2"]]
    assert all(float(value) > 0 for row in table for value in row[2:])
