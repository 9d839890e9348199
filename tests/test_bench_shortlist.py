"""`bench/shortlist.py --smoke`: on a tiny random Transformer, our XLA
SavedModel searches with and without the shortlist (float32 and int8) and
CTranslate2 with and without its vocabulary map decode over the same
pieces (the bench checks it) and each prints its speed and the ratios."""

import pytest

from tests.bench_helpers import load_bench

pytest.importorskip("ctranslate2")


@pytest.mark.large(reason="a benchmark's smoke run")
@pytest.mark.tensorflow
def test_shortlist_bench_smoke(capsys):
    load_bench("shortlist").main(["--smoke"])
    lines = capsys.readouterr().out.splitlines()
    cells = [line for line in lines if "the shortlist holds" in line]
    assert [line.split(":")[0] for line in cells] == ["greedy, batch 1", "beam4, batch 2"]
    systems = [line.split("  ")[1].strip() for line in lines if "tok/s" in line]
    names = ["ours XLA SM", "ours XLA SM shortlist", "ours int8 XLA SM"]
    names += ["ours int8 XLA SM shortlist", "CT2 float32", "CT2 float32 vmap", "CT2 int8"]
    assert systems == (names + ["CT2 int8 vmap"]) * 2
    ratios = [float(line.rsplit(": ", 1)[1]) for line in lines if line.startswith("  speed ")]
    assert len(ratios) == 14 and all(ratio > 0 for ratio in ratios)
