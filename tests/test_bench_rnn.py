"""`bench/rnn.py --smoke --profile` runs: ours only (no tfa virtualenv
needed) on a tiny model, both configurations, and the profile."""

import importlib.util
import os

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "rnn.py")


@pytest.mark.large
@pytest.mark.tensorflow
def test_rnn_bench_smoke(capsys):
    spec = importlib.util.spec_from_file_location("bench_rnn", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    bench.main(["--smoke", "--profile"])
    lines = capsys.readouterr().out.splitlines()
    table = [line.split() for line in lines if line.startswith(("feeding ", "no-feeding "))]
    assert [row[:2] for row in table] == [["feeding", "ours"], ["no-feeding", "ours"]]
    assert all(float(row[2]) > 0 for row in table)
    shares = [line.split()[-1] for line in lines if line.strip().startswith("whole step")]
    assert shares == ["1.00", "1.00"]  # one profile per configuration
