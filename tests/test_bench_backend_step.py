"""`bench/backend_step.py`: a backend's process times each family's step at
each shape and says which backend it ran on."""

import json

import pytest

from tests.bench_helpers import load_bench


@pytest.mark.large(reason="benchmark smoke run: builds and trains the demo's model")
def test_a_backend_s_process_times_every_cell(capsys):
    import keras

    bench = load_bench("backend_step")
    bench.child(["convs2s"], warmup=1, steps=2)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(line.removeprefix("RESULT "))
    assert result["backend"] == keras.backend.backend()
    assert set(result["steps"]) == {f"convs2s {rows}x{pieces}" for rows, pieces in bench.SHAPES}
    assert all(0 < ms < 60_000 for ms in result["steps"].values())


def test_a_process_on_the_wrong_backend_is_refused(monkeypatch):
    bench = load_bench("backend_step")

    class Done:
        returncode, stderr = 0, ""
        stdout = 'RESULT {"backend": "tensorflow", "steps": {}}\n'

    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: Done)
    args = type("Args", (), {"families": ["convs2s"], "warmup": 1, "steps": 1})
    with pytest.raises(SystemExit, match="ran Keras on tensorflow, not jax"):
        bench.measure("python", "jax", args)
    assert bench.measure("python", "tensorflow", args) == {}
