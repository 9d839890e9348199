"""XLA exports (TensorFlow-specific): each searching signature runs its
search as an XLA-compiled function (`tf.function(..., jit_compile=True)`)
over a fixed set of input shapes, the **buckets**; tokenization, number
protection, request checks and detokenization stay in the plain graph
around it, so a signature's inputs, outputs and answers are the plain
export's.

    source (B, S) -> cut to the smallest length bucket s >= its longest row
                  -> pad to the smallest batch bucket b >= B (copies of row 0)
                  -> XLA search (b, s) -> outputs sliced back to B rows
                     (attention (B, L, s) padded back to (B, L, S) with zeros)

A batch larger than the largest bucket `b_max` is padded to a multiple of
`b_max` and run in chunks of `b_max` (`tf.map_fn`), so no request shape
makes a new program. The constrained signature's prefix `(B, P)` is padded
to `(B, L)` with padding ids (a padded prefix forces nothing more).
Each searching signature holds one compiled function per (batch bucket,
length bucket): programs = signatures x batch buckets x length buckets,
all compiled by the export's warm-up requests (`warmup_requests`) when the
server loads it.

Defaults: batch buckets (1, 8, 32) and source lengths (ceil(S / 2), S),
S = `max_source_length`: 6 x 3 x 2 = 36 programs. Cutting trailing source
padding changes no family's results: the Transformer and the recurrent
models mask padded keys, ConvS2S also zeroes padded positions before each
convolution (`tests/test_xla_export.py` compares each family with its
plain export).
"""

import math
import os
from numbers import Integral

import numpy as np
import tensorflow as tf

from keras_attention.files import write_atomically

# The signatures that run a search; `decoding_options` runs none.
SEARCHING = ("serving_default", "greedy", "attention", "tokens", "nbest", "constrained")
BATCH_SIZES = (1, 8, 32)  # one request, a small batch, the batching server's full batch
# The largest bucket sizes taken. A batch bucket of b rows is an XLA
# program of b rows that the export's warm-up requests of b texts compile,
# and a request above the largest bucket runs in chunks of it, so a larger
# one buys nothing (TF Serving's batching takes requests of up to 1024
# rows, `batching_parameters`). A source width is also at most S, the
# Translator's `max_source_length`.
MAX_BUCKET_BATCH = 1024
MAX_BUCKET_LENGTH = 10_000
CONFIG_KEYS = ("batch_sizes", "source_lengths")  # of `XlaBuckets.get_config()`
# What a server started on an XLA export needs (TF Serving keeps XLA:CPU off
# without it and refuses to run a function that must compile).
SERVER_FLAG = "--xla_cpu_compilation_enabled=true"
BATCHING_PARAMETERS = "batching_parameters.txt"


def _sizes(value, name, largest, bound):
    """`value` as a strictly increasing tuple of positive ints, each at most
    `largest` (the constant named `bound`), or a `ValueError` naming `name`."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        value = [value]
    value = list(value)
    if not value or any(isinstance(v, bool) or not isinstance(v, Integral) or v < 1 for v in value):
        raise ValueError(
            f"`{name}` of XlaBuckets must be a non-empty list of positive integers; "
            f"received {name}={value!r}."
        )
    if any(a >= b for a, b in zip(value, value[1:])):
        raise ValueError(
            f"`{name}` of XlaBuckets must be strictly increasing; received {name}={value!r}."
        )
    if value[-1] > largest:
        raise ValueError(
            f"`{name}` of XlaBuckets must each be at most {bound}={largest} (each bucket "
            f"is an XLA program the export's warm-up requests compile); received "
            f"{name}={value!r}."
        )
    return tuple(int(v) for v in value)


class XlaBuckets:
    """The shapes an XLA export compiles its searches for.

    Args:
        batch_sizes: increasing batch sizes (default `(1, 8, 32)`), each
            at most `MAX_BUCKET_BATCH` (1024); a request of B rows runs at
            the smallest >= B, a larger one in chunks of the largest.
        source_lengths: increasing source widths, each >= 3 (`[START]`, a
            piece, `[END]`), at most `MAX_BUCKET_LENGTH` (10000) and at most
            S; S is always the last (added when missing). None:
            `(ceil(S / 2), S)`.

    `get_config()` gives plain values; `XlaBuckets(**config)` rebuilds it."""

    def __init__(self, batch_sizes=BATCH_SIZES, source_lengths=None):
        self.batch_sizes = _sizes(batch_sizes, "batch_sizes", MAX_BUCKET_BATCH, "MAX_BUCKET_BATCH")
        if source_lengths is not None:
            source_lengths = _sizes(
                source_lengths, "source_lengths", MAX_BUCKET_LENGTH, "MAX_BUCKET_LENGTH"
            )
            if source_lengths[0] < 3:
                raise ValueError(
                    "`source_lengths` of XlaBuckets must be at least 3 ([START], a piece, "
                    f"[END]); received source_lengths={list(source_lengths)!r}."
                )
        self.source_lengths = source_lengths

    def get_config(self):
        lengths = None if self.source_lengths is None else list(self.source_lengths)
        return {"batch_sizes": list(self.batch_sizes), "source_lengths": lengths}

    def lengths(self, max_source_length):
        """The source widths for S = `max_source_length`; `ValueError` for a
        width above S."""
        S = max_source_length
        if self.source_lengths is None:
            half = math.ceil(S / 2)
            return (half, S) if 3 <= half < S else (S,)
        if self.source_lengths[-1] > S:
            raise ValueError(
                f"`source_lengths` of XlaBuckets must be at most max_source_length={S}; "
                f"received source_lengths={list(self.source_lengths)!r}."
            )
        return tuple(w for w in self.source_lengths if w < S) + (S,)

    def __repr__(self):
        return f"XlaBuckets(**{self.get_config()!r})"


def get_buckets(buckets):
    """An `XlaBuckets` from None (the defaults), a config dict (the keys
    `CONFIG_KEYS`; another is a `ValueError` naming it) or itself."""
    if buckets is None:
        return XlaBuckets()
    if isinstance(buckets, XlaBuckets):
        return buckets
    if isinstance(buckets, dict):
        unknown = [key for key in buckets if key not in CONFIG_KEYS]
        if unknown:
            raise ValueError(
                f"`buckets` has unknown keys {unknown}: an XlaBuckets config has the keys "
                f"{list(CONFIG_KEYS)}; received buckets={buckets!r}."
            )
        return XlaBuckets(**buckets)
    raise ValueError(
        "`buckets` must be an XlaBuckets, its config (a dict with batch_sizes and "
        f"source_lengths) or None; received buckets={buckets!r}."
    )


class BucketedSearch:
    """Runs a search inside a signature's graph as XLA programs of the
    bucket shapes (see the module docstring).

    Args:
        batch_sizes, lengths: the batch buckets and source widths (the last
            is S, the width of every source given).
        max_length: L, the width a prefix is padded to.
        padding_id: the model's padding id (source and prefix padding)."""

    def __init__(self, batch_sizes, lengths, max_length, padding_id):
        self.batch_sizes, self.lengths = tuple(batch_sizes), tuple(lengths)
        self.max_length, self.padding_id = max_length, padding_id
        self.compiled = []  # the XLA tf.functions made, one per search traced

    def __call__(self, run, source, prefix=None):
        """`run(source, prefix)` (a search's dict of `(B, ...)` tensors) on
        `source (B, S')`, S' <= S, and `prefix (B, P)` or None, through one
        XLA program per bucket; the same dict, B rows, attention S wide."""
        compiled = tf.function(run, jit_compile=True, autograph=False)
        self.compiled.append(compiled)
        S = self.lengths[-1]
        source = tf.cast(source, tf.int32)
        source = tf.pad(
            source, [[0, 0], [0, S - tf.shape(source)[1]]], constant_values=self.padding_id
        )
        source = tf.reshape(source, [-1, S])  # (B, S), S static
        if prefix is not None:
            prefix = tf.cast(prefix, tf.int32)
            width = [[0, 0], [0, self.max_length - tf.shape(prefix)[1]]]
            prefix = tf.reshape(
                tf.pad(prefix, width, constant_values=self.padding_id), [-1, self.max_length]
            )  # (B, L)
        rows = tf.shape(source)[0]
        positions = tf.range(1, S + 1)[None, :]
        used = tf.reduce_max(tf.where(source != self.padding_id, positions, 0))
        length_index = tf.reduce_sum(tf.cast(used > tf.constant(self.lengths), tf.int32))
        batch_index = tf.minimum(
            tf.reduce_sum(tf.cast(rows > tf.constant(self.batch_sizes), tf.int32)),
            len(self.batch_sizes) - 1,
        )
        branches = [
            lambda b=b, s=s: self._bucket(compiled, source, prefix, rows, b, s)
            for s in self.lengths
            for b in self.batch_sizes
        ]
        index = length_index * len(self.batch_sizes) + batch_index
        return tf.switch_case(index, branches)

    def _bucket(self, compiled, source, prefix, rows, batch, width):
        """The outputs for bucket `(batch, width)`: the rows padded with
        copies of row 0 to `batch` (to a multiple of it, run in chunks, for
        the largest bucket), cut back to `rows`; attention padded to S."""
        largest = batch == self.batch_sizes[-1]
        padded = (rows + batch - 1) // batch * batch if largest else batch
        inputs = [source[:, :width]] + ([] if prefix is None else [prefix])
        # Filler rows copy a real row: the search never sees a source of
        # padding only, and rows are independent, so they change no answer.
        inputs = [tf.concat([x, tf.repeat(x[:1], padded - rows, axis=0)], 0) for x in inputs]
        if largest:
            chunks = [tf.reshape(x, [-1, batch, x.shape[1]]) for x in inputs]
            specs = [tf.TensorSpec((batch, x.shape[1]), tf.int32) for x in inputs]
            traced = compiled.get_concrete_function(*specs).structured_outputs
            signature = {k: tf.TensorSpec(v.shape, v.dtype) for k, v in traced.items()}
            outputs = tf.map_fn(
                lambda xs: compiled(*xs), tuple(chunks), fn_output_signature=signature
            )  # (chunks, batch, ...)
            outputs = {
                k: tf.reshape(v, tf.concat([[-1], tf.shape(v)[2:]], 0)) for k, v in outputs.items()
            }
        else:
            outputs = compiled(*[tf.reshape(x, [batch, x.shape[1]]) for x in inputs])
        outputs = {k: v[:rows] for k, v in outputs.items()}
        if "attention" in outputs:  # (B, ..., L, width) -> (B, ..., L, S)
            attention = outputs["attention"]
            pad = [[0, 0]] * (len(attention.shape) - 1) + [[0, self.lengths[-1] - width]]
            outputs["attention"] = tf.pad(attention, pad)
        return outputs


def _filler_texts(translator, lengths):
    """`{width: text}`: for each length bucket a text whose source's
    longest row is in `(previous width, width]`, made of copies of one
    piece of the source vocabulary."""
    S = translator.max_source_length
    size = translator.source_tokenizer.vocab_size
    pieces = translator.source_tokenizer.tokens(np.arange(size)).numpy()
    words = [p.decode("utf-8").strip("▁#") for p in pieces.reshape(-1)]
    words = [w for w in dict.fromkeys(words) if w.isalpha()][:20]
    for word in words:
        texts = [" ".join([word] * k) for k in range(1, S + 1)]
        source, _ = translator.encode(tf.constant(texts))
        used = np.max(np.cumsum(source.numpy() != translator.model.padding_id, 1), 1)
        found, previous = {}, 0
        for width in lengths:
            fits = [k for k, u in enumerate(used) if previous < u <= width]
            if fits:
                found[width] = texts[fits[-1]]
            previous = width
        if len(found) == len(lengths):
            return found
    raise ValueError(
        "the XLA export's warm-up requests need a word of the source vocabulary that "
        f"fills each length bucket {list(lengths)}; none of {words[:5]}... did."
    )


def warmup_requests(translator):
    """The `(signature, inputs)` warm-up requests of an XLA `translator`:
    one per searching signature, batch bucket and length bucket, whose
    shapes select exactly that bucket, so that a server compiles every
    program at load (`versions.write_warmup_requests` writes them)."""
    bucketed = translator.bucketed
    texts = _filler_texts(translator, bucketed.lengths)
    requests = []
    for width in bucketed.lengths:
        for batch in bucketed.batch_sizes:
            text = np.array([texts[width]] * batch, dtype=object)
            source = translator.encode(tf.constant(text))[0].numpy()
            lengths = (source != translator.model.padding_id).sum(1).astype("int32")
            ids = source[:, : int(lengths.max())]
            prefix = np.array([""] * batch, dtype=object)
            inputs = {
                "tokens": {"token_ids": ids, "lengths": lengths},
                "constrained": {"text": text, "prefix": prefix},
            }
            for name in SEARCHING:
                requests.append((name, inputs.get(name, {"text": text})))
    return requests


def add_warmup_requests(version_dir, model_name, translator):
    """Append `warmup_requests(translator)` to the warm-up requests the
    version holds (those a caller's `before_publish` wrote, if any)."""
    import os

    from keras_attention.serving.versions import read_warmup_requests, write_warmup_requests

    path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
    earlier = read_warmup_requests(version_dir) if os.path.exists(path) else []
    write_warmup_requests(version_dir, model_name, earlier + warmup_requests(translator))


def batching_parameters(batch_sizes):
    """The text-format `BatchingParameters` of TF Serving
    (`--enable_batching --batching_parameters_file`) matching the batch
    buckets: the server merges requests into batches of exactly those
    sizes (`allowed_batch_sizes`), and splits a request above the largest
    into batches of at most it (`enable_large_batch_splitting`,
    `max_execution_batch_size`), so it runs only compiled programs."""
    largest = batch_sizes[-1]
    lines = [
        f"max_batch_size {{ value: {max(largest, 1024)} }}  # the largest request taken",
        f"max_execution_batch_size {{ value: {largest} }}  # the largest batch bucket",
        "enable_large_batch_splitting { value: true }",
        "batch_timeout_micros { value: 5000 }  # wait at most 5 ms to fill a batch",
        "max_enqueued_batches { value: 100 }",
        "num_batch_threads { value: 4 }  # batches run at once",
        *[f"allowed_batch_sizes: {size}" for size in batch_sizes],
        "pad_variable_length_inputs: true  # tokens: token_ids of different widths",
    ]
    return "\n".join(lines) + "\n"


def write_batching_parameters(base_dir, batch_sizes):
    """Write `<base_dir>/batching_parameters.txt` (`batching_parameters`)
    atomically, beside `models.config`; returns its path."""
    return write_atomically(
        os.path.join(base_dir, BATCHING_PARAMETERS), batching_parameters(batch_sizes)
    )
