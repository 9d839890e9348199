"""MkDocs hook: fence the docstrings' doctest examples.

Python-Markdown reads a `>>>` line as three nested block quotes. This hook
adds a Markdown preprocessor (to the pages and to mkdocstrings' docstrings
alike) that wraps each run of doctest lines that is not already inside a
fence -- from a `>>>` line to the next blank line -- in a ```pycon fence.
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


@mkdocs.plugins.event_priority(100)  # before mkdocstrings reads the extensions
def on_config(config):
    config.markdown_extensions.append(DoctestFences())
    return config
