"""The documentation site (mkdocs.yml, docs/) covers the package: every
public name has a docstring, every module of the package is rendered on a
page, every page is in the navigation, and the README stays a front page.
`make test` also builds the site with `mkdocs build --strict`."""

import importlib
import inspect
import pathlib
import re

import pytest

import keras_attention
import keras_attention.seq2seq

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def nav_pages(node):
    """Every page path named in mkdocs.yml's `nav`."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in nav_pages(value)]
    return [page for item in node for page in nav_pages(item)]


def mkdocs_config():
    yaml = pytest.importorskip("yaml")  # PyYAML comes with mkdocs (the docs extra)
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def rendered_modules():
    """The modules named by mkdocstrings' `::: module` lines."""
    pages = DOCS.rglob("*.md")
    return {
        name
        for page in pages
        for name in re.findall(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M)
    }


def public(module, names):
    return [(f"{module.__name__}.{name}", getattr(module, name)) for name in names]


SERVING = (
    "translator",
    "graph",
    "exporters",
    "records",
    "buckets",
    "versions",
    "export",
    "check",
    "requests",
)
TOKENIZERS = ("base", "sentencepiece", "wordpiece", "loading", "numbers")
# The old paths of the modules that left serving/: shims, described in migrating.md.
MOVED = {f"keras_attention.serving.{short}" for short in ("text", "numbers", "distribute")}


def serving_names():
    pytest.importorskip("tensorflow")
    import keras_attention.serving as serving

    names = [("keras_attention.serving.Translator", serving.Translator)]
    for module_name in (
        *(f"keras_attention.serving.{short}" for short in SERVING),
        *(f"keras_attention.tokenizers.{short}" for short in TOKENIZERS),
        "keras_attention.training.distribute",
    ):
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if (
                not name.startswith("_")
                and (inspect.isfunction(value) or inspect.isclass(value))
                and value.__module__ == module.__name__
            ):
                names.append((f"{module.__name__}.{name}", value))
    return names


def test_every_public_name_has_a_docstring():
    names = public(keras_attention, keras_attention.__all__)
    names += public(keras_attention.seq2seq, keras_attention.seq2seq.__all__)
    assert len(names) > 40
    missing = [name for name, value in names if not (inspect.getdoc(value) or "").strip()]
    assert not missing, f"no docstring: {missing}"


def test_every_public_serving_name_has_a_docstring():
    names = serving_names()
    assert len(names) > 10
    missing = [name for name, value in names if not (value.__doc__ or "").strip()]
    assert not missing, f"no docstring: {missing}"


def test_every_page_is_in_the_nav():
    """Every page but those under mkdocs.yml's `not_in_nav` folders (the
    archive of earlier results and benchmarks, linked from their pages)."""
    config = mkdocs_config()
    nav = set(nav_pages(config["nav"]))
    patterns = config.get("not_in_nav", "").split()
    hidden = tuple(pattern.strip("/") + "/" for pattern in patterns)
    assert hidden == ("archive/",)
    pages = {page.relative_to(DOCS).as_posix() for page in DOCS.rglob("*.md")}
    pages = {page for page in pages if not page.startswith(hidden)}
    assert "index.md" in pages and "layers/multi_head.md" in pages
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries without a page"


def test_every_module_is_rendered():
    """Each module of the layers, seq2seq and serving appears in a `:::`
    directive (the validation helpers and the shims of old paths excepted)."""
    package = ROOT / "keras_attention"
    modules = {
        ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for path in package.rglob("*.py")
        if not path.name.startswith("_") and "oplists" not in path.parts
    }
    modules -= {"keras_attention.validation", *MOVED}
    missing = modules - rendered_modules()
    assert not missing, f"modules on no page: {sorted(missing)}"
    for name in rendered_modules():
        assert (ROOT / (name.replace(".", "/") + ".py")).exists(), name


def test_results_and_benchmarks_are_included_not_copied():
    for page, source in (("results.md", "RESULTS.md"), ("benchmarks.md", "BENCHMARKS.md")):
        text = (DOCS / page).read_text(encoding="utf-8")
        assert f'--8<-- "{source}"' in text
        assert len(text.splitlines()) < 10


def test_readme_is_a_front_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "make demo" in readme and "make test" in readme
    # Its table of contents points at pages that exist.
    for link in re.findall(r"\]\((docs/[\w/]+\.md)(?:#[\w-]+)?\)", readme):
        assert (ROOT / link).exists(), link
    nav = set(nav_pages(mkdocs_config()["nav"]))
    linked = {link[len("docs/") :] for link in re.findall(r"\]\((docs/[\w/]+\.md)", readme)}
    assert {"index.md", "serving.md", "generation.md", "migrating.md"} <= linked <= nav
