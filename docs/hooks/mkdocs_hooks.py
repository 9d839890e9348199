"""MkDocs hooks of the documentation site (mkdocs.yml, `hooks:`).

- Doctest examples: Python-Markdown reads a `>>>` line as three nested
  block quotes. A Markdown preprocessor (for the pages and mkdocstrings'
  docstrings alike) wraps each run of doctest lines that is not already
  inside a fence -- from a `>>>` line to the next blank line -- in a
  ```pycon fence.
- RESULTS.md and BENCHMARKS.md are included whole (pymdownx.snippets) into
  docs/results.md and docs/benchmarks.md; their links are relative to the
  repository's root, so `docs/x.png` becomes `x.png` and a link to the
  other file becomes a link to its page.
"""

import re

import markdown
import mkdocs.plugins

FENCE = re.compile(r"^\s*(```|~~~)")


class _DoctestFences(markdown.preprocessors.Preprocessor):
    def run(self, lines):
        out, fenced, in_doctest, indent = [], False, False, ""
        for line in lines:
            if in_doctest and not line.strip():
                out.append(indent + "```")
                in_doctest = False
            if not in_doctest and FENCE.match(line):
                fenced = not fenced
            elif not fenced and not in_doctest and line.lstrip().startswith(">>>"):
                indent = line[: len(line) - len(line.lstrip())]
                if out and out[-1].strip():
                    out.append("")
                out.append(indent + "```pycon")
                in_doctest = True
            out.append(line)
        if in_doctest:
            out.append(indent + "```")
        return out


class DoctestFences(markdown.Extension):
    def extendMarkdown(self, md):  # noqa: N802 (Python-Markdown's name)
        md.preprocessors.register(_DoctestFences(md), "doctest_fences", 40)
        md.preprocessors.register(_RootLinks(md), "root_links", 31)


ROOT_LINKS = {"](docs/": "](", "](RESULTS.md": "](results.md", "](BENCHMARKS.md": "](benchmarks.md"}


class _RootLinks(markdown.preprocessors.Preprocessor):
    """After pymdownx.snippets (priority 32) has included the files."""

    def run(self, lines):
        text = "\n".join(lines)
        for old, new in ROOT_LINKS.items():
            text = text.replace(old, new)
        return text.split("\n")


@mkdocs.plugins.event_priority(100)  # before mkdocstrings reads the extensions
def on_config(config):
    config.markdown_extensions.append(DoctestFences())
    return config
