"""keras_attention: the attention mechanisms of sequence-to-sequence learning,
as Keras 3 layers written with `keras.ops` only.

Three tiers, each importing only from those below it:

- the layers, flat in this package (`multiplicative`, `additive`, `local`,
  `multi_head`, `relative_position`, `positional`, `transformer`, `convs2s`,
  `rnn`, `cell`, `spatial`, with `masking`, `base`, `validation`, the
  `registry` of names and `compat`, what keeps older code and files working);
- `keras_attention.seq2seq`: encoder-decoder models, their loss and
  training regimes, generation (every backend);
- `keras_attention.serving`: TensorFlow-only export, tokenizer and
  multi-worker helpers (imported on demand, never from here).
"""

from importlib.metadata import PackageNotFoundError, version

# The mechanism modules fill `registry`'s name table as they are imported, in
# this order, which is the order of `keras_attention.registry.names()` (the
# recipes' and the tuner's first choice is its first name): the simplest first.
# isort: off
# First Keras, without TensorFlow's start-up notes on stderr (_startup says which).
from keras_attention import _startup  # noqa: F401
from keras_attention import multiplicative, additive, local, multi_head  # noqa: F401

# isort: on
from keras_attention.additive import AdditiveAttention, ConcatAttention
from keras_attention.base import ScoreAttention
from keras_attention.cell import AttentionCell
from keras_attention.convs2s import (
    ConvS2SDecoder,
    ConvS2SEncoder,
    GLUConv1D,
    MultiStepAttention,
)
from keras_attention.local import LocalAttention
from keras_attention.multi_head import MultiHead
from keras_attention.multiplicative import DotProductAttention, GeneralAttention
from keras_attention.positional import PositionalEmbedding, TokenAndPositionEmbedding
from keras_attention.registry import get
from keras_attention.relative_position import RelativePositionEmbedding, RotaryEmbedding
from keras_attention.rnn import AttentionDecoder
from keras_attention.rnn_encoder import RecurrentEncoder
from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    MaskedAccuracy,
    MaskedCrossEntropy,
    MaskedPerplexity,
    RecurrentSeq2Seq,
    ScheduledSampling,
    Seq2Seq,
    TransformerSeq2Seq,
)
from keras_attention.spatial import (
    AffineGrid,
    BilinearSampler,
    SpatialTransformer,
    ThinPlateSplineGrid,
)
from keras_attention.transformer import (
    FeedForward,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

try:  # the version is written once, in pyproject.toml
    __version__ = version("keras_attention")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AdditiveAttention",
    "AffineGrid",
    "AttentionCell",
    "AttentionDecoder",
    "BilinearSampler",
    "ConcatAttention",
    "ConvS2SDecoder",
    "ConvS2SEncoder",
    "ConvS2SSeq2Seq",
    "DotProductAttention",
    "FeedForward",
    "GeneralAttention",
    "GLUConv1D",
    "LocalAttention",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "MaskedPerplexity",
    "MultiHead",
    "MultiStepAttention",
    "PositionalEmbedding",
    "RecurrentEncoder",
    "RecurrentSeq2Seq",
    "RelativePositionEmbedding",
    "RotaryEmbedding",
    "ScheduledSampling",
    "ScoreAttention",
    "Seq2Seq",
    "SpatialTransformer",
    "ThinPlateSplineGrid",
    "TokenAndPositionEmbedding",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "TransformerSeq2Seq",
    "get",
]
