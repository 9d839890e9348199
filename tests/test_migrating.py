"""Every `>>>` example of docs/migrating.md runs and prints what the page
says (doctest). The "before" blocks (the peers' code) have no prompts, so
doctest skips them.

Not in the portable JAX run: the examples pass there too, but eager JAX
takes ~45 s over them (each new op compiles) against ~3 s on TensorFlow."""

import doctest
import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
PAGE = DOCS / "migrating.md"


def test_migrating_examples(monkeypatch):
    monkeypatch.chdir(DOCS.parent)  # the PyTorch example reads tests/data/
    # Inputs and weights come from NumPy's seeded generator in the page
    # itself, so the printed numbers do not depend on Keras's seed.
    result = doctest.testfile(
        str(PAGE),
        module_relative=False,
        optionflags=doctest.NORMALIZE_WHITESPACE,
        verbose=False,
        report=True,
    )
    assert result.attempted > 40, result
    assert result.failed == 0, f"{result.failed} of docs/migrating.md's examples failed (above)"


def _anchor(heading):
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_migrating_links_resolve():
    anchors = {
        name: {_anchor(h) for h in re.findall(r"^#+ (.*)$", (DOCS / name).read_text(), re.M)}
        for name in ("migrating.md", "conventions.md")
    }
    links = re.findall(r"\]\(((?:conventions\.md)?)#([\w\-]+)\)", PAGE.read_text())
    assert len(links) >= 10
    for name, anchor in links:
        assert anchor in anchors[name or "migrating.md"], (name, anchor)
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "(docs/migrating.md)" in readme
    assert "(migrating.md)" in (DOCS / "conventions.md").read_text(encoding="utf-8")
