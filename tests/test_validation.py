"""The argument and input checks every layer shares
(`keras_attention/validation.py`), across the layers: a Keras-style list
call, batches that differ, integer or boolean inputs to a float layer, and
NumPy integers taken as Python ints."""

import json

import numpy as np
import pytest
from keras import ops

from keras_attention import (
    AdditiveAttention,
    AttentionDecoder,
    BilinearSampler,
    ConcatAttention,
    DotProductAttention,
    FeedForward,
    GLUConv1D,
    LocalAttention,
    MultiHead,
    PositionalEmbedding,
    RotaryEmbedding,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)
from keras_attention.seq2seq import RecurrentSeq2Seq, TransformerSeq2Seq, beam_search, greedy_search
from tests.test_masking import ATTENTIONS


@pytest.mark.parametrize(
    "layer", [AdditiveAttention(4), DotProductAttention(), MultiHead(num_heads=2)]
)
def test_a_keras_style_list_call_gets_a_pointed_error(layer):
    q, v = np.ones((2, 3, 4), "float32"), np.ones((2, 5, 4), "float32")
    with pytest.raises(ValueError, match=r"call `layer\(query, value\)`.*not `layer\(\[query"):
        layer([q, v])
    assert tuple(layer(q, v).shape) == (2, 3, 4)  # the right call works


# check_same_batch: each layer names itself and the tensors whose batches differ.
BATCHES = {
    "batch mismatch": (
        lambda: DotProductAttention()(np.ones((2, 3, 4)), np.ones((3, 5, 4))),
        r"DotProductAttention: query, value, key must have the same batch size .* "
        r"received query 2, value 3, key 3",
    ),
    "batch mismatch, multi-head": (
        lambda: MultiHead(num_heads=2)(np.ones((2, 3, 4)), np.ones((3, 5, 4))),
        r"MultiHead: query, value, key must have the same batch size",
    ),
    "model((source, target)) with different batches": (
        lambda: RecurrentSeq2Seq(10, 10, embed_dim=4, hidden_dim=8)(
            (np.ones((2, 3), "int32"), np.ones((3, 4), "int32"))
        ),
        r"RecurrentSeq2Seq: source, target_in must have the same batch size .*source 2, "
        r"target_in 3",
    ),
    "AttentionDecoder target and memory batches differ": (
        lambda: AttentionDecoder(10, 4, 8, attention="dot")(
            np.ones((2, 3), "int32"), np.ones((3, 5, 8), "float32"), [np.zeros((2, 8))] * 2
        ),
        r"AttentionDecoder: target_tokens, memory must have the same batch size .*"
        r"target_tokens 2, memory 3",
    ),
    "BilinearSampler image and grid batches differ": (
        lambda: BilinearSampler()(np.ones((2, 4, 4, 1), "float32"), np.zeros((3, 2, 2, 2))),
        r"BilinearSampler: image, grid must have the same batch size .*image 2, grid 3",
    ),
}


@pytest.mark.parametrize("case", sorted(BATCHES))
def test_batches_that_differ_get_value_errors(case):
    call, pattern = BATCHES[case]
    with pytest.raises(ValueError, match=pattern):
        call()


@pytest.mark.parametrize("dtype", ["int32", "bool"])
@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_integer_and_boolean_inputs_are_refused_by_every_attention(name, dtype):
    # An int32 softmax is all zeros: DotProductAttention returned zeros.
    query, value = np.ones((1, 2, 4), dtype), np.ones((1, 3, 4), dtype)
    with pytest.raises(TypeError, match=r"`\w+` of \w+ must be a floating-point tensor; .*"):
        ATTENTIONS[name](query, value)


FLOAT_LAYERS = {
    "PositionalEmbedding": lambda x: PositionalEmbedding(8)(x),
    "PositionalEmbedding learned": lambda x: PositionalEmbedding(8, mode="learned")(x),
    "RotaryEmbedding": lambda x: RotaryEmbedding()(x),
    "TransformerEncoderLayer": lambda x: TransformerEncoderLayer(2, 8)(x),
    "TransformerDecoderLayer": lambda x: TransformerDecoderLayer(2, 8)(x, np.ones((1, 3, 4))),
    "FeedForward": lambda x: FeedForward(8)(x),
    "GLUConv1D": lambda x: GLUConv1D(4, 3)(x),
    "BilinearSampler": lambda x: BilinearSampler()(
        ops.reshape(x, (1, 2, 2, 3)), np.zeros((1, 2, 2, 2), "float32")
    ),
}


@pytest.mark.parametrize("name", sorted(FLOAT_LAYERS))
def test_integer_inputs_are_refused_by_the_positional_and_other_float_layers(name):
    # PositionalEmbedding on ints truncated its sinusoids to 0/1.
    with pytest.raises(TypeError, match="must be a floating-point tensor; received dtype int32"):
        FLOAT_LAYERS[name](np.ones((1, 3, 4), "int32"))


def test_numpy_integers_are_taken_and_configs_hold_plain_ints():
    layer = AdditiveAttention(units=np.int64(8))
    assert type(layer.get_config()["units"]) is int
    head = MultiHead(np.int64(2), np.int32(4), num_key_value_heads=np.int64(1))
    config = head.get_config()
    assert (type(config["num_heads"]), type(config["num_key_value_heads"])) == (int, int)
    encoder = TransformerEncoderLayer(np.int64(2), np.int64(8), dropout=np.float32(0.25))
    json.dumps(encoder.get_config())
    json.dumps(ConcatAttention(hidden_units=[np.int64(4)]).get_config())
    json.dumps(LocalAttention(window=np.int16(2)).get_config())
    model = TransformerSeq2Seq(10, 10, hidden_dim=8, num_heads=2, intermediate_dim=8, num_layers=1)
    source = np.array([[4, 5, 2]])
    tokens = greedy_search(model, source, max_length=np.int64(6))["tokens"]
    assert tuple(tokens.shape) == (1, 6)
    beams = beam_search(model, source, np.int32(4), beam_width=np.int64(2))["tokens"]
    assert tuple(beams.shape) == (1, 2, 4)
