"""keras_attention: the attention mechanisms of sequence-to-sequence learning,
as Keras 3 layers written with `keras.ops` only."""

from keras_attention.additive import AdditiveAttention, ConcatAttention
from keras_attention.base import ScoreAttention
from keras_attention.convs2s import (
    ConvS2SDecoder,
    ConvS2SEncoder,
    GLUConv1D,
    MultiStepAttention,
)
from keras_attention.local import LocalAttention
from keras_attention.multi_head import MultiHead
from keras_attention.multiplicative import DotProductAttention, GeneralAttention
from keras_attention.positional import PositionalEmbedding
from keras_attention.rnn import AttentionDecoder, RecurrentEncoder
from keras_attention.seq2seq import (
    ConvS2SSeq2Seq,
    MaskedCrossEntropy,
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

__version__ = "0.1.0"

__all__ = [
    "AdditiveAttention",
    "AffineGrid",
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
    "MaskedCrossEntropy",
    "MultiHead",
    "MultiStepAttention",
    "PositionalEmbedding",
    "RecurrentEncoder",
    "RecurrentSeq2Seq",
    "ScheduledSampling",
    "ScoreAttention",
    "Seq2Seq",
    "SpatialTransformer",
    "ThinPlateSplineGrid",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "TransformerSeq2Seq",
]
