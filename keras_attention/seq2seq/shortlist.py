"""A vocabulary shortlist: each request decodes over a few target pieces
instead of the whole target vocabulary (Marian's lexical shortlist,
CTranslate2's vocabulary map), so the output projection of every step
multiplies by `size` columns instead of `V`.

The table is learned once from a parallel corpus's ids
(`Shortlist.learn`): for each source piece the `depth` target pieces of
highest Dice coefficient over sentence pairs,

    dice(s, t) = 2 c(s, t) / (c(s) + c(t))

with `c` counting the pairs that hold the piece(s) (co-occurrence, no
alignment model), and the target pieces in order of frequency. A request
`source (B, S)` gets one list for its whole batch (`columns`): `size`
target ids, sorted, chosen in this order of priority until `size` are
taken:

1. the reserved ids `0 .. reserved - 1` (padding, `<sos>`, `<eos>`,
   `<unk>`), then the `always` ids (the number placeholder) and every
   piece of a forced prefix,
2. the `frequent` most frequent target pieces (a quarter of `size`),
3. the candidates of the batch's source pieces, by their place in a
   source piece's list: every first candidate, then every second one, ...
   (within a place, the more frequent first),
4. the next most frequent pieces, filling the list.

A fixed `size` keeps the shapes static for XLA. Because the reserved ids
are the smallest and always taken, column `i` is id `i` for each of them:
the search's special ids need no mapping. `shortlisted_search` runs a
search over a model's projection onto those columns only (gathered once
per request: the family's `output_columns`) and maps the chosen columns back to
target ids.

Convention (as CTranslate2's vocabulary map): the log-probabilities are
normalised over the listed pieces only, so scores are at least the full
vocabulary's. Greedy search chooses as the full search whenever the full
search's choices are listed; a beam's ranking may differ where pieces left
out held probability.

Example:

>>> import numpy as np
>>> pairs = [(np.array([5, 6]), np.array([7, 8])), (np.array([5]), np.array([7]))]
>>> table = Shortlist.learn(pairs, source_vocab_size=9, target_vocab_size=10, size=6, depth=1)
>>> table.candidates[5].tolist(), table.candidates[6].tolist()
([7], [8])
>>> np.asarray(table.columns(np.array([[1, 6, 2]]))).tolist()
[0, 1, 2, 3, 7, 8]
"""

import numpy as np
from keras import ops

from keras_attention import quantization
from keras_attention.seq2seq.decoding_options import check_prefix_ids

RESERVED = 4  # padding, <sos>, <eos>, <unk>: ids 0-3 of keras_attention.tokenizers
DEPTH = 8  # candidates per source piece
MAX_DEPTH = 256  # so that a priority (`Shortlist.columns`) fits an int32 for 1M pieces
CHUNK = 4096  # sentence pairs counted at a time by `learn`


def _check_size(name, value, low, owner="Shortlist"):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(
            f"`{name}` of {owner} must be an integer >= {low}; received {name}={value!r}."
        )
    return int(value)


def _pair_counts(pairs, source_vocab_size, target_vocab_size):
    """`(keys, counts, source_counts, target_counts, target_tokens)`: the
    (s, t) keys `s · V_t + t` with the pairs holding both, the pairs holding
    each piece, and each target piece's count of occurrences."""
    source_counts = np.zeros(source_vocab_size, np.int64)
    target_counts = np.zeros(target_vocab_size, np.int64)
    target_tokens = np.zeros(target_vocab_size, np.int64)
    keys, counts, chunk = np.zeros(0, np.int64), np.zeros(0, np.int64), []

    def merge(keys, counts, chunk):
        keys, inverse = np.unique(np.concatenate([keys, *chunk]), return_inverse=True)
        weights = np.concatenate([counts] + [np.ones(len(c), np.int64) for c in chunk])
        return keys, np.bincount(inverse, weights, len(keys)).astype(np.int64)

    for source, target in pairs:
        source, target = np.asarray(source, np.int64), np.asarray(target, np.int64)
        for name, ids, size in (
            ("source", source, source_vocab_size),
            ("target", target, target_vocab_size),
        ):
            if ids.size and (ids.min() < 0 or ids.max() >= size):
                raise ValueError(
                    f"`pairs` of Shortlist.learn must hold {name} ids in [0, {size}); received "
                    f"ids from {ids.min()} to {ids.max()}."
                )
        source, target = source[source >= RESERVED], target[target >= RESERVED]
        np.add.at(target_tokens, target, 1)
        source, target = np.unique(source), np.unique(target)
        source_counts[source] += 1
        target_counts[target] += 1
        chunk.append((source[:, None] * target_vocab_size + target[None, :]).ravel())
        if len(chunk) == CHUNK:
            keys, counts = merge(keys, counts, chunk)
            chunk = []
    if chunk:
        keys, counts = merge(keys, counts, chunk)
    return keys, counts, source_counts, target_counts, target_tokens


class Shortlist:
    """A vocabulary shortlist (see the module docstring).

    Args:
        candidates: int array `(V_s, depth)`: each source piece's target
            candidates, best first, `-1` where it has fewer.
        frequency: int array `(V_t,)`: every target id, most frequent first.
        size: int, the target pieces each request decodes over (`K`), from
            `reserved + 1` to `V_t`.
        always: target ids always listed besides the reserved ones (the
            number placeholder).
        frequent: how many of the most frequent pieces are always listed;
            default a quarter of `size`.
    """

    def __init__(self, candidates, frequency, size, always=(), frequent=None):
        self.candidates = np.asarray(candidates, np.int32)
        self.frequency = np.asarray(frequency, np.int32)
        vocab = len(self.frequency)
        if self.candidates.ndim != 2 or sorted(self.frequency.tolist()) != list(range(vocab)):
            raise ValueError(
                "`candidates` of Shortlist must be a (source vocabulary, depth) matrix and "
                "`frequency` every target id once; received candidates of shape "
                f"{self.candidates.shape} and frequency of {vocab} ids."
            )
        if self.candidates.size and (self.candidates.min() < -1 or self.candidates.max() >= vocab):
            raise ValueError(
                f"`candidates` of Shortlist must be target ids in [0, {vocab}) or -1; received "
                f"ids from {self.candidates.min()} to {self.candidates.max()}."
            )
        self.size = _check_size("size", size, RESERVED + 1)
        if self.size > vocab:
            raise ValueError(
                f"`size` of Shortlist must be at most the target vocabulary's {vocab} pieces; "
                f"received size={size}."
            )
        self.always = tuple(int(i) for i in always)
        if any(not 0 <= i < vocab for i in self.always):
            raise ValueError(
                f"`always` of Shortlist must be target ids in [0, {vocab}); received {always!r}."
            )
        self.frequent = self.size // 4 if frequent is None else _check_size("frequent", frequent, 0)
        fixed = min(RESERVED, vocab) + len(set(self.always) - set(range(RESERVED)))
        if self.frequent > self.size - fixed:
            raise ValueError(
                f"`frequent` of Shortlist must leave room for the {fixed} reserved and `always` "
                f"ids in `size` {self.size}: at most {self.size - fixed}; received "
                f"frequent={self.frequent}."
            )
        depth = self.candidates.shape[1]
        if depth > MAX_DEPTH:
            raise ValueError(
                f"`candidates` of Shortlist may hold at most {MAX_DEPTH} candidates per source "
                f"piece; received {depth}."
            )
        # A piece's priority is level · V + rank (`columns`): level depth + 3
        # for the reserved ones, depth + 2 for the `always` ones and a forced
        # prefix's, depth + 1 for the frequent ones, depth - j for a
        # candidate in place j of a source piece's list, 0 for the rest; the
        # rank orders by frequency within a level.
        self._rank = np.empty(vocab, np.int32)
        self._rank[self.frequency] = np.arange(vocab - 1, -1, -1)
        self._level = np.zeros(vocab, np.int32)
        self._level[self.frequency[: self.frequent]] = depth + 1
        self._level[list(self.always)] = depth + 2
        self._level[: min(RESERVED, vocab)] = depth + 3  # above all: they map to themselves

    @property
    def target_vocab_size(self):
        return len(self.frequency)

    @property
    def source_vocab_size(self):
        return len(self.candidates)

    @classmethod
    def learn(cls, pairs, source_vocab_size, target_vocab_size, size, depth=DEPTH, **options):
        """A `Shortlist` of `size` learned from `pairs`, an iterable of
        `(source_ids, target_ids)` integer sequences (the reserved ids,
        padding included, are left out: they are always listed): each source piece's
        `depth` best candidates by Dice coefficient, ties to the more
        frequent target piece. `options`: `always`, `frequent`."""
        source_vocab_size = _check_size(
            "source_vocab_size", source_vocab_size, 1, "Shortlist.learn"
        )
        target_vocab_size = _check_size(
            "target_vocab_size", target_vocab_size, 1, "Shortlist.learn"
        )
        depth = _check_size("depth", depth, 1, "Shortlist.learn")
        if depth > MAX_DEPTH:
            raise ValueError(
                f"`depth` of Shortlist.learn must be at most {MAX_DEPTH}; received depth={depth}."
            )
        keys, counts, source_counts, target_counts, tokens = _pair_counts(
            pairs, source_vocab_size, target_vocab_size
        )
        frequency = np.lexsort((np.arange(target_vocab_size), -tokens))
        source, target = keys // target_vocab_size, keys % target_vocab_size
        dice = 2.0 * counts / (source_counts[source] + target_counts[target])
        # Best first within each source piece: by Dice, then by frequency.
        rank = np.empty(target_vocab_size, np.int64)
        rank[frequency] = np.arange(target_vocab_size)
        order = np.lexsort((rank[target], -dice, source))
        source, target = source[order], target[order]
        starts = np.searchsorted(source, np.arange(source_vocab_size))
        position = np.arange(len(source)) - starts[source]
        keep = position < depth
        candidates = np.full((source_vocab_size, depth), -1, np.int32)
        candidates[source[keep], position[keep]] = target[keep]
        return cls(candidates, frequency, size, **options)

    def columns(self, source, prefix=None, padding_id=0):
        """The `size` target ids `(K,)` int32, sorted, that the batch
        `source (B, S)` decodes over (and every non-padding id of `prefix
        (B, P)`), in `keras.ops`: see the module docstring."""
        vocab, depth = self.target_vocab_size, self.candidates.shape[1]
        source = ops.reshape(ops.cast(source, "int32"), (-1,))
        found = ops.take(ops.convert_to_tensor(self.candidates), source, axis=0)  # (B·S, depth)
        found = ops.where(source[:, None] == padding_id, -1, found)
        level = ops.where(found >= 0, depth - ops.arange(depth, dtype="int32")[None], 0)
        found, level = ops.reshape(found, (-1,)), ops.reshape(level, (-1,))
        if prefix is not None:  # every forced piece, as the reserved ones
            prefix = ops.reshape(ops.cast(prefix, "int32"), (-1,))
            found = ops.concatenate([found, ops.where(prefix == padding_id, -1, prefix)], axis=0)
            level = ops.concatenate([level, ops.where(prefix == padding_id, 0, depth + 2)], axis=0)
        best = ops.segment_max(level, ops.maximum(found, 0), num_segments=vocab)
        level = ops.maximum(ops.maximum(best, 0), ops.convert_to_tensor(self._level))
        priority = level * vocab + ops.convert_to_tensor(self._rank)
        _, ids = ops.top_k(priority, self.size, sorted=False)
        return ops.sort(ops.cast(ids, "int32"))

    def vocabulary_map(self, source_pieces, target_pieces):
        """The table as CTranslate2's vocabulary map, lines of text: a line
        `\\t<frequent pieces>` (always candidates), then `<source
        piece>\\t<candidates>` for each source piece with candidates (the
        reserved pieces left out: CTranslate2 adds its own)."""
        always = [int(i) for i in self.frequency[: self.frequent] if i >= RESERVED]
        always += [i for i in self.always if i >= RESERVED]
        lines = ["\t" + " ".join(target_pieces[i] for i in always)]
        for source_id in range(RESERVED, self.source_vocab_size):
            found = [int(i) for i in self.candidates[source_id] if i >= RESERVED]
            if found:
                lines.append(
                    f"{source_pieces[source_id]}\t" + " ".join(target_pieces[i] for i in found)
                )
        return lines

    def save(self, path):
        """Write the table (`.npz`); `Shortlist.load(path)` reads it back."""
        np.savez(
            path,
            candidates=self.candidates,
            frequency=self.frequency,
            config=np.array([self.size, self.frequent]),
            always=np.array(self.always, np.int32),
        )

    @classmethod
    def load(cls, path, size=None):
        """The `Shortlist` saved at `path`, of its own `size` or `size`."""
        with np.load(path) as saved:
            stored, frequent = (int(v) for v in saved["config"])
            return cls(
                saved["candidates"],
                saved["frequency"],
                stored if size is None else size,
                always=saved["always"].tolist(),
                frequent=frequent if size is None else None,
            )

    def get_config(self):
        return {"size": self.size, "frequent": self.frequent, "always": list(self.always)}

    def __repr__(self):
        return (
            f"Shortlist(size={self.size}, frequent={self.frequent}, depth="
            f"{self.candidates.shape[1]}, target_vocab_size={self.target_vocab_size})"
        )


def check_shortlist(shortlist, model, owner, search=None):
    """`shortlist` checked: None, or a `Shortlist`; with a `model`, of the
    model's vocabulary sizes, the model able to decode over it
    (`output_columns`: TransformerSeq2Seq, ConvS2SSeq2Seq); with a
    `search`, one without `suppress_tokens`. `ValueError` naming `owner`
    otherwise."""
    if shortlist is None:
        return None
    if not isinstance(shortlist, Shortlist):
        raise ValueError(
            f"`shortlist` of {owner} must be a keras_attention.seq2seq.Shortlist or None; "
            f"received {shortlist!r}."
        )
    if search is not None and search.suppress_tokens:
        raise ValueError(
            f"`shortlist` of {owner} needs a search without suppress_tokens (they are banned "
            "after the log-softmax over the whole vocabulary); the search has suppress_tokens="
            f"{list(search.suppress_tokens)!r}."
        )
    if model is None:
        return shortlist
    if not hasattr(model, "output_columns"):
        raise ValueError(
            f"`shortlist` of {owner} needs a model that decodes over a shortlist "
            f"(TransformerSeq2Seq, ConvS2SSeq2Seq); the model is a {type(model).__name__}."
        )
    sizes = (shortlist.source_vocab_size, shortlist.target_vocab_size)
    if sizes != (model.source_vocab_size, model.target_vocab_size):
        raise ValueError(
            f"`shortlist` of {owner} must be learned for the model's vocabularies "
            f"({model.source_vocab_size} source, {model.target_vocab_size} target pieces); "
            f"received one of {sizes[0]} source and {sizes[1]} target pieces."
        )
    return shortlist


class ShortlistedModel:
    """`model`'s decoding contract over the target ids `columns (K,)`: its
    token ids are column indices (the reserved ids are their own, the
    columns being sorted with `0 .. RESERVED - 1` first). `decode_step`
    maps the fed columns to ids, runs `model.decode_features` and projects
    onto the columns only (`model.output_columns`, gathered once)."""

    def __init__(self, model, columns):
        for method in ("decode_features", "output_columns"):
            if not hasattr(model, method):
                raise ValueError(
                    f"`model` of shortlisted_search must decode over a shortlist (have "
                    f"`{method}`: TransformerSeq2Seq, ConvS2SSeq2Seq); received "
                    f"{type(model).__name__}."
                )
        self.model, self.columns = model, columns
        self.project = model.output_columns(columns)
        self.target_vocab_size = int(columns.shape[0])
        for name in (
            "sos_id",
            "eos_id",
            "padding_id",
            "unk_id",
            "source_vocab_size",
            "has_attention",
            "max_length",
        ):
            if hasattr(model, name):
                setattr(self, name, getattr(model, name))
        self.reorder_state = model.reorder_state
        for name in ("reorder_beams", "beam_invariant_state"):  # a Seq2Seq's, not every model's
            if hasattr(model, name):
                setattr(self, name, getattr(model, name))

    def encode(self, source, max_length=None):
        return self.model.encode(source, max_length=max_length)

    def decode_step(self, tokens, state):
        ids = ops.take(self.columns, ops.cast(tokens, "int32"), axis=0)
        features, state, attention = self.model.decode_features(ids, state)
        return self.project(features), state, attention


def _to_columns(ids, columns, vocab_size, padding_id):
    """`ids` of target pieces as indices into `columns` (each id listed)."""
    positions = ops.arange(ops.shape(columns)[0], dtype="int32")
    vocab_positions = ops.scatter(ops.cast(columns, "int32")[:, None], positions, (vocab_size,))
    ids = ops.cast(ids, "int32")
    return ops.where(ids == padding_id, padding_id, ops.take(vocab_positions, ids, axis=0))


def shortlisted_search(search, model, shortlist, source, prefix=None, best=False):
    """`search(model, source, prefix)` (`search.best` with `best`) decoding
    over `shortlist.columns(source, prefix)` only: the result's `tokens`
    are target ids, as the full search's. A search with `suppress_tokens`
    is refused (the full search bans them after the log-softmax, which a
    list of columns chosen per request cannot repeat). A forced prefix's
    pieces are listed after the reserved ids: a batch whose prefixes hold
    more distinct pieces than the list's room beside those loses the
    least frequent of them (their forcing ends there)."""
    if search.suppress_tokens:
        raise ValueError(
            "`search` of shortlisted_search must have no suppress_tokens (they are banned "
            "after the log-softmax over the whole vocabulary); received suppress_tokens="
            f"{list(search.suppress_tokens)!r}."
        )
    padding_id = getattr(search, "padding_id", None)
    padding_id = model.padding_id if padding_id is None else padding_id
    for name in ("sos_id", "eos_id", "padding_id", "unk_id"):
        value = getattr(search, name, None)
        value = getattr(model, name, None) if value is None else value
        if value is not None and not -1 <= value < RESERVED:
            raise ValueError(
                f"`search` of shortlisted_search must use reserved ids below {RESERVED} for "
                f"its special tokens (they map to themselves); received {name}={value}."
            )
    if prefix is not None:
        sos_id = model.sos_id if search.sos_id is None else search.sos_id
        prefix = check_prefix_ids(prefix, model, sos_id, "shortlisted_search")
    with quantization.dequantized(model):  # the search's own scope sees no Keras model
        return _search_over(search, model, shortlist, source, prefix, best, padding_id)


def _search_over(search, model, shortlist, source, prefix, best, padding_id):
    columns = shortlist.columns(source, prefix, padding_id)
    shortlisted = ShortlistedModel(model, columns)
    if prefix is not None:
        prefix = _to_columns(prefix, columns, shortlist.target_vocab_size, padding_id)
    result = (search.best if best else search)(shortlisted, source, prefix=prefix)
    return dict(result, tokens=ops.take(columns, result["tokens"], axis=0))
