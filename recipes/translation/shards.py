"""The training split tokenised once: `<data>/shards-<key>/`, a shard set
of NumPy files and `meta.json`, written after the vocabularies and read by
every epoch, resume and tuning trial of the run instead of the text
(`write_shards`), on any Keras backend: NumPy reads it alone (`read_chunk`),
and `tf.data` reads the same files (`pipeline.py`).

The pairs that fit `max_length`, in the split's order (counting the pairs
kept), `CHUNK` pairs to a file (`chunk-00000.npy`, ...; the last holds the
rest): each a 1-D int32 array `[n, the n sources' piece counts, the n
targets', every source's pieces, every target's]` (the target's
`[START] ... [END]` included, no padding). A reader holds one chunk, not
the split: memory stays flat however large the corpus. `meta.json` holds
the files, and how many pairs there are of each length (the longer
side's pieces), so that an epoch's batches are known without reading them.

The key names what the tokens depend on: the split file's bytes, the
vocabulary files' bytes, `max_length`, the number protection and the
format. The set is written into a temporary folder renamed into
place at the end (`meta.json` written last, inside it): a process killed
while writing leaves a `.partial-<host>-<pid>-` folder, removed by the
next writer on that machine once that process is gone, and never a set
that is read. Two processes writing one set at once (workers) write the
same bytes; the first rename wins.
"""

import glob
import hashlib
import itertools
import json
import os
import shutil
import socket
import tempfile
from concurrent.futures import ThreadPoolExecutor

from .. import run_files

FORMAT = 2  # the layout above (1: TFRecord files); a new one gets new keys
CHUNK = 65_536  # pairs a file


def _vocabulary_file(tokenizer):
    """The vocabulary file a tokenizer was loaded from (SentencePiece's
    model, WordPiece's token list; a `SentencePieceEncoder`'s model)."""
    if hasattr(tokenizer, "model_path"):  # the Python twin of the graph's tokenizer
        return str(tokenizer.model_path)
    model = getattr(tokenizer, "_model", None)  # SentencePiece's resource
    asset = model.model_file if hasattr(model, "model_file") else tokenizer.vocabulary_file
    path = asset.asset_path
    return path.numpy().decode("utf-8") if hasattr(path, "numpy") else str(path)


def shard_key(train_path, tokenizers, max_length, numbers):
    """16 hex digits of a hash of what the shards' tokens depend on: the
    split file, the tokenizers' vocabulary files (and WordPiece's case
    rule), `max_length` and the number protection (None, or a
    `NumberProtection` or `NumberRules`: its config)."""
    digest = hashlib.sha256()
    for part in (
        FORMAT,
        max_length,
        None if numbers is None else numbers.get_config(),
        [getattr(tokenizer, "lower_case", None) for tokenizer in tokenizers],
    ):
        digest.update(json.dumps(part, sort_keys=True).encode("utf-8") + b"\0")
    for path in (train_path, *(_vocabulary_file(tokenizer) for tokenizer in tokenizers)):
        run_files.file_digest(path, digest)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def shard_folder(path, tokenizers, max_length, numbers):
    """Where the shard set of the split file `path` goes: beside it, named
    by `shard_key` (graph tokenizers or their Python twins, which give
    the same ids, name the same set)."""
    key = shard_key(path, tokenizers, max_length, numbers)
    return os.path.join(os.path.dirname(os.path.abspath(path)), f"shards-{key}")


def read_meta(folder):
    """A complete shard set's `meta.json`, or None when `folder` holds none
    (not written, or not all of it)."""
    path = os.path.join(folder, "meta.json")
    if not os.path.exists(path):
        return None
    try:
        meta = run_files.read_json(
            path, "the shards' record", required=("files", "lengths", "pairs")
        )
    except ValueError:
        return None
    if meta.get("format") != FORMAT or not all(
        os.path.exists(os.path.join(folder, name)) for name in meta["files"]
    ):
        return None
    return meta


def write_shards(folder, train_path, encode, max_length, log=print):
    """The shard set `folder` of `train_path`'s pairs, written unless a
    complete one is there; returns its `meta.json` dict. `encode` takes a
    list of `source<TAB>target` lines (bytes) to NumPy arrays `(source
    ids, target ids, fits)`, padded with 0 at the end, numbers protected as
    the run decided; pairs that do not fit are left out."""
    meta = read_meta(folder)
    if meta is not None:
        return meta
    parent, name = os.path.split(folder)
    _remove_stale(parent, name)
    if os.path.exists(folder):  # not a complete set (written by hand?): made again
        shutil.rmtree(folder)
    owner = f"{socket.gethostname()}-{os.getpid()}"
    temporary = tempfile.mkdtemp(dir=parent, prefix=f"{name}.partial-{owner}-")
    try:
        meta = _write_arrays(temporary, train_path, encode, max_length)
        run_files.write_json_atomically(os.path.join(temporary, "meta.json"), meta)
        try:
            os.rename(temporary, folder)
        except OSError:  # another process renamed the same set into place first
            if read_meta(folder) is None:
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    name = os.path.basename(train_path)
    log(f"shards: {meta['pairs']} of {meta['lines']} pairs of {name} tokenised once -> {folder}")
    return meta


def text_encoder(source_encoder, target_encoder, max_length, protect_numbers=False):
    """`write_shards`' `encode` without TensorFlow: `source<TAB>target`
    lines (UTF-8 bytes) to `(source ids, target ids, fits)` with the
    tokenizers' Python twins (`SentencePieceEncoder`s), the numbers that a
    pair's two sides share protected first (`number_rules.protect_pair`)
    when `protect_numbers`: the ids the graph's encoder gives
    (`pipeline.training_shards`), the source cut at `max_length` pieces and
    the target at `max_length + 1`."""
    import numpy as np

    from keras_attention.tokenizers.number_rules import protect_pair

    def encode(lines):
        pairs = [(line.split(b"\t", 1) + [b""])[:2] for line in lines]
        pairs = [(source.decode("utf-8"), target.decode("utf-8")) for source, target in pairs]
        if protect_numbers:
            pairs = [protect_pair(source, target) for source, target in pairs]
        sources, targets = [list(side) for side in zip(*pairs)] or ([], [])
        source, source_cut = source_encoder.encode(sources, max_length)
        target, target_cut = target_encoder.encode(targets, max_length + 1)
        return source, target, np.logical_not(source_cut | target_cut)

    return encode


def _remove_stale(parent, name):
    """Remove the partial folders of set `name` whose writer, a process of
    this machine, is gone (killed before its rename); another machine's, or
    a live writer's (a worker writing the same set at once), stay."""
    for stale in glob.glob(os.path.join(parent, f"{name}.partial-*")):
        host, _, rest = os.path.basename(stale)[len(name) + len(".partial-") :].rpartition("-")
        host, _, pid = host.rpartition("-")
        if host != socket.gethostname() or not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(stale, ignore_errors=True)


def _alive(pid):
    """Whether process `pid` of this machine runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _write_arrays(folder, train_path, encode, max_length):
    """Write the chunk files of `write_shards` into `folder`; returns the
    meta dict: the files, pairs of each length (0 to `max_length + 1`),
    the pairs written and the split's lines."""
    import numpy as np

    lengths = np.zeros(max_length + 2, np.int64)
    files, blocks, held, pairs, lines = [], [], 0, 0, 0

    def write(source, target):
        name = f"chunk-{len(files):05d}.npy"
        with open(os.path.join(folder, name), "wb") as handle:
            np.lib.format.write_array(handle, _chunk(source, target), version=(1, 0))
        files.append(name)

    for source, target, keep, count in _encoded(train_path, encode):
        lines += int(count)
        source, target = source[keep], target[keep]
        pairs, held = pairs + len(source), held + len(source)
        lengths += np.bincount(
            np.maximum((source > 0).sum(1), (target > 0).sum(1)), minlength=len(lengths)
        )
        blocks.append((source, target))
        if held >= CHUNK:  # a chunk or more: written, the rest kept
            source, target = (np.concatenate(side) for side in zip(*blocks))
            for start in range(0, held - CHUNK + 1, CHUNK):
                write(source[start : start + CHUNK], target[start : start + CHUNK])
            rest = held - held % CHUNK
            blocks, held = [(source[rest:], target[rest:])], held % CHUNK
    if held or not files:
        source, target = (
            (np.concatenate(side) for side in zip(*blocks))
            if blocks
            else (np.zeros((0, 1), np.int32),) * 2
        )
        write(source, target)
    return {
        "format": FORMAT,
        "files": files,
        "lengths": lengths.tolist(),
        "pairs": pairs,
        "lines": lines,
    }


def _chunk(source, target):
    """The int32 array of a chunk file of padded `source` and `target` id
    rows (padding, id 0, at the end of each)."""
    import numpy as np

    parts = [[len(source)], (source > 0).sum(1), (target > 0).sum(1)]
    parts += [source[source > 0], target[target > 0]]  # row after row
    return np.concatenate([np.asarray(part).astype("<i4") for part in parts])


def _encoded(train_path, encode):
    """`(source ids, target ids, fits, lines)` NumPy arrays of each 1024
    lines of `train_path`, in order, encoded by a thread per core (the
    graph's tokenizers run without the GIL). Lines are `TextLineDataset`'s:
    split on `\\n`, every `\\r` dropped."""
    import numpy as np

    def encoded(chunk):
        return (*(np.asarray(part) for part in encode(chunk)), len(chunk))

    workers = os.cpu_count() or 1
    with open(train_path, "rb") as handle, ThreadPoolExecutor(workers) as pool:
        chunks = iter(
            lambda: [
                line.rstrip(b"\n").replace(b"\r", b"") for line in itertools.islice(handle, 1024)
            ],
            [],
        )
        while group := list(itertools.islice(chunks, 2 * workers)):
            yield from pool.map(encoded, group)


def read_chunk(path):
    """`(source, target)` of a chunk file: lists of each pair's int32 pieces."""
    values, starts, ends = chunk_offsets(path)
    pieces = [values[start:end] for start, end in zip(starts, ends)]
    count = len(pieces) // 2
    return pieces[:count], pieces[count:]


def chunk_offsets(path):
    """`(values, starts, ends)` of a chunk file: its int32 values (its pair
    count, every source's and target's piece count, then their pieces) and
    where each side of each pair lies in them (every source, then every
    target)."""
    import numpy as np

    values = np.load(path)
    count = int(values[0])
    lengths = values[1 : 1 + 2 * count].astype(np.int64)
    ends = np.cumsum(lengths) + 1 + 2 * count
    return values, ends - lengths, ends


def chunk_files(folder, meta):
    """The paths of a complete shard set's chunk files (`meta`: its
    `read_meta`), in the split's order."""
    return [os.path.join(folder, name) for name in meta["files"]]
