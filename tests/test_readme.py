"""Every Python example in README.md runs as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md example {index}", "exec"), {})
    if "print(np.round(weights, 3))" in BLOCKS[index]:
        printed = capsys.readouterr().out
        assert "[[0.419 0.206 0.217 0.157]]" in printed
        assert "[[ 0.087 -0.002 -0.038]]" in printed
