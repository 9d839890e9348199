"""Files in and out of the translation recipe's commands: sentences to
translate (a file or standard input, one per line), their translations
(standard output, or a file written atomically), progress on standard
error, and the user's own `source<TAB>target` files for validation
(`train --valid`) and testing (`evaluate --test`).

Lines split on `\\n` only, the rule every reader of the recipe follows
(`data`); a `\\r` before it is dropped, so `\\r\\n` files
translate as `\\n` ones. Line counts are kept: an empty line in gives an
empty line out.
"""

import contextlib
import os
import sys
import time

from .. import run_files, runs
from .corpus import (
    BOM,
    bounded_lines,
    check_file,
    describe_bound,
    open_text,
    report_replaced,
    report_skipped,
    tsv_pairs,
)

STDIO = "-"


def describe(path):
    return "standard input" if path == STDIO else path


def read_sentences(path, stdin=None, log=print):
    """The lines of `path` (`-`: standard input, or `stdin` when given, a
    binary stream), one sentence each, without their line ends.

    A byte that is not UTF-8 becomes U+FFFD, as in `evaluate --test`
    files, and one warning (`log`; from the command line, standard error)
    says how many lines held such bytes, and which. Read as `--corpus` is
    (`corpus.open_text`, `corpus.bounded_lines`): gzip decompressed, and a
    `ValueError` for a file that is not text or a line longer than
    `MAX_LINE_BYTES` (skipping it would shift every later translation)."""
    name = describe(path)
    if path == STDIO:
        opened = open_text(name, "--input", ValueError, stdin or sys.stdin.buffer)
    else:
        check_file(path, "--input", ValueError)
        opened = open_text(path, "--input", ValueError)
    sentences, replaced = [], []
    with opened as handle:
        for number, line in bounded_lines(handle, name, "--input", ValueError):
            if line is None:
                raise ValueError(
                    f"--input {name}:{number}: longer than {describe_bound()}; "
                    "expected one sentence a line: split that line into sentences, or leave "
                    "it out (each line in gives a line out, so none is skipped)"
                )
            if number == 1:
                line = line.removeprefix(BOM.encode("utf-8"))  # no part of line 1
                if not line:  # the file is a byte order mark alone
                    break
            line = line.removesuffix(b"\n")
            try:
                sentences.append(line.decode("utf-8").removesuffix("\r"))
            except UnicodeDecodeError:
                sentences.append(line.decode("utf-8", "replace").removesuffix("\r"))
                replaced.append(number)
    report_replaced(f"--input {describe(path)}", replaced, log)
    return sentences


def check_output_file(path):
    """`ValueError` (`PermissionError`) before any work when `--output-file`
    cannot be written: its folder is missing, it is a folder, it lies
    inside a run folder (`runs.check_outside_runs`), or it is read-only."""
    if path is None or path == STDIO:
        return
    folder = os.path.dirname(os.path.realpath(path))  # a link's: where its file is written
    if not os.path.isdir(folder):
        raise ValueError(f"--output-file {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"--output-file {path} is a folder; expected a file name")
    runs.check_outside_runs("output_file", path)
    run_files.writable_target(path, "--output-file")  # a read-only file: refused, as `>` would


@contextlib.contextmanager
def line_writer(path, stdout=None):
    """Yield `write(lines)`, which writes each line and a `\\n`. To
    standard output (`path` None or `-`) lines go out as they come; to a
    file, into a temporary sibling renamed to `path` only when the block
    ends without an error, so `path` is never half written
    (`run_files.replacing`: a symbolic link is written through, a read-only
    file refused, the file's permissions kept)."""
    if path is None or path == STDIO:
        stream = stdout or sys.stdout

        def write(lines):
            stream.write("".join(f"{line}\n" for line in lines))
            stream.flush()

        yield write
        return
    with run_files.replacing(path, "--output-file") as temporary:
        with open(temporary, "w", encoding="utf-8", newline="\n") as handle:
            yield lambda lines: handle.write("".join(f"{line}\n" for line in lines))


class Progress:
    """`translated 640/5000 sentences (52.1/s)` on standard error: redrawn
    in place (`\\r`) on a terminal, otherwise one line every `every`
    sentences, so a log file gets a few lines, not thousands. Inputs of at
    most `quiet_below` sentences report nothing."""

    def __init__(self, total, stream=None, every=1000, quiet_below=256):
        self.total, self.every = total, every
        self.stream = stream or sys.stderr
        self.quiet = total <= quiet_below
        self.terminal = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.perf_counter()
        self.reported = 0

    def line(self, done):
        rate = done / max(time.perf_counter() - self.started, 1e-9)
        return f"translated {done}/{self.total} sentences ({rate:.1f}/s)"

    def update(self, done):
        if self.quiet:
            return
        if self.terminal:
            self.stream.write(f"\r{self.line(done)}")
        elif done - self.reported >= self.every or done == self.total:
            self.stream.write(f"{self.line(done)}\n")
            self.reported = done
        else:
            return
        self.stream.flush()

    def close(self):
        if self.terminal and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


def read_pair_file(path, flag, log=print):
    """The `(source, target)` pairs of a user's TSV file given as `flag`
    (`--valid`, `--test`); skipped lines are reported as the corpus's are
    (`data.tsv_pairs`), and bytes that are not UTF-8 are replaced by
    U+FFFD, as `translate --input` does, with one warning. A missing file, or one without a
    usable pair, raises `ValueError` saying so."""
    check_file(path, flag, ValueError)
    problems, replaced = [], []
    pairs = list(tsv_pairs(path, problems, flag, replaced, ValueError))
    if pairs:  # else the error says why, once
        report_skipped(problems, log)
        report_replaced(f"{flag} {path}", replaced, log)
    if not pairs:
        raise ValueError(
            f"{flag} {path} holds no source<TAB>target pairs"
            + (f" ({len(problems)} lines skipped; the first: {problems[0]})" if problems else "")
            + ": expected one `source<TAB>target` pair a line"
        )
    return pairs


def write_pair_file(pairs, path):
    """Write `pairs` as `source<TAB>target` lines, atomically."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    run_files.write_atomically(path, lambda temporary: _write_pairs(pairs, temporary, "w"))
    return path


def append_pairs(pairs, path):
    """Append `pairs` to `path` as `source<TAB>target` lines. Not atomic:
    for a resumable job's partial file, whose reader keeps whole chunks."""
    _write_pairs(pairs, path, "a")


def _write_pairs(pairs, path, mode):
    # A translation is one line: the searches never emit a newline.
    with open(path, mode, encoding="utf-8", newline="\n") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in pairs)


def translate_lines(sentences, translate_batch, output_file=None, batch_size=64, progress=None):
    """Translate `sentences` `batch_size` at a time with `translate_batch`
    (`sentences -> output lines`: one translation each, or n-best lines)
    and write the lines to `output_file` (`None` or `-`: standard output)
    as each batch is done; `progress` (a `Progress`) hears of every batch."""
    progress = progress or Progress(len(sentences))
    try:
        with line_writer(output_file) as write:
            for start in range(0, len(sentences), batch_size):
                write(translate_batch(sentences[start : start + batch_size]))
                progress.update(min(start + batch_size, len(sentences)))
    finally:
        progress.close()


def reads_lines(config):
    """True when `translate` translates lines: from `--input`, or from
    standard input when it is not a terminal and no text is given, or
    (text given) to `--output-file`; then each input line gives one output
    line (`--nbest N`: N lines)."""
    given, output_file = config.input, config.output_file
    if given is not None and config.text:
        raise ValueError("give the sentences either as arguments or with --input, not both")
    if given is not None or output_file:
        return True
    return not config.text and sys.stdin is not None and not sys.stdin.isatty()


def translate_file(config, translator, stderr=None):
    """`translate` of lines: the text arguments, `--input FILE` or standard
    input, to standard output or `--output-file` (atomically), in batches
    with progress on standard error. `translator()` loads the model (after
    the input is read and checked) and returns `sentences -> lines`."""
    stderr = stderr or sys.stderr
    check_output_file(config.output_file)
    if config.text:
        sentences = config.text
    else:
        sentences = read_sentences(config.input or STDIO)
        if not sentences and config.input is None:
            raise ValueError(
                "give the text to translate: standard input held no sentences (pipe in a "
                "file of sentences, one a line, or give --input FILE or the text as arguments)"
            )
    translate_lines(sentences, translator(), config.output_file, progress=Progress(len(sentences)))
    if config.output_file and config.output_file != STDIO:
        print(f"translated {len(sentences)} lines -> {config.output_file}", file=stderr)
    return len(sentences)


def validation_file(output, valid, folder, log=print):
    """The validation split of the run in `output`, or, given `valid` (the
    user's `--valid` file), its pairs copied clean into `<folder>/data/`
    (skipped lines reported) for `tf.data`."""
    if not valid:
        return os.path.join(output, "data", "valid.tsv")
    pairs = read_pair_file(valid, "--valid", log)
    log(f"--valid {valid}: {len(pairs)} pairs")
    return write_pair_file(pairs, os.path.join(folder, "data", "valid.user.tsv"))
