"""Reading parallel corpora: the Ding dictionary's German-English example
sentences (Debian package `trans-de-en`), its word and phrase entries, and
any TSV file, as `(source, target)` pairs; the warnings of what was skipped.

Bad input never stops a run with a traceback. A malformed line (no tab, an
empty side, bytes that are not UTF-8, a carriage return inside the line,
more than `MAX_LINE_BYTES`) is skipped, and reported with its line number;
a file that cannot be text (compressed other than by gzip, NUL bytes, or
carriage returns alone as line breaks) is refused with one message, and a
gzip-compressed one is read as the text it holds. Every
reader splits lines on `\\n` only, the rule `tf.data.TextLineDataset`
follows (which also drops every `\\r`; the split files hold none), so the
split files and the pipelines agree on what a line is.
"""

import contextlib
import gzip
import itertools
import os
import re
import sys
import zlib

from .settings import DING, MAX_LINE_BYTES, size_in_words

DING_HINT = "install it with: sudo apt-get install -y trans-de-en (make demo and make test do this)"
_ANNOTATION = re.compile(r"\{[^}]*\}|\[[^\]]*\]|<[^>]*>")


class CorpusError(Exception):
    """A problem with the user's corpus, reported as a message."""


BOM = "\ufeff"  # a UTF-8 byte order mark, which some editors write first: stripped on read


def check_file(path, flag, error=CorpusError):
    """`error` naming `flag` unless `path` is a file that can be read: no
    such file, a directory (not the raw `[Errno 21] Is a directory`)."""
    if os.path.isdir(path):
        raise error(f"{flag} {path} is a directory; expected a file")
    if not os.path.exists(path):
        raise error(f"{flag} {path}: no such file")


GZIP = b"\x1f\x8b"  # the first bytes of a gzip file (RFC 1952), which is read as its text
# The first bytes of the compressed files that are refused, and their formats (each
# also the name of the tool that decompresses it: `xz -dc FILE`).
# bzip2's `BZh` is followed by its block size and the magic of a block or of the end
# (a text file may begin with `BZh`); the others cannot begin UTF-8 text.
COMPRESSED = {
    re.compile(rb"BZh[1-9](\x31\x41\x59\x26\x53\x59|\x17\x72\x45\x38\x50\x90)"): "bzip2",
    re.compile(rb"\xfd7zXZ\x00"): "xz",
    re.compile(rb"\x28\xb5\x2f\xfd"): "zstd",
}
_HEAD = 4096  # bytes looked at for the magic numbers and NUL bytes


def _head(handle):
    """The first bytes of the binary stream `handle`, left unread."""
    if hasattr(handle, "peek"):
        return handle.peek(_HEAD)[:_HEAD]
    if handle.seekable():
        at = handle.tell()
        head = handle.read(_HEAD)
        handle.seek(at)
        return head
    return b""


@contextlib.contextmanager
def open_text(path, flag, error=CorpusError, handle=None):
    """The binary stream of the text file `path` that `flag` names (or of
    `handle`, e.g. standard input, `path` naming it): a gzip file's
    decompressed text. `error` naming `flag` for a file of another
    compressed format or with NUL bytes in its first 4 KiB (binary, or
    UTF-16 text), and for damaged gzip data."""
    with contextlib.ExitStack() as stack:
        if handle is None:
            handle = stack.enter_context(open(path, "rb"))
        gzipped = _head(handle).startswith(GZIP)
        try:
            if gzipped:
                handle = stack.enter_context(gzip.GzipFile(fileobj=handle, mode="rb"))
            head = _head(handle)
            for magic, name in COMPRESSED.items():
                if magic.match(head):
                    raise error(
                        f"{flag} {path} is {name}-compressed, which is not read: decompress it "
                        f"({name} -dc {path} > corpus.tsv) and pass the text file (a gzip file "
                        "is read as it is)"
                    )
            if b"\0" in head:
                raise error(
                    f"{flag} {path} holds NUL bytes: it is not UTF-8 text (a binary file, or "
                    "UTF-16 text: convert that with iconv -f UTF-16 -t UTF-8)"
                )
            yield handle
        except (EOFError, zlib.error, gzip.BadGzipFile) as damaged:
            if not gzipped:
                raise
            raise error(f"{flag} {path}: damaged gzip data ({damaged})") from None


def check_text_file(path, flag, error=CorpusError):
    """`error` naming `flag` when the file at `path` is one `open_text` or
    the first line of `bounded_lines` refuses (compressed in another
    format than gzip, NUL bytes, damaged gzip data, carriage returns alone
    as line breaks): the checks that need only the file's start, made
    before a command writes anything (or `--overwrite` deletes anything)."""
    with open_text(path, flag, error) as handle:
        next(bounded_lines(handle, path, flag, error), None)


def describe_bound(limit=None):
    """`limit` bytes (default `MAX_LINE_BYTES`, as it is now) in words."""
    return size_in_words(limit or MAX_LINE_BYTES)


def bounded_lines(handle, path, flag, error=CorpusError, limit=None):
    """`(number, line)` of each line of the binary stream `handle`, split
    on `\\n` only, its `\\n` kept; a line of more than `limit` bytes before
    its `\\n` (default `MAX_LINE_BYTES`) is `(number, None)`, its bytes read
    and dropped `limit` at a time: memory stays bounded whatever the file
    holds. `error` naming `flag` and `path` when the first line holds a
    carriage return and no `\\n` ends it: the file breaks lines with
    carriage returns alone, and would be one line."""
    limit = limit or MAX_LINE_BYTES
    number = 0
    while line := handle.readline(limit + 1):
        number += 1
        complete = len(line) <= limit or line.endswith(b"\n")
        ends = line.rstrip(b"\r") if complete else line  # a last line may end with `\r`
        if number == 1 and not line.endswith(b"\n") and b"\r" in ends:
            file = path if os.path.isfile(path) else "FILE"  # (standard input)
            gzipped = str(file).endswith(".gz")  # its text: zcat's, not the file's bytes
            source = f"zcat {file} | " if gzipped else ""
            into = f"{file[:-3] if gzipped else file}.lf"
            raise error(
                f"{flag} {path} uses carriage returns (CR, old Mac line endings) alone as "
                f"line breaks; convert it with: {source}tr '\\r' '\\n' "
                f"{'' if gzipped else f'< {file} '}> {into}"
            )
        if complete:
            yield number, line
            continue
        while (rest := handle.readline(limit)) and not rest.endswith(b"\n"):
            pass  # the rest of an over-long line, dropped as it is read
        yield number, None


def warn(log=print):
    """Where warnings go: standard error from the command line (`log` is
    `print`: standard output is for results, e.g. translations), else the
    caller's `log` (a list the tests read, a logger)."""
    if log is print:
        return lambda message: print(message, file=sys.stderr, flush=True)
    return log


def report_skipped(problems, log=print):
    """Warn of the first 10 `problems` (skipped lines), and how many more."""
    say = warn(log)
    for problem in problems[:10]:
        say(f"warning: {problem}")
    if len(problems) > 10:
        say(f"warning: ... and {len(problems) - 10} more lines skipped")


def report_replaced(where, lines, log=print):
    """Warn, in one line, that `lines` (line numbers) of `where` (a flag
    and its file) held bytes that are not UTF-8, replaced by U+FFFD."""
    if lines:
        shown = ", ".join(str(number) for number in lines[:5]) + (", ..." if len(lines) > 5 else "")
        warn(log)(
            f"warning: {where}: {len(lines)} line{'s' if len(lines) > 1 else ''} held bytes "
            f"that are not UTF-8 (line{'s' if len(lines) > 1 else ''} {shown}); each such "
            "byte was replaced by U+FFFD"
        )


def _clean(text):
    return re.sub(r"\s+", " ", _ANNOTATION.sub("", text)).strip()


def _is_sentence(text):
    return len(text.split()) >= 3 and text[:1].isupper() and text[-1:] in ".!?"


def ding_pairs(path=DING):
    """(German, English) sentence pairs of the Ding dictionary.

    Lines are `German :: English`; ` | ` separates aligned sub-entries, `;`
    alternatives (the first is kept), and `{...}`, `[...]`, `<...>` are
    annotations (removed). A pair is kept when both sides are sentences:
    three or more words, a capital first letter, and a final `.`, `!` or `?`.
    """
    if not os.path.exists(path):
        raise CorpusError(
            f"the Ding corpus {path} is missing; {DING_HINT}, or pass --corpus FILE.tsv"
        )
    for first, _ in ding_alternative_pairs(path):
        yield first


def _ding_entries(path, every=False):
    """The first alternative of each German and English sub-entry of the
    Ding file, as written (`ding_alternative_pairs` keeps the sentences,
    `ding_dictionary_pairs` the rest); with `every`, the lists of all the
    alternatives of each side instead."""
    with open(path, encoding="utf-8-sig", errors="replace", newline="\n") as handle:
        for line in handle:
            if line.startswith("#") or " :: " not in line:
                continue
            german, english = line.rstrip("\n").split(" :: ", 1)
            german, english = german.split(" | "), english.split(" | ")
            if len(german) != len(english):
                continue
            for de, en in zip(german, english):
                de, en = de.split("; "), en.split("; ")
                yield (de, en) if every else (de[0], en[0])


def ding_alternative_pairs(path=DING):
    """`((German, English), others)` for each pair of `ding_pairs`, in its
    order (`ding_pairs` is the first of each, so a `--limit` slice of one is
    that of the other): `others` pairs every German sentence of its
    sub-entry with every English one, the first pair left out ("Bei meinem
    Handy war der Akku leer.; Das Handy hatte keinen Akku mehr." :: "My
    phone had ran out of battery.; My phone had run out of power." gives
    three more). Alternatives that are not sentences (`ding_pairs`' rule)
    are left out."""
    for german, english in _ding_entries(path, every=True):
        first = _clean(german[0]), _clean(english[0])
        if not (_is_sentence(first[0]) and _is_sentence(first[1])):
            continue
        german = [first[0], *map(_clean, german[1:])]
        english = [first[1], *map(_clean, english[1:])]
        others = [
            (de, en)
            for de in german
            if _is_sentence(de)
            for en in english
            if _is_sentence(en) and (de, en) != first
        ]
        yield first, others


_GLOSSES = re.compile(r"\([^)]*\)|(?:^|\s)/[^/]+/(?=\s|$)")  # and /abbreviations/
_WORDS = re.compile(r"\w+")


def ding_dictionary_pairs(path=DING):
    """(German, English) word and phrase entries of the Ding dictionary: the
    sub-entries that `ding_pairs` leaves out because neither side is a
    sentence ("Bahnhof" :: "station", "Bahnhöfe" :: "stations", "zur
    Sache kommen" :: "to come to the point"). The first alternative of each
    side is kept, without annotations, parenthesised glosses or
    abbreviations (`Bahnhof {m} /Bhf./` is "Bahnhof")."""
    for de, en in _ding_entries(path):
        de, en = _clean(_GLOSSES.sub("", de)), _clean(_GLOSSES.sub("", en))
        if de and en and not (_is_sentence(de) or _is_sentence(en)):
            yield de, en


def words_of(text):
    """What a sentence says, for leak checks: its lower-cased words."""
    return " ".join(_WORDS.findall(text.lower()))


def tsv_pairs(path, problems, flag="--corpus", replaced=None, error=CorpusError):
    """`source<TAB>target` pairs of a TSV file (or its gzip file), streamed;
    each skipped line appends a message to `problems`: among them a line of
    more than `MAX_LINE_BYTES`, and one blank on both sides of its tab (a
    line without a tab that is blank is ignored). A byte order mark before
    the first line is not part of it. A line that is not UTF-8 is skipped,
    or, given the list `replaced`, kept with each invalid byte as U+FFFD and
    its line number appended to `replaced` (a user's `--test` and `--valid`
    files, as `translate --input` reads). `error` for a file that is not
    text (`open_text`, `bounded_lines`)."""
    check_file(path, flag, error)
    with open_text(path, flag, error) as handle:
        for number, raw in bounded_lines(handle, path, flag, error):
            if raw is None:
                problems.append(
                    f"{path}:{number}: longer than {describe_bound()} "
                    "(a line holds one source<TAB>target pair); skipped"
                )
                continue
            try:
                line = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError as invalid:
                if replaced is None:
                    problems.append(
                        f"{path}:{number}: not valid UTF-8 "
                        f"({invalid.reason} at byte {invalid.start}); skipped"
                    )
                    continue
                replaced.append(number)
                line = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
            if number == 1:
                line = line.removeprefix(BOM)
            if not line.strip() and "\t" not in line:
                continue  # blank lines are allowed and ignored
            if "\r" in line:
                problems.append(
                    f"{path}:{number}: a carriage return (\\r) inside the line "
                    "(lines end with \\n or \\r\\n); skipped"
                )
                continue
            if "\t" not in line:
                problems.append(
                    f"{path}:{number}: expected 'source<TAB>target', found no tab; skipped"
                )
                continue
            source, target = (part.strip() for part in line.split("\t", 1))
            if not source or not target or "\t" in target:
                problems.append(
                    f"{path}:{number}: expected exactly one non-empty source and target; skipped"
                )
                continue
            yield source, target


def count_pairs(path=None, at_most=None):
    """The sentence pairs of the corpus `path` (a TSV file or its gzip
    file; None: Ding's), counted no further than `at_most`: what `train`
    chooses its preset by (`config.choose_preset`)."""
    pairs = ding_pairs() if path is None else tsv_pairs(path, [])
    return sum(1 for _ in itertools.islice(pairs, at_most))


def read_pairs(path):
    """The `(source, target)` pairs of a split file, lines split on `\n` only."""
    with open(path, encoding="utf-8-sig", newline="\n") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if line.strip()]
