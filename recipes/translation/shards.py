"""The training split tokenised once: `<data>/shards-<key>/`, a shard set
of TFRecord files (`train-000NN-of-000MM.tfrecord`) and `meta.json`,
written after the vocabularies and read by every epoch, resume and tuning
trial of the run instead of the text (`write_shards`, `shard_records`).

Each record is one pair that fits `max_length`: little-endian int32s, the
source's piece count, then the source's pieces, then the target's
(`[START] ... [END]` included, no padding): `tf.io.decode_raw` reads it.
Pair i of the split (counting the pairs kept) is in shard `i % shards`, so
reading the shards in turn, one record each, gives the split's order.
`meta.json` holds how many pairs there are of each length (the longer
side's pieces), so that an epoch's batches are known without tokenising.

The key names what the tokens depend on: the split file's bytes, the
vocabulary files' bytes, `max_length`, the number protection and the
record format. The set is written into a temporary folder renamed into
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

FORMAT = 1  # the record layout above; a new one gets new keys
SHARDS = 16  # files of a set: several workers can each read their own


def _vocabulary_file(tokenizer):
    """The vocabulary file a tokenizer was loaded from (SentencePiece's
    model, WordPiece's token list)."""
    model = getattr(tokenizer, "_model", None)  # SentencePiece's resource
    asset = model.model_file if hasattr(model, "model_file") else tokenizer.vocabulary_file
    path = asset.asset_path
    return path.numpy().decode("utf-8") if hasattr(path, "numpy") else str(path)


def shard_key(train_path, tokenizers, max_length, numbers):
    """16 hex digits of a hash of what the shards' tokens depend on: the
    split file, the tokenizers' vocabulary files (and WordPiece's case
    rule), `max_length` and the number protection (None or its config)."""
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
    if not all(os.path.exists(os.path.join(folder, name)) for name in meta["files"]):
        return None
    return meta


def write_shards(folder, train_path, encode, max_length, shards=SHARDS, log=print):
    """The shard set `folder` of `train_path`'s pairs, written unless a
    complete one is there; returns its `meta.json` dict. `encode` is the
    pipeline's (`lines -> (source ids, target ids, fits)`, numbers
    protected as the run decided); pairs that do not fit are left out."""
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
        meta = _write_records(temporary, train_path, encode, max_length, shards)
        run_files.write_json_atomically(os.path.join(temporary, "meta.json"), meta)
        try:
            os.rename(temporary, folder)
        except OSError:  # another process renamed the same set into place first
            if read_meta(folder) is None:
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    log(
        f"shards: {meta['pairs']} of {meta['lines']} training pairs tokenised once into "
        f"{shards} files -> {folder}"
    )
    return meta


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


def _write_records(folder, train_path, encode, max_length, shards):
    """Write the shard files of `write_shards` into `folder`; returns the
    meta dict: the files, pairs of each length (0 to `max_length + 1`),
    the pairs written and the split's lines."""
    import numpy as np
    import tensorflow as tf

    files = [f"train-{index:05d}-of-{shards:05d}.tfrecord" for index in range(shards)]
    writers = [tf.io.TFRecordWriter(os.path.join(folder, file)) for file in files]
    lengths = np.zeros(max_length + 2, np.int64)
    written = lines = 0
    try:
        for source, target, keep, count in _encoded(train_path, encode):
            lines += int(count)
            records, longer = _records(source[keep], target[keep])
            for record in records:
                writers[written % shards].write(record)
                written += 1
            lengths += np.bincount(longer, minlength=len(lengths))
    finally:
        for writer in writers:
            writer.close()
    return {
        "format": FORMAT,
        "files": files,
        "lengths": lengths.tolist(),
        "pairs": written,
        "lines": lines,
    }


def _encoded(train_path, encode):
    """`(source ids, target ids, fits, lines)` NumPy arrays of each 1024
    lines of `train_path`, in order, encoded eagerly by a thread per core
    (TensorFlow's kernels run without the GIL; eager, since a `tf.data` map
    would first trace `encode`, seconds that a small split does not need).
    Lines are `TextLineDataset`'s: split on `\\n`, every `\\r` dropped."""
    import numpy as np
    import tensorflow as tf

    def encoded(chunk):
        return (*(np.asarray(part) for part in encode(tf.constant(chunk))), len(chunk))

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


def _records(source, target):
    """The records of padded `source` and `target` id rows (padding, id 0,
    at the end of each), and each pair's longer side's length."""
    import numpy as np

    source_pieces, target_pieces = source > 0, target > 0
    source_lengths, target_lengths = source_pieces.sum(1), target_pieces.sum(1)
    columns = np.concatenate([source_lengths[:, None], source, target], axis=1).astype("<i4")
    kept = np.concatenate([np.ones_like(source_pieces[:, :1]), source_pieces, target_pieces], 1)
    data = columns[kept].tobytes()  # row after row
    ends = np.cumsum(4 * (1 + source_lengths + target_lengths)).tolist()
    records = [data[start:end] for start, end in zip([0, *ends[:-1]], ends)]
    return records, np.maximum(source_lengths, target_lengths)


def shard_records(folder, meta):
    """The records of a shard set (`meta`: its `read_meta`), in the split's
    order: the files read in turn, one record each, in parallel."""
    import tensorflow as tf

    files = [os.path.join(folder, name) for name in meta["files"]]
    return tf.data.Dataset.from_tensor_slices(files).interleave(
        tf.data.TFRecordDataset,
        cycle_length=len(files),
        block_length=1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )


def decode_records(records):
    """The `(source, target)` int32 pieces (unpadded) of shard `records`."""
    import tensorflow as tf

    @tf.autograph.experimental.do_not_convert
    def decode(record):
        ids = tf.io.decode_raw(record, tf.int32, little_endian=True)
        return ids[1 : 1 + ids[0]], ids[1 + ids[0] :]

    return records.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
