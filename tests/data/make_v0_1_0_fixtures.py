"""Writes the `.keras` files of keras_attention 0.1.0 that
`tests/test_compatibility.py` loads with the current code.

They were made once, at commit 88acf34 (the last 0.1.0 layout), with

    git worktree add /tmp/v010 88acf34
    cd /tmp/v010 && KERAS_BACKEND=tensorflow python <this file> <repo>/tests/data/v0_1_0

and are committed; re-running it on a later layout would defeat the test.
Each `<name>.keras` comes with `<name>.npz`: the inputs and the outputs
0.1.0 computed for them.
"""

import os
import sys

import keras
import numpy as np

import keras_attention as ka


def layer_cases(rng):
    q, v = (
        rng.normal(size=(2, 3, 6)).astype("float32"),
        rng.normal(size=(2, 5, 6)).astype("float32"),
    )
    tokens = np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32")
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    return {
        "general": (ka.GeneralAttention(), (q, v)),
        "additive": (ka.AdditiveAttention(5), (q, v)),
        "concat": (ka.ConcatAttention((7,)), (q, v)),
        "local": (ka.LocalAttention(window=2, mode="predictive", score="general"), (q, v)),
        "multihead": (ka.MultiHead(num_heads=2, key_dim=3), (q, v)),
        "glu": (ka.GLUConv1D(8, 3, causal=True), (x,)),
        "transformer_encoder": (ka.TransformerEncoderLayer(2, 16), (x,)),
        "positional_learned": (ka.PositionalEmbedding(6, mode="learned"), (x,)),
        "convs2s_encoder": (ka.ConvS2SEncoder(20, 8, ((8, 3),) * 2, max_length=8), (tokens,)),
    }


def model_cases():
    return {
        "rnn_general": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention="general"),
        "rnn_local": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention="local"),
        "rnn_additive_bahdanau": ka.RecurrentSeq2Seq(
            20, 21, 8, 8, attention="additive", style="bahdanau"
        ),
        "rnn_concat": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention="concat"),
        "rnn_multihead": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention="multihead"),
        "rnn_none": ka.RecurrentSeq2Seq(20, 21, 8, 8, attention=None, cell="gru"),
        "convs2s": ka.ConvS2SSeq2Seq(20, 21, 8, ((8, 3),) * 2, ((8, 3),) * 2, max_length=10),
        "transformer": ka.TransformerSeq2Seq(
            20, 21, width=8, num_heads=2, intermediate_dim=16, num_layers=1, max_length=10
        ),
    }


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    keras.utils.set_random_seed(0)
    for name, (layer, inputs) in layer_cases(rng).items():
        output = layer(*inputs)
        output = output[0] if isinstance(output, (tuple, list)) else output
        keras.saving.save_model(layer, os.path.join(out, f"{name}.keras"))  # any Layer saves alone
        np.savez(
            os.path.join(out, f"{name}.npz"), *inputs, output=keras.ops.convert_to_numpy(output)
        )
    source = np.array([[3, 4, 5, 6, 0], [7, 8, 9, 0, 0]], "int32")
    target_in = np.array([[1, 5, 6, 7], [1, 8, 9, 0]], "int32")
    for name, model in model_cases().items():
        logits = model((source, target_in))
        model.save(os.path.join(out, f"{name}.keras"))
        np.savez(
            os.path.join(out, f"{name}.npz"),
            source=source,
            target_in=target_in,
            output=keras.ops.convert_to_numpy(logits),
        )


if __name__ == "__main__":
    main(sys.argv[1])
