"""Every deprecated spelling of keras_attention in one table, with what to
write instead and the release that removes it, and the one wording of their
`DeprecationWarning`.

A deprecated spelling keeps working, with a warning, until the release in
its row; then it goes, with its row. Files are not spellings: `.keras`
configs and weights written by 0.1.0 and 0.2.x, and 0.2.0's SavedModel
exports, load quietly and stay readable (`compat.py` reads them; see
`tests/data/v0_1_0`, `tests/data/v0_2_0`). 0.2.0's functions
(`seq2seq.generation`: `greedy_search`, `sample`, `beam_search`,
`generate`; `serving.export`: `translator_archive`, `decoding_options`,
...) are thin wrappers over today's objects and are not deprecated.

The shims that stay where old code finds them only call `warn` (and
`moved_module`), so that a new deprecation is one row here:

- `compat.reads_0_1_0`, `compat.renamed_method`, `compat.renamed_arguments`:
  constructor arguments, methods and keyword arguments renamed;
- `seq2seq/generation.py`: `return_attention` of the 0.2.0 functions;
- `serving/text.py`, `serving/numbers.py`, `serving/distribute.py`: the
  modules that moved out of `serving/`, through `moved_module`; and
  `seq2seq/search.py`'s `__getattr__` for the sampling helpers it offered.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     warn("AttentionDecoder.initial_state")
>>> old, instead = str(caught[0].message).split(": ")
>>> old
'AttentionDecoder.initial_state is deprecated and will be removed in keras_attention 0.4.0'
>>> instead
'use AttentionDecoder.init_cache (the same method).'
"""

import collections
import importlib
import warnings

Deprecation = collections.namedtuple("Deprecation", "old instead since removed_in")
Deprecation.__doc__ = """One deprecated spelling: `old` (as its warning names it),
`instead` (what to write), `since` (the release that deprecated it) and
`removed_in` (the first release without it)."""


def _rows(since, removed_in, *pairs):
    return [Deprecation(old, instead, since, removed_in) for old, instead in pairs]


def _keyword(owner, old, new):
    return f"`{old}` of {owner}", f"use `{new}` (the same meaning)"


_RETURN_ATTENTION = "use `return_attention_scores` (the result's key stays 'attention')"

DEPRECATIONS = (
    # 0.1.0's constructor arguments, deprecated by 0.2.0 (which said "until
    # 0.3.0"); kept one release longer so that 0.3.0 breaks no working code.
    *_rows(
        "0.2.0",
        "0.4.0",
        _keyword("RecurrentSeq2Seq", "units", "hidden_dim"),
        _keyword("RecurrentSeq2Seq", "encoder_layers", "num_layers"),
        _keyword("RecurrentSeq2Seq", "decoder_layers", "num_decoder_layers"),
        _keyword("TransformerSeq2Seq", "width", "hidden_dim"),
        (
            "LocalAttention(window, ...) with the window first",
            "the first argument is now the score layer; write LocalAttention(window=...)",
        ),
    ),
    # One name per idea across the tiers (0.3.0).
    *_rows(
        "0.3.0",
        "0.4.0",
        ("AttentionDecoder.initial_state", "use AttentionDecoder.init_cache (the same method)"),
        _keyword("AttentionDecoder.step", "state", "cache"),
        _keyword("ConvS2SDecoder.step", "index", "cache_index"),
        *(
            _keyword(
                f"{family}Seq2Seq.teacher_forced", "return_attention", "return_attention_scores"
            )
            for family in ("Recurrent", "ConvS2S", "Transformer")
        ),
        *(
            (f"`return_attention` of {function}", _RETURN_ATTENTION)
            for function in ("greedy_search", "sample", "beam_search", "generate")
        ),
    ),
    # The tokenizers and the multi-worker setup left `serving/` (0.3.0).
    *_rows(
        "0.3.0",
        "0.4.0",
        ("keras_attention.serving.text", "import from keras_attention.tokenizers"),
        ("keras_attention.serving.numbers", "import from keras_attention.tokenizers.numbers"),
        (
            "keras_attention.serving.distribute",
            "import from keras_attention.training.distribute",
        ),
        # Names are imported from the module that defines them (0.3.0).
        (
            "keras_attention.seq2seq.search's sampling helpers",
            "import check_vocabulary_fits, decode_loop and filter_logits from "
            "keras_attention.seq2seq.sampling",
        ),
    ),
)

_BY_OLD = {row.old: row for row in DEPRECATIONS}


def warn(old, instead=None, stacklevel=2):
    """The `DeprecationWarning` of the row `old` of `DEPRECATIONS` (a
    `KeyError` for a spelling without a row): "`old` is deprecated and will
    be removed in keras_attention `removed_in`: `instead`." `instead`
    overrides the row's advice (a moved module names the name's new home);
    `stacklevel` counts as `warnings.warn`'s does, from the caller of `warn`."""
    row = _BY_OLD[old]
    warnings.warn(
        f"{old} is deprecated and will be removed in keras_attention {row.removed_in}: "
        f"{instead or row.instead}.",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def moved_module(old, new, homes):
    """`(__getattr__, __dir__)` for the module `old` (a row of
    `DEPRECATIONS`), whose names now live in the modules `homes` (searched
    in order): a name is looked up there, with a `DeprecationWarning` that
    says where it lives and `new`, the path to import it from."""

    def __getattr__(name):
        if not name.startswith("__"):
            for home in homes:
                module = importlib.import_module(home)
                if hasattr(module, name):
                    public = hasattr(importlib.import_module(new), name)
                    warn(
                        old,
                        f"{name} moved to {home}; import it from {new if public else home} instead",
                    )
                    return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    def __dir__():
        return sorted(
            {
                name
                for home in homes
                for name, value in vars(importlib.import_module(home)).items()
                if not name.startswith("__") and not isinstance(value, type(importlib))
            }
        )

    return __getattr__, __dir__
