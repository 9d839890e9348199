"""`bench/rnn.py --smoke --profile` runs: ours only (no tfa virtualenv
needed) on a tiny model, both configurations, and the profile."""

import pytest

from tests.bench_helpers import load_bench


@pytest.mark.large
@pytest.mark.tensorflow
def test_rnn_bench_smoke(capsys):
    bench = load_bench("rnn")
    bench.main(["--smoke", "--profile"])
    lines = capsys.readouterr().out.splitlines()
    table = [line.split() for line in lines if line.startswith(("feeding ", "no-feeding "))]
    assert [row[:2] for row in table] == [["feeding", "ours"], ["no-feeding", "ours"]]
    assert all(float(row[2]) > 0 for row in table)
    shares = [line.split()[-1] for line in lines if line.strip().startswith("whole step")]
    assert shares == ["1.00", "1.00"]  # one profile per configuration
