"""Encoder-decoder models, their loss and training regimes, and generation:
`keras.ops` only, so they train and generate on every Keras backend.

    base.py                 the Seq2Seq interface and its decoding contract
    recurrent.py            RecurrentSeq2Seq (RNN + Bahdanau/Luong attention)
    convolutional.py        ConvS2SSeq2Seq
    transformer.py          TransformerSeq2Seq
    teacher_forcing.py      target_in / target_out framing
    scheduled_sampling.py   ScheduledSampling and its decoding loop
    losses.py               MaskedCrossEntropy; MaskedAccuracy, MaskedPerplexity metrics
    schedules.py            InverseSquareRootSchedule (warm-up, 1/sqrt(step)), PlannedCosineDecay,
                            PerUpdateSchedule (a schedule of updates under accumulation)
    search.py               GreedySearch, BeamSearch, RandomSampling, get_search: the strategies
    generation.py           greedy_search, sample, beam_search, generate: 0.2.0's wrappers
    beam.py                 beam search's loop, GNMT length and coverage penalties
    ensemble.py             Ensemble: several models decoding as one
    shortlist.py            Shortlist: each request decoded over a few target pieces
    decoding_options.py     min length, n-gram bans, repetition penalty, prefixes, <unk> copies
    selection.py            top_k and argmax over the vocabulary, exact, shaped for XLA on CPU
    plotting.py             attention heatmaps (matplotlib)
"""

from keras_attention.seq2seq.base import Seq2Seq
from keras_attention.seq2seq.convolutional import ConvS2SSeq2Seq
from keras_attention.seq2seq.ensemble import Ensemble
from keras_attention.seq2seq.generation import beam_search, generate, greedy_search, sample
from keras_attention.seq2seq.losses import MaskedAccuracy, MaskedCrossEntropy, MaskedPerplexity
from keras_attention.seq2seq.recurrent import RecurrentSeq2Seq
from keras_attention.seq2seq.sampling import GreedySearch, RandomSampling
from keras_attention.seq2seq.scheduled_sampling import ScheduledSampling
from keras_attention.seq2seq.schedules import (
    InverseSquareRootSchedule,
    PerUpdateSchedule,
    PlannedCosineDecay,
)
from keras_attention.seq2seq.search import BeamSearch, get_search
from keras_attention.seq2seq.search_base import Search
from keras_attention.seq2seq.shortlist import Shortlist, shortlisted_search
from keras_attention.seq2seq.teacher_forcing import teacher_forcing_pairs
from keras_attention.seq2seq.transformer import TransformerSeq2Seq

__all__ = [
    "BeamSearch",
    "ConvS2SSeq2Seq",
    "Ensemble",
    "GreedySearch",
    "InverseSquareRootSchedule",
    "MaskedAccuracy",
    "MaskedCrossEntropy",
    "MaskedPerplexity",
    "PerUpdateSchedule",
    "PlannedCosineDecay",
    "RandomSampling",
    "RecurrentSeq2Seq",
    "ScheduledSampling",
    "Search",
    "Seq2Seq",
    "Shortlist",
    "TransformerSeq2Seq",
    "beam_search",
    "generate",
    "get_search",
    "greedy_search",
    "sample",
    "shortlisted_search",
    "teacher_forcing_pairs",
]
