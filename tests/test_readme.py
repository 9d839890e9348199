"""Every Python example of README.md and of the documentation pages
(docs/**/*.md) runs as written.

A fenced ```python block runs unless the line just before it is
`<!-- not run -->` (code that needs a trained model, or a peer library's
"before" code in docs/migrating.md, whose `>>>` examples
tests/test_migrating.py runs as doctests). Each block runs in a fresh
namespace, from the repository's root."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^(<!-- not run -->\n)?```python\n(.*?)^```", re.S | re.M)


def blocks(page):
    """(index, code, run) for each ```python block of `page`."""
    text = page.read_text(encoding="utf-8")
    return [
        (index, match.group(2), match.group(1) is None)
        for index, match in enumerate(BLOCK.finditer(text))
    ]


# The manual's examples that train or quantize and save models for longer
# than the rest together: large (`make test-large`); the front page's and the
# others run in `make test`.
LARGE_EXAMPLES = ("docs/models.md:0", "docs/models.md:2")


def examples():
    """A parameter for each block to run; a block the same as an earlier one
    (docs/index.md repeats the front page's) runs once."""
    found, seen = [], set()
    for page in PAGES:
        for index, code, run in blocks(page):
            if run and code not in seen:
                seen.add(code)
                name = f"{page.relative_to(ROOT)}:{index}"
                marks = pytest.mark.large if name in LARGE_EXAMPLES else ()
                found.append(pytest.param(page, index, code, id=name, marks=marks))
    return found


EXAMPLES = examples()


def test_examples_are_found():
    names = {param.values[0].relative_to(ROOT).as_posix() for param in EXAMPLES}
    # The front page's layer example and the layer, model and generation pages.
    assert "README.md" in names
    for page in ("docs/generation.md", "docs/models.md", "docs/layers/index.md"):
        assert page in names, page
    # docs/index.md's example is the front page's, run once.
    index = [code for _, code, run in blocks(ROOT / "docs" / "index.md") if run]
    assert index and index[0] in [code for _, code, run in blocks(ROOT / "README.md")]
    assert len(EXAMPLES) >= 11
    # docs/migrating.md's "before" blocks are marked and skipped.
    migrating = blocks(ROOT / "docs" / "migrating.md")
    assert migrating and not any(run for _, _, run in migrating)


@pytest.mark.parametrize(("page", "index", "code"), EXAMPLES)
def test_example_runs(page, index, code, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(code, f"{page.name} example {index}", "exec"), {"__name__": "__example__"})
    if "print(np.round(weights, 3))" in code:  # the lecture notes' worked example
        printed = capsys.readouterr().out
        assert "[[0.419 0.206 0.217 0.157]]" in printed
        assert "[[ 0.087 -0.002 -0.038]]" in printed


def test_readme_worked_example_is_the_layer_page_s():
    """The front page's layer example is the multiplicative page's, which
    prints the lecture notes' numbers."""
    readme = [code for _, code, run in blocks(ROOT / "README.md") if run]
    page = [code for _, code, run in blocks(ROOT / "docs/layers/multiplicative.md") if run]
    assert readme and readme[0] in page
